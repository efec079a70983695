"""Run directories: their layout, creating and locking one, resuming, and run metadata.

A training run lives in one directory (see :mod:`agents.training.train` for every file in it); this
module names the parts other modules look up (``config.yaml``, ``policy/``, ``best_policy/``).
A directory is created atomically and exclusively (:func:`create_run_dir`: built under a
staging name, renamed into place), and while a process trains in it that process holds its
lock (:func:`lock_run_dir`, ``run.lock`` with the holder's pid): a second writer gets a clear
error, never a shared directory. Resuming first removes what a killed process left behind
(:func:`clean_for_resume`). The module also writes the metadata that lets a result be traced to the code and packages that made it
(:func:`run_metadata`: used by ``versions.json`` of a run and ``run.json`` of an experiment).
"""

from __future__ import annotations

import importlib
import math
import os
import platform
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Sequence
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from agents.training.config import RunConfig, config_from_dict, read_config_file, validate_config
from hulk_env.errors import HulkInputError
from hulk_env.files import atomic_write_bytes, atomic_write_text

CONFIG_FILE = "config.yaml"
VERSIONS_FILE = "versions.json"
FINAL_POLICY_DIR = "policy"
BEST_POLICY_DIR = "best_policy"
EVALUATIONS_CSV = "eval/evaluations.csv"
EVAL_POLICIES_DIR = "eval/policies"  # eval.keep_policies: one policy directory per evaluation, named by its steps
TENSORBOARD_DIR = "tb"
SOURCE_DIR = Path(__file__).resolve().parents[2]  # the checkout, when installed editable

# Distributions whose versions a training run records (keys: their import names).
AGENT_PACKAGES = (
    "hulk-env", "numpy", "gymnasium", "torch", "stable-baselines3", "sb3-contrib", "torch-geometric",
)  # fmt: skip


