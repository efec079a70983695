"""What every command prints: one line for bad input (exit 2), JSON for scripts, rich tables.

Bad input -- a :class:`hulk_env.errors.HulkInputError`, an unreadable file, or a command that
needs the agent stack where it is not installed -- is one line on stderr starting ``error:``
and exit status :data:`EXIT_BAD_INPUT`, never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from typer._click import exceptions as click_errors  # typer's own click (0.29 vendors it)
from typer.core import TyperGroup

from hulk_env.errors import HulkInputError

console = Console()
err_console = Console(stderr=True)

EXIT_BAD_INPUT = 2
# The extra `hulk-env[agent]` (pyproject.toml): what training and the policy methods import.
AGENT_MODULES = ("torch", "stable_baselines3", "sb3_contrib", "torch_geometric", "tensorboard")
INSTALL_AGENT = "pip install 'hulk-env[agent]'"


def clean_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Report bad input as one line and exit 2 (typer keeps the signature via ``wraps``)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (HulkInputError, OSError) as exc:
            message = exc.one_line() if isinstance(exc, HulkInputError) else str(exc)
            err_console.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper


class OneLineUsageErrors(TyperGroup):
    """The ``hulk`` group: a usage error anywhere below it -- an option value out of range or
    of the wrong type, an unknown command or option -- is one line on stderr and exit status
    :data:`EXIT_BAD_INPUT`, like every other bad input (typer would draw a box around it)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click_errors.NoArgsIsHelpError as exc:  # `hulk` alone: the help, as before
            from typer import rich_utils

            rich_utils.rich_format_error(exc)
            sys.exit(exc.exit_code)
        except click_errors.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "hulk"
            message = " ".join(exc.format_message().split())
            err_console.print(f"error: {where}: {message} (see --help)", markup=False, highlight=False, soft_wrap=True)
            sys.exit(EXIT_BAD_INPUT)
        except click_errors.ClickException as exc:
            err_console.print(f"error: {' '.join(exc.format_message().split())}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err_console.print("aborted", markup=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


def missing_agent_modules() -> list[str]:
    """The agent stack's modules that cannot be imported here (found without importing them)."""
    missing = []
    for name in AGENT_MODULES:
        try:
            found = find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or blocked install counts as missing
            found = False
        if not found:
            missing.append(name)
    return missing


def require_agent(what: str) -> None:
    """Raise a one-line :class:`HulkInputError` saying how to install the agent stack when
    ``what`` (e.g. ``"hulk train"``) cannot run without it."""
    missing = missing_agent_modules()
    if missing:
        raise HulkInputError(
            f"{what} needs the agent stack ({', '.join(missing)} not installed): {INSTALL_AGENT}"
        )


def print_json(obj: Any) -> None:
    """JSON on stdout, nothing else (scripts parse it)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def print_figures(result: dict, as_json: bool) -> None:
    """A benchmark's figures: JSON, or a two-column table."""
    if as_json:
        print_json(result)
        return
    table = Table("figure", "value")
    for key, value in result.items():
        table.add_row(key, f"{value:,.4g}" if isinstance(value, float) else str(value))
    console.print(table)


def leaderboard_table(entries: list[dict], title: str) -> Table:
    """The leaderboard with short headers, so it stays readable in an 80-column terminal."""
    table = Table("#", "method", "speed-up", "gap", "best", "solved", "evals", "wall s", title=title)
    for e in entries:
        table.add_row(
            str(e["rank"]), e["method"], f"x{e['geomean_speedup_vs_naive']:.2f}",
            f"{100 * e['mean_gap_to_best']:.1f}%", str(e["best_on"]), f"{e['solved']}/{e['instances']}",
            f"{e['mean_cost_evals']:,.0f}", f"{e['total_wall_s']:.2f}",
        )
    table.caption = "speed-up: geometric mean over naive; gap: mean gap to the best method per instance"
    return table
