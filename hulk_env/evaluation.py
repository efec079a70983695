"""Benchmark suites, running placement methods on them, and the leaderboard.

CompilerGym style: fixed, versioned, seeded suites of instances with stable ids
(``"geo-v0/17"``), named methods (:data:`hulk_env.baselines.METHODS`, plus any callables such as
trained policies), results as CSV/JSON and a Markdown leaderboard of the geometric-mean speed-up
over the ``naive`` placement (the paper's "without Hulk" reference).

Suites (a suite's instances never change under its name; a new design gets a new version):

===========  ===============================================================================
``tiny-v0``  20 toy instances (2-4 machines, 2-5 layers, D in {1, 2}) from
             :class:`hulk_env.generators.ToyGenerator`; optimum known by exhaustive search.
``geo-v0``   24 random geo clusters of 8-64 machines over real cities x built-in models from
             GPT-3 125M to 175B (catalog coarsening, at most ~50 layers), D in {1, 2, 4},
             8/16/32 micro-batches, mostly 1F1B.
``hard-v0``  12 memory-tight, cross-continent instances: 4-8 cities on different continents,
             1-4 mid-size machines each, models that need 45-90% of all memory.
``paper-v0`` the paper's 47 machines (loaded from ``hulk_data``, the directory of its
             ``node_feature.csv`` and ``edge.txt``) x GPT-3 1.3B-175B and LLaMA-65B, D in {1, 2}.
===========  ===============================================================================

Every instance of every suite is feasible: the ``naive`` placement fits in memory.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hulk_env import catalog, cost, geo
from hulk_env.baselines import METHODS, PlacementResult, get_method
from hulk_env.baselines.base import layer_memory_bytes, stash_count
from hulk_env.baselines.naive import naive
from hulk_env.cluster import Cluster, geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance

MethodFn = Callable[[Instance, int, "int | None"], PlacementResult]

RESULT_COLUMNS = (
    "instance",
    "method",
    "iteration_time_s",
    "speedup_vs_naive",
    "gap_to_best",
    "cost_evals",
    "wall_s",
    "feasible",
)
DEFAULT_METHODS = (
    "naive",
    "random",
    "compute-greedy",
    "latency-chain-dp",
    "partition",
    "genetic",
    "anneal",
)


# ---- suites ---------------------------------------------------------------------------------

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

SUITES: dict[str, str] = {
    "tiny-v0": f"{TINY_V0_SIZE} toy instances with a known optimum (exhaustive search)",
    "geo-v0": f"{GEO_V0_SIZE} random geo clusters (8-64 machines) x models 125M-175B, D in 1/2/4",
    "hard-v0": f"{HARD_V0_SIZE} memory-tight, cross-continent instances",
    "paper-v0": f"the paper's 47 machines x {len(PAPER_V0_CASES)} model/D cases (needs hulk_data)",
}


def suite_names() -> list[str]:
    """Names :func:`load_suite` accepts."""
    return list(SUITES)


def load_suite(name: str, hulk_data: str | Path | None = None) -> list[Instance]:
    """The instances of a suite, ids ``"<suite>/<index>"``, same every time.

    Args:
        name: a suite name (:func:`suite_names`).
        hulk_data: the paper's data directory; required by ``paper-v0`` only.

    Raises:
        HulkInputError: unknown suite, or ``paper-v0`` without (or with a bad) ``hulk_data``.
    """
    key = str(name).strip().lower()
    if key == "tiny-v0":
        return _tiny_v0()
    if key == "geo-v0":
        return _geo_v0()
    if key == "hard-v0":
        return _hard_v0()
    if key == "paper-v0":
        if hulk_data is None:
            raise HulkInputError(
                "suite 'paper-v0' needs the paper's data: pass hulk_data=DIR (CLI: --hulk-data DIR), "
                "the directory holding node_feature.csv and edge.txt",
                field="hulk_data",
            )
        return _paper_v0(Path(hulk_data))
    raise HulkInputError(f"unknown suite '{name}'; choose one of {', '.join(SUITES)}", field="suite")


def _tiny_v0() -> list[Instance]:
    from hulk_env.generators import ToyGenerator

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
            if naive(inst).feasible:
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
        if low <= memory_tightness(inst) <= high and naive(inst).feasible:
            return inst
    raise RuntimeError(f"{instance_id}: no feasible memory-tight draw")  # a suite design bug


def memory_tightness(instance: Instance) -> float:
    """Memory the model needs (all replicas, stash of the deepest pipeline) / the cluster's."""
    deepest = min(instance.num_machines, instance.num_layers)
    need = instance.data_parallel * float(layer_memory_bytes(instance, stash_count(instance, deepest)).sum())
    return need / float(instance.cluster.memory_bytes.sum())


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
    from hulk_env.cluster import load_hulk_dir

    cluster, _ = load_hulk_dir(hulk_data)
    out = []
    for i, (model, d) in enumerate(PAPER_V0_CASES):
        inst = Instance(cluster, catalog.get_model(model, data_parallel=d), f"paper-v0/{i}")
        if not naive(inst).feasible:
            raise HulkInputError(
                f"paper-v0/{i} ({model}, D={d}) does not fit on this cluster: is {hulk_data} the "
                "paper's unmodified data?",
                source=str(hulk_data),
            )
        out.append(inst)
    return out


