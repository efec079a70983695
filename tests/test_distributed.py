"""Evaluation as tasks: the incremental results.csv, --resume, and Ray (a killed worker is retried).

The Ray tests start a local Ray with 2 CPUs for this module and stop it at the end.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hulk_env.baselines import PlacementResult, get_method
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite, read_results_csv, run_methods
from hulk_env.evaluation.distributed import (
    MANIFEST,
    RAY_INSTALL,
    bench_evaluate,
    evaluate_tasks,
    import_ray,
    rows_equal,
)

REPO = Path(__file__).resolve().parent.parent
METHODS = ["naive", "compute-greedy", "genetic", "anneal"]
BUDGETS = {"genetic": 200, "anneal": 200}
DIE_AT_ENV = "HULK_TEST_DIE_AT"  # "instance_id|marker file": _dies_once kills its process there once


@pytest.fixture(scope="module")
def instances():
    return load_suite("tiny-v0")[:3]


@pytest.fixture(scope="module")
def reference(instances):
    """The rows of the plain in-memory runner: what every other path must reproduce."""
    return run_methods(instances, [*METHODS, "never"], budgets=BUDGETS, progress=False, extra_methods={"never": _never})


def _never(instance, seed, budget):
    """A method that never finds a placement (its reason must survive a resume)."""
    return PlacementResult("never", None, 7, "gave up on purpose")


def _dies_once(instance, seed, budget):
    """compute-greedy, except that it kills its own process once where DIE_AT_ENV says."""
    target, _, marker = os.environ.get(DIE_AT_ENV, "").partition("|")
    if instance.instance_id == target and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return get_method("compute-greedy")(instance, seed, budget)


def _csv_rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


# ---- serial -------------------------------------------------------------------------------------


def test_serial_run_gives_the_runners_rows_and_saves_each_row_as_it_finishes(tmp_path, instances, reference):
    out = tmp_path / "eval"
    seen: list[int] = []

    def watcher(instance, seed, budget):  # reads results.csv between tasks, as a user would
        seen.append(len(_csv_rows(out / "results.csv")))
        return get_method("naive")(instance, seed, budget)

    run = evaluate_tasks(
        instances, [*METHODS, "never", "watch"], out, budgets=BUDGETS, progress=False,
        extra_methods={"never": _never, "watch": watcher},
    )
    per_instance = len(METHODS) + 2
    # Before the watcher on instance k: every earlier task's row, complete, and no other.
    assert seen == [k * per_instance + per_instance - 1 for k in range(len(instances))]
    rows = [r for r in run.rows if r.method != "watch"]
    assert rows_equal(rows, reference)
    assert [r.reason for r in rows] == [r.reason for r in reference]
    saved = read_results_csv(out / "results.csv")
    assert rows_equal(saved, run.rows)  # the final file has gap_to_best (the final write)
    assert all(math.isfinite(r["gap_to_best"]) for r in saved if r["feasible"])
    assert (run.ran, run.skipped, run.workers) == (len(instances) * per_instance, 0, 1)
    assert json.loads((out / MANIFEST).read_text())["reasons"] == {
        f"{i.instance_id} | never": "gave up on purpose" for i in instances
    }


def test_a_killed_driver_loses_only_the_task_in_flight_and_resume_finishes_it(tmp_path, instances, reference):
    out = tmp_path / "eval"
    marker = tmp_path / "died"
    target = instances[1].instance_id
    script = (
        "from hulk_env.evaluation import load_suite\n"
        "from hulk_env.evaluation.distributed import evaluate_tasks\n"
        "from tests.test_distributed import BUDGETS, METHODS, _dies_once, _never\n"
        f"evaluate_tasks(load_suite('tiny-v0')[:3], METHODS, {str(out)!r}, budgets=BUDGETS, progress=False,\n"
        "               extra_methods={'never': _never, 'dies': _dies_once})\n"
    )
    env = {**os.environ, DIE_AT_ENV: f"{target}|{marker}"}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    per_instance = len(METHODS) + 2
    saved = _csv_rows(out / "results.csv")  # valid CSV: every line a whole row
    assert len(saved) == per_instance + per_instance - 1  # instance 0, then instance 1 up to "dies"
    assert [r["method"] for r in saved[-1:]] == ["never"]
    assert "" in {r["gap_to_best"] for r in saved}  # filled only by the final write

    os.environ[DIE_AT_ENV] = f"{target}|{marker}"  # the marker exists: it will not die again
    try:
        run = evaluate_tasks(
            instances, METHODS, out, budgets=BUDGETS, progress=False, resume=True,
            extra_methods={"never": _never, "dies": _dies_once},
        )
    finally:
        del os.environ[DIE_AT_ENV]
    assert (run.skipped, run.ran) == (len(saved), len(instances) * per_instance - len(saved))
    expected = run_methods(
        instances, METHODS, budgets=BUDGETS, progress=False,
        extra_methods={"never": _never, "dies": get_method("compute-greedy")},
    )
    assert rows_equal(run.rows, expected)
    assert rows_equal(read_results_csv(out / "results.csv"), expected)
    assert {r.reason for r in run.rows if r.method == "never"} == {"gave up on purpose"}


def test_resume_of_a_finished_directory_runs_nothing(tmp_path, instances, reference):
    out = tmp_path / "eval"
    evaluate_tasks(instances, METHODS, out, budgets=BUDGETS, progress=False, extra_methods={"never": _never})
    calls = []

    def counted(instance, seed, budget):
        calls.append(instance.instance_id)
        return _never(instance, seed, budget)

    again = evaluate_tasks(instances, METHODS, out, budgets=BUDGETS, progress=False, resume=True, extra_methods={"never": counted})
    assert (calls, again.ran, again.skipped) == ([], 0, len(reference))
    assert rows_equal(again.rows, reference)
    assert [r.reason for r in again.rows] == [r.reason for r in reference]


def test_resume_adds_a_method_to_an_existing_leaderboard(tmp_path, instances):
    out = tmp_path / "eval"
    evaluate_tasks(instances, ["naive", "genetic"], out, budgets=BUDGETS, progress=False)
    more = evaluate_tasks(instances, ["naive", "genetic", "anneal"], out, budgets=BUDGETS, progress=False, resume=True)
    assert (more.ran, more.skipped) == (len(instances), 2 * len(instances))
    full = run_methods(instances, ["naive", "genetic", "anneal"], budgets=BUDGETS, progress=False)
    assert rows_equal(more.rows, full)  # gap_to_best now includes anneal


def test_resume_cuts_a_row_the_machine_did_not_finish_writing(tmp_path, instances, reference):
    out = tmp_path / "eval"
    evaluate_tasks(instances[:2], METHODS, out, budgets=BUDGETS, progress=False, extra_methods={"never": _never})
    with (out / "results.csv").open("a") as fh:
        fh.write(f"{instances[2].instance_id},naive,12.3")  # a power cut in the middle of a row
    run = evaluate_tasks(instances, METHODS, out, budgets=BUDGETS, progress=False, resume=True, extra_methods={"never": _never})
    assert (run.skipped, run.ran) == (2 * (len(METHODS) + 1), len(METHODS) + 1)
    assert rows_equal(read_results_csv(out / "results.csv"), reference)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 1}, "made with --seed 0, this run has --seed 1"),
        ({"budgets": {"genetic": 999}}, "genetic was run with budget 200, this run gives it 999"),
        ({"methods": ["naive"]}, "the saved rows include method genetic, which this run does not have"),
    ],
)
def test_resume_refuses_rows_made_otherwise(tmp_path, instances, change, message):
    out = tmp_path / "eval"
    evaluate_tasks(instances, ["naive", "genetic"], out, budgets=BUDGETS, progress=False)
    before = (out / "results.csv").read_bytes()
    kwargs = {"methods": ["naive", "genetic"], "budgets": BUDGETS, "seed": 0, **change}
    with pytest.raises(HulkInputError, match=message):
        evaluate_tasks(instances, out_dir=out, progress=False, resume=True, **kwargs)
    assert (out / "results.csv").read_bytes() == before  # nothing saved is lost


def test_resume_refuses_a_directory_without_manifest(tmp_path, instances):
    out = tmp_path / "eval"
    evaluate_tasks(instances, ["naive"], out, progress=False)
    (out / MANIFEST).unlink()
    with pytest.raises(HulkInputError, match="no evaluate.json beside results.csv"):
        evaluate_tasks(instances, ["naive"], out, progress=False, resume=True)


def test_without_ray_installed_ray_says_how_to_install_it(monkeypatch, tmp_path, instances):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(HulkInputError) as err:
        import_ray()
    assert str(err.value) == f"--ray needs Ray, which is not installed: {RAY_INSTALL}"
    with pytest.raises(HulkInputError, match="pip install 'hulk-env\\[ray\\]'"):
        evaluate_tasks(instances, ["naive"], tmp_path / "eval", ray="local", progress=False)


# ---- the CLI (before any Ray starts in this process) ------------------------------------------


def _hulk(*args: str):
    from typer.testing import CliRunner

    from hulk_cli.app import app

    return CliRunner().invoke(app, list(args))


def test_cli_evaluate_resume_and_bad_options(tmp_path):
    out = tmp_path / "eval"
    common = ("evaluate", "--limit", "2", "--methods", "naive,genetic", "--budget", "200", "--out", str(out))
    first = _hulk(*common)
    assert first.exit_code == 0, first.output
    saved = (out / "results.csv").read_text()
    again = _hulk(*common, "--resume")
    assert again.exit_code == 0 and "resumed: 4 rows kept, 0 run" in again.output
    assert (out / "results.csv").read_text() == saved
    for args, message in [
        ((*common, "--resume", "--seed", "1"), "made with --seed 0, this run has --seed 1"),
        ((*common, "--workers", "2"), "--workers needs --ray"),
        ((*common, "--ray", "127.0.0.1:1"), "cannot reach the Ray cluster at 127.0.0.1:1"),
        ((*common, "--ray", "nowhere"), "give local, auto or a cluster address host:port"),
    ]:
        result = _hulk(*args)
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert message in result.output
    assert (out / "results.csv").read_text() == saved  # nothing saved is lost


# ---- Ray ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with 2 CPUs on this machine, started and stopped by this module."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_run_gives_the_serial_rows(local_ray, tmp_path, instances, reference):
    out = tmp_path / "eval"
    run = evaluate_tasks(
        instances, METHODS, out, budgets=BUDGETS, progress=False, ray="local", workers=2,
        extra_methods={"never": _never},
    )
    assert run.workers == 2
    assert rows_equal(run.rows, reference)
    assert rows_equal(read_results_csv(out / "results.csv"), reference)
    assert [r.reason for r in run.rows] == [r.reason for r in reference]


def _blocker(flag_dir: Path, target: str):
    """anneal, except that its first attempt on ``target`` records its pid and waits to be killed."""

    def blocker(instance, seed, budget):
        if instance.instance_id == target:
            attempts = sorted(flag_dir.glob("pid-*"))
            (flag_dir / f"pid-{len(attempts)}").write_text(str(os.getpid()))
            if not attempts:
                time.sleep(120)
        return get_method("anneal")(instance, seed, budget)

    return blocker


def test_a_killed_worker_is_retried_and_every_row_is_saved_once(local_ray, tmp_path, instances):
    out, flags = tmp_path / "eval", tmp_path / "flags"
    flags.mkdir()
    target = instances[1].instance_id
    killed: list[int] = []

    def kill_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            first = flags / "pid-0"
            if first.exists() and first.read_text():
                pid = int(first.read_text())
                assert pid != os.getpid()  # a Ray worker, not this test
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_worker)
    killer.start()
    run = evaluate_tasks(
        instances, ["naive", "blocked", "genetic"], out, budgets={**BUDGETS, "blocked": 200},
        progress=False, ray="local", workers=2, extra_methods={"blocked": _blocker(flags, target)},
    )
    killer.join()
    assert len(killed) == 1
    pids = [int((flags / f"pid-{k}").read_text()) for k in range(2)]
    assert pids[0] == killed[0] and pids[1] != pids[0] and not (flags / "pid-2").exists()  # run twice
    keys = [(r["instance"], r["method"]) for r in _csv_rows(out / "results.csv")]
    assert len(keys) == len(set(keys)) == 3 * len(instances)  # every row exactly once
    expected = run_methods(
        instances, ["naive", "blocked", "genetic"], budgets={**BUDGETS, "blocked": 200}, progress=False,
        extra_methods={"blocked": get_method("anneal")},
    )
    assert rows_equal(run.rows, expected)


def test_ray_resumes_a_directory_started_serially(local_ray, tmp_path, instances, reference):
    out = tmp_path / "eval"
    evaluate_tasks(instances[:2], METHODS, out, budgets=BUDGETS, progress=False, extra_methods={"never": _never})
    # The run of the first two instances had its own gap_to_best; the resumed run's rows are
    # the full run's rows.
    manifest = json.loads((out / MANIFEST).read_text())
    assert set(manifest["instances"]) == {i.instance_id for i in instances[:2]}
    run = evaluate_tasks(
        instances, METHODS, out, budgets=BUDGETS, progress=False, ray="local", resume=True,
        extra_methods={"never": _never},
    )
    assert (run.skipped, run.ran) == (2 * (len(METHODS) + 1), len(METHODS) + 1)
    assert rows_equal(run.rows, reference)


def test_bench_evaluate_keys_and_equal_rows(local_ray):
    figures = bench_evaluate(workers=2, limit=2, budget=100)
    assert list(figures) == ["tasks", "serial_s", "ray_s", "workers", "speedup", "rows_equal"]
    assert figures["tasks"] == 2 * 3 and figures["workers"] == 2
    assert figures["rows_equal"] is True
    assert figures["speedup"] == pytest.approx(figures["serial_s"] / figures["ray_s"], rel=0.01)


def test_cli_bench_evaluate_json(local_ray):
    result = _hulk("bench", "evaluate", "--json", "--limit", "2", "--budget", "100")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert list(figures) == ["tasks", "serial_s", "ray_s", "workers", "speedup", "rows_equal"]
    assert figures["rows_equal"] is True and figures["tasks"] == 6
