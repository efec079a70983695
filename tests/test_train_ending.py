"""The main job's ending (``hulk train``'s last lines): one table whose method names are never
cut, also when the output is a file; one sentence computed from the figures; the report path."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from hulk_cli import train as train_cli
from hulk_env.evaluation.results import ResultRow

LONG = "policy:default-20261129-233118-a-long-run-directory-name"


def rows(times: dict[str, float], instance: str = "i0", naive: float = 10.0) -> list[ResultRow]:
    """Rows of one instance; ``nan`` time = infeasible. Gaps as the runner computes them."""
    best = min(t for t in times.values() if t == t)
    return [
        ResultRow(
            instance, m, t, naive / t if t == t else float("nan"), t / best - 1 if t == t else float("nan"),
            cost_evals=7, wall_s=0.1, feasible=t == t,
        )
        for m, t in {"naive": naive, **times}.items()
    ]


def test_sentence_when_the_policy_stays_at_a_baselines_time() -> None:
    r = rows({"compute-greedy": 2.0, "latency-chain-dp": 1.6, "policy": 2.0, "policy+16": 1.8})
    assert train_cli.outcome_sentence(r, "policy") == (
        "The trained policy stayed at compute-greedy's iteration time (x5.00 over naive), 25.0% more time per "
        "iteration than the best baseline, latency-chain-dp (x6.25); it beat 1 of 3 baselines."
    )


def test_sentence_when_the_policy_matches_beats_or_fails() -> None:
    matched = train_cli.outcome_sentence(rows({"latency-chain-dp": 1.6, "policy": 1.6}), "policy")
    assert matched == "The trained policy matched the best baseline, latency-chain-dp: x6.25 over naive."
    beat = train_cli.outcome_sentence(rows({"latency-chain-dp": 2.0, "policy": 1.6}), "policy")
    assert beat.startswith("The trained policy beat every baseline: x6.25 over naive, 20.0% less time per iteration")
    failed = train_cli.outcome_sentence(rows({"latency-chain-dp": 2.0, "policy": float("nan")}), "policy")
    assert failed == "The trained policy found no feasible placement on any of 1 instance(s); the best baseline, latency-chain-dp, reached x5.00 over naive."
    behind = train_cli.outcome_sentence(rows({"latency-chain-dp": 1.0, "anneal": 1.25, "policy": 1.6}), "policy")
    assert behind.startswith("The trained policy reached x6.25 over naive, 60.0% more time per iteration than the best baseline, latency-chain-dp (x10.00)")
    assert behind.endswith("it beat 1 of 3 baselines.")  # naive only


def test_sentence_names_every_baseline_tied_at_the_best() -> None:
    r = rows({"gnn-ppo": 1.6, "latency-chain-dp": 1.6, "partition": 1.6, "compute-greedy": 2.0, "policy": 2.0})
    assert train_cli.outcome_sentence(r, "policy") == (
        "The trained policy stayed at compute-greedy's iteration time (x5.00 over naive), 25.0% more time per iteration "
        "than the best baselines, gnn-ppo, latency-chain-dp and partition (x6.25); it beat 1 of 5 baselines."
    )


def test_a_report_that_cannot_be_built_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import types

    def broken(run_dir):
        raise ImportError("No module named 'hulk_env.render.report_page'")

    monkeypatch.setitem(sys.modules, "hulk_cli.report", types.SimpleNamespace(write_report=broken))
    assert train_cli.write_run_report(tmp_path) == "report: not written (No module named 'hulk_env.render.report_page')"
    monkeypatch.setitem(sys.modules, "hulk_cli.report", types.SimpleNamespace(write_report=lambda d: d / "report.html"))
    assert train_cli.write_run_report(tmp_path) == f"report: {tmp_path / 'report.html'}"


def test_sentence_over_several_instances_counts_unsolved() -> None:
    r = rows({"latency-chain-dp": 1.0, "policy": 2.0}, "a") + rows({"latency-chain-dp": 1.0, "policy": float("nan")}, "b")
    sentence = train_cli.outcome_sentence(r, "policy")
    assert "(no feasible placement on 1 of 2 instances)" in sentence and "latency-chain-dp" in sentence


def test_table_keeps_every_name_whole_when_piped(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(train_cli, "console", Console(file=out, width=80))  # a file: not a terminal
    r = rows({"latency-chain-dp": 1.6, "gnn-ppo+search": 1.55, LONG: 2.0, "policy": 2.0})
    train_cli.print_whole(train_cli.comparison_table(r, title="trained policy vs baselines"))
    text = out.getvalue()
    for method in ("latency-chain-dp", "gnn-ppo+search", LONG, "policy", "naive"):
        assert any(f" {method} " in line for line in text.splitlines()), method
    assert "…" not in text
    assert "iteration s" in text and "2.0000" in text  # one instance: its times too
    lines = [line for line in text.splitlines() if line.startswith(("│", "┃"))]
    assert len({len(line) for line in lines}) == 1  # one row per method, none wrapped


def test_table_folds_long_names_in_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(train_cli, "console", Console(file=out, width=90, force_terminal=True, color_system=None))
    train_cli.print_whole(train_cli.comparison_table(rows({LONG: 2.0, "policy": 2.0}), title="t"))
    lines = out.getvalue().splitlines()
    assert "…" not in out.getvalue() and max(map(len, lines)) <= 90
    assert LONG in "".join(line.split("│")[2].strip() for line in lines if line.count("│") > 3)


def test_table_too_wide_for_the_terminal_is_printed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(train_cli, "console", Console(file=out, width=50, force_terminal=True, color_system=None))
    train_cli.print_whole(train_cli.comparison_table(rows({LONG: 2.0, "policy": 2.0}), title="t"))
    assert "…" not in out.getvalue() and f" {LONG} " in out.getvalue()


@pytest.mark.slow
def test_hulk_train_ending_piped_to_a_file(tmp_path: Path) -> None:
    """The real ending, stdout a file: table, sentence, results (and the report where it exists)."""
    hulk = Path(sys.executable).parent / "hulk"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    with open(tmp_path / "out.txt", "w") as stdout:
        done = subprocess.run(
            [str(hulk), "train", "--config", "smoke", "--timesteps", "128", "--out", str(tmp_path)],
            stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=600,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "out.txt").read_text()
    assert "…" not in text and "compute-greedy" in text and "policy" in text
    sentence = [line for line in text.splitlines() if line.startswith("The trained policy")]
    assert len(sentence) == 1
    assert text.rstrip().splitlines()[-1].startswith(("results: ", "report: "))
