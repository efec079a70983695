"""The README's commands, as a new user runs them on a fresh clone.

Convention (stated here and kept by :func:`test_skip_markers_give_a_reason`): every fenced
``bash`` or ``python`` block of ``README.md`` runs as written, in order, in one scratch directory
that sees the repository's files (so ``tests/data/...`` resolves, and what the commands write
stays out of the checkout), with the virtualenv's ``hulk`` first on ``PATH``. A block that
installs, trains, starts a service or otherwise takes minutes has the line::

    <!-- readme-test: skip (REASON) -->

right above its fence, with the reason. The fast tests read the README only: its length, the
markers, its links, and every ``hulk ...`` line against the real command tree (a renamed command
or option fails here). ``test_readme_blocks_run`` (slow, about a minute) runs the blocks.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 300
SKIP_MARK = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
RUN_LANGS = ("bash", "python")
# Repository entries the scratch directory must not see (outputs, environments, git).
NOT_LINKED = {".git", ".venv", ".venv-rllib", "runs", "site", ".pytest_cache", ".ruff_cache"}


class Block(NamedTuple):
    """One fenced code block: its language, text, 1-based first line, and skip reason (or None)."""

    lang: str
    text: str
    line: int
    skip: str | None


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, each with the skip reason of the line above it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start, lang = i, match.group("lang")
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        above = lines[start - 1] if start > 0 else ""
        mark = SKIP_MARK.search(above)
        blocks.append(Block(lang, "\n".join(body) + "\n", start + 1, None if mark is None else mark.group("reason").strip()))
        i += 1
    return blocks


def hulk_lines(script: str) -> list[list[str]]:
    """The ``hulk`` invocations of a shell script, as argument lists (continuations joined,
    heredoc bodies, comments and redirections dropped)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    commands, heredoc_end = [], None
    for line in joined.splitlines():
        if heredoc_end is not None:
            heredoc_end = None if line.strip() == heredoc_end else heredoc_end
            continue
        here = re.search(r"<<-?\s*'?(\w+)'?", line)
        if here:
            heredoc_end = here.group(1)
        words = shlex.split(line, comments=True)
        if words and words[0] == "hulk":
            cut = next((k for k, w in enumerate(words) if w in (">", ">>", "|", "&&", ";")), len(words))
            commands.append(words[1:cut])
    return commands


@pytest.fixture(scope="module")
def readme() -> str:
    return README.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def hulk_command():
    from typer.main import get_command

    from hulk_cli.app import app

    return get_command(app)


def test_readme_is_a_manual_not_a_log(readme: str) -> None:
    assert len(readme.splitlines()) <= MAX_README_LINES


def test_skip_markers_give_a_reason(readme: str) -> None:
    blocks = readme_blocks(readme)
    runnable = [b for b in blocks if b.lang in RUN_LANGS and b.skip is None]
    assert all(b.skip for b in blocks if b.skip is not None), "a skip marker needs its reason"
    assert all(b.lang in RUN_LANGS for b in blocks), [b for b in blocks if b.lang not in RUN_LANGS]
    # the marker sits right above a fence, never loose in the text
    marks = [n for n, line in enumerate(readme.splitlines(), 1) if SKIP_MARK.search(line)]
    assert sorted(b.line - 1 for b in blocks if b.skip is not None) == marks
    assert len(runnable) >= 4, "the README should keep commands a new user can run at once"
    assert any(b.lang == "python" for b in runnable)


def test_readme_links_exist(readme: str) -> None:
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which is not in the repository"


def test_readme_hulk_lines_match_the_commands(readme: str, hulk_command) -> None:
    """Every `hulk ...` line names a real command and real options (skipped blocks too)."""
    lines = [args for b in readme_blocks(readme) if b.lang == "bash" for args in hulk_lines(b.text)]
    assert len(lines) >= 15
    for args in lines:
        command, rest = hulk_command, list(args)
        while rest and hasattr(command, "commands") and not rest[0].startswith("-"):
            name = rest.pop(0)
            assert name in command.commands, f"`hulk {' '.join(args)}`: no command {name!r}"
            command = command.commands[name]
        assert not hasattr(command, "commands"), f"`hulk {' '.join(args)}` names a group, not a command"
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
        for word in rest:
            if word.startswith("-") and word != "-":
                assert word.split("=")[0] in known, f"`hulk {' '.join(args)}`: no option {word}"


def test_hulk_lines_parse_continuations_and_heredocs() -> None:
    script = "cat > a.yaml <<'EOF'\nhulk: not a command\nEOF\nhulk place --cluster a.yaml \\\n    --json > b.json  # note\n"
    assert hulk_lines(script) == [["place", "--cluster", "a.yaml", "--json"]]


def scratch_env() -> dict[str, str]:
    """The environment of a user of the virtualenv: its ``hulk`` and this checkout's code."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.mark.slow
def test_readme_blocks_run(readme: str, tmp_path: Path) -> None:
    for entry in ROOT.iterdir():
        if entry.name not in NOT_LINKED:
            (tmp_path / entry.name).symlink_to(entry)
    env = scratch_env()
    for block in readme_blocks(readme):
        if block.skip is not None:
            continue
        if block.lang == "bash":
            argv = ["bash", "-euo", "pipefail", "-c", block.text]
        else:
            argv = [sys.executable, "-c", block.text]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"README block at line {block.line} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert (tmp_path / "runs" / "tiny" / "results.csv").is_file()
    assert (tmp_path / "placement.png").stat().st_size > 0
