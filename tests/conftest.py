"""Shared fixtures: the paper's data ships with the package, so no test skips for want of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk_env.cluster import paper_data_dir

BAD_FILES = Path(__file__).resolve().parent / "data" / "bad"


@pytest.fixture(scope="session")
def hulk_data() -> Path:
    """The paper's ``node_feature.csv`` and ``edge.txt``, as the installed package holds them."""
    return paper_data_dir()


@pytest.fixture(scope="session")
def geo_evaluation(tmp_path_factory) -> Path:
    """``hulk evaluate`` on two geo-v0 instances (coordinates: the report draws a world map):
    its output directory, report included. Shared by the report tests."""
    from typer.testing import CliRunner

    from hulk_cli.app import app

    out = tmp_path_factory.mktemp("geo-eval")
    result = CliRunner().invoke(
        app, ["evaluate", "--suite", "geo-v0", "--limit", "2", "--methods", "naive,compute-greedy,latency-chain-dp",
              "--out", str(out)], catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert f"report: {out / 'report.html'}" in " ".join(result.output.split())
    return out


@pytest.fixture(scope="session")
def report_run_dir(tmp_path_factory) -> Path:
    """A smoke training run on the main job's instance (the paper's 47 machines x GPT-3 1.3B),
    compared with two baselines as ``hulk train`` does at its end: a run directory to report."""
    from agents.compare import evaluate_run
    from agents.config import TrainSettings
    from agents.train import train

    out = tmp_path_factory.mktemp("report-runs")
    settings = TrainSettings("smoke", ("train.torch_threads=1", "train.name=main", "env.generator=fixed",
                                       "env.cluster=default", "env.model=default"), out=out)
    run_dir = train(settings.resolve())
    evaluate_run(run_dir, methods=["naive", "compute-greedy"], samples=0, progress=False)
    return run_dir
