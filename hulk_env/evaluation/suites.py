"""Benchmark suites: fixed, versioned, seeded instance sets with stable ids.

CompilerGym style: every instance has a stable id (``"geo-v0/17"``).

Suites (a suite's instances never change under its name; a new design gets a new version):

=============  ===============================================================================
``tiny-v0``    20 toy instances (2-4 machines, 2-5 layers, D in {1, 2}) from
               :class:`hulk_env.generators.ToyGenerator`; optimum known by exhaustive search.
``geo-v0``     24 random geo clusters of 8-64 machines over real cities x built-in models from
               GPT-3 125M to 175B (catalog coarsening, at most ~50 layers), D in {1, 2, 4},
               8/16/32 micro-batches, mostly 1F1B.
``hard-v0``    12 memory-tight, cross-continent instances: 4-8 cities on different continents,
               1-4 mid-size machines each, models that need 45-90% of all memory.
``paper-v0``   the paper's 47 machines (its ``node_feature.csv`` and ``edge.txt``, shipped in the
               package; ``hulk_data`` reads another copy) x GPT-3 1.3B-175B and LLaMA-65B, D in {1, 2}.
``unseen-v0``  22 clusters of 8-512 machines over ``UNSEEN_CITIES`` (never in an agent's training
               pool) x GPT-3 1.3B-175B and LLaMA-65B, D in {1, 2, 4}; 9 memory-tight (the model
               needs 45-90% of all memory, up to 256 machines). What agents are reported on.
``unseen-v1``  ``unseen-v0``'s 22 cases drawn again over ``UNSEEN_CITIES`` from another seed: a fresh
               test draw, for a change of an agent's settings after ``unseen-v0`` had already been
               used to judge such a change (reported beside ``unseen-v0``, never tuned on).
``val-v0``     12 clusters of 8-256 machines over ``VALIDATION_CITIES``, built the same way from
               other seeds: where agents choose checkpoints and settings, never on ``unseen-v0``.
``val-x-v0``   ``unseen-v0``'s 22 cases (8-512 machines, 9 memory-tight) drawn over
               ``VALIDATION_CITIES`` from another seed: validation at the reported suite's sizes
               (where the start ranker's checkpoint and the decision's settings are chosen).
``val-xl-v0``  3 more draws of ``val-x-v0``'s cases over ``VALIDATION_CITIES`` (66 instances):
               the larger validation pool start settings are compared on (34 instances let 2-4
               of them decide).
``settings-v0`` 8 clusters of 8-64 multi-GPU machines over ``UNSEEN_CITIES`` x GPT-3 1.3B-13B
               and LLaMA-13B, D in {1, 2, 4}, each with its own plan settings
               (``SETTINGS_V0_CASES``: tensor parallel 0-8, ZeRO 0-3, every-step or DiLoCo with
               H 10-500, 32-4 bits, streaming or not): methods and agents on the plan settings.
               Reported like ``unseen-v0``, never tuned on.
=============  ===============================================================================

Every instance of every suite is feasible: the ``naive`` placement fits in memory.

**City split.** ``TRAINING_CITIES``, ``VALIDATION_CITIES`` and ``UNSEEN_CITIES`` are disjoint and
each spans every continent. Agent training distributions draw clusters from ``TRAINING_CITIES``
only (the 12 cities of the paper's cluster among them), so ``val-v0`` and ``unseen-v0`` hold
clusters no training run has seen.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hulk_env.cluster import Cluster, geo_cluster, load_hulk_dir, paper_data_dir
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import memory_tightness
from hulk_env.generators import ToyGenerator, naive_fits_memory
from hulk_env.hardware import geo
from hulk_env.instance import Instance
from hulk_env.reference import reference_fits
from hulk_env.workload import catalog

TINY_V0_SEED = 20240
TINY_V0_SIZE = 20

GEO_V0_SEED = 20241
GEO_V0_SIZE = 24
GEO_V0_MODELS = (
    "gpt3-125m",
    "gpt3-350m",
    "bert-large",
    "gpt3-1.3b",
    "gpt3-2.7b",
    "gpt3-6.7b",
    "llama-7b",
    "gpt3-13b",
    "t5-11b",
    "llama-13b",
    "llama-65b",
    "gpt3-175b",
)
# (GPU, GPUs per machine, weight): cloud boxes and older on-premise servers. Fixed here (not
# imported) so that geo-v0 does not change when a generator's defaults do.
GEO_V0_GPU_MIX = (
    ("A100-40GB", 8, 2.0),
    ("A100-80GB", 8, 1.0),
    ("H100", 8, 0.5),
    ("V100-32GB", 8, 1.0),
    ("V100-32GB", 4, 1.0),
    ("A10", 4, 2.0),
    ("T4", 4, 1.0),
    ("GTX-1080", 8, 0.5),
)
GEO_V0_LINK_NOISE = 0.1

HARD_V0_SEED = 20242
HARD_V0_SIZE = 12
HARD_V0_MODELS = ("gpt3-2.7b", "gpt3-6.7b", "llama-7b", "gpt3-13b", "llama-13b", "t5-11b", "llama-65b")
HARD_V0_GPU_MIX = (
    ("V100-32GB", 8, 2.0),
    ("V100-32GB", 4, 1.0),
    ("A10", 4, 2.0),
    ("T4", 8, 1.0),
    ("A100-40GB", 8, 1.0),
    ("GTX-1080", 8, 1.0),
)
HARD_V0_TIGHTNESS = (0.45, 0.9)  # memory needed / memory available

PAPER_V0_CASES = (
    ("gpt3-1.3b", 1),
    ("gpt3-1.3b", 2),
    ("gpt3-2.7b", 1),
    ("gpt3-2.7b", 2),
    ("gpt3-6.7b", 1),
    ("gpt3-6.7b", 2),
    ("gpt3-13b", 1),
    ("gpt3-13b", 2),
    ("llama-65b", 1),
    ("gpt3-175b", 1),
)

# ---- held-out suites: the city split, unseen-v0 and val-v0 -------------------------------------

UNSEEN_CITIES = (
    "Amsterdam", "Helsinki", "Madrid", "Warsaw",  # Europe
    "Ashburn", "Chicago", "Toronto", "Queretaro",  # North America
    "Singapore", "Seoul", "Mumbai", "Dubai",  # Asia
    "Sydney", "Santiago", "Johannesburg", "Lagos",  # Oceania, South America, Africa
)  # fmt: skip
VALIDATION_CITIES = (
    "Dublin", "Zurich", "Stockholm",  # Europe
    "Seattle", "Dallas", "Montreal",  # North America
    "Osaka", "Hong Kong", "Bangkok", "Tel Aviv",  # Asia
    "Melbourne", "Bogota", "Nairobi",  # Oceania, South America, Africa
)  # fmt: skip
TRAINING_CITIES = tuple(c for c in sorted(geo.CITIES) if c not in UNSEEN_CITIES + VALIDATION_CITIES)

HELDOUT_GPU_MIX = GEO_V0_GPU_MIX
# Memory-tight cases draw GPUs from these mixes in turn until the model needs HELDOUT_TIGHTNESS of
# the cluster's memory: small boxes; boxes that each hold a coarse layer of the 175B class
# (about 104 GB with 8 micro-batches); mid-size boxes.
SMALL_GPU_MIX = (("T4", 4, 1.0), ("A10", 4, 1.0), ("V100-16GB", 4, 1.0), ("GTX-1080", 8, 1.0), ("V100-32GB", 4, 1.0))
FLOOR_GPU_MIX = (("V100-32GB", 4, 2.0), ("T4", 8, 1.0), ("A10", 8, 1.0), ("V100-32GB", 8, 1.0), ("A100-40GB", 4, 1.0))
MEDIUM_GPU_MIX = HARD_V0_GPU_MIX
HELDOUT_TIGHTNESS = (0.45, 0.9)
HELDOUT_DRAWS = 40  # cluster draws per GPU mix

UNSEEN_V0_SEED = 20243
# (machines, model, replicas, memory-tight)
UNSEEN_V0_CASES = (
    (8, "gpt3-1.3b", 1, False), (8, "gpt3-1.3b", 4, True), (8, "gpt3-6.7b", 1, True),
    (16, "gpt3-2.7b", 2, False), (16, "gpt3-13b", 1, True), (16, "gpt3-2.7b", 4, True),
    (32, "gpt3-6.7b", 2, False), (32, "llama-65b", 1, True), (32, "gpt3-13b", 2, False),
    (64, "gpt3-1.3b", 4, False), (64, "gpt3-13b", 1, False), (64, "gpt3-175b", 1, True),
    (128, "gpt3-2.7b", 4, False), (128, "llama-65b", 4, True), (128, "gpt3-175b", 2, True),
    (256, "gpt3-6.7b", 4, False), (256, "gpt3-175b", 4, True), (256, "llama-65b", 2, False),
    (512, "gpt3-1.3b", 4, False), (512, "gpt3-13b", 2, False), (512, "llama-65b", 4, False),
    (512, "gpt3-175b", 4, False),
)  # fmt: skip
UNSEEN_V1_SEED = 20248  # unseen-v1: UNSEEN_V0_CASES drawn again over the unseen cities
VAL_X_V0_SEED = 20246  # val-x-v0: UNSEEN_V0_CASES over the validation cities
VAL_XL_V0_SEED = 20247  # val-xl-v0: 3 more draws of UNSEEN_V0_CASES over the validation cities
VAL_XL_V0_DRAWS = 3
VAL_V0_SEED = 20244
VAL_V0_CASES = (
    (8, "gpt3-2.7b", 2, False), (8, "gpt3-6.7b", 1, True), (16, "gpt3-2.7b", 4, True),
    (16, "gpt3-6.7b", 1, False), (32, "gpt3-13b", 1, False), (32, "llama-65b", 1, True),
    (64, "gpt3-6.7b", 2, False), (64, "gpt3-175b", 1, True), (128, "gpt3-13b", 4, False),
    (128, "llama-65b", 4, True), (256, "llama-65b", 2, False), (256, "gpt3-2.7b", 4, False),
)  # fmt: skip

SETTINGS_V0_SEED = 20249
# (machines, model, replicas, plan settings): each setting takes several values across cases,
# tensor parallel on every GPU count a box of the mix holds (4 and 8) and on part of one. Every
# case's naive placement fits under the cost model's memory rule (naive_fits_memory: TP 4 on
# llama-13b's 8-GPU boxes, or TP 1 on gpt3-6.7b, would not: each group inside a box holds a copy).
SETTINGS_V0_CASES = (
    (8, "gpt3-1.3b", 2, {"tensor_parallel": 8}),
    (8, "gpt3-2.7b", 1, {"tensor_parallel": 2, "zero": 1}),
    (16, "gpt3-6.7b", 2, {"tensor_parallel": 4, "zero": 2}),
    (16, "gpt3-1.3b", 4, {"zero": 3}),
    (32, "gpt3-13b", 2, {"tensor_parallel": 8, "zero": 1, "sync": "diloco", "inner_steps": 100, "outer_bits": 8}),
    (32, "gpt3-2.7b", 4, {"sync": "diloco", "inner_steps": 500, "outer_bits": 4, "streaming": True}),
    (64, "llama-13b", 2, {"tensor_parallel": 8, "zero": 3, "sync": "diloco", "inner_steps": 10, "outer_bits": 16}),
    (64, "gpt3-1.3b", 4, {"tensor_parallel": 1, "zero": 2, "sync": "diloco", "inner_steps": 100, "streaming": True}),
)  # fmt: skip

SUITES: dict[str, str] = {
    "tiny-v0": f"{TINY_V0_SIZE} toy instances with a known optimum (exhaustive search)",
    "geo-v0": f"{GEO_V0_SIZE} random geo clusters (8-64 machines) x models 125M-175B, D in 1/2/4",
    "hard-v0": f"{HARD_V0_SIZE} memory-tight, cross-continent instances",
    "paper-v0": f"the paper's 47 machines x {len(PAPER_V0_CASES)} model/D cases",
    "unseen-v0": f"{len(UNSEEN_V0_CASES)} clusters (8-512 machines) over cities outside every training pool",
    "unseen-v1": f"{len(UNSEEN_V0_CASES)} clusters (8-512 machines): unseen-v0's cases drawn again over its cities",
    "val-v0": f"{len(VAL_V0_CASES)} clusters (8-256 machines) over the validation cities (checkpoint selection)",
    "val-x-v0": f"{len(UNSEEN_V0_CASES)} clusters (8-512 machines) over the validation cities, unseen-v0's cases",
    "val-xl-v0": f"{VAL_XL_V0_DRAWS * len(UNSEEN_V0_CASES)} clusters: {VAL_XL_V0_DRAWS} more draws of val-x-v0's cases (start settings)",
    "settings-v0": f"{len(SETTINGS_V0_CASES)} clusters (8-64 multi-GPU machines) whose cases vary the plan settings (TP, ZeRO, DiLoCo)",
}


def suite_names() -> list[str]:
    """Names :func:`load_suite` accepts."""
    return list(SUITES)


def load_suite(name: str, hulk_data: str | Path | None = None) -> list[Instance]:
    """The instances of a suite, ids ``"<suite>/<index>"``, same every time.

    Args:
        name: a suite name (:func:`suite_names`).
        hulk_data: the paper's data directory for ``paper-v0`` (default: the copy shipped in
            the package, :func:`hulk_env.cluster.paper_data_dir`); other suites ignore it.

    Raises:
        HulkInputError: unknown suite, or ``paper-v0`` with a bad ``hulk_data``.
    """
    key = str(name).strip().lower()
    if key == "tiny-v0":
        return _tiny_v0()
    if key == "geo-v0":
        return _geo_v0()
    if key == "hard-v0":
        return _hard_v0()
    if key in heldout_specs():
        return _heldout_suite(*heldout_specs()[key], key)
    if key == "paper-v0":
        return _paper_v0(paper_data_dir() if hulk_data is None else Path(hulk_data))
    if key == "settings-v0":
        return [_settings_v0_instance(i) for i in range(len(SETTINGS_V0_CASES))]
    raise HulkInputError(f"unknown suite '{name}'; choose one of {', '.join(SUITES)}", field="suite")


def suite_instance(name: str, index: int) -> Instance:
    """``load_suite(name)[index]``, drawing only that instance where the suite allows it.

    A held-out suite draws instance ``i`` from its own generator ``default_rng([seed, i])``, so
    one instance costs one draw instead of the whole suite (``val-xl-v0``: 66 draws).
    """
    key = str(name).strip().lower()
    if key == "settings-v0" and 0 <= index < len(SETTINGS_V0_CASES):
        return _settings_v0_instance(index)
    if key not in heldout_specs():
        return load_suite(name)[index]
    cases, seed, cities = heldout_specs()[key]
    if not 0 <= index < len(cases):
        raise HulkInputError(f"{key} has {len(cases)} instances; index {index} is out of range", field="index")
    m, model, d, tight = cases[index]
    return _draw_heldout_instance(np.random.default_rng([seed, index]), m, model, d, tight, cities, f"{key}/{index}")


def heldout_specs() -> dict[str, tuple[tuple, int, tuple[str, ...]]]:
    """Each held-out suite's ``(cases, seed, cities)``: a case is ``(machines, model, replicas, tight)``."""
    return {
        "unseen-v0": (UNSEEN_V0_CASES, UNSEEN_V0_SEED, UNSEEN_CITIES),
        "unseen-v1": (UNSEEN_V0_CASES, UNSEEN_V1_SEED, UNSEEN_CITIES),
        "val-v0": (VAL_V0_CASES, VAL_V0_SEED, VALIDATION_CITIES),
        "val-x-v0": (UNSEEN_V0_CASES, VAL_X_V0_SEED, VALIDATION_CITIES),
        "val-xl-v0": (UNSEEN_V0_CASES * VAL_XL_V0_DRAWS, VAL_XL_V0_SEED, VALIDATION_CITIES),
    }


