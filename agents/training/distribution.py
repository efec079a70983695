"""The generalist's training distribution: what users place, over the training cities only.

:class:`GeneralistGenerator` is an instance generator (the protocol of
:mod:`hulk_env.generators`: ``__call__(np_random) -> Instance`` plus the padding bounds) that
draws

* clusters of 4-128 machines (log-uniform, so small and large clusters are equally common) in
  1-12 cities of the *training* city pool, sometimes one city per continent (cross-continent
  links), with the GPUs of one of several mixes (cloud boxes, older on-premise servers, the
  paper's, one GPU type only) or a random sub-mix of the GPU catalog;
* built-in models from GPT-3 125M to the 175B class (the catalog's coarsening keeps them under
  ~50 layers), encoder-only and encoder-decoder ones included, 1-4 data-parallel replicas,
  4-32 micro-batches, 1F1B or GPipe;
* a share of memory-tight instances: the model needs ``TIGHT_RANGE`` (45-90%) of the
  cluster's memory, where most rollouts that ignore memory dead-end.

Every instance is feasible (the naive placement fits, as the env requires). Like the other
generators it draws one integer key from ``np_random`` and builds the instance from the key
alone: ``instance_id`` is ``"<name>/<key>"`` and :meth:`GeneralistGenerator.instance` rebuilds
it.

Cities of the held-out suites are never drawn: the default pool is
:func:`training_cities`, every city of :data:`hulk_env.hardware.geo.CITIES` except the held-out list.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hulk_env.baselines.naive import naive
from hulk_env.cluster import PAPER_GPU_MIX, geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import memory_tightness
from hulk_env.hardware import geo
from hulk_env.instance import Instance
from hulk_env.workload import catalog

KEY_RANGE = 2**31
# Built-in models, 125M to 176B parameters (the catalog coarsens the largest to <= ~50 layers).
GENERALIST_MODELS: tuple[str, ...] = (
    "gpt3-125m", "gpt3-350m", "bert-large", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "llama-7b",
    "gpt3-13b", "llama-13b", "t5-11b", "llama-65b", "gpt3-175b", "opt-175b", "bloom-176b",
)  # fmt: skip
# (GPU, GPUs per machine, weight) mixes a regional pool may hold.
GPU_MIXES: dict[str, tuple[tuple[str, int, float], ...]] = {
    "cloud": (("A100-40GB", 8, 3.0), ("A100-80GB", 8, 2.0), ("H100", 8, 1.0), ("V100-32GB", 8, 2.0), ("A10", 4, 2.0)),
    "on-premise": (("V100-32GB", 4, 2.0), ("V100-16GB", 8, 1.0), ("T4", 4, 2.0), ("GTX-1080", 8, 2.0),
                   ("GTX-1080Ti", 4, 1.0), ("P40", 4, 1.0), ("RTX-2080Ti", 8, 1.0)),
    "paper": PAPER_GPU_MIX,
    "mixed": (("A100-40GB", 8, 2.0), ("A100-80GB", 8, 1.0), ("H100", 8, 0.5), ("V100-32GB", 8, 1.0),
              ("V100-32GB", 4, 1.0), ("A10", 4, 2.0), ("T4", 4, 1.0), ("GTX-1080", 8, 0.5)),
    "workstations": (("RTX-3090", 2, 2.0), ("RTX-3090", 4, 1.0), ("A40", 4, 1.0), ("L4", 4, 1.0),
                     ("L40S", 4, 1.0), ("TITAN-RTX", 2, 1.0)),
}  # fmt: skip
GPUS_PER_MACHINE = (1, 2, 4, 8)  # for random sub-mixes
TIGHT_RANGE = (0.45, 0.9)  # memory needed / memory of the cluster, for memory-tight draws


def training_cities() -> tuple[str, ...]:
    """The training city pool (:data:`hulk_env.evaluation.suites.TRAINING_CITIES`): the
    validation (``val-v0``) and unseen (``unseen-v0``) suites use the other cities."""
    from hulk_env.evaluation.suites import TRAINING_CITIES

    return tuple(geo.get_city(c).name for c in TRAINING_CITIES)


@dataclass(frozen=True)
class GeneralistGenerator:
    """Clusters of many sizes, cities and GPU mixes x built-in models; feasible only.

    Args:
        num_machines: (low, high) machines, drawn log-uniformly.
        max_regions: the most cities in a cluster (at most ``num_machines``).
        cities: the city pool (default: :func:`training_cities`).
        models: built-in model names to draw from.
        data_parallel: replica counts to draw from (fewer are tried when the drawn one does
            not fit).
        num_micro_batches: micro-batches per iteration to draw from (GPipe draws at most 16).
        gpipe_share: probability of the GPipe schedule (else 1F1B).
        tight_share: probability that an instance must be memory-tight (``TIGHT_RANGE``).
        cross_continent_share: probability that the cities are spread one per continent.
        submix_share: probability of a random sub-mix of the GPU catalog instead of a named mix.
        link_noise: sigma of the log-normal jitter on each pair's RTT.
        max_tries: draws per instance before giving up.
        name: prefix of the instance ids.
    """

    num_machines: tuple[int, int] = (4, 128)
    max_regions: int = 12
    cities: tuple[str, ...] = ()
    models: tuple[str, ...] = GENERALIST_MODELS
    data_parallel: tuple[int, ...] = (1, 2, 3, 4)
    num_micro_batches: tuple[int, ...] = (4, 8, 16, 32)
    gpipe_share: float = 0.2
    tight_share: float = 0.3
    cross_continent_share: float = 0.3
    submix_share: float = 0.3
    link_noise: float = 0.1
    max_tries: int = 200
    name: str = "generalist"

    def __post_init__(self) -> None:
        lo, hi = (int(x) for x in self.num_machines)
        if not 1 <= lo <= hi:
            raise HulkInputError(f"num_machines must be (low, high) with 1 <= low <= high, got {self.num_machines}",
                                 field="num_machines")  # fmt: skip
        object.__setattr__(self, "num_machines", (lo, hi))
        pool = tuple(geo.get_city(c).name for c in self.cities) if self.cities else training_cities()
        if not pool:
            raise HulkInputError("the city pool is empty", field="cities")
        object.__setattr__(self, "cities", tuple(dict.fromkeys(pool)))
        for model in self.models:
            catalog.get_model_config(model)  # an unknown name is a clear error now, not mid-training
        if not self.models or not self.data_parallel or not self.num_micro_batches:
            raise HulkInputError("models, data_parallel and num_micro_batches need at least one choice")

    # The padding bounds of the generator protocol: the largest instance it can draw.
    @property
    def max_machines(self) -> int:
        return self.num_machines[1]

    @property
    def max_slots(self) -> int:
        return max(self.data_parallel) * max(_layers(m) for m in self.models)

    @property
    def max_edges(self) -> int:
        return max(self.data_parallel) * max(_edges(m) for m in self.models)

    def __call__(self, np_random: np.random.Generator) -> Instance:
        for _ in range(self.max_tries):
            inst = self.instance(int(np_random.integers(KEY_RANGE)))
            if inst is not None:
                return inst
        raise HulkInputError(f"{self.name}: no feasible instance in {self.max_tries} draws; widen the ranges")

    def instance(self, key: int) -> Instance | None:
        """The instance named ``"<name>/<key>"``, or ``None`` when that key's draw does not fit."""
        rng = np.random.default_rng([key, 7])
        cluster = self._cluster(rng, key)
        tight = bool(rng.random() < self.tight_share)
        schedule = "gpipe" if rng.random() < self.gpipe_share else "1f1b"
        micro = int(rng.choice(self.num_micro_batches))
        if schedule == "gpipe":
            micro = min(micro, 16)
        drawn = int(rng.choice(self.data_parallel))
        # Models in a random order: the first that fits (and is tight when asked) is taken.
        for model in rng.permutation(np.array(self.models)):
            for d in sorted((x for x in self.data_parallel if x <= drawn), reverse=True):
                w = catalog.get_model(str(model), data_parallel=d, num_micro_batches=micro, schedule=schedule)
                inst = Instance(cluster, w, f"{self.name}/{key}")
                if tight and not TIGHT_RANGE[0] <= memory_tightness(inst) <= TIGHT_RANGE[1]:
                    continue
                if naive(inst).feasible:
                    return inst
        return None

    def _cluster(self, rng: np.random.Generator, key: int):
        lo, hi = self.num_machines
        m = int(np.clip(round(np.exp(rng.uniform(np.log(lo), np.log(hi + 1)))), lo, hi))
        top = min(self.max_regions, m, len(self.cities))
        regions = int(np.clip(round(np.sqrt(m) * rng.uniform(0.4, 2.0)), 1, top))
        cities = self._cities(rng, regions)
        counts = 1 + rng.multinomial(m - regions, rng.dirichlet(np.full(regions, 2.0)))
        return geo_cluster(cities, [int(c) for c in counts], self._gpu_mix(rng), seed=int(rng.integers(KEY_RANGE)),
                           name=f"{self.name}/{key}", link_noise=self.link_noise)  # fmt: skip

    def _cities(self, rng: np.random.Generator, regions: int) -> list[str]:
        pool = list(self.cities)
        if rng.random() < self.cross_continent_share:
            by_continent: dict[str, list[str]] = {}
            for c in pool:
                by_continent.setdefault(geo.get_city(c).continent, []).append(c)
            picks = [str(rng.choice(by_continent[k])) for k in rng.permutation(sorted(by_continent))]
            rest = [c for c in pool if c not in picks]
            picks += [str(c) for c in rng.choice(rest, max(0, regions - len(picks)), replace=False)]
            return picks[:regions]
        return [str(c) for c in rng.choice(pool, regions, replace=False)]

    def _gpu_mix(self, rng: np.random.Generator) -> tuple[tuple[str, int, float], ...]:
        if rng.random() < self.submix_share:
            from hulk_env.hardware.gpus import GPUS

            names = sorted(GPUS)
            k = int(rng.integers(1, 5))
            picks = rng.choice(len(names), k, replace=False)
            return tuple((names[i], int(rng.choice(GPUS_PER_MACHINE)), float(rng.uniform(0.5, 2.0))) for i in picks)
        names = sorted(GPU_MIXES)
        return GPU_MIXES[names[int(rng.integers(len(names)))]]


def _layers(model: str) -> int:
    return catalog.get_model(model).num_layers


def _edges(model: str) -> int:
    return len(catalog.get_model(model).edges)
