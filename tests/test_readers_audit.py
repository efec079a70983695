"""Every file the program reads comes through ``hulk_env/validation/reading.py``.

An AST walk over ``hulk_env/``, ``hulk_cli/`` and ``agents/`` finds every call that opens or
parses a file another way (``open``, ``Path.open/read_text/read_bytes``, ``os.open``,
``json.load``, ``yaml.*load``, ``np.load*``, ``torch.load``, ``pickle.load``...). Each one must
be in :data:`ALLOWED`, with the reason it is not a user file read: writers, the program's own
lock and append-only files, package data, in-memory bytes. A new reader that bypasses the
validation layer fails here, naming its file, line and function.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hulk_env", "hulk_cli", "agents")
READING = "hulk_env/validation/reading.py"  # the one module allowed to open user files

# Attribute calls that open or read a file (on a path or a module).
_METHODS = {"open", "read_text", "read_bytes", "fdopen", "load", "loads", "safe_load", "full_load",
            "unsafe_load", "load_all", "safe_load_all", "loadtxt", "genfromtxt", "fromfile", "read_csv",
            "memmap"}
# Module names whose ``loads`` parses text a file came from (json.loads of a subprocess's
# stdout is not a file read; yaml/pickle loads are checked always).
_LOADS_MODULES = {"yaml", "pickle"}

# (file, function) -> why it is not a user file read around the validation layer.
ALLOWED: dict[tuple[str, str], str] = {
    # Writers: the atomic temp file of every output.
    ("hulk_env/files.py", "atomic_write_bytes"): "writes the temporary file of an atomic write",
    ("hulk_env/render/report_page.py", "write_report_file"): "writes the temporary file of the report page",
    ("hulk_env/evaluation/results.py", "append_csv"): "appends rows to the results.csv it writes (O_APPEND)",
    ("agents/training/runs.py", "lock_run_dir"): "the run directory's lock file (flock), never parsed",
    ("agents/network/files.py", "safe_torch_load"): "torch.load of bytes already read by reading.read_bytes (BytesIO)",
    # Package data shipped with hulk (importlib.resources), not a user's file.
    ("hulk_env/money.py", "gpu_usd_per_hour"): "package data: the shipped GPU list prices (cluster/data/prices)",
    ("hulk_env/money.py", "egress_usd_per_gb"): "package data: the shipped egress prices (cluster/data/prices)",
    ("hulk_env/render/geo.py", "land_rings"): "the packaged Natural Earth coastlines (render/data)",
    # The run's own files read back on resume, written by this program in the same directory
    # the resume locks (`agents.training.runs.lock_run_dir`); torn records are dropped.
    ("agents/training/runs.py", "clean_for_resume"): "the run's own evaluations.csv, cut to the checkpoint",
    ("agents/training/runs.py", "_truncate_events"): "the run's own TensorBoard event records, CRC-checked one by one",
    ("agents/training/train.py", "evaluate"): "the run's own evaluations.csv, appended to",
    # `hulk import torch`'s child process: its stdout/stderr files, and the tail of its stderr.
    ("hulk_env/importers/child.py", "import_in_child"): "writes the child's stdout/stderr files",
    ("hulk_env/importers/child.py", "_last_line"): "the last 4 KiB of our own child's stderr, for the message",
    # A one-line YAML value from the command line (`--set key=value`), not a file.
    ("agents/training/config.py", "apply_overrides"): "parses a --set value string, not a file",
}


def _calls(tree: ast.AST):
    """(function name, call) for every call, with the innermost enclosing function's name."""
    stack: list[tuple[ast.AST, str]] = [(tree, "<module>")]
    while stack:
        node, func = stack.pop()
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Call):
                yield name, child
            stack.append((child, name))


def _is_reader(call: ast.Call) -> str | None:
    """What the call does, if it opens or parses a file; else None."""
    f = call.func
    if isinstance(f, ast.Name) and f.id == "open":
        return "open()"
    if not isinstance(f, ast.Attribute) or f.attr not in _METHODS:
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if f.attr == "loads" and owner not in _LOADS_MODULES:
        return None  # json.loads of text already in memory (checked by load_json where it is a file's)
    if f.attr == "load" and owner in ("json", "yaml", "np", "numpy", "torch", "pickle", "marshal"):
        return f"{owner}.load"
    if f.attr == "load":
        return None  # e.g. importlib's or a loader object's own load()
    return f"{owner or '...'}.{f.attr}()"


@cache
def find_readers() -> list[tuple[str, int, str, str]]:
    """Every file-reading call outside ``reading.py``: (file, line, function, what)."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == READING:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
            for func, call in _calls(tree):
                what = _is_reader(call)
                if what is not None:
                    found.append((rel, call.lineno, func, what))
    return found


def test_no_reader_bypasses_the_validation_layer():
    stray = [f"{rel}:{line} in {func}: {what}" for rel, line, func, what in find_readers() if (rel, func) not in ALLOWED]
    assert not stray, "files read around hulk_env/validation/reading.py:\n" + "\n".join(stray)


def test_every_allowance_is_still_used():
    """The allow-list does not outlive the code it excuses."""
    used = {(rel, func) for rel, _, func, _ in find_readers()}
    assert set(ALLOWED) <= used, sorted(set(ALLOWED) - used)


def test_the_audit_finds_a_bypass():
    """The walk sees each way of reading a file (it is not a test that cannot fail)."""
    source = (
        "def f(p):\n    return open(p).read()\n"
        "def g(p):\n    return p.read_text()\n"
        "def h(s):\n    import yaml\n    return yaml.safe_load(s)\n"
        "def i(p):\n    import numpy as np\n    return np.load(p)\n"
    )
    whats = [_is_reader(call) for _, call in _calls(ast.parse(source))]
    assert sorted(w for w in whats if w) == sorted(["open()", "p.read_text()", "yaml.safe_load()", "np.load"])
