"""Instance generators: where :class:`hulk_env.env.PlacementEnv` gets its problems (Jumanji style).

A generator is an object with ``__call__(np_random) -> Instance`` plus three bounds the env pads
its observation to: ``max_machines``, ``max_slots`` (replicas x layers, ``D * L``) and
``max_edges`` (layer-graph edges of all replicas). All randomness comes from the ``np_random``
passed in (the env's ``self.np_random``): same seed, same instance.

* :class:`RandomGeoGenerator`: clusters over real cities (the city table of :mod:`hulk_env.geo`,
  GPUs drawn from a mix, link noise) and GPT-style transformer workloads of random size and
  training settings;
* :class:`ToyGenerator`: tiny instances (2-4 machines, 2-5 layers, ``D`` in {1, 2}) whose
  optimum :func:`exhaustive_optimum` finds by enumerating every placement;
* :class:`FixedGenerator`: one cluster and one model, named (:mod:`hulk_env.catalog`) or loaded
  from files;
* :class:`InstanceListGenerator`: a uniform draw from given instances (e.g. a benchmark suite).

Every generated instance is feasible: the naive placement (the env's reference) fits in memory.
Random and toy generators draw one integer ``key`` from ``np_random`` and build the instance from
it alone, so ``instance_id`` (``"random-geo/<key>"``) names it reproducibly:
``generator.instance(key)`` rebuilds it.

:func:`make_generator` builds any of them from a name and plain keyword values (what RL Zoo's
``--env-kwargs`` and YAML configs can hold).
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Protocol

import numpy as np

from hulk_env import cost, geo
from hulk_env.baselines.naive import naive
from hulk_env.cluster import Cluster, Machine, geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.units import GB, GBPS, MS, TFLOPS
from hulk_env.workload import TransformerConfig, Workload, build_transformer

KEY_RANGE = 2**31  # instance keys are drawn in [0, KEY_RANGE)
# Exhaustive search enumerates M^(D*L) placements; beyond this it refuses (minutes of numpy).
MAX_EXHAUSTIVE_PLACEMENTS = 2**20
_ENUM_CHUNK = 16384


class InstanceGenerator(Protocol):
    """What the env needs from a generator."""

    @property
    def max_machines(self) -> int: ...

    @property
    def max_slots(self) -> int: ...

    @property
    def max_edges(self) -> int: ...

    def __call__(self, np_random: np.random.Generator) -> Instance: ...


def is_feasible(instance: Instance) -> bool:
    """Whether the naive placement (the env's reference) fits in memory."""
    return naive(instance).feasible


def instance_edges(instance: Instance) -> int:
    """Layer-graph edges of all replicas (``D * E``)."""
    return instance.data_parallel * len(instance.workload.edges)


def _pair(value: object, label: str) -> tuple[int, int]:
    """A ``(low, high)`` integer range from a pair or a single integer; validated."""
    lo, hi = (value, value) if isinstance(value, int | np.integer) else tuple(value)  # type: ignore[misc]
    if int(lo) != lo or int(hi) != hi or lo < 1 or hi < lo:
        raise HulkInputError(f"must be an integer range (low, high) with 1 <= low <= high, got {value!r}", field=label)
    return int(lo), int(hi)


def _choices(value: object, label: str) -> tuple:
    """A non-empty tuple of choices (lists from YAML/JSON become tuples)."""
    out = tuple(value) if isinstance(value, list | tuple) else (value,)
    if not out:
        raise HulkInputError("needs at least one choice", field=label)
    return out


def _resample(build, np_random: np.random.Generator, max_tries: int, what: str) -> Instance:
    """Draw keys until ``build(key)`` gives a feasible instance."""
    for _ in range(max_tries):
        key = int(np_random.integers(KEY_RANGE))
        instance = build(key)
        if is_feasible(instance):
            return instance
    raise HulkInputError(
        f"{what}: no feasible instance in {max_tries} draws (the naive placement never fit in "
        "memory); allow more or larger machines, smaller models, fewer micro-batches or replicas"
    )


# ---- random geo clusters x transformers ------------------------------------------------------

# Cloud and on-premise servers: (GPU, GPUs per machine, weight). Big cloud boxes and the
# smaller, older servers a regional pool also holds (as in the paper's 47 machines).
DEFAULT_GPU_MIX: tuple[tuple[str, int, float], ...] = (
    ("A100-40GB", 8, 2.0),
    ("A100-80GB", 8, 1.0),
    ("H100", 8, 0.5),
    ("V100-32GB", 8, 1.0),
    ("V100-32GB", 4, 1.0),
    ("A10", 4, 2.0),
    ("T4", 4, 1.0),
    ("GTX-1080", 8, 0.5),
)


@dataclass(frozen=True)
class RandomGeoGenerator:
    """Random clusters over real cities x random GPT-style transformers; feasible only.

    Args:
        num_machines: (low, high) machines per cluster.
        num_regions: (low, high) cities per cluster (at most ``num_machines``); every city
            gets at least one machine.
        cities: the city pool (names from :data:`hulk_env.geo.CITIES`); empty = all of them.
        gpu_mix: ``(gpu, GPUs per machine, weight)`` choices, drawn per machine.
        link_noise: sigma of the log-normal jitter on each pair's RTT (see ``geo_cluster``).
        num_blocks: (low, high) transformer blocks; the model has ``blocks + 2`` layers
            (embedding, blocks, head), a chain.
        hidden: model widths to draw from (heads = hidden / ``head_dim``).
        head_dim: per-head size.
        seq_len: sequence lengths to draw from.
        vocab: vocabulary sizes to draw from.
        micro_batch_size: micro-batch sizes (sequences) to draw from.
        num_micro_batches: micro-batches per iteration to draw from.
        data_parallel: replica counts ``D`` to draw from.
        schedules: pipeline schedules to draw from.
        max_tries: draws before giving up on finding a feasible instance.
        name: prefix of the instance ids.
    """

    num_machines: tuple[int, int] = (4, 12)
    num_regions: tuple[int, int] = (2, 4)
    cities: tuple[str, ...] = ()
    gpu_mix: tuple[tuple[str, int, float], ...] = DEFAULT_GPU_MIX
    link_noise: float = 0.1
    num_blocks: tuple[int, int] = (2, 12)
    hidden: tuple[int, ...] = (512, 768, 1024, 1536, 2048)
    head_dim: int = 64
    seq_len: tuple[int, ...] = (512, 1024, 2048)
    vocab: tuple[int, ...] = (32000, 50257)
    micro_batch_size: tuple[int, ...] = (1, 2, 4)
    num_micro_batches: tuple[int, ...] = (4, 8, 16)
    data_parallel: tuple[int, ...] = (1, 2)
    schedules: tuple[str, ...] = ("1f1b", "gpipe")
    max_tries: int = 100
    name: str = "random-geo"

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "num_machines", _pair(self.num_machines, "num_machines"))
        set_(self, "num_regions", _pair(self.num_regions, "num_regions"))
        set_(self, "num_blocks", _pair(self.num_blocks, "num_blocks"))
        cities = tuple(self.cities) if self.cities else tuple(geo.CITIES)
        set_(self, "cities", tuple(geo.get_city(c).name for c in cities))
        if self.num_regions[1] > len(self.cities):
            raise HulkInputError(
                f"num_regions up to {self.num_regions[1]} but only {len(self.cities)} cities given",
                field="num_regions",
            )
        set_(self, "gpu_mix", tuple((str(g), int(n), float(w)) for g, n, w in self.gpu_mix))
        for label in ("hidden", "seq_len", "vocab", "micro_batch_size", "num_micro_batches", "data_parallel", "schedules"):
            set_(self, label, _choices(getattr(self, label), label))
        bad = [h for h in self.hidden if int(h) % self.head_dim]
        if bad:
            raise HulkInputError(f"hidden sizes {bad} are not multiples of head_dim {self.head_dim}", field="hidden")

    @property
    def max_machines(self) -> int:
        return self.num_machines[1]

    @property
    def max_slots(self) -> int:
        return max(self.data_parallel) * (self.num_blocks[1] + 2)

    @property
    def max_edges(self) -> int:
        return max(self.data_parallel) * (self.num_blocks[1] + 1)

    def __call__(self, np_random: np.random.Generator) -> Instance:
        return _resample(self.instance, np_random, self.max_tries, self.name)

    def instance(self, key: int) -> Instance:
        """The instance named ``"<name>/<key>"`` (deterministic; may be infeasible)."""
        rng = np.random.default_rng(key)
        m = int(rng.integers(self.num_machines[0], self.num_machines[1] + 1))
        regions = int(rng.integers(self.num_regions[0], min(self.num_regions[1], m) + 1))
        cities = [self.cities[i] for i in rng.choice(len(self.cities), regions, replace=False)]
        counts = 1 + rng.multinomial(m - regions, np.full(regions, 1.0 / regions))
        cluster = geo_cluster(
            cities,
            [int(c) for c in counts],
            self.gpu_mix,
            seed=int(rng.integers(KEY_RANGE)),
            name=f"{self.name}/{key}",
            link_noise=self.link_noise,
        )
        hidden = int(rng.choice(self.hidden))
        cfg = TransformerConfig(
            name=f"gpt-{hidden}h",
            num_layers=int(rng.integers(self.num_blocks[0], self.num_blocks[1] + 1)),
            hidden=hidden,
            heads=hidden // self.head_dim,
            vocab=int(rng.choice(self.vocab)),
            seq_len=int(rng.choice(self.seq_len)),
            max_positions=0,
            micro_batch_size=int(rng.choice(self.micro_batch_size)),
            num_micro_batches=int(rng.choice(self.num_micro_batches)),
            data_parallel=int(rng.choice(self.data_parallel)),
            schedule=str(rng.choice(self.schedules)),
        )
        return Instance(cluster, build_transformer(cfg), f"{self.name}/{key}")


