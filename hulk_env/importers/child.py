"""``hulk import torch`` runs the user's code in a child process with a time limit.

The factory and ``forward`` are the user's code: they may sleep forever, call ``sys.exit``,
``os._exit``, crash the interpreter or print to stdout. :func:`import_in_child` runs
:func:`hulk_env.importers.torch_module.import_torch_module` in a fresh Python
(``python -m hulk_env.importers.child REQUEST RESULT``) and turns every ending into one
:class:`HulkInputError` line (exit status 2):

* a result: the workload mapping and the FLOP check come back as JSON;
* bad input (:class:`HulkInputError` in the child): the same message, relayed;
* ``sys.exit(N)`` in the user's code: "the factory or forward called sys.exit(N)";
* the child ends without a result (``os._exit``) or dies of a signal: its status, and the
  last line it wrote on stderr;
* past ``time_limit_s``: the child's whole process group is killed, "did not finish within";
* Ctrl-C in the parent: the child is killed and :class:`ImportInterrupted` is raised (the
  CLI prints one line and exits 130).

The child runs in its own session, so a Ctrl-C reaches only the parent, which stops it. Its
stdout and stderr go to files (a chatty module cannot fill a pipe and block).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hulk_env.errors import HulkInputError

DEFAULT_TIME_LIMIT_S = 60.0
_KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the child to be reaped


class ImportInterrupted(Exception):
    """Ctrl-C while the child ran; the child has been stopped."""


class ChildImport(NamedTuple):
    """What the child found: the workload mapping and the layers' FLOPs vs the counter's."""

    workload: dict
    flops_error: float


def import_in_child(
    spec: str,
    input_shapes: Sequence[Sequence[int]],
    *,
    input_dtypes: Sequence[str] | None = None,
    dtype: str = "bfloat16",
    block_depth: int = 1,
    name: str | None = None,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> ChildImport:
    """:func:`~hulk_env.importers.torch_module.import_torch_module` in a child process.

    Raises:
        HulkInputError: the child's own error, an exit, a crash or the time limit (module docstring).
        ImportInterrupted: Ctrl-C.
    """
    request = {
        "spec": spec, "input_shapes": [list(s) for s in input_shapes], "input_dtypes": None if input_dtypes is None else list(input_dtypes),
        "dtype": dtype, "block_depth": block_depth, "name": name,
    }
    package_root = str(Path(__file__).resolve().parents[2])  # so the child imports this hulk_env
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="hulk-import-torch-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request), encoding="utf-8")
        with open(Path(tmp) / "stdout", "wb") as out, open(Path(tmp) / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "hulk_env.importers.child", str(req), str(res)],
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=os.getcwd(), start_new_session=True,
            )
            try:
                code = proc.wait(timeout=time_limit_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                raise HulkInputError(
                    f"'{spec}' did not finish within {time_limit_s:g} s (a forward or factory that hangs or sleeps?); "
                    "it was stopped: fix it, or give more time with --time-limit SECONDS",
                    field="module",
                ) from None
            except KeyboardInterrupt:
                _kill(proc)
                raise ImportInterrupted(spec) from None
        return _outcome(spec, code, res, Path(tmp) / "stderr")


def _kill(proc: subprocess.Popen) -> None:
    """Kill the child and everything it started (its own session), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.wait(timeout=_KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        pass


def _outcome(spec: str, code: int, result: Path, stderr: Path) -> ChildImport:
    """The child's result file (or its exit) as a :class:`ChildImport` or one error."""
    data = None
    if result.is_file():
        try:  # written by our own child, atomically; a missing or odd one is an exit below
            from hulk_env.validation.reading import read_data

            data = read_data(result, syntax="json", what="import result")
        except HulkInputError:
            data = None
    if isinstance(data, dict) and "workload" in data:
        return ChildImport(data["workload"], float(data["flops_error"]))
    if isinstance(data, dict) and "error" in data:
        e = data["error"]
        raise HulkInputError(e["message"], source=e.get("source"), row=e.get("row"), field=e.get("field"))
    if isinstance(data, dict) and "exit" in data:
        raise HulkInputError(
            f"'{spec}' called sys.exit({data['exit']!r}) before returning a module; a factory must return "
            "an nn.Module (and forward must return its output)",
            field="module",
        )
    if code < 0:
        try:
            what = f"signal {signal.Signals(-code).name}"
        except ValueError:
            what = f"signal {-code}"
        how = f"was killed by {what}"
    else:
        how = f"exited with status {code} without a result (os._exit, or a crash)"
    last = _last_line(stderr)
    raise HulkInputError(f"'{spec}' {how}{f'; it said: {last}' if last else ''}", field="module")


def _last_line(path: Path) -> str:
    """The last non-empty line the child wrote on stderr (at most 200 characters)."""
    try:
        with open(path, "rb") as fh:  # our own child's stderr, bounded by the seek below
            fh.seek(max(0, path.stat().st_size - 4096))
            tail = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


# ---- the child ------------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()  # numpy / torch scalars
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _child(request_path: str, result_path: str) -> int:
    """Run the import and write the result file (atomically); the exit code says nothing more."""
    from hulk_env.files import atomic_write_text
    from hulk_env.importers.torch_module import import_torch_module
    from hulk_env.validation.reading import read_data

    req = read_data(request_path, syntax="json", what="import request")
    try:
        result = import_torch_module(
            req["spec"], [tuple(s) for s in req["input_shapes"]], input_dtypes=req["input_dtypes"],
            dtype=req["dtype"], block_depth=req["block_depth"], name=req["name"],
        )
        payload: dict = {"workload": result.workload, "flops_error": result.flops_error}
    except HulkInputError as err:
        payload = {"error": {"message": err.message, "source": err.source, "row": err.row, "field": err.field}}
    except SystemExit as err:
        payload = {"exit": err.code if isinstance(err.code, int | str | None) else str(err.code)}
    atomic_write_text(result_path, json.dumps(payload, default=_json_default))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