def _renamed(instance: Instance, instance_id: str) -> Instance:
    return Instance(instance.cluster, instance.workload, instance_id)


# ---- running methods ------------------------------------------------------------------------


@dataclass(frozen=True)
class ResultRow:
    """One method on one instance.

    Attributes:
        instance: the instance id.
        method: the method name.
        iteration_time_s: the placement's iteration time (``nan`` when infeasible).
        speedup_vs_naive: ``T_naive / T_method`` (``nan`` when either is infeasible).
        gap_to_best: ``T_method / T_best - 1``, ``T_best`` the fastest method on this instance.
        cost_evals: cost-model evaluations the method used.
        wall_s: the method's wall-clock seconds.
        feasible: whether it returned a memory-feasible placement.
        reason: why not, when not feasible (not a CSV column).
    """

    instance: str
    method: str
    iteration_time_s: float
    speedup_vs_naive: float
    gap_to_best: float
    cost_evals: int
    wall_s: float
    feasible: bool
    reason: str = ""


def run_methods(
    instances: Sequence[Instance],
    methods: Sequence[str] = DEFAULT_METHODS,
    seed: int = 0,
    budgets: Mapping[str, int | None] | None = None,
    progress: bool = True,
    extra_methods: Mapping[str, MethodFn] | None = None,
) -> list[ResultRow]:
    """Run every method on every instance; rows in instance-major order.

    Args:
        instances: e.g. ``load_suite("geo-v0")``.
        methods: registered method names (:data:`hulk_env.baselines.METHODS`) or names in
            ``extra_methods``.
        seed: passed to every method.
        budgets: per-method evaluation budget (methods not listed get their default).
        progress: show a progress bar (on stderr).
        extra_methods: more methods by name, e.g. trained policies:
            ``callable(instance, seed, budget) -> PlacementResult``; those not named in
            ``methods`` are run after them.

    Raises:
        HulkInputError: an unknown method name.
    """
    extra = dict(extra_methods or {})
    names = list(dict.fromkeys([*methods, *extra]))
    table = {n: extra[n] if n in extra else get_method(n) for n in names}
    budgets = dict(budgets or {})
    rows: list[ResultRow] = []
    with _Progress(progress, len(instances) * len(names)) as advance:
        for inst in instances:
            raw = {}
            for n in names:
                raw[n] = _run_one(table[n], inst, seed, budgets.get(n))
                advance(f"{inst.instance_id} {n}")
            reference = raw["naive"][0] if "naive" in raw else _run_one(naive, inst, seed, None)[0]
            rows += _rows_for_instance(inst.instance_id, raw, reference)
    return rows


def evaluate_suite(
    suite: str,
    methods: Sequence[str] = DEFAULT_METHODS,
    out_dir: str | Path | None = None,
    hulk_data: str | Path | None = None,
    seed: int = 0,
    budgets: Mapping[str, int | None] | None = None,
    progress: bool = True,
    extra_methods: Mapping[str, MethodFn] | None = None,
) -> list[ResultRow]:
    """Load a suite, run the methods on it and, with ``out_dir``, write the result files.

    One call for ``hulk evaluate``: see :func:`load_suite`, :func:`run_methods` and
    :func:`write_results` for the arguments.
    """
    rows = run_methods(load_suite(suite, hulk_data), methods, seed, budgets, progress, extra_methods)
    if out_dir is not None:
        write_results(rows, out_dir, title=f"Leaderboard: {suite}")
    return rows


def _run_one(fn: MethodFn, inst: Instance, seed: int, budget: int | None) -> tuple[float, int, float, str]:
    """``(iteration_time_s or nan, cost_evals, wall_s, reason)``."""
    start = time.perf_counter()
    try:
        result = fn(inst, seed, budget)
    except HulkInputError as err:  # e.g. a policy whose padding is too small for the instance
        return math.nan, 0, time.perf_counter() - start, err.one_line()
    wall = time.perf_counter() - start
    if result.placement is None:
        return math.nan, result.cost_evals, wall, result.reason or "no placement"
    breakdown = cost.evaluate(inst.cluster, inst.workload, result.placement)
    if not breakdown.memory_feasible:
        return math.nan, result.cost_evals, wall, "the returned placement does not fit in memory"
    return float(breakdown.iteration_time_s), result.cost_evals, wall, ""


def _rows_for_instance(instance_id: str, raw: dict, reference: float) -> list[ResultRow]:
    times = [t for t, *_ in raw.values() if not math.isnan(t)]
    best = min(times) if times else math.nan
    rows = []
    for name, (t, evals, wall, reason) in raw.items():
        feasible = not math.isnan(t)
        rows.append(
            ResultRow(
                instance=instance_id,
                method=name,
                iteration_time_s=t,
                speedup_vs_naive=reference / t if feasible and not math.isnan(reference) else math.nan,
                gap_to_best=t / best - 1.0 if feasible else math.nan,
                cost_evals=int(evals),
                wall_s=float(wall),
                feasible=feasible,
                reason=reason,
            )
        )
    return rows