# ---- toy instances with a known optimum --------------------------------------------------------


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
        object.__setattr__(self, "num_machines", _pair(self.num_machines, "num_machines"))
        object.__setattr__(self, "num_layers", _pair(self.num_layers, "num_layers"))
        object.__setattr__(self, "data_parallel", _choices(self.data_parallel, "data_parallel"))
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
        return _resample(self.instance, np_random, self.max_tries, self.name)

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
        stash = workload.num_micro_batches if workload.schedule == "gpipe" else min(workload.num_micro_batches, m)
        need = d * float(np.sum(workload.state_bytes_per_param * workload.params + stash * workload.stash_bytes))
        memory = rng.uniform(0.5, 2.0, m) * need / m
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


def exhaustive_optimum(
    instance: Instance, max_placements: int = MAX_EXHAUSTIVE_PLACEMENTS
) -> tuple[np.ndarray, float]:
    """The fastest memory-feasible placement, by enumerating all ``M^(D*L)`` of them.

    Ties go to the first placement in enumeration order (row-major ``[D, L]`` digits in base
    ``M``, i.e. lexicographic).

    Returns:
        ``(placement [D, L], iteration_time_s)``.

    Raises:
        HulkInputError: more than ``max_placements`` placements, or none fits in memory.
    """
    m, d, n = instance.num_machines, instance.data_parallel, instance.num_layers
    total = m ** (d * n)
    if total > max_placements:
        raise HulkInputError(
            f"{m}^({d}x{n}) = {total} placements is above the exhaustive limit {max_placements}",
            source=instance.instance_id,
        )
    best_time, best_index = np.inf, -1
    for start in range(0, total, _ENUM_CHUNK):
        idx = np.arange(start, min(total, start + _ENUM_CHUNK))
        batch = enumerate_placements(idx, m, d, n)
        times = cost.iteration_times(instance.cluster, instance.workload, batch).penalised()
        i = int(np.argmin(times))
        if times[i] < best_time:
            best_time, best_index = float(times[i]), start + i
    if best_index < 0:
        raise HulkInputError("no placement fits in memory", source=instance.instance_id)
    return enumerate_placements(np.array([best_index]), m, d, n)[0], best_time


