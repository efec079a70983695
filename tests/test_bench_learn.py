"""``hulk bench learn``: its instances, the JSON's keys and their meaning (tiny budgets only;
the real figures come from the command itself)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agents.benchmarks.bench_learn import BENCH_INSTANCES, LearnRun, bench_instance, summary
from hulk_cli.app import app
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import memory_tightness

TINY = ["--set", "ppo.n_steps=8", "--set", "ppo.batch_size=8", "--set", "train.n_envs=1"]


def _run(name: str, seed: int, steps: int | None, gap: float | None) -> LearnRun:
    return LearnRun(name, seed, steps, gap, 1.0, ((0, 0.05), (steps or 100_000, gap)))  # untrained: 5% behind


KEYS = {"runs", "reached_fraction", "steps_to_chain_dp_median", "untrained_reached_fraction"}
ROW_KEYS = {"instance", "seed", "steps_to_chain_dp", "final_gap", "initial_gap"}


def test_summary_semantics():
    runs = [_run("a", 0, 4096, -0.01), _run("a", 1, None, 0.07), _run("b", 0, 2048, 0.0), _run("b", 1, 8192, 0.0)]
    runs.append(LearnRun("c", 0, 0, 0.0, 1.0, ((0, 0.0), (2048, 0.01), (4096, 0.0))))  # reached untrained
    out = summary(runs)
    assert set(out) == KEYS
    assert out["reached_fraction"] == 0.8
    assert out["steps_to_chain_dp_median"] == 3072.0  # over the runs that reached it only
    assert out["untrained_reached_fraction"] == 0.2  # c only
    assert out["runs"][1] == {"instance": "a", "seed": 1, "steps_to_chain_dp": None, "final_gap": 0.07, "initial_gap": 0.05}
    assert summary([_run("a", 0, None, 0.1)])["steps_to_chain_dp_median"] is None
    with pytest.raises(HulkInputError, match="twice"):
        summary([_run("a", 0, None, 0.1), _run("a", 0, 2048, 0.0)])


def _save(folder, runs: list[LearnRun]) -> None:
    folder.mkdir()
    rows = [json.dumps(r.saved_row()) for r in runs]
    (folder / "runs.jsonl").write_text("\n".join(rows) + "\n")


def test_from_runs_merges_saved_runs_and_refuses_bad_ones(tmp_path):
    """Seeds trained in parallel processes, summarised together; a duplicate run, a corrupt line
    or a row whose steps_to_chain_dp disagrees with its curve is one clear error."""
    a = [LearnRun("default", 0, 2048, 0.0, 1.0, ((0, 0.03), (2048, 0.0)))]
    b = [LearnRun("default", 1, None, 0.02, 1.0, ((0, 0.03), (2048, 0.02)))]
    _save(tmp_path / "a", a)
    _save(tmp_path / "b", b)
    result = CliRunner().invoke(app, ["bench", "learn", "--json", "--from-runs", str(tmp_path / "a"), "--from-runs", str(tmp_path / "b" / "runs.jsonl")])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == summary(a + b)
    for name, text, message in [
        ("dup", None, "twice"),
        ("corrupt", '{"instance": "default", "seed": 0,\n', "not valid JSON"),
        ("edited", json.dumps({**a[0].row(), "steps_to_chain_dp": 0, "curve": [[0, 0.03], [2048, 0.0]]}), "does not match its curve"),
    ]:
        folder = tmp_path / name
        if text is None:
            _save(folder, a)
        else:
            folder.mkdir()
            (folder / "runs.jsonl").write_text(text)
        result = CliRunner().invoke(app, ["bench", "learn", "--from-runs", str(tmp_path / "a"), "--from-runs", str(folder)])
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


@pytest.mark.slow
def test_bench_instances_differ_in_shape():
    shapes = {n: bench_instance(n) for n in BENCH_INSTANCES}
    assert shapes["multi-replica"].workload.data_parallel == 2
    assert shapes["128-machines"].num_machines == 128
    assert memory_tightness(shapes["memory-tight"]) > 0.45
    assert memory_tightness(shapes["default"]) < 0.1
    with pytest.raises(HulkInputError, match="unknown bench-learn instance"):
        bench_instance("nope")


def test_cli_tiny_budget_keys_and_null_when_not_reached(tmp_path):
    args = ["bench", "learn", "--json", "--timesteps", "16", "--eval-every", "8", "--seeds", "2", "--instances", "default",
            "--out", str(tmp_path), *TINY]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "default seed 1: 16 steps" in result.stderr  # progress on stderr, the JSON alone on stdout
    out = json.loads(result.stdout)
    saved = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in row.items() if k != "curve"} for row in saved] == out["runs"]
    assert [steps for steps, _ in saved[0]["curve"]] == [0, 8, 16]  # every evaluation, in order
    assert set(out) == KEYS
    assert [(r["instance"], r["seed"]) for r in out["runs"]] == [("default", 0), ("default", 1)]
    for r, row in zip(out["runs"], saved, strict=True):
        assert set(r) == ROW_KEYS
        first = next((steps for steps, gap in row["curve"] if gap <= 1e-6), None)
        assert r["steps_to_chain_dp"] == first and r["initial_gap"] == row["curve"][0][1]
        assert r["final_gap"] == row["curve"][-1][1]


def test_cli_unknown_instance_is_one_line():
    result = CliRunner().invoke(app, ["bench", "learn", "--instances", "default,huge"])
    assert result.exit_code == 2
    assert "unknown instance 'huge'" in result.output


@pytest.mark.slow
def test_ppo_learns_its_way_to_latency_chain_dp_from_a_myopic_start():
    """PPO from scratch with the myopic pipeline lookahead (``pipeline-lookahead``: its untrained
    greedy opens the second stage too early, 3-7% behind) reaches latency-chain-dp's speed-up
    on the default instance within 100,000 steps (measured: seeds 0-2 at 24,576 / 20,480 /
    36,864). The guard that PPO itself learns. Bounded by steps, not time."""
    from agents.benchmarks.bench_learn import bench_learn

    out = bench_learn(timesteps=100_000, seeds=[0], instances=("default",), config="pipeline-lookahead", stop_at_chain_dp=True)
    (run,) = out["runs"]
    assert run["initial_gap"] > 0.01  # something to learn
    assert run["steps_to_chain_dp"] is not None and run["steps_to_chain_dp"] <= 100_000
    assert run["final_gap"] <= 1e-6


@pytest.mark.slow
@pytest.mark.timeout(1800)  # bounded by steps; 100k split-lookahead steps take 9-10 min on a loaded 2-core machine
def test_main_job_ends_at_latency_chain_dp_or_better():
    """The main job's config (the split lookahead) from scratch on the default instance: after
    100,000 PPO steps the greedy rollout is still at least as fast as latency-chain-dp's -- PPO
    does not wander off the start its lookahead gives it."""
    from agents.benchmarks.bench_learn import bench_learn

    (run,) = bench_learn(timesteps=100_000, seeds=[0], instances=("default",))["runs"]
    assert run["steps_to_chain_dp"] is not None and run["final_gap"] <= 1e-6


@pytest.mark.slow
def test_128_machines_model_is_the_rule_pick():
    """The 128-machines rule (agents.benchmarks.bench_learn's docstring), applied again: the smallest of GPT-3
    2.7B, 6.7B, 13B whose compute-greedy placement is more than 1% slower than latency-chain-dp's
    on that cluster (a model where the greedy is already optimal measures nothing)."""
    import numpy as np

    from agents.benchmarks.bench_learn import MODEL_128
    from hulk_env import cost
    from hulk_env.baselines import get_method
    from hulk_env.instance import Instance
    from hulk_env.workload import catalog

    cluster = bench_instance("128-machines").cluster

    def greedy_gap(model: str) -> float:
        inst = Instance(cluster, catalog.get_model(model), model)
        t = {m: cost.iteration_time(cluster, inst.workload, np.asarray(get_method(m)(inst, 0, None).placement))
             for m in ("compute-greedy", "latency-chain-dp")}  # fmt: skip
        return float(t["compute-greedy"] / t["latency-chain-dp"] - 1)

    pick = next(m for m in ("gpt3-2.7b", "gpt3-6.7b", "gpt3-13b") if greedy_gap(m) > 0.01)
    assert pick == MODEL_128 == "gpt3-13b"