class _Progress:
    """A rich progress bar when enabled; ``advance(label)`` after each run."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled, total
        self.bar = None

    def __enter__(self) -> Callable[[str], None]:
        if not self.enabled:
            return lambda label: None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        task = self.bar.add_task("evaluating", total=self.total)

        def advance(label: str) -> None:
            self.bar.update(task, advance=1, description=label)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


# ---- leaderboard and files ------------------------------------------------------------------


def geometric_mean(values: Sequence[float]) -> float:
    """Geometric mean of the finite positive values (``nan`` when there are none)."""
    arr = np.asarray([v for v in values if np.isfinite(v) and v > 0], dtype=np.float64)
    return float(np.exp(np.log(arr).mean())) if len(arr) else math.nan


def leaderboard(rows: Sequence[ResultRow]) -> list[dict]:
    """One entry per method, best geometric-mean speed-up over naive first.

    Keys: ``rank``, ``method``, ``geomean_speedup_vs_naive`` (over the instances both it and
    naive solved), ``mean_gap_to_best``, ``best_on`` (instances where it matched the best within
    1e-9), ``solved``, ``instances``, ``mean_cost_evals``, ``total_wall_s``.
    """
    by_method: dict[str, list[ResultRow]] = {}
    for r in rows:
        by_method.setdefault(r.method, []).append(r)
    entries = []
    for name, rs in by_method.items():
        gaps = [r.gap_to_best for r in rs if r.feasible]
        entries.append(
            {
                "method": name,
                "geomean_speedup_vs_naive": geometric_mean([r.speedup_vs_naive for r in rs]),
                "mean_gap_to_best": float(np.mean(gaps)) if gaps else math.nan,
                "best_on": sum(1 for g in gaps if g <= 1e-9),
                "solved": sum(1 for r in rs if r.feasible),
                "instances": len(rs),
                "mean_cost_evals": float(np.mean([r.cost_evals for r in rs])),
                "total_wall_s": float(sum(r.wall_s for r in rs)),
            }
        )
    entries.sort(key=lambda e: (-_or(e["geomean_speedup_vs_naive"], -math.inf), e["method"]))
    for i, e in enumerate(entries, 1):
        e["rank"] = i
    return [{"rank": e.pop("rank"), **e} for e in entries]


def _or(value: float, default: float) -> float:
    return default if math.isnan(value) else value


def summary_markdown(rows: Sequence[ResultRow], title: str = "Leaderboard") -> str:
    """The leaderboard as a Markdown table (CompilerGym style)."""
    board = leaderboard(rows)
    n_instances = len({r.instance for r in rows})
    lines = [
        f"# {title}",
        "",
        f"{n_instances} instance(s). Speed-up = naive iteration time / method iteration time "
        "(geometric mean over the instances both solved); gap = time / best method's time - 1.",
        "",
        "| Rank | Method | Geomean speed-up vs naive | Mean gap to best | Best on | Solved | Mean cost evals | Wall time (s) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for e in board:
        lines.append(
            f"| {e['rank']} | {e['method']} | {_fmt(e['geomean_speedup_vs_naive'], '.3f')}x | "
            f"{_fmt(100 * e['mean_gap_to_best'], '.2f')}% | {e['best_on']} | {e['solved']}/{e['instances']} | "
            f"{e['mean_cost_evals']:,.0f} | {e['total_wall_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _fmt(value: float, spec: str) -> str:
    return "n/a" if math.isnan(value) else format(value, spec)


def write_results(rows: Sequence[ResultRow], out_dir: str | Path, title: str = "Leaderboard") -> dict[str, Path]:
    """Write ``results.csv``, ``results.json`` and ``summary.md`` into ``out_dir`` (created).

    ``results.csv`` has exactly the columns of :data:`RESULT_COLUMNS`; undefined numbers
    (infeasible runs) are empty cells. ``results.json`` holds every row (with ``reason``) and
    the leaderboard.

    Returns:
        The paths written, keyed ``csv``, ``json``, ``summary``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "json": out / "results.json", "summary": out / "summary.md"}
    with paths["csv"].open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(RESULT_COLUMNS)
        for r in rows:
            writer.writerow([_cell(getattr(r, c)) for c in RESULT_COLUMNS])
    payload = {
        "columns": list(RESULT_COLUMNS),
        "rows": [{k: _json_value(v) for k, v in asdict(r).items()} for r in rows],
        "leaderboard": [{k: _json_value(v) for k, v in e.items()} for e in leaderboard(rows)],
    }
    paths["json"].write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    paths["summary"].write_text(summary_markdown(rows, title), encoding="utf-8")
    return paths


def _cell(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(value)
    return str(value)


def _json_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


__all__ = [
    "DEFAULT_METHODS",
    "METHODS",
    "RESULT_COLUMNS",
    "SUITES",
    "ResultRow",
    "evaluate_suite",
    "geometric_mean",
    "leaderboard",
    "load_suite",
    "memory_tightness",
    "run_methods",
    "suite_names",
    "summary_markdown",
    "write_results",
]
