"""What every placement method returns, and the memory bookkeeping they share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hulk_env.instance import Instance
from hulk_env.units import GB


@dataclass(frozen=True)
class PlacementResult:
    """A method's answer for one instance.

    Attributes:
        method: the method's registered name.
        placement: ``[D, L]`` machine indices, or ``None`` when no feasible placement was found.
        cost_evals: placements evaluated with the cost model to get there.
        reason: why there is no placement (empty when feasible).
    """

    method: str
    placement: np.ndarray | None
    cost_evals: int = 0
    reason: str = ""

    @property
    def feasible(self) -> bool:
        return self.placement is not None


def layer_memory_bytes(instance: Instance, stash_micro_batches: int) -> np.ndarray:
    """``[L]`` bytes each layer of one replica needs with ``stash_micro_batches`` stashed."""
    w = instance.workload
    return w.state_bytes_per_param * w.params + stash_micro_batches * w.stash_bytes


def stash_count(instance: Instance, num_stages: int) -> int:
    """Micro-batches a replica with ``num_stages`` machines stashes (see ``cost.py``)."""
    w = instance.workload
    return w.num_micro_batches if w.schedule == "gpipe" else min(w.num_micro_batches, num_stages)


def capacity_reason(instance: Instance) -> str:
    """A one-line explanation when the model cannot fit, with the figures and what to change."""
    w, c = instance.workload, instance.cluster
    need = w.data_parallel * float(layer_memory_bytes(instance, 1).sum())
    return (
        f"model '{w.name}' x {w.data_parallel} replica(s) needs at least {need / GB:,.1f} GB "
        f"(model state + one stashed micro-batch; 1F1B stashes one per pipeline stage and GPipe all, so the real need is larger) and the largest layer needs "
        f"{float(layer_memory_bytes(instance, 1).max()) / GB:,.1f} GB; cluster '{c.name}' has "
        f"{float(c.memory_bytes.sum()) / GB:,.1f} GB in total and {float(c.memory_bytes.max()) / GB:,.1f} GB "
        "on its largest machine: use more or larger machines, fewer replicas, fewer micro-batches "
        "or the 1f1b schedule"
    )
