"""One fixed instance: a cluster and a model, named or loaded from files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hulk_env.cluster import Cluster, load_cluster
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import capacity_reason, instance_edges
from hulk_env.generators.base import is_feasible
from hulk_env.instance import Instance
from hulk_env.workload import Workload, apply_overrides, load_workload


@dataclass(frozen=True, eq=False)
class FixedGenerator:
    """Always the same instance: one cluster and one model.

    Args:
        cluster: a :class:`Cluster`, a built-in name (:func:`hulk_env.cluster.cluster_names`),
            a paper-format directory or a YAML/JSON cluster file.
        model: a :class:`Workload`, a built-in model name or a YAML/JSON workload file.
        data_parallel, num_micro_batches, micro_batch_size, schedule, layers_per_block:
            training settings overriding the model's (``None`` keeps them).
    """

    cluster: Cluster | str = "default"
    model: Workload | str = "default"
    data_parallel: int | None = None
    num_micro_batches: int | None = None
    micro_batch_size: int | None = None
    schedule: str | None = None
    layers_per_block: int | None = None
    fixed: Instance = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fixed", fixed_instance(
            self.cluster,
            self.model,
            data_parallel=self.data_parallel,
            num_micro_batches=self.num_micro_batches,
            micro_batch_size=self.micro_batch_size,
            schedule=self.schedule,
            layers_per_block=self.layers_per_block,
        ))  # fmt: skip
        if not is_feasible(self.fixed):
            raise HulkInputError(
                f"the naive placement does not fit: {capacity_reason(self.fixed)}",
                source=self.fixed.instance_id,
            )

    @property
    def max_machines(self) -> int:
        return self.fixed.num_machines

    @property
    def max_slots(self) -> int:
        return self.fixed.data_parallel * self.fixed.num_layers

    @property
    def max_edges(self) -> int:
        return instance_edges(self.fixed)

    def __call__(self, np_random: np.random.Generator) -> Instance:
        return self.fixed


def fixed_instance(
    cluster: Cluster | str | Path,
    model: Workload | str | Path,
    *,
    data_parallel: int | None = None,
    num_micro_batches: int | None = None,
    micro_batch_size: int | None = None,
    schedule: str | None = None,
    layers_per_block: int | None = None,
    seq_len: int | None = None,
    recompute: str | None = None,
) -> Instance:
    """An instance from a cluster and a model, each an object, a built-in name or a file."""
    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)[0]
    overrides = dict(
        data_parallel=data_parallel,
        num_micro_batches=num_micro_batches,
        micro_batch_size=micro_batch_size,
        schedule=schedule,
        layers_per_block=layers_per_block,
        seq_len=seq_len,
        recompute=recompute,
    )
    if isinstance(model, Workload):
        w = apply_overrides(model, **overrides)  # a transformer is rebuilt, explicit layers relabelled
    else:
        w = load_workload(model, **overrides)
    return Instance(c, w, f"{c.name}x{w.name}")
