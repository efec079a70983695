"""Benchmark suites, running methods on them, result files and the leaderboard."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines import METHODS, PlacementResult
from hulk_env.baselines.naive import naive
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import (
    RESULT_COLUMNS,
    ResultRow,
    evaluate_suite,
    geometric_mean,
    leaderboard,
    load_suite,
    memory_tightness,
    run_methods,
    suite_names,
    summary_markdown,
    write_results,
)
from hulk_env.generators import exhaustive_optimum

BUDGETS = {"genetic": 300, "anneal": 300, "random-best-of-n": 50}
SEARCHES = [m for m in METHODS if m != "exact"]


@pytest.fixture(scope="module")
def tiny():
    return load_suite("tiny-v0")


def smallest(instances, k):
    """The ``k`` instances with the fewest (machines x slots): fast, still varied."""
    return sorted(instances, key=lambda i: i.num_machines * i.num_layers * i.data_parallel)[:k]


def test_suite_names_and_unknown_suite():
    assert suite_names() == [
        "tiny-v0", "geo-v0", "hard-v0", "paper-v0", "unseen-v0", "unseen-v1", "val-v0", "val-x-v0", "val-xl-v0", "settings-v0"
    ]
    with pytest.raises(HulkInputError, match="unknown suite 'geo-v9'; choose one of tiny-v0"):
        load_suite("geo-v9")


def test_paper_suite_defaults_to_the_shipped_data(tmp_path, hulk_data):
    shipped = load_suite("paper-v0")
    copy = load_suite("paper-v0", hulk_data=hulk_data)  # the explicit-path argument still works
    assert [i.instance_id for i in shipped] == [i.instance_id for i in copy]
    assert np.array_equal(shipped[0].cluster.latency_s, copy[0].cluster.latency_s)
    with pytest.raises(HulkInputError):
        load_suite("paper-v0", hulk_data=tmp_path)  # empty directory


@pytest.mark.parametrize("name", ["tiny-v0", "geo-v0", "hard-v0"])
def test_suites_are_stable_seeded_and_feasible(name):
    a, b = load_suite(name), load_suite(name)
    assert [i.instance_id for i in a] == [f"{name}/{k}" for k in range(len(a))]
    for x, y in zip(a, b, strict=True):
        assert x.instance_id == y.instance_id
        assert np.array_equal(x.cluster.latency_s, y.cluster.latency_s)
        assert np.array_equal(x.cluster.flops, y.cluster.flops)
        assert np.array_equal(x.workload.flops, y.workload.flops)
        assert x.workload.data_parallel == y.workload.data_parallel
        assert naive(x).feasible


def test_geo_suite_covers_its_design():
    insts = load_suite("geo-v0")
    assert len(insts) == 24
    assert min(i.num_machines for i in insts) >= 8 and max(i.num_machines for i in insts) <= 64
    assert {i.data_parallel for i in insts} == {1, 2, 4}
    names = {i.workload.name for i in insts}
    assert "gpt3-125m" in names and "gpt3-175b" in names
    assert max(i.num_layers for i in insts) <= 50


def test_hard_suite_is_memory_tight_and_cross_continent():
    from hulk_env.hardware import geo

    for inst in load_suite("hard-v0"):
        assert 0.45 <= memory_tightness(inst) <= 0.9
        continents = {geo.CITIES[r].continent for r in inst.cluster.regions}
        assert len(continents) >= 3


def test_paper_suite_loads_the_47_machines(hulk_data):
    insts = load_suite("paper-v0", hulk_data=hulk_data)
    assert len(insts) == 10
    assert all(i.num_machines == 47 for i in insts)
    assert {i.workload.name for i in insts} >= {"gpt3-1.3b", "gpt3-175b"}


def test_exact_equals_the_toy_optimum_and_nothing_beats_it(tiny):
    """Also every other method feasible on every tiny-v0 instance, within its budget (one run of
    each method serves both checks; they were two tests running the same methods)."""
    optimum = {inst.instance_id: exhaustive_optimum(inst)[1] for inst in tiny}
    rows = run_methods(tiny, ["exact", *SEARCHES], budgets=BUDGETS, progress=False)
    assert len(rows) == len(tiny) * (1 + len(SEARCHES))
    assert not [(r.instance, r.method, r.reason) for r in rows if not r.feasible]
    for r in rows:
        if r.method == "exact":
            assert r.iteration_time_s == pytest.approx(optimum[r.instance], rel=1e-12), r.instance
        assert r.iteration_time_s >= optimum[r.instance] * (1 - 1e-12), (r.instance, r.method)
        if r.method in BUDGETS:
            assert r.cost_evals <= BUDGETS[r.method]


def assert_all_feasible(instances, methods=SEARCHES):
    rows = run_methods(instances, methods, budgets=BUDGETS, progress=False)
    bad = [(r.instance, r.method, r.reason) for r in rows if not r.feasible]
    assert not bad
    for r in rows:
        if r.method in BUDGETS:
            assert r.cost_evals <= BUDGETS[r.method]


@pytest.mark.parametrize("name", ["geo-v0", "hard-v0"])
def test_every_method_is_feasible_on_a_suite_sample(name):
    assert_all_feasible(smallest(load_suite(name), 2))


def test_every_method_is_feasible_on_a_paper_sample(hulk_data):
    assert_all_feasible(load_suite("paper-v0", hulk_data=hulk_data)[:1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["geo-v0", "hard-v0", "paper-v0"])
def test_every_method_is_feasible_on_every_suite_instance(name, hulk_data):
    assert_all_feasible(load_suite(name, hulk_data=hulk_data))


def test_run_methods_rows_and_metrics(tiny):
    insts = tiny[:3]
    rows = run_methods(insts, ["naive", "latency-chain-dp", "exact"], progress=False)
    assert [(r.instance, r.method) for r in rows] == [
        (i.instance_id, m) for i in insts for m in ("naive", "latency-chain-dp", "exact")
    ]
    for inst in insts:
        mine = {r.method: r for r in rows if r.instance == inst.instance_id}
        assert mine["naive"].speedup_vs_naive == pytest.approx(1.0)
        assert min(r.gap_to_best for r in mine.values()) == pytest.approx(0.0, abs=1e-12)
        assert mine["exact"].gap_to_best == pytest.approx(0.0, abs=1e-12)  # the optimum is best
        best = min(r.iteration_time_s for r in mine.values())
        for r in mine.values():
            assert r.feasible and r.wall_s >= 0
            assert r.gap_to_best == pytest.approx(r.iteration_time_s / best - 1)
            assert r.speedup_vs_naive == pytest.approx(mine["naive"].iteration_time_s / r.iteration_time_s)


def test_extra_methods_plug_in_and_bad_ones_are_reported(tiny):
    inst = tiny[0]

    def everything_on_machine_zero(instance, seed, budget):
        shape = (instance.data_parallel, instance.num_layers)
        return PlacementResult("zero", np.zeros(shape, dtype=np.int64), 0)

    def too_big(instance, seed, budget):
        raise HulkInputError("policy padded to 2 machines; instance has 4")

    rows = run_methods([inst], ["naive"], progress=False, extra_methods={"zero": everything_on_machine_zero, "big": too_big})
    by = {r.method: r for r in rows}
    assert list(by) == ["naive", "zero", "big"]
    fits = cost.evaluate(inst.cluster, inst.workload, np.zeros((inst.data_parallel, inst.num_layers), int)).memory_feasible
    assert by["zero"].feasible == bool(fits)
    if not fits:
        assert "does not fit in memory" in by["zero"].reason
    assert not by["big"].feasible and "padded to 2 machines" in by["big"].reason
    assert math.isnan(by["big"].speedup_vs_naive)
    with pytest.raises(HulkInputError, match="unknown method"):
        run_methods([inst], ["no-such-method"], progress=False)


def test_naive_reference_is_computed_even_when_not_listed(tiny):
    rows = run_methods(tiny[:1], ["latency-chain-dp"], progress=False)
    assert len(rows) == 1 and rows[0].speedup_vs_naive >= 1.0 - 1e-12


def row(instance, method, t, naive_t, best):
    ok = not math.isnan(t)
    return ResultRow(instance, method, t, naive_t / t if ok else math.nan, t / best - 1 if ok else math.nan, 10, 0.5, ok)


def test_leaderboard_geometric_means_and_order():
    rows = [
        row("a", "naive", 4.0, 4.0, 1.0), row("a", "fast", 1.0, 4.0, 1.0), row("a", "mid", 2.0, 4.0, 1.0),
        row("b", "naive", 9.0, 9.0, 1.0), row("b", "fast", 1.0, 9.0, 1.0), row("b", "mid", math.nan, 9.0, 1.0),
    ]  # fmt: skip
    board = leaderboard(rows)
    # Solved first: "mid" is faster than naive where it ran but solved 1 of 2, so it ranks last.
    assert [e["method"] for e in board] == ["fast", "naive", "mid"]
    assert [e["rank"] for e in board] == [1, 2, 3]
    assert board[0]["geomean_speedup_vs_naive"] == pytest.approx(6.0)  # sqrt(4 * 9)
    assert board[2]["geomean_speedup_vs_naive"] == pytest.approx(2.0)
    assert board[2]["solved"] == 1 and board[2]["instances"] == 2 and board[2]["unsolved"] == ["b"]
    assert board[0]["unsolved"] == [] and board[0]["best_on"] == 2
    assert geometric_mean([2.0, 8.0, math.nan]) == pytest.approx(4.0)
    assert math.isnan(geometric_mean([]))
    text = summary_markdown(rows, "test")
    assert text.startswith("# test") and "| 1 | fast | 6.000x |" in text and "| 3 | mid | 2.000x |" in text
    assert "- mid on b: no feasible placement" in text  # the unsolved instance is shown


def test_write_results_files(tmp_path, tiny):
    rows = run_methods(tiny[:2], ["naive", "compute-greedy"], progress=False)
    rows.append(ResultRow("x/0", "broken", math.nan, math.nan, math.nan, 0, 0.1, False, "no placement"))
    paths = write_results(rows, tmp_path / "out")
    with paths["csv"].open() as fh:
        table = list(csv.reader(fh))
    assert tuple(table[0]) == RESULT_COLUMNS == (
        "instance", "method", "iteration_time_s", "speedup_vs_naive", "gap_to_best", "cost_evals", "wall_s", "feasible",
    )  # fmt: skip
    assert len(table) == 1 + len(rows)
    assert table[1][0] == tiny[0].instance_id and table[1][1] == "naive"
    assert float(table[1][2]) == pytest.approx(rows[0].iteration_time_s)
    assert table[-1][2:5] == ["", "", ""] and table[-1][-1] == "false"
    data = json.loads(paths["json"].read_text())
    assert data["columns"] == list(RESULT_COLUMNS)
    assert data["rows"][-1]["reason"] == "no placement" and data["rows"][-1]["iteration_time_s"] is None
    assert {e["method"] for e in data["leaderboard"]} == {"naive", "compute-greedy", "broken"}
    summary = paths["summary"].read_text()
    assert "Geomean speed-up vs naive" in summary and "compute-greedy" in summary


def test_evaluate_suite_is_one_call(tmp_path):
    rows = evaluate_suite("tiny-v0", ["naive", "exact"], out_dir=tmp_path, progress=False)
    assert len(rows) == 2 * 20
    assert {p.name for p in tmp_path.iterdir()} == {"results.csv", "results.json", "summary.md"}
    assert "Leaderboard: tiny-v0" in (tmp_path / "summary.md").read_text()
    board = {e["method"]: e for e in leaderboard(rows)}
    assert board["exact"]["best_on"] == 20 and board["exact"]["geomean_speedup_vs_naive"] >= 1.0
