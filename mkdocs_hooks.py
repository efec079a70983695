"""MkDocs hooks of the documentation site (``mkdocs.yml``; ``make docs`` builds it, strict).

Three things are generated from the code at build time, so the site cannot drift from it:

* a line ``<!-- hulk-docs: docstring DOTTED.NAME -->`` in a page becomes that module's, class's or
  function's docstring, its reStructuredText bits turned into Markdown (:func:`docstring_markdown`);
* a line ``<!-- hulk-docs: cli -->`` becomes the reference of every ``hulk`` command and option, read
  from the typer/click command tree (:func:`cli_markdown`);
* every page in ``docs/`` that ``nav`` does not list is added under *Topics*
  (:func:`on_config`), so a new ``docs/<topic>.md`` is on the site without editing the nav.

Docstrings are read from the source with :mod:`ast` where the name is defined in the module it
names (no import: ``agents`` modules would import torch), else from the imported object.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
MARKER = re.compile(r"^<!--\s*hulk-docs:\s*(?P<what>\w+)(?:\s+(?P<arg>[\w.]+))?\s*-->$", flags=re.M)  # alone on its line
TOPICS = "Topics"
if str(ROOT) not in sys.path:  # `mkdocs` run from a checkout without the package installed
    sys.path.insert(0, str(ROOT))


def on_config(config: Any) -> Any:
    """Add the pages of ``docs/`` that the nav does not list under *Topics*."""
    nav = config.get("nav") or []
    listed = set(_nav_files(nav))
    docs_dir = Path(config["docs_dir"])
    extra = sorted(
        str(p.relative_to(docs_dir)) for p in docs_dir.rglob("*.md") if str(p.relative_to(docs_dir)) not in listed
    )
    if extra:
        nav.append({TOPICS: [{_title(docs_dir / name): name} for name in extra]})
        config["nav"] = nav
    return config


def _nav_files(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [f for item in nav for f in _nav_files(item)]
    if isinstance(nav, dict):
        return [f for value in nav.values() for f in _nav_files(value)]
    return []


def _title(page: Path) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem.replace("-", " ").replace("_", " ").capitalize()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Expand the ``hulk-docs`` markers of a page."""

    def expand(match: re.Match[str]) -> str:
        what, arg = match.group("what"), match.group("arg")
        if what == "docstring" and arg:
            return docstring_markdown(docstring_of(arg), depth=_depth_at(markdown, match.start()))
        if what == "cli":
            return cli_markdown()
        raise ValueError(f"{page.file.src_uri}: unknown hulk-docs marker {match.group(0)!r}")

    return MARKER.sub(expand, markdown)


def _depth_at(markdown: str, pos: int) -> int:
    """The level of the last Markdown heading before ``pos`` (0 if none)."""
    levels = [len(m.group(1)) for m in re.finditer(r"^(#{1,6}) ", markdown[:pos], flags=re.M)]
    return levels[-1] if levels else 0


# -- docstrings --------------------------------------------------------------------------------


def docstring_of(dotted: str) -> str:
    """The docstring of a module, or of a class or function in one, found without importing
    where the name is defined in its module's source."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not source.is_file():
            continue
        node: ast.AST = ast.parse(source.read_text(encoding="utf-8"))
        for name in parts[cut:]:
            node = next(
                (n for n in getattr(node, "body", []) if isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name == name),
                None,
            )
            if node is None:
                break
        if node is not None:
            doc = ast.get_docstring(node, clean=True)
            if not doc:
                raise ValueError(f"{dotted} has no docstring")
            return doc
        break
    module, _, name = dotted.rpartition(".")
    doc = inspect.getdoc(getattr(importlib.import_module(module), name))
    if not doc:
        raise ValueError(f"{dotted} has no docstring")
    return doc


def docstring_markdown(doc: str, depth: int = 0) -> str:
    """A docstring as Markdown: ````x```` to ```x```, Sphinx roles (``:class:`a.b```) to code,
    ``::`` blocks to fenced code, and its own headings moved below the page's level ``depth``."""
    lines = doc.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.lstrip().startswith(("|", "*")):
            text = line.rstrip()[:-2].rstrip()
            if text:
                out.append(_inline(text) + ":")
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["", "```text", textwrap.dedent("\n".join(block)).strip("\n"), "```", ""]
            continue
        heading = re.match(r"^(#{1,5}) (.*)$", line)
        if heading:
            level = min(6, max(len(heading.group(1)), depth + 1))
            out.append("#" * level + " " + _inline(heading.group(2)))
        else:
            out.append(_inline(line))
        i += 1
    return "\n".join(out).strip() + "\n"


def _inline(text: str) -> str:
    text = re.sub(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`", r"`\1`", text)
    return re.sub(r"``(.+?)``", r"`\1`", text)


# -- the CLI -----------------------------------------------------------------------------------


def cli_markdown() -> str:
    """Every ``hulk`` command, group by group: usage, help text and an options table."""
    from typer.main import get_command

    from hulk_cli.app import app

    root = get_command(app)
    sections: list[str] = []
    _command_markdown(root, "hulk", sections)
    return "\n".join(sections)


def _command_markdown(command: Any, path: str, out: list[str]) -> None:
    subcommands = getattr(command, "commands", None)
    level = min(6, 1 + path.count(" ") + 1)
    if path != "hulk":
        out.append(f"{'#' * level} `{path}`\n")
    help_text = inspect.cleandoc(command.help or "")
    if help_text:
        out.append(_inline(help_text.replace("\b\n", "")) + "\n")
    if subcommands:
        if path == "hulk":
            out.append("| command | what it does |\n|---|---|")
            out += [f"| `hulk {name}` | {_cell(sub.get_short_help_str(limit=200))} |" for name, sub in subcommands.items()]
            out.append("")
        for name, sub in subcommands.items():
            _command_markdown(sub, f"{path} {name}", out)
        return
    ctx = command.make_context(path, [], resilient_parsing=True)
    out.append(f"```text\n{' '.join([path, *command.collect_usage_pieces(ctx)])}\n```\n")
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    if options:
        out.append("| option | meaning |\n|---|---|")
        for p in options:
            names, meaning = p.get_help_record(ctx) or (", ".join(p.opts), p.help or "")
            out.append(f"| `{names}` | {_cell(meaning)} |")
        out.append("")


def _cell(text: str) -> str:
    return " ".join(_inline(str(text)).split()).replace("|", "\\|")
