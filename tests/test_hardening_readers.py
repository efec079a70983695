"""Issue 38, readers and outputs: each audit class is a file made for it, and ends in one clean
``error:`` line naming the input (exit 2), with no file left behind.

Placements (``hulk replace --placement``), failure traces (``--trace``), Hugging Face configs
(``hulk import hf``) and workload files now come through ``hulk_env/validation/reading.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_env.errors import HulkInputError
from hulk_env.generators import fixed_instance
from hulk_env.importers.hf_config import read_config
from hulk_env.replacement.problem import read_placement_file
from hulk_env.replacement.traces import load_trace
from hulk_env.validation import limits
from hulk_env.workload import load_workload_file
from tests.cli_checks import one_error_line

runner = CliRunner()
DEEP = 5_000  # far past MAX_NESTING_DEPTH and Python's recursion limit
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)
LLAMA = {
    "model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
    "num_hidden_layers": 4, "intermediate_size": 1376, "vocab_size": 32000, "max_position_embeddings": 1024,
}


def refused(fn, path, *args) -> str:
    """``fn(path, *args)`` raises one HulkInputError naming ``path``, on one line."""
    with pytest.raises(HulkInputError) as info:
        fn(path, *args)
    line = info.value.one_line()
    assert "\n" not in line and str(path) in line, line
    return line


def hostile(tmp_path: Path, name: str, kind: str) -> Path:
    """A file of one hostile kind (named ``name``)."""
    path = tmp_path / name
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" * 50)
    elif kind == "latin1":
        path.write_bytes('{"name": "caf\xe9"}'.encode("latin-1"))
    elif kind == "deep":
        path.write_text("[" * DEEP + "]" * DEEP)
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        raise ValueError(kind)
    return path


KINDS = ("dev-zero", "binary", "latin1", "deep", "directory", "fifo")


@pytest.fixture(scope="module")
def cluster():
    return fixed_instance("cloud-3region", "gpt3-1.3b").cluster


# ---- every reader through the validation layer ------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_placement_trace_and_hf_config_refuse_hostile_files(tmp_path, cluster, kind):
    refused(read_placement_file, hostile(tmp_path, "placement.json", kind))
    refused(load_trace, hostile(tmp_path, "trace.yaml", kind), cluster)
    refused(read_config, hostile(tmp_path, "config.json", kind))


def test_trace_alias_bomb_repeated_key_and_length_are_refused(tmp_path, cluster, monkeypatch):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB + "events: []\n")
    assert "alias" in refused(load_trace, bomb, cluster)
    twice = tmp_path / "twice.yaml"
    twice.write_text("events:\n  - {at_h: 1, fail: frankfurt-0, at_h: 2}\n")
    assert "given twice" in refused(load_trace, twice, cluster)
    monkeypatch.setattr(limits, "MAX_TRACE_EVENTS", 10)
    long = tmp_path / "long.yaml"
    long.write_text("events:\n" + "".join(f"  - {{at_h: {i}, fail: frankfurt-0}}\n" for i in range(50)))
    assert "more than 10 items in 'events'" in refused(load_trace, long, cluster)


def test_placement_repeated_key_and_size_are_refused(tmp_path):
    twice = tmp_path / "twice.json"
    twice.write_text('{"placement": [[0]], "placement": [[1]]}')
    assert "given twice" in refused(read_placement_file, twice)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps([[0] * 200] * 200))  # 40,000 slots > MAX_SLOTS
    assert "MAX_SLOTS" in refused(read_placement_file, huge)


def test_hf_config_repeated_key_is_refused(tmp_path):
    twice = tmp_path / "config.json"
    twice.write_text('{"model_type": "llama", "model_type": "gpt2"}')
    assert "given twice" in refused(read_config, twice)


def test_workload_layers_are_counted_before_they_are_built(tmp_path):
    """A 20,000-layer file stops at layer 1,025 of the event stream, not after building 20,000."""
    path = tmp_path / "big.yaml"
    layer = "  - {{name: l{i}, flops: 1.0e9, params: 1.0e6, activation_mb: 1, stash_mb: 1}}\n"
    path.write_text("name: big\nlayers:\n" + "".join(layer.format(i=i) for i in range(20_000)))
    line = refused(load_workload_file, path)
    assert "more than 1,024 items in 'layers'" in line and "refused before reading the rest" in line
    assert "row 1027" in line  # the 1,025th layer's line: nothing past it was read into objects


def test_layer_names_are_unique_ignoring_case(tmp_path):
    path = tmp_path / "case.yaml"
    layer = "  - {{name: {n}, flops: 1.0e9, params: 1.0e6, activation_mb: 1, stash_mb: 1}}\n"
    path.write_text("name: c\nlayers:\n" + layer.format(n="A") + layer.format(n="a"))
    assert "unique ignoring case" in refused(load_workload_file, path)


# ---- the commands: one line, nothing written ---------------------------------------------------------


def test_replace_with_a_dev_zero_placement_is_one_line(tmp_path):
    link = hostile(tmp_path, "placement.json", "dev-zero")
    line = one_error_line(runner.invoke(app, ["replace", "--placement", str(link), "--fail", "frankfurt-0"]))
    assert "not a regular file" in line and str(link) in line


def test_simulate_failures_with_a_deep_trace_is_one_line(tmp_path):
    trace = hostile(tmp_path, "trace.yaml", "deep")
    result = runner.invoke(app, ["simulate-failures", "--cluster", "cloud-3region", "--model", "gpt3-1.3b",
                                 "--trace", str(trace), "--iterations", "10", "--methods", "repair"])
    assert "nest" in one_error_line(result)  # ours, or libyaml's own depth limit


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"num_key_value_heads": 3}, "num_kv_heads 3 must divide heads 8"),
        ({"num_hidden_layers": 10**9}, "MAX_TRANSFORMER_BLOCKS"),
    ],
)
def test_import_hf_invalid_model_names_the_config_and_writes_nothing(tmp_path, change, says):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA, **change}))
    out = tmp_path / "out" / "model.yaml"
    line = one_error_line(runner.invoke(app, ["import", "hf", str(config), "--out", str(out)]))
    assert line.startswith(f"error: {config}:") and says in line and "model.yaml" not in line
    assert not out.exists() and not out.parent.exists()


def test_import_hf_binary_config_is_one_line(tmp_path):
    config = hostile(tmp_path, "config.json", "binary")
    out = tmp_path / "model.yaml"
    assert "NUL byte" in one_error_line(runner.invoke(app, ["import", "hf", str(config), "--out", str(out)]))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_import_hf_valid_config_still_writes(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA))
    out = tmp_path / "model.yaml"
    result = runner.invoke(app, ["import", "hf", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert load_workload_file(out).num_layers >= 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.yaml"]  # no temporary left
