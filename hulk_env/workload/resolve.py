"""One entry point for every workload source: :func:`load_workload`; and
:func:`apply_overrides`, the same settings applied to a workload already built."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from hulk_env.errors import HulkInputError
from hulk_env.workload.catalog import get_model
from hulk_env.workload.files import FILE_SUFFIXES, load_workload_file
from hulk_env.workload.model import (
    TrainingSettings,
    Workload,
    WorkloadOverrides,
    explicit_options,
    training_overrides,
)
from hulk_env.workload.transformer import build_from_config


def load_workload(name_or_path: str | Path, **overrides: Unpack[WorkloadOverrides]) -> Workload:
    """A built-in model by name (:mod:`hulk_env.workload.catalog`) or a ``.yaml/.yml/.json`` file.

    Training settings given here (:class:`~hulk_env.workload.model.WorkloadOverrides`) override
    the model's or the file's.

    Raises:
        HulkInputError: unknown name (the message lists the valid ones), missing or bad file.
    """
    path = Path(name_or_path)
    if path.suffix.lower() in FILE_SUFFIXES or path.is_file():
        return load_workload_file(path, **overrides)
    return get_model(str(name_or_path), **overrides)


def apply_overrides(workload: Workload, **overrides: Unpack[WorkloadOverrides]) -> Workload:
    """``workload`` with other training settings, as a loader would have built it.

    A transformer (its ``config`` kept by the builder) is rebuilt with its current training
    settings and ``overrides``, so FLOPs and bytes follow the micro-batch size, the sequence
    length and the recomputation. Explicit layers take the other training settings,
    ``recompute: full`` and ``layers_per_block``.

    Raises:
        HulkInputError: a setting the workload cannot take (``micro_batch_size``, ``seq_len``
            or ``recompute: selective`` on explicit layers; invalid values).
    """
    given = training_overrides(**overrides)
    if not given:
        return workload
    settings = {k: given[k] for k in TrainingSettings.__annotations__ if k in given}
    if workload.config is not None:
        current = {k: getattr(workload, k) for k in TrainingSettings.__annotations__}
        return build_from_config(workload.config, {**current, **given})
    if settings.get("micro_batch_size", workload.micro_batch_size) != workload.micro_batch_size:
        raise HulkInputError(
            f"micro_batch_size would rebuild the model, and model '{workload.name}' is explicit "
            "layers whose numbers are of one micro-batch: give its file, or re-import it",
            field="micro_batch_size",
        )
    relabelled = workload.with_training(**settings)
    return explicit_options(relabelled, given, f"model '{workload.name}'")
