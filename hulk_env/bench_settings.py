"""``hulk bench settings``: the value of the plan settings and the analytic model's
agreement with the simulator on plans that use them.

Suite (:data:`SETTINGS_SUITE`, fixed: it never drifts): clusters of 8-GPU A100 / H100 machines
over two to four regions (:func:`hulk_env.cluster.model.geo_cluster`, links from the geo model),
models from 7B to 70B parameters, one or two data-parallel replicas, per-replica batch 8.

Figures:

- ``joint_vs_pp_dp_geomean``: per instance, the planner's iteration time (placement and
  settings searched together, :mod:`hulk_env.planner`, objective time) over the best
  pipeline + data-parallel-only plan's (the same planner restricted to ``tensor_parallel 1,
  zero 0``, micro-batch sizes searched alike: every GPU of a machine a data-parallel rank), both
  under the new cost model; geometric mean over instances where both fit (``pp_dp_unfit``
  counts those where the PP+DP-only plan fits nowhere: there the settings are the only way).
- ``analytic_vs_sim_median`` / ``_p95``: ``|analytic - simulated| / simulated`` of the
  iteration time, over the chosen plan of each instance and its variants using each new setting
  on the same placement (tensor parallel 8, ZeRO 3, DiLoCo H = 100 at 8 bits, streaming DiLoCo),
  and for two replicas the same on :func:`spread_placement` (prefix ``spread_``: rings across
  regions);
  ``analytic_vs_sim_by_setting`` gives each variant's worst; ``analytic_vs_sim_one_device_median``
  the same placements evaluated as one device per machine (the pipeline model's own gap, e.g.
  replicas sharing machines, which the new terms inherit).
- ``settings_used``: how often each choice was picked (:data:`SETTING_KEYS`; ``sync`` stays
  ``every-step`` unless pinned: the planner never trades convergence for speed).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import NamedTuple

import numpy as np

from hulk_env.cluster.model import geo_cluster
from hulk_env.instance import Instance
from hulk_env.workload import load_workload


class SettingsCase(NamedTuple):
    """One instance of the suite."""

    name: str
    cities: tuple[str, ...]
    machines_per_city: int
    gpu: str
    model: str
    data_parallel: int


SETTINGS_SUITE: tuple[SettingsCase, ...] = (
    SettingsCase("a100-2region-llama7b", ("Ashburn", "Frankfurt"), 2, "A100-80GB", "llama-7b", 2),
    SettingsCase("h100-3region-llama7b", ("Ashburn", "Dublin", "Frankfurt"), 2, "H100", "llama-7b", 2),
    SettingsCase("a100-3region-llama13b", ("Oregon", "Tokyo", "Singapore"), 2, "A100-80GB", "llama-13b", 1),
    SettingsCase("mixed-4region-llama13b", ("Ashburn", "Frankfurt", "Mumbai", "Tokyo"), 2, "mixed", "llama-13b", 2),
    SettingsCase("h100-2region-llama70b", ("Ashburn", "Dublin"), 6, "H100", "llama-2-70b", 1),
    SettingsCase("a100-3region-llama70b", ("Ashburn", "Frankfurt", "Tokyo"), 4, "A100-80GB", "llama-2-70b", 1),
)
SMALL_SUITE = SETTINGS_SUITE[:2]
SETTING_KEYS = ("tensor_parallel", "zero", "micro_batch_size", "num_micro_batches", "sync")
# The same placement as one device per machine (the model before plan settings): its error is
# the pipeline model's own (docs: hulk bench cost), the baseline of the variants' errors.
BASE = {"tensor_parallel": 0, "zero": 0, "sync": "every-step"}
SIM_VARIANTS = {
    "tensor_parallel_8": {"tensor_parallel": 8},
    "zero_3": {"zero": 3},
    "diloco_h100_8bit": {"sync": "diloco", "inner_steps": 100, "outer_bits": 8},
    "diloco_streaming": {"sync": "diloco", "inner_steps": 100, "outer_bits": 8, "streaming": True},
}


def case_instance(case: SettingsCase) -> Instance:
    """The instance of one suite case (seed 0 for the GPU draw and link noise)."""
    mix = [("A100-80GB", 8, 1.0), ("H100", 8, 1.0)] if case.gpu == "mixed" else [(case.gpu, 8, 1.0)]
    cluster = geo_cluster(list(case.cities), case.machines_per_city, mix, seed=0, name=case.name, link_noise=0.1)
    workload = load_workload(case.model, data_parallel=case.data_parallel, micro_batch_size=1, num_micro_batches=8)
    return Instance(cluster, workload)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / b


def bench_case(case: SettingsCase, method: str = "latency-chain-dp") -> dict:
    """One case's row: joint and PP+DP-only times, the chosen settings, simulator errors."""
    from hulk_env import cost, planner
    from hulk_env.simulate import simulate

    instance = case_instance(case)
    start = time.perf_counter()
    joint = planner.search(instance, method)
    w = instance.workload
    sizes = {g["micro_batch_size"] for g in planner.settings_grid(w, instance.cluster)}
    batch = w.micro_batch_size * w.num_micro_batches
    only = planner.search(instance, method, grid=[
        {"micro_batch_size": b, "num_micro_batches": batch // b, **planner.PP_DP_ONLY} for b in sorted(sizes)
    ])  # fmt: skip
    row: dict = {"case": case.name, "search_s": time.perf_counter() - start, "cost_evals": joint.cost_evals + only.cost_evals}
    if joint.best is None:
        row["error"] = "no plan fits"
        return row
    best = joint.best
    row["joint_s"] = best.iteration_time_s
    row["pp_dp_s"] = only.best.iteration_time_s if only.best is not None else None
    row["settings"] = planner.settings_of(best.workload)
    errors = {}
    chosen = {"chosen": {}} | SIM_VARIANTS | {"one_device": BASE}
    places = {"": best.placement}
    if w.data_parallel > 1:
        places["spread_"] = spread_placement(instance.cluster, w.data_parallel, w.num_layers)
    for prefix, placement in places.items():
        for label, change in chosen.items():
            wv = best.workload.with_training(**change) if change else best.workload
            analytic = float(cost.evaluate(instance.cluster, wv, placement).iteration_time_s)
            simulated = simulate(instance.cluster, wv, placement, record=False).iteration_time_s
            errors[prefix + label] = _rel(analytic, simulated)
    row["sim_errors"] = errors
    return row


def spread_placement(cluster, replicas: int, num_layers: int, depth: int = 2) -> np.ndarray:
    """Replicas on disjoint machines in region order (replica ``r`` on the ``r``-th block of
    machines, its layers cut evenly over ``depth`` of them): data-parallel rings across regions,
    where ZeRO-3 and DiLoCo differ from every-step sync (the planner's plans often keep rings
    inside a machine)."""
    order = np.argsort(cluster.region_index, kind="stable")
    block = max(cluster.num_machines // replicas, 1)
    depth = min(depth, block)
    cuts = np.array_split(np.arange(num_layers), depth)
    rows = np.empty((replicas, num_layers), dtype=np.int64)
    for r in range(replicas):
        for s, layers in enumerate(cuts):
            rows[r, layers] = order[(r * block + s) % cluster.num_machines]
    return rows


def settings_used(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per setting of :data:`SETTING_KEYS`, how many rows' chosen plans picked each value
    (rows without a plan count nowhere)."""
    used: dict[str, Counter] = {k: Counter() for k in SETTING_KEYS}
    for r in rows:
        for k in used:
            if "settings" in r:
                used[k][str(r["settings"][k])] += 1
    return {k: dict(v) for k, v in used.items()}


def bench_settings(small: bool = False, method: str = "latency-chain-dp") -> dict:
    """The figures of the module docstring over :data:`SETTINGS_SUITE` (or :data:`SMALL_SUITE`)."""
    rows = [bench_case(case, method) for case in (SMALL_SUITE if small else SETTINGS_SUITE)]
    ratios = [r["joint_s"] / r["pp_dp_s"] for r in rows if r.get("pp_dp_s")]
    errors = [e for r in rows for k, e in r.get("sim_errors", {}).items() if not k.endswith("one_device")]
    base = [e for r in rows for k, e in r.get("sim_errors", {}).items() if k.endswith("one_device")]
    by_setting: dict[str, list[float]] = {}
    for r in rows:
        for label, e in r.get("sim_errors", {}).items():
            by_setting.setdefault(label, []).append(e)
    return {
        "instances": len(rows),
        "joint_vs_pp_dp_geomean": float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan"),
        "pp_dp_unfit": sum(1 for r in rows if "joint_s" in r and not r.get("pp_dp_s")),
        "no_plan": sum(1 for r in rows if "error" in r),
        "analytic_vs_sim_median": float(np.median(errors)) if errors else float("nan"),
        "analytic_vs_sim_p95": float(np.percentile(errors, 95)) if errors else float("nan"),
        "analytic_vs_sim_by_setting": {k: float(max(v)) for k, v in by_setting.items() if not k.endswith("one_device")},
        "analytic_vs_sim_one_device_median": float(np.median(base)) if base else float("nan"),
        "settings_used": settings_used(rows),
        "cost_evals": sum(r["cost_evals"] for r in rows),
        "rows": rows,
    }
