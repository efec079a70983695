"""The import rules of docs/architecture.md, checked on the source text and in a fresh interpreter.

The static walk reads every ``import`` statement (module level and inside functions) of the
project's packages, so a lazy import that closes a cycle is caught as well as an eager one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("hulk_env", "agents", "hulk_cli", "experiments")
TORCH_STACK = ("torch", "torch_geometric", "stable_baselines3", "sb3_contrib", "tensorboard")
# Core modules that may import torch inside a function, because their whole job is reading a
# user's torch module (they are never imported by ``import hulk_env``).
LAZY_TORCH_ALLOWED = ("hulk_env.importers",)
# The env side of the core: what the env needs must not pull in searches or suites.
ENV_SIDE = ("hulk_env.env", "hulk_env.generators", "hulk_env.cost", "hulk_env.feasibility", "hulk_env.rewards")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(modules: dict[str, Path]) -> dict[str, set[tuple[str, bool]]]:
    """module -> {(imported name, at module level)}; a ``from pkg import sub`` names pkg.sub."""
    edges: dict[str, set[tuple[str, bool]]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        top_level = {id(n) for n in tree.body}
        found: set[tuple[str, bool]] = set()
        for node in ast.walk(tree):
            eager = id(node) in top_level or _inside_top_level_block(tree, node)
            if isinstance(node, ast.Import):
                found.update((alias.name, eager) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(node, name, _is_package(path))
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add((sub if sub in modules else target, eager))
        edges[name] = found
    return edges


def _inside_top_level_block(tree: ast.Module, node: ast.AST) -> bool:
    """True for imports under a module-level ``if``/``try`` (executed on import)."""
    for stmt in tree.body:
        if isinstance(stmt, ast.If | ast.Try) and node in ast.walk(stmt):
            return not any(
                isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node in ast.walk(inner)
                for inner in ast.walk(stmt)
            )
    return False


@pytest.fixture(scope="module")
def graph() -> dict[str, set[tuple[str, bool]]]:
    return _imports(_modules())


def _project_edges(graph, modules) -> dict[str, set[str]]:
    return {m: {t for t, _ in targets if t in modules and t != m} for m, targets in graph.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def _under(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_no_import_cycle_anywhere(graph):
    modules = _modules()
    cycles = _cycles(_project_edges(graph, modules))
    assert not cycles, "import cycles (each line one cycle's modules):\n" + "\n".join(map(" <-> ".join, cycles))


def test_the_core_never_imports_agents_cli_or_experiments(graph):
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if _under(m, "hulk_env")
        for t, _ in targets
        if _under(t, ("agents", "hulk_cli", "experiments"))
    )
    assert not bad, "\n".join(bad)


def test_the_core_never_imports_the_torch_stack(graph):
    bad = sorted(
        f"{m} imports {t}" + ("" if eager else " (inside a function)")
        for m, targets in graph.items()
        if _under(m, "hulk_env")
        for t, eager in targets
        if _under(t, TORCH_STACK) and (eager or not _under(m, LAZY_TORCH_ALLOWED))
    )
    assert not bad, "\n".join(bad)


def test_the_agent_never_imports_the_cli(graph):
    bad = sorted(f"{m} imports {t}" for m, targets in graph.items() if _under(m, "agents") for t, _ in targets if _under(t, "hulk_cli"))
    assert not bad, "\n".join(bad)


def test_env_side_never_imports_searches_or_suites(graph):
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if _under(m, ENV_SIDE)
        for t, _ in targets
        if _under(t, ("hulk_env.baselines", "hulk_env.evaluation"))
    )
    assert not bad, "\n".join(bad)


def test_searches_suites_and_pictures_never_import_the_env(graph):
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if _under(m, ("hulk_env.baselines", "hulk_env.evaluation", "hulk_env.render"))
        for t, _ in targets
        if _under(t, "hulk_env.env")
    )
    assert not bad, "\n".join(bad)


def test_the_walk_sees_known_edges(graph):
    """The checker itself: it must see an edge that is known to exist, or every rule above is vacuous."""
    assert any(_under(t, "hulk_env.cost") for t, _ in graph["hulk_env.simulate"])
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_importing_the_env_loads_neither_torch_nor_any_baseline():
    code = (
        "import sys, gymnasium as gym, hulk_env\n"
        "env = gym.make('hulk/Placement-v0')\n"
        "env.reset(seed=0)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {TORCH_STACK!r} or m.startswith('hulk_env.baselines'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "", f"loaded by importing and resetting the env: {out.stdout.strip()}"
