"""What every experiment shares: configs, output directories, Markdown tables, run info
(CSV files: :func:`hulk_env.evaluation.write_csv`)."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hulk_env.cluster import paper_data_dir
from hulk_env.errors import HulkInputError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # the experiments' own settings
DEFAULT_OUT = REPO_ROOT / "runs" / "experiments"


def default_hulk_data() -> Path:
    """The paper's data as the package ships it (``--hulk-data DIR`` reads a copy of your own)."""
    return paper_data_dir()


def load_config(name: str, path: str | Path | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment's settings: ``defaults`` updated by a YAML file.

    Args:
        name: the experiment (its file is ``experiments/configs/<name>.yaml``).
        path: another YAML file to read instead (``--config``).
        defaults: every key the experiment knows, with its default; a YAML key that is not
            here is an error naming it.

    Raises:
        HulkInputError: a missing or malformed file, or an unknown key.
    """
    file = Path(path) if path is not None else CONFIG_DIR / f"{name}.yaml"
    if not file.is_file():
        raise HulkInputError("config file not found", source=str(file))
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise HulkInputError(f"not valid YAML: {exc}".replace("\n", " "), source=str(file)) from None
    if not isinstance(data, dict):
        raise HulkInputError("a config must be a mapping of keys", source=str(file))
    unknown = sorted(set(data) - set(defaults))
    if unknown:
        raise HulkInputError(
            f"unknown key(s) {', '.join(unknown)}; known: {', '.join(defaults)}", source=str(file), field=unknown[0]
        )
    return {**defaults, **data}


def prepare_out_dir(out: str | Path | None, name: str) -> Path:
    """The output directory (created): ``out`` or ``runs/experiments/<name>``."""
    path = Path(out) if out is not None else DEFAULT_OUT / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, str]]) -> str:
    """A Markdown table: ``columns`` are ``(key, header, format)``; ``format`` is a format spec
    (``".2f"``), ``"x"`` for a speed-up (``×1.23``), ``"%"`` for a share, or ``""`` for str."""
    header = "| " + " | ".join(h for _, h, _ in columns) + " |"
    align = "|" + "|".join("---" if fmt == "" else "---:" for _, _, fmt in columns) + "|"
    lines = [header, align]
    for row in rows:
        lines.append("| " + " | ".join(format_value(row.get(k), fmt) for k, _, fmt in columns) + " |")
    return "\n".join(lines) + "\n"


def format_value(value: Any, fmt: str) -> str:
    """One table cell (``n/a`` for missing or non-finite numbers)."""
    if value is None or (isinstance(value, float | np.floating) and not math.isfinite(value)):
        return "n/a"
    if fmt == "":
        return str(value)
    if fmt == "x":
        return f"×{value:.2f}"
    if fmt == "%":
        return f"{100 * value:.0f}%"
    return format(value, fmt)


def write_run_info(out: Path, name: str, argv: Sequence[str], config: Mapping[str, Any], started: float) -> Path:
    """``run.json``: the exact command, the resolved config, wall time, versions, git commit
    (:func:`agents.training.runs.run_metadata`)."""
    from agents.training.runs import run_metadata

    info = {
        "experiment": name,
        "command": " ".join(["python", "-m", f"experiments.{name}", *argv]),
        "config": dict(config),
        "wall_s": time.perf_counter() - started,
        **run_metadata(),
    }
    path = out / "run.json"
    path.write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def run_cli(main: Callable[[list[str] | None], Path], argv: list[str] | None = None) -> None:
    """Run an experiment's ``main`` as a command: bad input is one line on stderr and exit 2."""
    try:
        out = main(argv)
    except HulkInputError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"results in {out}")
