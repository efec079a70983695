"""Run directories: atomic, exclusive creation; locks; resuming after a kill at any point.

The kill tests run real (seconds-long) trainings in subprocesses and SIGKILL them: before the
first checkpoint, in the middle of a checkpoint write, and while a second process tries the
same directory. After each: no stuck run, no temporary file, no doubled evaluation rows.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.training.runs import (
    CONFIG_FILE,
    EVALUATIONS_CSV,
    LOCK_FILE,
    clean_for_resume,
    create_run_dir,
    lock_run_dir,
)
from agents.training.train import CHECKPOINT, checkpoint_timesteps
from hulk_env.errors import HulkInputError

REPO = Path(__file__).resolve().parents[1]
FILES = {CONFIG_FILE: "train: {}\n"}

# A trainer in a fresh process: `new <overrides...>`, `resume <dir>`, `kill-in-write <n>
# <overrides...>` (SIGKILLs itself after writing the temporary file of its n-th checkpoint,
# before the rename: a kill in the middle of a checkpoint write), or `pause <gate dir>
# <overrides...>` (at its first checkpoint, creates GATE/waiting and waits for GATE/go).
_TRAINER = """
import os, signal, sys, time
from pathlib import Path
from agents.training.config import TrainSettings
import agents.network.files
from agents.training.train import train

mode, args = sys.argv[1], sys.argv[2:]
if mode == "pause":
    gate, args = Path(args[0]), args[1:]
    write = agents.network.files.atomic_write_bytes

    def paused_write(path, data):
        if path.name == "checkpoint.pt" and not (gate / "go").exists():
            (gate / "waiting").touch()
            while not (gate / "go").exists():
                time.sleep(0.02)
        return write(path, data)

    agents.network.files.atomic_write_bytes = paused_write
