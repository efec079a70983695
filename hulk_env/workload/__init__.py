"""Workloads: the layer graph of a model to train, its training settings, and their sources.

Modules, in import order (each imports only those above it):

* :mod:`.model`: :class:`Workload` (validated on construction) and the training settings
  every loader accepts (:class:`TrainingSettings`, :class:`WorkloadOverrides`);
* :mod:`.transformer`: :class:`TransformerConfig` and :func:`build_transformer`, with every
  parameter, FLOP and activation-byte formula in its docstring;
* :mod:`.files`: YAML/JSON workload files, :func:`load_workload_file` (the format is in its
  docstring);
* :mod:`.catalog`: the named models (:func:`model_names`, :func:`get_model`);
* :mod:`.resolve`: :func:`load_workload`, a built-in name or a file.

Every public name is importable from ``hulk_env.workload`` directly.
"""

from hulk_env.workload.catalog import (
    DEFAULT_MODEL,
    MODELS,
    PUBLISHED_PARAMS,
    get_model,
    get_model_config,
    model_names,
)
from hulk_env.workload.files import FILE_SUFFIXES, load_workload_file
from hulk_env.workload.model import (
    RECOMPUTE_MODES,
    SCHEDULES,
    TRAINING_KEYS,
    TrainingSettings,
    Workload,
    WorkloadOverrides,
    training_overrides,
    with_full_recompute,
)
from hulk_env.workload.resolve import apply_overrides, load_workload
from hulk_env.workload.transformer import (
    ARCHITECTURES,
    LOGIT_BYTES,
    MASK_BYTES,
    NORMS,
    LayerCost,
    TransformerConfig,
    build_from_config,
    build_transformer,
    transformer_block,
)

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_MODEL",
    "FILE_SUFFIXES",
    "LOGIT_BYTES",
    "MASK_BYTES",
    "MODELS",
    "NORMS",
    "PUBLISHED_PARAMS",
    "RECOMPUTE_MODES",
    "SCHEDULES",
    "TRAINING_KEYS",
    "LayerCost",
    "TrainingSettings",
    "TransformerConfig",
    "Workload",
    "WorkloadOverrides",
    "apply_overrides",
    "build_from_config",
    "build_transformer",
    "get_model",
    "get_model_config",
    "load_workload",
    "load_workload_file",
    "model_names",
    "training_overrides",
    "transformer_block",
    "with_full_recompute",
]
