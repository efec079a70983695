"""``hulk replace``, ``hulk simulate-failures`` and ``hulk bench replace``'s figures: JSON, plots,
and one clear line (exit 2) for bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.output import EXIT_BAD_INPUT
from hulk_env.replacement.bench import summarise
from hulk_env.replacement.problem import ReplacementResult

runner = CliRunner()
CLUSTER = ("--cluster", "cloud-3region", "--model", "gpt3-1.3b")


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    """`hulk place --json` output for GPT-3 1.3B x 2 on the 3-region cloud."""
    path = tmp_path_factory.mktemp("replace") / "old.json"
    result = run("place", *CLUSTER, "-d", "2", "--json")
    assert result.exit_code == 0, result.output
    path.write_text(result.stdout)
    return path, json.loads(result.stdout)


def test_replace_takes_place_json_and_reports_every_method(placed, tmp_path) -> None:
    path, old = placed
    plot = tmp_path / "outage.png"
    result = run("replace", *CLUSTER, "--placement", str(path), "--fail", "region:Frankfurt", "--method", "agent",
                 "--json", "--plot", str(plot))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["failed"] == ["frankfurt-0", "frankfurt-1", "frankfurt-2", "frankfurt-3"]
    assert out["method"] == "agent" and out["result"]["feasible"]
    assert not any(m.startswith("frankfurt") for m in out["machines"])
    assert {r["method"] for r in out["compared"]} == {"agent", "scratch", "repair", "search"}
    r = out["result"]
    assert r["total_s"] == pytest.approx(r["migration_s"] + 1000 * r["iteration_time_s"])
    assert out["scratch"]["method"] == "scratch"
    assert all((tmp_path / f"outage-{tag}.png").stat().st_size > 10_000 for tag in ("before", "after"))
    np.testing.assert_array_equal(np.array(old["placement"]).shape, np.array(out["placement"]).shape)


def test_replace_tables(placed) -> None:
    path, _ = placed
    result = run("replace", *CLUSTER, "--placement", str(path), "--fail", "frankfurt-0", "--method", "repair", "--horizon", "50")
    assert result.exit_code == 0, result.output
    assert "re-placement methods" in result.stdout and "repair's placement" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--fail", "frankfurt-9"), "unknown machine 'frankfurt-9'"),
        (("--fail", "region:Atlantis"), "unknown region 'Atlantis'"),
        (("--fail", "region:Frankfurt", "--method", "teleport"), "unknown re-placement method"),
        (("--fail", "region:Frankfurt", "--model", "gpt3-2.7b"), "give the --model"),
        (("--fail", "region:Frankfurt,region:Ashburn,region:Dublin"), "every machine of the cluster failed"),
        (("--fail", "frankfurt-0", "--checkpoint", "Tokyo"), "is not region:NAME"),
        (("--fail", "frankfurt-0", "--checkpoint", "region:Tokyo"), "unknown checkpoint region"),
    ],
)
def test_replace_bad_input_is_one_line(placed, args, message) -> None:
    path, _ = placed
    base = ["replace", *CLUSTER, "--placement", str(path)]
    # later options win, so --model here replaces the default one
    result = run(*base, *args)
    assert result.exit_code == EXIT_BAD_INPUT
    assert message in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_replace_bad_placement_files(tmp_path, placed) -> None:
    _, old = placed
    cases = {
        "not json": "not valid JSON",
        json.dumps({"rows": []}): "no 'placement' key",
        json.dumps({"placement": [[1, 2], [3]]}): "same number of layers",
        json.dumps({"placement": [[99] * 26] * 2}): "out of range",
        json.dumps({**old, "machines": ["tokyo-0"]}): "give the --cluster",
    }
    for i, (text, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.json"
        path.write_text(text)
        result = run("replace", *CLUSTER, "--placement", str(path), "--fail", "frankfurt-0")
        assert result.exit_code == EXIT_BAD_INPUT, text
        assert message in result.stderr, (text, result.stderr)


def test_replace_when_the_survivors_lack_memory(tmp_path) -> None:
    path = tmp_path / "big.json"
    placed = run("place", "--cluster", "cloud-3region", "--model", "gpt3-13b", "-d", "2", "--json")
    path.write_text(placed.stdout)
    result = run("replace", "--cluster", "cloud-3region", "--model", "gpt3-13b", "--placement", str(path),
                 "--fail", "region:Ashburn,region:Frankfurt,dublin-2,dublin-3", "--method", "repair", "--budget", "300")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "no placement fits on the 2 machines left" in result.stderr


def test_simulate_failures_trace_file(tmp_path) -> None:
    trace = tmp_path / "trace.yaml"
    trace.write_text("checkpoint_every: 100\nevents:\n  - {at_s: 30, fail: region:Frankfurt}\n  - {at_s: 200, recover: region:Frankfurt}\n")
    plot = tmp_path / "timeline.png"
    result = run("simulate-failures", *CLUSTER, "--trace", str(trace), "--iterations", "2000",
                 "--methods", "repair,agent", "--json", "--plot", str(plot))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [m["method"] for m in out["methods"]] == ["repair", "agent"]
    assert out["least_time_lost"] in ("repair", "agent")
    for m in out["methods"]:
        assert m["finished"] and m["iterations_done"] == 2000 and m["lost_s"] > 0
        assert m["timeline"][0]["action"] == "replaced"
    assert plot.stat().st_size > 10_000


def test_simulate_failures_random_trace_and_errors() -> None:
    result = run("simulate-failures", *CLUSTER, "--rate", "0.5", "--region-rate", "0.2", "--iterations", "3000",
                 "--methods", "repair")
    assert result.exit_code == 0, result.output
    assert "least time lost" in result.stdout
    both = run("simulate-failures", *CLUSTER, "--iterations", "10")
    assert both.exit_code == EXIT_BAD_INPUT and "either --trace" in both.stderr
    bad = run("simulate-failures", *CLUSTER, "--rate", "1", "--methods", "magic")
    assert bad.exit_code == EXIT_BAD_INPUT and "unknown re-placement method" in bad.stderr


def _result(name: str, total: float | None, decision_s: float = 1.0) -> ReplacementResult:
    from hulk_env.replacement.problem import Outcome

    if total is None:
        return ReplacementResult(name, None, 1, decision_s, None, "no room")
    return ReplacementResult(name, np.zeros((1, 1), dtype=np.int64), 1, decision_s, Outcome(1.0, 0.0, 0.0, 0.0, (), 1, total))


def test_bench_figures_keep_failures_in_the_averages() -> None:
    class Problem:  # the two attributes summarise reads
        failed = np.array([True, False])
        displaced = np.array([[True]])

    class Scenario:
        name, problem = "s", Problem()

    results = [
        {"scratch": _result("scratch", 200.0), "repair": _result("repair", 100.0, 0.0), "search": _result("search", 100.0, 8.0), "agent": _result("agent", 110.0, 0.5)},
        {"scratch": _result("scratch", 50.0), "repair": _result("repair", None), "search": _result("search", 50.0, 4.0), "agent": _result("agent", 50.0, 0.3)},
        {m: _result(m, None) for m in ("scratch", "repair", "search", "agent")},
    ]
    out = summarise([Scenario()] * 3, results)
    assert out["scenarios"] == 3 and out["infeasible"] == 1
    assert out["agent_total_vs_best"] == pytest.approx(np.sqrt(1.1))
    assert out["scratch_total_vs_best"] == pytest.approx(np.sqrt(2.0))
    assert out["repair_total_vs_best"] == float("inf")  # it failed a scenario others answered
    assert out["agent_decision_s_median"] == pytest.approx(0.4)
    assert out["search_decision_s_median"] == pytest.approx(6.0)


@pytest.mark.slow  # ~28 s CPU; every method on every scenario stays covered fast by test_replacement_methods.py
def test_bench_replace_runs_every_method_on_every_scenario(monkeypatch) -> None:
    result = run("bench", "replace", "--clusters", "cloud-3region", "--budget", "300", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in ("scenarios", "infeasible", "agent_total_vs_best", "repair_total_vs_best", "scratch_total_vs_best",
                "agent_decision_s_median", "search_decision_s_median"):
        assert key in out
    assert out["scenarios"] == 9 and out["infeasible"] == 0 and len(out["rows"]) == 9
    assert all(np.isfinite(out[f"{m}_total_vs_best"]) and out[f"{m}_total_vs_best"] >= 1.0
               for m in ("agent", "repair", "scratch", "search"))
    import hulk_env.replacement.bench as bench

    monkeypatch.setattr(bench, "bench_replace", lambda *a, **k: json.loads(result.stdout))  # the table of the same figures
    table = run("bench", "replace", "--clusters", "cloud-3region")
    assert table.exit_code == 0 and "re-placement benchmark" in table.stdout and "agent_total_vs_best" in table.stdout
