"""Run directories: their layout, creating one, reading its config back, and run metadata.

A training run lives in one directory (see :mod:`agents.train` for every file in it); this
module names the parts other modules look up (``config.yaml``, ``policy/``, ``best_policy/``)
and writes the metadata that lets a result be traced to the code and packages that made it
(:func:`run_metadata`: used by ``versions.json`` of a run and ``run.json`` of an experiment).
"""

from __future__ import annotations

import importlib
import platform
import subprocess
from collections.abc import Sequence
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from agents.config import RunConfig, config_from_dict
from hulk_env.errors import HulkInputError

CONFIG_FILE = "config.yaml"
FINAL_POLICY_DIR = "policy"
BEST_POLICY_DIR = "best_policy"
SOURCE_DIR = Path(__file__).resolve().parents[1]  # the checkout, when installed editable

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
def new_run_dir(config: RunConfig, label: str) -> Path:
    """``train.out/<train.name or label-timestamp>``, created (an existing run is an error)."""
    name = config.train.name or f"{label}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(config.train.out) / name
    if (run_dir / CONFIG_FILE).exists():
        raise HulkInputError(
            "run directory already holds a run; use --resume to continue it or choose another train.name",
            source=str(run_dir),
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def read_run_config(run_dir: Path) -> RunConfig:
    """The resolved config a run directory was started with."""
    import yaml

    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise HulkInputError(f"not a run directory (no {CONFIG_FILE})", source=str(run_dir))
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise HulkInputError(f"{CONFIG_FILE} is not valid YAML: {exc}".replace("\n", " "), source=str(path)) from None
    return config_from_dict(data, source=str(path))
