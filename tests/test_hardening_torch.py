"""Issue 38, ``hulk import torch``: the user's factory and forward run in a child process with a
time limit; an exit, a crash, a hang or Ctrl-C is one line (exit 2, or 130 for Ctrl-C) and no
file is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from tests.cli_checks import one_error_line

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

MODULE = '''
import os, sys, time
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, sleep_s=0.0):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.sleep_s = sleep_s

    def forward(self, x):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.b(self.a(x))


def exits():
    sys.exit(0)


def hard_exit():
    os._exit(3)


def crashes():
    os.kill(os.getpid(), 11)


def sleeps():
    return Net(sleep_s=10_000)


def waits():
    open(os.environ["HULK_TEST_MARKER"], "w").close()
    time.sleep(10_000)


def fine():
    return Net()
'''


@pytest.fixture
def here(tmp_path, monkeypatch):
    (tmp_path / "hostile_models.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _import(factory: str, *extra: str):
    return runner.invoke(app, ["import", "torch", f"hostile_models:{factory}", "--input-shape", "2,8",
                               "--input-dtype", "float", "--out", "model.yaml", *extra])


def _left(here: Path) -> list[str]:
    return sorted(p.name for p in here.iterdir() if p.name != "__pycache__")


@pytest.mark.parametrize(
    ("factory", "says"),
    [
        ("exits", "called sys.exit(0) before returning a module"),
        pytest.param("hard_exit", "exited with status 3 without a result", marks=pytest.mark.slow),
        pytest.param("crashes", "was killed by signal SIGSEGV", marks=pytest.mark.slow),
    ],
)
def test_exits_and_crashes_are_one_line_and_write_nothing(here, factory, says):
    assert says in one_error_line(_import(factory))
    assert _left(here) == ["hostile_models.py"]


def test_a_hanging_forward_is_stopped_at_the_time_limit(here):
    line = one_error_line(_import("sleeps", "--time-limit", "2"))
    assert "did not finish within 2 s" in line and "--time-limit" in line
    assert _left(here) == ["hostile_models.py"]


@pytest.mark.slow  # a child importing torch: seconds of CPU; test_cli_inputs imports good modules
def test_a_good_module_still_imports(here):
    result = _import("fine")
    assert result.exit_code == 0, result.output
    assert _left(here) == ["hostile_models.py", "model.yaml"]


@pytest.mark.slow  # a real `hulk` process and its child: ~10 s of CPU
def test_ctrl_c_stops_the_child_with_one_line_and_status_130(here):
    marker = here / "started"
    env = {**os.environ, "HULK_TEST_MARKER": str(marker), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hulk_cli", "import", "torch", "hostile_models:waits", "--input-shape", "2,8",
         "--out", "model.yaml"],
        cwd=here, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for _ in range(1200):  # the child is running the factory once the marker exists
            if marker.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == ["interrupted: the import of 'hostile_models:waits' was stopped; nothing written"], err
    assert sorted(p.name for p in here.iterdir() if p.name != "__pycache__") == ["hostile_models.py", "started"]