if mode == "kill-in-write":
    target, args = int(args[0]), args[1:]
    seen = {"n": 0}
    write = agents.network.files.atomic_write_bytes

    def dying_write(path, data):
        if path.name == "checkpoint.pt":
            seen["n"] += 1
            if seen["n"] == target:
                tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
                tmp.write_bytes(data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
        return write(path, data)

    agents.network.files.atomic_write_bytes = dying_write
train(resume=args[0]) if mode == "resume" else train(TrainSettings("smoke", tuple(args)))
"""


def _overrides(out: Path, name: str, **settings) -> list[str]:
    base = {"train.out": out, "train.name": name, "train.torch_threads": 1, "train.total_timesteps": 768,
            "train.checkpoint_every": 128, "eval.eval_every": 128, "train.tensorboard": "false"}
    base.update({k.replace("__", "."): v for k, v in settings.items()})
    return [f"{k}={v}" for k, v in base.items()]


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _TRAINER, *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _TRAINER, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"trainer ended before {what}: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {what} within {timeout} s")


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _eval_steps(run: Path) -> list[int]:
    path = run / EVALUATIONS_CSV
    if not path.exists():
        return []
    with path.open() as fh:
        return [int(row["timesteps"]) for row in csv.DictReader(fh)]


def _assert_clean(run: Path, total: int) -> None:
    assert checkpoint_timesteps(run) == total
    steps = _eval_steps(run)
    assert steps and steps == sorted(set(steps)), f"doubled or unordered evaluation rows: {steps}"
    assert not list(run.rglob(".*.tmp*")), "temporary files left behind"
    assert not (run / LOCK_FILE).exists(), "lock left behind by a finished run"
    assert not list(run.parent.glob(".*.creating-*")), "staging directory left behind"


# ---- creation and locks (no training) ---------------------------------------------------------


def test_unnamed_runs_in_one_second_get_distinct_names(tmp_path):
    made = []
    for _ in range(3):
        run, lock = create_run_dir(tmp_path, None, "smoke", FILES)
        lock.release()
        made.append(run)
    assert len({p.name for p in made}) == 3
    assert all((p / CONFIG_FILE).read_text() == FILES[CONFIG_FILE] for p in made)
    assert not list(tmp_path.glob(".*"))


def test_two_creators_of_one_name_one_wins(tmp_path):
    results: list[object] = []
    barrier = threading.Barrier(8)

    def create() -> None:
        barrier.wait()
        try:
            results.append(create_run_dir(tmp_path, "same", "x", FILES))
        except HulkInputError as err:
            results.append(err)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if not isinstance(r, HulkInputError)]
    lost = [r for r in results if isinstance(r, HulkInputError)]
    assert len(won) == 1 and len(lost) == 7
    assert all("already holds a run" in str(e) for e in lost)
    won[0][1].release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same"]


def test_lock_names_its_holder_and_dies_with_it(tmp_path):
    lock = lock_run_dir(tmp_path)
    with pytest.raises(HulkInputError, match=f"in use by pid {os.getpid()}"):
        lock_run_dir(tmp_path)
    lock.release()
    lock_run_dir(tmp_path).release()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from agents.training.runs import lock_run_dir; lock_run_dir(sys.argv[1]); "
        "print('locked', flush=True); time.sleep(60)"), str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(HulkInputError, match=f"pid {holder.pid}"):
            lock_run_dir(tmp_path)
    finally:
        _kill(holder)
    assert (tmp_path / LOCK_FILE).exists()  # a killed holder leaves the file ...
    lock_run_dir(tmp_path).release()  # ... but not the lock


def test_stale_staging_of_a_killed_creation_is_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".run.creating-{dead.stdout.strip()}-abc"
    stale.mkdir()
    (stale / CONFIG_FILE).write_text("half")
    run, lock = create_run_dir(tmp_path, "fresh", "x", FILES)
    lock.release()
    assert not stale.exists() and run.is_dir()


def test_clean_for_resume_drops_rows_after_the_checkpoint_and_temp_files(tmp_path):
    (tmp_path / "eval").mkdir()
    (tmp_path / EVALUATIONS_CSV).write_text("timesteps,mean_reward\n128,0.1\n256,0.2\n384,0.3\n51")
    (tmp_path / ".checkpoint.pt.tmp999").write_bytes(b"half")
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / ".weights.pt.tmp1").write_bytes(b"half")
    clean_for_resume(tmp_path, 256)
    assert _eval_steps(tmp_path) == [128, 256]
    assert not list(tmp_path.rglob(".*.tmp*"))
    clean_for_resume(tmp_path, None)
    assert _eval_steps(tmp_path) == []


def test_clean_for_resume_cuts_tensorboard_events_after_the_checkpoint(tmp_path):
    from agents.training.tb_curves import read_curves
    from tests.tb_events import write_event_file

    tag = "placement/speedup_vs_naive"
    write_event_file(tmp_path / "tb" / "ppo_1", tag, [(128, 1.0), (256, 1.5), (384, 2.0), (512, 2.5)])
    (events,) = (tmp_path / "tb" / "ppo_1").glob("events.out.tfevents.*")
    with open(events, "ab") as fh:
        fh.write(b"\x40\x00\x00\x00\x00\x00\x00\x00half")  # a record the kill cut short
    clean_for_resume(tmp_path, 256)
    write_event_file(tmp_path / "tb" / "ppo_2", tag, [(384, 2.2), (512, 2.7)])  # the resumed run
    (curve,) = read_curves(tmp_path)
    assert curve.steps.tolist() == [128, 256, 384, 512]  # one point per step
    assert curve.values.tolist() == pytest.approx([1.0, 1.5, 2.2, 2.7])
    assert events.read_bytes()[-4:] != b"half"
    before = events.read_bytes()
    clean_for_resume(tmp_path, 512)  # nothing past the checkpoint: left as it is
    assert events.read_bytes() == before


def test_bad_settings_leave_no_run_directory(tmp_path):
    from agents.training.config import TrainSettings
    from agents.training.train import train

    bad = [
        ("train.n_envs=0",), ("ppo.batch_size=0",), ("ppo.n_steps=0",), ("ppo.learning_rate=nan",),
        ("policy.heads=0",), ("policy.hidden_dim=0",), ("eval.n_eval_episodes=-1",), ("train.torch_threads=-4",),
        ("eval.baselines=[naive,telepathy]",), ("train.device=cuda:7",),
        ("env.generator=fixed", "env.cluster=no-such-cluster"), ("env.generator=fixed", "env.model=/nonexistent/m.yaml"),
    ]
    for items in bad:
        with pytest.raises(HulkInputError) as err:
            train(TrainSettings("smoke", (*items, f"train.out={tmp_path}", "train.name=bad")))
        assert "\n" not in str(err.value)
        key = items[0].split("=")[0]
        if not key.startswith("env.") and key != "train.device":
            assert str(err.value).startswith(f"--set: field '{key}'"), str(err.value)
        assert not any(tmp_path.iterdir()), f"{items} left {list(tmp_path.iterdir())}"


# ---- kills during real trainings ------------------------------------------------------------------


def test_killed_before_the_first_checkpoint_restarts_cleanly(tmp_path):
    run = tmp_path / "early"
    proc = _start("new", *_overrides(tmp_path, "early", train__checkpoint_every=0, train__total_timesteps=512))
    try:
        _wait_for(lambda: len(_eval_steps(run)) >= 1, proc, "a first evaluation")
        _kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (run / CHECKPOINT).exists()
    done = _run("resume", str(run))
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_clean(run, 512)
    assert _eval_steps(run) == [128, 256, 384, 512]


def test_killed_during_a_checkpoint_write_resumes_without_its_temp_file(tmp_path):
    run = tmp_path / "mid-write"
    killed = _run("kill-in-write", "2", *_overrides(tmp_path, "mid-write", train__total_timesteps=512))
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert list(run.glob(".checkpoint.pt.tmp*")), "the kill should leave a half-written temp file"
    assert checkpoint_timesteps(run) == 128  # the first checkpoint survived intact
    done = _run("resume", str(run))
    assert done.returncode == 0, done.stderr[-2000:]
    _assert_clean(run, 512)


@pytest.mark.slow  # ~24 s CPU; the lock stays covered fast by test_lock_names_its_holder_and_dies_with_it
def test_two_runs_on_one_directory(tmp_path):
    run, gate = tmp_path / "shared", tmp_path / "gate"
    gate.mkdir()
    first = _start("pause", str(gate), *_overrides(tmp_path, "shared", train__tensorboard="true"))
    try:
        _wait_for(lambda: (gate / "waiting").exists(), first, "the first run's first checkpoint")
        second = _start("new", *_overrides(tmp_path, "shared"))
        resumed = _start("resume", str(run))
        second_err, resumed_err = second.communicate(timeout=120)[1], resumed.communicate(timeout=120)[1]
        (gate / "go").touch()
        assert first.wait(timeout=300) == 0, first.stderr.read()[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode != 0 and "already holds a run" in second_err
    assert resumed.returncode != 0 and f"in use by pid {first.pid}" in resumed_err
    _assert_clean(run, 768)
    assert len(list((run / "tb").iterdir())) == 1, "one TensorBoard run"
