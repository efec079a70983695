"""Shared fixtures: the paper's data ships with the package, so no test skips for want of it."""

from __future__ import annotations

import fcntl
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hulk_env.cluster import paper_data_dir

BAD_FILES = Path(__file__).resolve().parent / "data" / "bad"
CPU_LOG_ENV = "HULK_TEST_CPU_LOG"  # a file: each test's CPU seconds (its own and its children's)

# pytest-xdist sets COLUMNS in its workers (the main process's width); the CLI takes COLUMNS as a
# terminal's width and wraps its tables in it, where a serial run prints them whole: unset it.
# Each worker has a core to itself (make test: 2 workers on 2 cores): torch's (OpenMP's) own threads
# only oversubscribe them (their spin-waits cost ~20% more CPU in a loaded run), so one thread per
# worker, its child processes included, unless the caller set otherwise.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_threads, "1")


def _cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``HULK_TEST_CPU_LOG=FILE``: append ``<cpu seconds> <test id> <wall seconds>`` per test
    (setup, call and teardown). CPU is a measure that a loaded shared machine does not inflate as
    it does wall time; wall well above CPU marks a test that waits (a subprocess's start, Ray)."""
    log = os.environ.get(CPU_LOG_ENV)
    start, start_wall = (_cpu_s(), time.perf_counter()) if log else (0.0, 0.0)
    yield
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{_cpu_s() - start:.3f} {item.nodeid} {time.perf_counter() - start_wall:.3f}\n")


@pytest.fixture(scope="session")
def hulk_data() -> Path:
    """The paper's ``node_feature.csv`` and ``edge.txt``, as the installed package holds them."""
    return paper_data_dir()


def built_once(tmp_path_factory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(a fresh directory)``'s result, built by the first pytest-xdist worker that asks and
    reused by the others (a lock file in the run's temp root, which the workers share), so a
    session fixture costs one build per run rather than one per worker. Its users only read it."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return build(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent  # this run's; each worker's basetemp lies under it
    done = root / f"{name}.built"  # holds the result's path, written once the build succeeded
    with open(root / f"{name}.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():  # a failed build leaves none: the next worker tries in its own dir
            done.write_text(str(build(tmp_path_factory.mktemp(name))), encoding="utf-8")
        return Path(done.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def geo_evaluation(tmp_path_factory) -> Path:
    """``hulk evaluate`` on two geo-v0 instances (coordinates: the report draws a world map):
    its output directory, report included. Shared by the report tests (built once per run)."""
    from typer.testing import CliRunner

    from hulk_cli.app import app

    def build(out: Path) -> Path:
        result = CliRunner().invoke(
            app, ["evaluate", "--suite", "geo-v0", "--limit", "2", "--methods", "naive,compute-greedy,latency-chain-dp",
                  "--out", str(out)], catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        assert f"report:{out / 'report.html'}" in "".join(result.output.split())  # rich may wrap a long path
        return out

    return built_once(tmp_path_factory, "geo-eval", build)


@pytest.fixture(scope="session")
def report_run_dir(tmp_path_factory) -> Path:
    """A smoke training run on the main job's instance (the paper's 47 machines x GPT-3 1.3B),
    compared with two baselines as ``hulk train`` does at its end: a run directory to report
    (built once per run)."""
    from agents.benchmarks.compare import evaluate_run
    from agents.training.config import TrainSettings
    from agents.training.train import train

    def build(out: Path) -> Path:
        settings = TrainSettings("smoke", ("train.torch_threads=1", "train.name=main", "env.generator=fixed",
                                           "env.cluster=default", "env.model=default"), out=out)
        run_dir = train(settings.resolve())
        evaluate_run(run_dir, methods=["naive", "compute-greedy"], samples=0, progress=False)
        return run_dir

    return built_once(tmp_path_factory, "report-runs", build)
