"""Checks shared by the command-line tests."""

from __future__ import annotations

from hulk_cli.output import EXIT_BAD_INPUT


def one_error_line(result) -> str:
    """The one ``error:`` line of a refused command (exit 2, no traceback)."""
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]