def _tiny_v0() -> list[Instance]:
    # Every size range spelled out, so a change of the generator's defaults cannot change tiny-v0.
    gen = ToyGenerator(
        num_machines=(2, 4), num_layers=(2, 5), data_parallel=(1, 2), max_placements=4096,
        skip_edge_probability=0.3, max_tries=100,
        name="tiny-v0",
    )
    rng = np.random.default_rng(TINY_V0_SEED)
    return [_renamed(gen(rng), f"tiny-v0/{i}") for i in range(TINY_V0_SIZE)]


def _geo_v0() -> list[Instance]:
    out = []
    for i in range(GEO_V0_SIZE):
        rng = np.random.default_rng([GEO_V0_SEED, i])
        model = GEO_V0_MODELS[i % len(GEO_V0_MODELS)]
        out.append(_draw_geo_instance(rng, model, f"geo-v0/{i}"))
    return out


def _draw_geo_instance(rng: np.random.Generator, model: str, instance_id: str) -> Instance:
    """A feasible geo instance for ``model``: redraw the cluster, then fewer replicas, if needed."""
    for _ in range(50):
        m = int(rng.integers(8, 65))
        regions = int(rng.integers(2, min(8, m // 2) + 1))
        cluster = _geo_cluster(rng, m, regions, GEO_V0_GPU_MIX, instance_id, one_per_continent=False)
        settings = dict(
            num_micro_batches=int(rng.choice([8, 16, 32])),
            schedule="gpipe" if rng.random() < 0.25 else "1f1b",
        )
        if settings["schedule"] == "gpipe":
            settings["num_micro_batches"] = min(settings["num_micro_batches"], 16)
        drawn = int(rng.choice([1, 2, 4]))
        for d in (x for x in (4, 2, 1) if x <= drawn):
            inst = Instance(cluster, catalog.get_model(model, data_parallel=d, **settings), instance_id)
            if reference_fits(inst):
                return inst
    raise RuntimeError(f"{instance_id}: no feasible draw for {model}")  # a suite design bug


def _hard_v0() -> list[Instance]:
    out = []
    for i in range(HARD_V0_SIZE):
        rng = np.random.default_rng([HARD_V0_SEED, i])
        out.append(_draw_hard_instance(rng, f"hard-v0/{i}"))
    return out


def _draw_hard_instance(rng: np.random.Generator, instance_id: str) -> Instance:
    """Cross-continent cluster and a model that fills 45-90% of its memory (naive fits)."""
    low, high = HARD_V0_TIGHTNESS
    for _ in range(500):
        regions = int(rng.integers(4, 9))
        m = int(rng.integers(regions, 4 * regions + 1))
        cluster = _geo_cluster(rng, m, regions, HARD_V0_GPU_MIX, instance_id, one_per_continent=True)
        model = str(rng.choice(HARD_V0_MODELS))
        d = int(rng.choice([1, 2, 4]))
        w = catalog.get_model(model, data_parallel=d, num_micro_batches=int(rng.choice([8, 16])))
        inst = Instance(cluster, w, instance_id)
        if low <= memory_tightness(inst) <= high and reference_fits(inst):
            return inst
    raise RuntimeError(f"{instance_id}: no feasible memory-tight draw")  # a suite design bug


def _heldout_suite(cases: tuple, seed: int, cities: tuple[str, ...], name: str) -> list[Instance]:
    return [
        _draw_heldout_instance(np.random.default_rng([seed, i]), m, model, d, tight, cities, f"{name}/{i}")
        for i, (m, model, d, tight) in enumerate(cases)
    ]


def heldout_regions(machines: int, cities: int) -> int:
    """Cities in a held-out cluster: about ``sqrt(machines)``, at least 2, at most ``cities``."""
    return int(np.clip(round(np.sqrt(machines)), 2, cities))


def _draw_heldout_instance(
    rng: np.random.Generator, machines: int, model: str, replicas: int, tight: bool, cities: tuple[str, ...], instance_id: str
) -> Instance:
    """A feasible cluster of ``machines`` over ``cities`` for ``model``. Memory-tight: exactly
    ``replicas`` replicas, 8 micro-batches, 1F1B, a GPU mix where the model needs
    ``HELDOUT_TIGHTNESS`` of all memory; otherwise fewer replicas if they do not fit, 8 or 16
    micro-batches, GPipe one time in five."""
    regions = min(heldout_regions(machines, len(cities)), machines)
    low, high = HELDOUT_TIGHTNESS
    for mix in (SMALL_GPU_MIX, FLOOR_GPU_MIX, MEDIUM_GPU_MIX) if tight else (HELDOUT_GPU_MIX,):
        for _ in range(HELDOUT_DRAWS):
            chosen = [str(c) for c in rng.choice(cities, regions, replace=False)]
            counts = 1 + rng.multinomial(machines - regions, np.full(regions, 1.0 / regions))
            cluster = geo_cluster(
                chosen, [int(c) for c in counts], mix, seed=int(rng.integers(2**31)), name=instance_id,
                link_noise=GEO_V0_LINK_NOISE,
            )  # fmt: skip
            micro_batches = 8 if tight else int(rng.choice([8, 16]))
            schedule = "gpipe" if not tight and rng.random() < 0.2 else "1f1b"
            for d in (replicas,) if tight else tuple(x for x in (4, 2, 1) if x <= replicas):
                workload = catalog.get_model(model, data_parallel=d, num_micro_batches=micro_batches, schedule=schedule)
                inst = Instance(cluster, workload, instance_id)
                if reference_fits(inst) and (not tight or low <= memory_tightness(inst) <= high):
                    return inst
    raise RuntimeError(f"{instance_id}: no feasible draw for {model}")  # a suite design bug


def _settings_v0_instance(index: int) -> Instance:
    """``settings-v0/<index>``: a held-out draw of the case's cluster and model (every-step,
    as ``unseen-v0`` draws them), then the case's plan settings."""
    machines, model, replicas, settings = SETTINGS_V0_CASES[index]
    instance_id = f"settings-v0/{index}"
    rng = np.random.default_rng([SETTINGS_V0_SEED, index])
    drawn = _draw_heldout_instance(rng, machines, model, replicas, False, UNSEEN_CITIES, instance_id)
    inst = Instance(drawn.cluster, drawn.workload.with_training(**settings), instance_id)
    if not (reference_fits(inst) and naive_fits_memory(inst)):
        raise RuntimeError(f"{instance_id}: the naive placement does not fit under {settings}")  # a suite design bug
    return inst


def _geo_cluster(
    rng: np.random.Generator,
    num_machines: int,
    regions: int,
    gpu_mix: tuple[tuple[str, int, float], ...],
    name: str,
    one_per_continent: bool,
) -> Cluster:
    names = sorted(geo.CITIES)
    if one_per_continent:
        # Cities on distinct continents first (cross-continent links), then any others.
        by_continent: dict[str, list[str]] = {}
        for c in names:
            by_continent.setdefault(geo.CITIES[c].continent, []).append(c)
        continents = sorted(by_continent)
        picks = [str(rng.choice(by_continent[k])) for k in rng.permutation(continents)]
        rest = [c for c in names if c not in picks]
        picks += [str(c) for c in rng.choice(rest, max(0, regions - len(picks)), replace=False)]
        cities = picks[:regions]
    else:
        cities = [str(c) for c in rng.choice(names, regions, replace=False)]
    counts = 1 + rng.multinomial(num_machines - regions, np.full(regions, 1.0 / regions))
    return geo_cluster(
        cities,
        [int(c) for c in counts],
        gpu_mix,
        seed=int(rng.integers(2**31)),
        name=name,
        link_noise=GEO_V0_LINK_NOISE,
    )


def _paper_v0(hulk_data: Path) -> list[Instance]:
    cluster, _ = load_hulk_dir(hulk_data)
    out = []
    for i, (model, d) in enumerate(PAPER_V0_CASES):
        inst = Instance(cluster, catalog.get_model(model, data_parallel=d), f"paper-v0/{i}")
        if not reference_fits(inst):
            raise HulkInputError(
                f"paper-v0/{i} ({model}, D={d}) does not fit on this cluster: is {hulk_data} the "
                "paper's unmodified data?",
                source=str(hulk_data),
            )
        out.append(inst)
    return out


def _renamed(instance: Instance, instance_id: str) -> Instance:
    return Instance(instance.cluster, instance.workload, instance_id)
