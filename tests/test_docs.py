"""The documentation site's generated parts (mkdocs_hooks.py); `make docs` builds the whole site
in strict mode, and the slow test here does the same into a scratch directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import mkdocs_hooks as hooks

ROOT = Path(__file__).resolve().parent.parent


def test_docstring_markdown_turns_rst_into_markdown() -> None:
    doc = "Load it: :func:`~hulk_env.cluster.load_cluster` and ``x = 1``.\n\nA file::\n\n    a: 1\n      b: 2\n\n## Section\nafter"
    md = hooks.docstring_markdown(doc, depth=2)
    assert "`hulk_env.cluster.load_cluster`" in md and "`x = 1`" in md and "``x" not in md
    assert "A file:\n\n```text\na: 1\n  b: 2\n```" in md
    assert "\n### Section\n" in md  # below the page's level-2 heading


def test_docstring_of_reads_source_without_importing_agents() -> None:
    before = set(sys.modules)
    doc = hooks.docstring_of("agents.network.saved_policy")
    assert "policy.json" in doc and "weights.pt" in doc
    assert "torch" not in set(sys.modules) - before
    assert hooks.docstring_of("hulk_env.env.PlacementEnvV1").startswith("Place a model's layers")
    with pytest.raises((ValueError, AttributeError, ModuleNotFoundError)):
        hooks.docstring_of("hulk_env.no_such_module.Thing")


def test_env_spec_page_is_the_docstring() -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="environment.md"))
    text = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    built = hooks.on_page_markdown(text, page=page, config={}, files=None)
    assert "hulk-docs:" not in built
    spec = hooks.docstring_markdown(hooks.docstring_of("hulk_env.env.PlacementEnvV1"), depth=2)
    assert spec in built


def test_only_markers_alone_on_a_line_expand() -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri="x.md"))
    inline = "see `<!-- hulk-docs: docstring MODULE -->` for how\n"
    assert hooks.on_page_markdown(inline, page=page, config={}, files=None) == inline
    with pytest.raises(ValueError, match="unknown hulk-docs marker"):
        hooks.on_page_markdown("<!-- hulk-docs: nonsense -->\n", page=page, config={}, files=None)


def test_cli_reference_lists_every_command_and_option() -> None:
    from typer.main import get_command

    from hulk_cli.app import app

    md = hooks.cli_markdown()

    def walk(command, path):
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, f"{path} {name}")
        else:
            yield path, command

    leaves = list(walk(get_command(app), "hulk"))
    assert len(leaves) > 15
    for path, command in leaves:
        assert f"`{path}`" in md, path
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert param.opts[0] in md, (path, param.opts)


def test_nav_lists_existing_pages_and_adds_the_others(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", ""))
    for page in hooks._nav_files(config["nav"]):
        assert (ROOT / "docs" / page).is_file(), page
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n")
    (docs / "new-topic.md").write_text("# A new topic\n")
    out = hooks.on_config({"nav": [{"Home": "index.md"}], "docs_dir": str(docs)})
    assert out["nav"][-1] == {hooks.TOPICS: [{"A new topic": "new-topic.md"}]}


@pytest.mark.slow
def test_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cli = (tmp_path / "site" / "cli.html").read_text(encoding="utf-8")
    assert "hulk simulate-failures" in cli and "--budget" in cli
