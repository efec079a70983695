"""Tiny instances whose optimum exhaustive search finds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hulk_env.cluster import Cluster, Machine
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import model_memory_bytes
from hulk_env.generators.base import choices, int_range, resample
from hulk_env.generators.enumerate import MAX_EXHAUSTIVE_PLACEMENTS, exhaustive_optimum
from hulk_env.instance import Instance
from hulk_env.units import GB, GBPS, MS, TFLOPS
from hulk_env.workload import Workload


@dataclass(frozen=True)
class ToyGenerator:
    """Tiny instances whose optimum is found by enumerating all ``M^(D*L)`` placements.

    Machines have 20-300 TFLOP/s, links 0.5-100 ms and 0.1-10 Gbps, layers 0.5-20 TFLOPs per
    micro-batch with 5-100 MB activations, and machine memory is drawn around what the model
    needs so that the memory constraint often binds. The layer graph is a chain, plus one skip
    edge with probability ``skip_edge_probability``.

    Args:
        num_machines: (low, high) machines, M.
        num_layers: (low, high) layers, L.
        data_parallel: replica counts D to draw from.
        max_placements: redraw the sizes until ``M^(D*L)`` is at most this (keeps the
            exhaustive optimum fast: 4096 placements take about 50 ms).
        skip_edge_probability: chance of one extra edge ``u -> v`` with ``v >= u + 2``.
        max_tries: draws before giving up on finding a feasible instance.
        name: prefix of the instance ids.
    """

    num_machines: tuple[int, int] = (2, 4)
    num_layers: tuple[int, int] = (2, 5)
    data_parallel: tuple[int, ...] = (1, 2)
    max_placements: int = 4096
    skip_edge_probability: float = 0.3
    max_tries: int = 100
    name: str = "toy"

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_machines", int_range(self.num_machines, "num_machines"))
        object.__setattr__(self, "num_layers", int_range(self.num_layers, "num_layers"))
        object.__setattr__(self, "data_parallel", choices(self.data_parallel, "data_parallel"))
        smallest = self.num_machines[0] ** (min(self.data_parallel) * self.num_layers[0])
        if smallest > min(self.max_placements, MAX_EXHAUSTIVE_PLACEMENTS):
            raise HulkInputError(
                f"the smallest toy instance has {smallest} placements, above max_placements "
                f"{self.max_placements}; allow more or draw fewer machines/layers",
                field="max_placements",
            )

    @property
    def max_machines(self) -> int:
        return self.num_machines[1]

    @property
    def max_slots(self) -> int:
        return max(self.data_parallel) * self.num_layers[1]

    @property
    def max_edges(self) -> int:
        return max(self.data_parallel) * self.num_layers[1]  # L - 1 chain edges + 1 skip edge

    def __call__(self, np_random: np.random.Generator) -> Instance:
        return resample(self.instance, np_random, self.max_tries, self.name)

    def instance(self, key: int) -> Instance:
        """The instance named ``"<name>/<key>"`` (deterministic; may be infeasible)."""
        rng = np.random.default_rng(key)
        while True:
            m = int(rng.integers(self.num_machines[0], self.num_machines[1] + 1))
            n = int(rng.integers(self.num_layers[0], self.num_layers[1] + 1))
            d = int(rng.choice(self.data_parallel))
            if m ** (d * n) <= self.max_placements:
                break
        edges = [(i, i + 1) for i in range(n - 1)]
        if n >= 3 and rng.random() < self.skip_edge_probability:
            u = int(rng.integers(0, n - 2))
            edges.append((u, int(rng.integers(u + 2, n))))
        workload = Workload(
            name=f"toy-{n}",
            layer_names=tuple(f"l{i}" for i in range(n)),
            flops=rng.uniform(0.5, 20.0, n) * TFLOPS,
            params=rng.uniform(1e7, 5e8, n),
            activation_bytes=rng.uniform(5.0, 100.0, n) * 1e6,
            stash_bytes=rng.uniform(0.1, 2.0, n) * GB,
            edges=edges,
            num_micro_batches=int(rng.choice([2, 4, 8])),
            data_parallel=d,
            schedule=str(rng.choice(["1f1b", "gpipe"])),
        )
        memory = rng.uniform(0.5, 2.0, m) * model_memory_bytes(workload, m) / m
        regions = rng.integers(0, max(1, m - 1), m)
        machines = tuple(
            Machine(f"t{i}", f"region{int(regions[i])}", "custom", 1, float(f), float(mem))
            for i, (f, mem) in enumerate(zip(rng.uniform(20.0, 300.0, m) * TFLOPS, memory, strict=True))
        )
        same = regions[:, None] == regions[None, :]
        rtt = np.triu(np.where(same, 0.5, rng.uniform(2.0, 200.0, (m, m))) * MS, 1)
        bw = np.triu(np.where(same, 10.0, rng.uniform(0.1, 2.0, (m, m))) * GBPS, 1)
        cluster = Cluster(machines, (rtt + rtt.T) / 2, bw + bw.T + np.eye(m), name=f"{self.name}/{key}")
        return Instance(cluster, workload, f"{self.name}/{key}")

    def optimum(self, instance: Instance) -> tuple[np.ndarray, float]:
        """The instance's optimal placement and time (see :func:`exhaustive_optimum`)."""
        return exhaustive_optimum(instance, max_placements=MAX_EXHAUSTIVE_PLACEMENTS)