def enumerate_placements(index: np.ndarray, m: int, d: int, n: int) -> np.ndarray:
    """``[N, D, L]`` placements number ``index`` in base-``m`` row-major order."""
    digits = m ** np.arange(d * n - 1, -1, -1, dtype=np.int64)
    return ((np.asarray(index, dtype=np.int64)[:, None] // digits) % m).reshape(-1, d, n)


# ---- fixed and listed instances ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FixedGenerator:
    """Always the same instance: one cluster and one model.

    Args:
        cluster: a :class:`Cluster`, a built-in name (:func:`hulk_env.catalog.cluster_names`),
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
            from hulk_env.baselines.base import capacity_reason

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
) -> Instance:
    """An instance from a cluster and a model, each an object, a built-in name or a file."""
    from hulk_env.cluster import load_cluster
    from hulk_env.workload import load_workload

    c = cluster if isinstance(cluster, Cluster) else load_cluster(cluster)[0]
    overrides = dict(
        data_parallel=data_parallel,
        num_micro_batches=num_micro_batches,
        micro_batch_size=micro_batch_size,
        schedule=schedule,
        layers_per_block=layers_per_block,
    )
    if isinstance(model, Workload):
        if micro_batch_size is not None or layers_per_block is not None:
            raise HulkInputError(
                "micro_batch_size and layers_per_block rebuild the model: give its name or file",
                field="model",
            )
        w = model.with_training(
            data_parallel=data_parallel, num_micro_batches=num_micro_batches, schedule=schedule
        )
    else:
        w = load_workload(model, **overrides)
    return Instance(c, w, f"{c.name}x{w.name}")


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
                raise HulkInputError("the naive placement does not fit in memory", source=inst.instance_id)

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


# ---- by name -----------------------------------------------------------------------------------

GENERATORS: dict[str, type] = {
    "random": RandomGeoGenerator,
    "toy": ToyGenerator,
    "fixed": FixedGenerator,
}


def make_generator(name: str, **kwargs: object) -> InstanceGenerator:
    """A generator by name (``"random"``, ``"toy"``, ``"fixed"``) from plain keyword values.

    Lists (from YAML/JSON) are accepted where tuples are expected. An unknown keyword is a
    :class:`HulkInputError` naming the valid ones.
    """
    if name not in GENERATORS:
        close = difflib.get_close_matches(str(name), GENERATORS, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise HulkInputError(f"unknown generator '{name}'; {hint}choose one of {', '.join(GENERATORS)}", field="generator")
    cls = GENERATORS[name]
    allowed = [f.name for f in fields(cls) if f.init]
    for key in kwargs:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"valid: {', '.join(allowed)}"
            raise HulkInputError(f"unknown argument of the '{name}' generator; {hint}", field=key)
    plain = {k: (tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v) for k, v in kwargs.items()}
    return cls(**plain)


def generator_arguments(name: str) -> dict[str, object]:
    """The keyword arguments a named generator takes, with their defaults (for docs and CLIs)."""
    cls = GENERATORS[name]
    return {
        p.name: p.default
        for p in inspect.signature(cls).parameters.values()
        if p.default is not inspect.Parameter.empty
    }


__all__ = [
    "DEFAULT_GPU_MIX",
    "FixedGenerator",
    "InstanceGenerator",
    "InstanceListGenerator",
    "RandomGeoGenerator",
    "ToyGenerator",
    "enumerate_placements",
    "exhaustive_optimum",
    "fixed_instance",
    "generator_arguments",
    "is_feasible",
    "make_generator",
]