# ------------------------------------------------------------------------------ metadata
def package_version(distribution: str) -> str:
    """The installed version of ``distribution`` (``"not installed"`` when it is not)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    try:  # a source checkout on sys.path without installed metadata
        return str(importlib.import_module(distribution.replace("-", "_")).__version__)
    except (ImportError, AttributeError):
        return "not installed"


def git(*args: str, cwd: Path = SOURCE_DIR) -> str | None:
    """Output of a git command in the source checkout (``None``: no git or no checkout)."""
    try:
        return subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=cwd, timeout=10
        ).stdout.rstrip("\n")  # keep leading spaces: `status --porcelain` lines start " M path"
    except (OSError, subprocess.SubprocessError):
        return None


def run_metadata(packages: Sequence[str] = AGENT_PACKAGES) -> dict[str, Any]:
    """Python, platform, the versions of ``packages``, the git commit and uncommitted files.

    ``git_commit`` is ``"unknown"`` outside a git checkout (e.g. a non-editable install);
    ``uncommitted_changes`` lists tracked files that differ from that commit.
    """
    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    out.update({name.replace("-", "_"): package_version(name) for name in packages})
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    out["git_commit"] = commit or "unknown"
    out["uncommitted_changes"] = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return out


# -------------------------------------------------------------------------- run directory
LOCK_FILE = "run.lock"
_STAGING = ".creating-"  # a new run directory is built under `.<name>.creating-<pid>-XXXX`
_MAX_SUFFIX = 1000


class RunLock:
    """An exclusive lock on a run directory, held while one process trains in it.

    ``RUN_DIR/run.lock`` holds the holder's pid, host and start time; the lock itself is an
    ``flock`` on that file, which the system drops when the process dies however it dies, so
    a killed run never leaves a stale lock (the file stays, unlocked, and is taken over).
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    def moved_to(self, run_dir: Path) -> None:
        """The directory was renamed (a new run leaving staging); the lock goes with it."""
        self.path = run_dir / LOCK_FILE

    def release(self) -> None:
        """Remove the lock file and drop the lock (idempotent)."""
        if self.fd < 0:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_run_dir(run_dir: Path) -> RunLock:
    """Take the run directory's lock, or say who holds it.

    Raises:
        HulkInputError: another live process trains in this directory.
    """
    import fcntl

    path = Path(run_dir) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another process"
        os.close(fd)
        raise HulkInputError(
            f"run directory is in use by {holder}; wait for that run to finish (or stop it) "
            "before resuming it, or train under another train.name",
            source=str(run_dir),
        ) from None
    os.ftruncate(fd, 0)
    stamp = datetime.now().isoformat(timespec="seconds")
    os.pwrite(fd, f"pid {os.getpid()} on {platform.node()} since {stamp}\n".encode(), 0)
    return RunLock(path, fd)


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` already holds a run (its config is written first, atomically)."""
    return (Path(run_dir) / CONFIG_FILE).is_file()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_staging(out: Path) -> None:
    """Staging directories of creations killed half-way (their process is gone)."""
    for path in out.glob(f".*{_STAGING}*"):
        pid_text = path.name.split(_STAGING, 1)[1].split("-", 1)[0]
        if path.is_dir() and pid_text.isdigit() and not _pid_alive(int(pid_text)):
            shutil.rmtree(path, ignore_errors=True)


def create_run_dir(out: Path, name: str | None, label: str, files: dict[str, str]) -> tuple[Path, RunLock]:
    """Create a run directory atomically and exclusively, holding its lock.

    The directory is built under a staging name in ``out`` (``files`` written into it, the lock
    taken), then renamed into place in one step: a reader never sees a half-made run, and of
    two processes asking for one name only one gets it. Without ``name`` the name is
    ``<label>-<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3``, ... appended when runs start within one
    second.

    Returns:
        The run directory and its lock (release it when the run ends).

    Raises:
        HulkInputError: ``name`` already holds a run (or is being created by another process).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale_staging(out)
    base = name or f"{label}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    for attempt in range(1, _MAX_SUFFIX + 1):
        candidate = base if attempt == 1 else f"{base}-{attempt}"
        target = out / candidate
        if holds_run(target):
            if name:
                break
            continue
        staging = Path(tempfile.mkdtemp(prefix=f".{candidate}{_STAGING}{os.getpid()}-", dir=out))
        lock = lock_run_dir(staging)
        try:
            for file_name, text in files.items():
                atomic_write_text(staging / file_name, text)
            os.rename(staging, target)  # atomic; fails if target is a non-empty directory
        except OSError:
            lock.release()
            shutil.rmtree(staging, ignore_errors=True)
            if name:
                break
            continue
        lock.moved_to(target)
        return target, lock
    raise HulkInputError(
        "run directory already holds a run; use --resume to continue it or choose another train.name",
        source=str(out / base),
    )


def clean_for_resume(run_dir: Path, checkpoint_timesteps: int | None) -> None:
    """Remove what a killed process left that a resumed run would duplicate (holding the lock).

    * temporary files of writes cut short (``.<name>.tmp<pid>``), anywhere in the directory;
    * rows of ``eval/evaluations.csv`` after the checkpoint (the resumed run evaluates those
      steps again);
    * TensorBoard events after the checkpoint, and a record torn by the kill, from every event
      file under ``tb/`` (the resumed run logs those steps again: curves would get two points
      per step);
    * with no checkpoint at all (killed before the first one): the run restarts from step 0,
      so the killed attempt's TensorBoard logs and best policy go too.
    """
    for tmp in Path(run_dir).rglob(".*.tmp*"):
        if tmp.is_file():
            tmp.unlink(missing_ok=True)
    evaluations = Path(run_dir) / EVALUATIONS_CSV
    keep_until = checkpoint_timesteps or 0
    if evaluations.is_file():
        lines = evaluations.read_text().splitlines(keepends=True)
        complete = [line for line in lines[1:] if line.endswith("\n")]  # a torn last line goes
        kept = lines[:1] + [line for line in complete if _row_step(line) <= keep_until]
        if kept != lines:
            atomic_write_text(evaluations, "".join(kept))
    if checkpoint_timesteps is None:
        for part in (TENSORBOARD_DIR, BEST_POLICY_DIR):
            shutil.rmtree(Path(run_dir) / part, ignore_errors=True)
    else:
        from agents.training.tb_curves import EVENT_GLOB

        for events in sorted((Path(run_dir) / TENSORBOARD_DIR).rglob(EVENT_GLOB)):
            if events.is_file():
                _truncate_events(events, checkpoint_timesteps)


# A TFRecord (TensorBoard's event file format): uint64 length, uint32 CRC of the length, the
# record (one serialised ``Event``), uint32 CRC of the record; little-endian.
_RECORD_HEAD = struct.Struct("<QI")
_RECORD_CRC_BYTES = 4


def _truncate_events(path: Path, keep_until: int) -> None:
    """Rewrite an event file without its events after step ``keep_until`` and without a record
    cut short (kept records are copied byte for byte, their checksums with them)."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    data = path.read_bytes()
    kept, pos = [], 0
    while pos + _RECORD_HEAD.size <= len(data):
        length, _ = _RECORD_HEAD.unpack_from(data, pos)
        end = pos + _RECORD_HEAD.size + length + _RECORD_CRC_BYTES
        if end > len(data):  # torn by the kill
            break
        try:
            event = event_pb2.Event.FromString(data[pos + _RECORD_HEAD.size : end - _RECORD_CRC_BYTES])
        except DecodeError:
            break
        if event.step <= keep_until:
            kept.append(data[pos:end])
        pos = end
    pruned = b"".join(kept)
    if pruned != data:
        atomic_write_bytes(path, pruned)


def _row_step(line: str) -> float:
    try:
        return float(line.split(",", 1)[0])
    except ValueError:
        return math.inf  # a torn last line: drop it


def read_run_config(run_dir: Path) -> RunConfig:
    """The resolved config a run directory was started with (read safely, every setting checked)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise HulkInputError(f"not a run directory (no {CONFIG_FILE})", source=str(run_dir))
    return validate_config(config_from_dict(read_config_file(path), source=str(path)), str(path))
