"""Random clusters over real cities x random GPT-style transformers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hulk_env.cluster import Cluster, geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.generators.base import KEY_RANGE, choices, int_range, naive_fits_memory, resample
from hulk_env.hardware import geo
from hulk_env.instance import Instance
from hulk_env.workload import TransformerConfig, build_transformer

# Plan settings a generator draws when asked (hulk_env.parallelism): DiLoCo's published runs
# use H of 50-500 and outer updates quantised down to 4 bits (Douillard et al. 2023, 2025).
PLAN_ZERO_STAGES = (0, 1, 2, 3)
PLAN_INNER_STEPS = (10, 100, 500)
PLAN_OUTER_BITS = (32, 16, 8, 4)
PLAN_STREAM = 7_741  # the settings' own random stream: a key's cluster and model stay the same
PLAN_DRAWS = 8  # settings drawn per instance until the naive placement fits under them


def draw_plan_settings(rng: np.random.Generator, cluster: Cluster) -> dict[str, Any]:
    """Plan settings for an instance on ``cluster`` (keywords of
    :meth:`hulk_env.workload.Workload.with_training`): tensor parallel off (0) or a divisor of
    the largest machine's GPU count (a smaller machine takes ``gcd(t, g_m)``), ZeRO 0-3, and
    every-step sync or DiLoCo (one time in two) with ``H`` in :data:`PLAN_INNER_STEPS`, bits in
    :data:`PLAN_OUTER_BITS` and streaming or not."""
    gpus = int(cluster.num_gpus.max())
    tp = int(rng.choice([0, *(t for t in range(1, gpus + 1) if gpus % t == 0)]))
    out: dict[str, Any] = {"tensor_parallel": tp, "zero": int(rng.choice(PLAN_ZERO_STAGES)), "sync": "every-step"}
    if rng.random() < 0.5:
        out |= {
            "sync": "diloco",
            "inner_steps": int(rng.choice(PLAN_INNER_STEPS)),
            "outer_bits": int(rng.choice(PLAN_OUTER_BITS)),
            "streaming": bool(rng.random() < 0.5),
        }
    return out


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
        cities: the city pool (names from :data:`hulk_env.hardware.geo.CITIES`); empty = all of them.
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
        plan_settings: draw plan settings per instance (:func:`draw_plan_settings`, from a
            stream of its own: the key's cluster and model are the same either way), up to
            :data:`PLAN_DRAWS` times until the naive placement fits under them
            (:func:`naive_fits_memory`: more groups inside a machine hold more copies), else
            the default settings; off by default, so the default draws are those from before
            the settings existed.
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
    plan_settings: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "num_machines", int_range(self.num_machines, "num_machines"))
        set_(self, "num_regions", int_range(self.num_regions, "num_regions"))
        set_(self, "num_blocks", int_range(self.num_blocks, "num_blocks"))
        cities = tuple(self.cities) if self.cities else tuple(geo.CITIES)
        set_(self, "cities", tuple(geo.get_city(c).name for c in cities))
        if self.num_regions[1] > len(self.cities):
            raise HulkInputError(
                f"num_regions up to {self.num_regions[1]} but only {len(self.cities)} cities given",
                field="num_regions",
            )
        set_(self, "gpu_mix", tuple((str(g), int(n), float(w)) for g, n, w in self.gpu_mix))
        if not isinstance(self.plan_settings, bool | np.bool_):
            raise HulkInputError(f"must be true or false, got {self.plan_settings!r}", field="plan_settings")
        set_(self, "plan_settings", bool(self.plan_settings))
        for label in ("hidden", "seq_len", "vocab", "micro_batch_size", "num_micro_batches", "data_parallel", "schedules"):
            set_(self, label, choices(getattr(self, label), label))
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
        return resample(self.instance, np_random, self.max_tries, self.name)

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
        plain = Instance(cluster, build_transformer(cfg), f"{self.name}/{key}")
        if not self.plan_settings:
            return plain
        rng = np.random.default_rng([key, PLAN_STREAM])
        for _ in range(PLAN_DRAWS):
            planned = Instance(cluster, plain.workload.with_training(**draw_plan_settings(rng, cluster)), plain.instance_id)
            if naive_fits_memory(planned):
                return planned
        return plain
