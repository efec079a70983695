"""Memory feasibility and padding: the rules env, generators, baselines and evaluation share.

Memory (the cost model's rule, :func:`hulk_env.cost.memory_use_bytes`): a layer needs its model
state (``state_bytes_per_param x params``) plus ``k`` stashed micro-batches of activations,
``k = m`` (all micro-batches) for GPipe and ``k = min(m, S)`` for 1F1B, ``S`` the pipeline
depth (distinct machines) of its replica. The functions here give those needs per layer and per
model, and a one-line explanation when a model cannot fit.

Padding: an observation (the env's, a policy's) is padded to ``max_machines`` machines,
``max_layers`` (replica, layer) slots and ``max_edges`` layer-graph edges of all replicas;
:class:`Padding` says whether an instance fits and, when not, what to change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.units import GB
from hulk_env.workload import Workload


def _workload(problem: Instance | Workload) -> Workload:
    return problem.workload if isinstance(problem, Instance) else problem


def stash_count(problem: Instance | Workload, num_stages: int) -> int:
    """Micro-batches a replica with ``num_stages`` machines stashes (GPipe: all of them)."""
    w = _workload(problem)
    return w.num_micro_batches if w.schedule == "gpipe" else min(w.num_micro_batches, num_stages)


def layer_memory_bytes(problem: Instance | Workload, stash_micro_batches: int) -> np.ndarray:
    """``[L]`` bytes each layer of one replica needs with ``stash_micro_batches`` stashed."""
    w = _workload(problem)
    return w.state_bytes_per_param * w.params + stash_micro_batches * w.stash_bytes


def model_memory_bytes(problem: Instance | Workload, num_stages: int) -> float:
    """Bytes all ``D`` replicas need when each one's pipeline has ``num_stages`` machines."""
    w = _workload(problem)
    return w.data_parallel * float(layer_memory_bytes(w, stash_count(w, num_stages)).sum())


def min_memory_bytes(problem: Instance | Workload) -> float:
    """A lower bound on what any placement needs: model state plus one stashed micro-batch per
    layer, all replicas (1F1B stashes one per pipeline stage and GPipe all, so more)."""
    w = _workload(problem)
    return w.data_parallel * float(layer_memory_bytes(w, 1).sum())


def memory_tightness(instance: Instance) -> float:
    """Memory the model needs (all replicas, stash of the deepest pipeline) / the cluster's."""
    deepest = min(instance.num_machines, instance.num_layers)
    return model_memory_bytes(instance, deepest) / float(instance.cluster.memory_bytes.sum())


def capacity_reason(instance: Instance) -> str:
    """A one-line explanation when the model cannot fit, with the figures and what to change."""
    w, c = instance.workload, instance.cluster
    return (
        f"model '{w.name}' x {w.data_parallel} replica(s) needs at least {min_memory_bytes(w) / GB:,.1f} GB "
        f"(model state + one stashed micro-batch; 1F1B stashes one per pipeline stage and GPipe all, so the real need is larger) and the largest layer needs "
        f"{float(layer_memory_bytes(w, 1).max()) / GB:,.1f} GB; cluster '{c.name}' has "
        f"{float(c.memory_bytes.sum()) / GB:,.1f} GB in total and {float(c.memory_bytes.max()) / GB:,.1f} GB "
        "on its largest machine: use more or larger machines, fewer replicas, fewer micro-batches "
        "or the 1f1b schedule"
    )


# ---- padding ---------------------------------------------------------------------------------


def instance_edges(instance: Instance) -> int:
    """Layer-graph edges of all replicas (``D * E``)."""
    return instance.data_parallel * len(instance.workload.edges)


@dataclass(frozen=True)
class Padding:
    """Observation padding: the largest instance an env (or a policy trained on it) takes.

    Attributes:
        max_machines: machines ``M``.
        max_layers: (replica, layer) slots ``D * L``.
        max_edges: layer-graph edges of all replicas ``D * E``.
    """

    max_machines: int
    max_layers: int
    max_edges: int

    @classmethod
    def of(cls, instances: Sequence[Instance]) -> Padding:
        """The smallest padding that fits every instance (at least one edge)."""
        return cls(
            max_machines=max(i.num_machines for i in instances),
            max_layers=max(i.data_parallel * i.num_layers for i in instances),
            max_edges=max(1, max(instance_edges(i) for i in instances)),
        )

    def at_least(self, other: Padding) -> Padding:
        """Element-wise maximum."""
        return Padding(
            max(self.max_machines, other.max_machines),
            max(self.max_layers, other.max_layers),
            max(self.max_edges, other.max_edges),
        )

    def check_fits(
        self,
        instance: Instance,
        holder: str = "the env's padding",
        fix: str = "make the env with {key}>={have}",
    ) -> None:
        """Raise :class:`HulkInputError` when ``instance`` is larger than the padding.

        Args:
            instance: the instance to place.
            holder: whose padding it is, for the message (``"the env's padding"``).
            fix: what to do, formatted with ``key`` (e.g. ``max_machines``) and ``have``.
        """
        sizes = (
            ("machines", instance.num_machines, self.max_machines, "max_machines"),
            ("replica x layer slots", instance.data_parallel * instance.num_layers, self.max_layers, "max_layers"),
            ("layer-graph edges (all replicas)", instance_edges(instance), self.max_edges, "max_edges"),
        )
        for what, have, limit, key in sizes:
            if have > limit:
                raise HulkInputError(
                    f"instance has {have} {what}, above {holder} {key}={limit}; {fix.format(key=key, have=have)}",
                    source=instance.instance_id,
                )


__all__ = [
    "Padding",
    "capacity_reason",
    "instance_edges",
    "layer_memory_bytes",
    "memory_tightness",
    "min_memory_bytes",
    "model_memory_bytes",
    "stash_count",
]
