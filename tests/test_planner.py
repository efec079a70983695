"""The planner over placement and plan settings: grid, pruning, objectives, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hulk_env import cost, planner
from hulk_env.cluster.files import load_cluster_file
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.workload import load_workload

CLUSTER = """name: three-providers
machines:
  - {name: aws-a, region: aws:us-east-1, gpu: A100-80GB, num_gpus: 8, count: 2}
  - {name: gcp-h, region: gcp:europe-west4, gpu: H100, num_gpus: 8, count: 2}
  - {name: az-a, region: azure:eastus, gpu: A100-40GB, num_gpus: 8, count: 2}
"""


@pytest.fixture
def three(tmp_path):
    path = tmp_path / "three.yaml"
    path.write_text(CLUSTER)
    return path


def test_grid_keeps_the_batch_and_pins(three):
    cluster = load_cluster_file(three)
    w = load_workload("gpt3-1.3b", micro_batch_size=1, num_micro_batches=8)
    grid = planner.settings_grid(w, cluster)
    assert {g["micro_batch_size"] * g["num_micro_batches"] for g in grid} == {8}
    assert {g["tensor_parallel"] for g in grid} == {1, 2, 4, 8} and {g["zero"] for g in grid} == {0, 2, 3}
    pinned = planner.settings_grid(w, cluster, planner.parse_fixed(["zero=1", "tensor_parallel=2"]))
    assert {(g["zero"], g["tensor_parallel"]) for g in pinned} == {(1, 2)}
    with pytest.raises(HulkInputError, match="--fix"):
        planner.parse_fixed(["colour=blue"])


@pytest.mark.slow  # ~4 s of CPU: two searches over 3 settings and the machine groups
def test_cost_objective_picks_a_cheaper_plan(three):
    cluster = load_cluster_file(three)
    w = load_workload("llama-7b", data_parallel=2, micro_batch_size=1, num_micro_batches=8)
    fixed = {"micro_batch_size": 2, "tensor_parallel": 4}
    fast = planner.search(Instance(cluster, w), objective="time", fixed=fixed)
    cheap = planner.search(Instance(cluster, w), objective="cost", fixed=fixed)
    assert fast.best is not None and cheap.best is not None
    from hulk_env.money import usd_per_iteration

    fast_usd = usd_per_iteration(cluster, fast.best.workload, fast.best.placement)
    assert cheap.best.usd_per_iteration < fast_usd
    assert cheap.best.iteration_time_s >= fast.best.iteration_time_s
    # the chosen plan's figures are the cost model's under its settings
    again = cost.evaluate(cluster, cheap.best.workload, cheap.best.placement)
    assert again.iteration_time_s == pytest.approx(cheap.best.iteration_time_s) and again.memory_feasible
    front = planner.pareto_front(cheap.plans)
    assert all(a.usd_per_iteration > b.usd_per_iteration for a, b in zip(front, front[1:], strict=False))
    budget = planner.choose(cheap.plans, "cost-under-deadline", max_s=fast.best.iteration_time_s * 1.0001)
    assert budget is not None and budget.iteration_time_s <= fast.best.iteration_time_s * 1.0001
    assert planner.choose(cheap.plans, "time-under-budget", max_usd=0.0) is None


@pytest.mark.slow  # ~8 s of CPU: two planned searches through the CLI
def test_place_and_pareto_commands(three, tmp_path):
    from hulk_cli.app import app

    runner = CliRunner()
    args = ["--cluster", str(three), "--model", "gpt3-1.3b", "--data-parallel", "2", "--fix", "micro_batch_size=2",
            "--fix", "zero=0"]
    out = runner.invoke(app, ["place", *args, "--objective", "cost", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["settings"]["zero"] == 0 and data["usd_per_iteration"] > 0
    assert np.asarray(data["placement"]).shape[0] == 2
    png = tmp_path / "front.png"
    out = runner.invoke(app, ["pareto", *args, "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert png.stat().st_size > 1000 and "front" in out.output
    bad = runner.invoke(app, ["place", *args, "--objective", "fastest"])
    assert bad.exit_code == 2 and "objective" in bad.output
