"""A uniform draw from given instances (e.g. a benchmark suite)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.feasibility import capacity_reason, instance_edges
from hulk_env.generators.base import is_feasible
from hulk_env.instance import Instance


@dataclass(frozen=True, eq=False)
class InstanceListGenerator:
    """A uniform draw from a fixed list of instances (each must be feasible).

    Args:
        instances: the instances, e.g. a benchmark suite's.
    """

    instances: tuple[Instance, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(self.instances))
        if not self.instances:
            raise HulkInputError("needs at least one instance", field="instances")
        for inst in self.instances:
            if not is_feasible(inst):
                raise HulkInputError(f"the naive placement does not fit: {capacity_reason(inst)}", source=inst.instance_id)

    @property
    def max_machines(self) -> int:
        return max(i.num_machines for i in self.instances)

    @property
    def max_slots(self) -> int:
        return max(i.data_parallel * i.num_layers for i in self.instances)

    @property
    def max_edges(self) -> int:
        return max(instance_edges(i) for i in self.instances)

    def __call__(self, np_random: np.random.Generator) -> Instance:
        return self.instances[int(np_random.integers(len(self.instances)))]
