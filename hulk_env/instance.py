"""A problem instance: one cluster and one workload to place on it."""

from __future__ import annotations

from dataclasses import dataclass

from hulk_env.cluster import Cluster
from hulk_env.validation.sizes import check_instance_size
from hulk_env.workload import Workload


@dataclass(frozen=True, eq=False)
class Instance:
    """What a placement method is given.

    Attributes:
        cluster: the machines and links.
        workload: the model's layer graph with its training settings (including ``D``).
        instance_id: a stable id, e.g. ``"geo-v0/17"``, for leaderboards and logs.
    """

    cluster: Cluster
    workload: Workload
    instance_id: str = "instance"

    def __post_init__(self) -> None:
        check_instance_size(self.num_machines, self.num_layers, self.data_parallel, self.instance_id)

    @property
    def num_machines(self) -> int:
        return self.cluster.num_machines

    @property
    def num_layers(self) -> int:
        return self.workload.num_layers

    @property
    def data_parallel(self) -> int:
        return self.workload.data_parallel
