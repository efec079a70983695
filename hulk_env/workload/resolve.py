"""One entry point for every workload source: :func:`load_workload`."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

from hulk_env.workload.catalog import get_model
from hulk_env.workload.files import FILE_SUFFIXES, load_workload_file
from hulk_env.workload.model import Workload, WorkloadOverrides


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
