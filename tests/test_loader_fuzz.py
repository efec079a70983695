"""Fuzz every loader with malformed files: one clean line or a valid object, never a crash or hang.

A deterministic corpus generator (:func:`write_case`) starts from a valid file of each format --
cluster YAML and JSON, the paper's directory format, workload YAML/JSON (transformer and explicit
layers), saved-policy directories -- and breaks it: hostile values at random places (NaN, 1e308,
400-digit integers, huge counts, wrong types), removed, unknown or case-changed keys, repeated
entries, truncated or spliced text, other encodings and binary bytes, alias and merge bombs,
deep nesting, and files that are links to endless devices, directories or pipes. Each file goes
through the same entry point the CLI uses; the outcome must be a valid object or a
:class:`HulkInputError` whose message is one line naming the file. A per-file alarm turns a
hang into a failure.

The default suite runs a few hundred files (seconds); ``-m slow`` runs 10,000.
"""

from __future__ import annotations

import copy
import json
import os
import random
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from hulk_env.errors import HulkInputError

HANG_S = 30  # per file: far above any clean answer (milliseconds), far below a real hang
BAD = Path(__file__).resolve().parent / "data" / "bad" / "hostile"

# ---- valid starting points -------------------------------------------------------------------------

CLUSTER = {
    "name": "fuzz-lab",
    "mfu": 0.4,
    "machines": [
        {"name": "sj", "region": "California", "gpu": "A100-80GB", "num_gpus": 8, "count": 2},
        {"name": "ber", "region": "Berlin", "gpu": "V100-32GB", "num_gpus": 4},
        {"name": "lab", "region": "Lab-7", "lat": 48.1, "lon": 11.6, "tflops": 150, "memory_gb": 96},
    ],
    "links": [{"a": "sj", "b": "ber", "latency_ms": 70, "bandwidth_gbps": 0.8}, {"a": "California", "b": "lab", "latency_ms": 80}],
}
TRANSFORMER = {
    "name": "fuzz-gpt",
    "transformer": {"num_layers": 4, "hidden": 256, "heads": 4, "vocab": 1000, "seq_len": 128, "max_positions": 128},
    "micro_batch_size": 2,
    "num_micro_batches": 8,
    "data_parallel": 1,
}
LAYERS = {
    "name": "fuzz-net",
    "layers": [
        {"name": "embed", "flops": 0, "params": 1.0e8, "activation_mb": 8, "stash_mb": 4},
        {"name": "body", "tflops": 3.5, "params": 1.2e9, "activation_mb": 8, "stash_mb": 900},
        {"name": "head", "flops": 1.0e12, "params": 1.0e8, "activation_bytes": 0, "stash_bytes": 1.0e6},
    ],
    "edges": [["embed", "body"], ["body", "head"]],
    "schedule": "gpipe",
}
POLICY = {
    "format": "hulk-policy/1",
    "env_id": "hulk/Placement-v0",
    "policy": {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2},
    "padding": {"max_machines": 8, "max_layers": 12, "max_edges": 11},
    "observation": {"lookahead": False},
    "weights": "weights.pt",
    "weights_sha256": "0" * 64,
    "num_timesteps": 10,
}
NODES = [["node", "City", "Capability", "Memory"], ["0", "Beijing", "8.6", "152"], ["1", "Beijing", "8", "320"],
         ["2", "Berlin", "7", "384"], ["3", "Neimeng ", "7.5", "96"]]
EDGES = [["0", "1", "10"], ["0", "2", "250"], ["1", "2", "220"], ["2", "3", "180"], ["3", "3", "0"]]

HOSTILE_VALUES = [
    None, True, False, "", " ", "x" * 20_000, "nan", ".inf", "-.inf", float("nan"), float("inf"), -1, 0, 0.5,
    1e308, -1e308, 5e-324, 10**400, -(10**400), 2**63, 2**64 + 1, "1e9", "1_000", "9" * 400, [], {}, [[[[1]]]],
    {"a": {"b": {}}}, "Paris", "a100 80gb", "gpt3-13b", 10**6, 10**21, "\u0663", "caf\u00e9", "line\nbreak",
]
TEXT_NOISE = [":", "[", "]", "{", "}", "&a ", "*a", "*nope", "!!python/object/apply:os.system ['true']", "\t", "---\n",
              "- ", '"', "'", "#", "<<: ", "? ", "|\n", "%YAML 1.1\n", "\x85", "\ufeff", "\u2028"]
HOSTILE_CELLS = ["", "nan", "-1", "1e400", "9" * 400, "Atlantis", " Beijing ", "\u00e9", "0x10", "1,5", "inf", "-0"]


# ---- mutations ------------------------------------------------------------------------------------


def _paths(doc, prefix=()):
    """Every (path, value) of a nested dict/list document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _set(doc, path, value):
    if not path:
        return value
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


def _mutate_doc(rng: random.Random, doc):
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))
        path, value = rng.choice(paths)
        kind = rng.random()
        if kind < 0.45:
            doc = _set(doc, path, copy.deepcopy(rng.choice(HOSTILE_VALUES)))
        elif kind < 0.6 and isinstance(value, dict) and value:
            key = rng.choice(list(value))
            if rng.random() < 0.5:
                del value[key]
            else:
                value[key.upper() if rng.random() < 0.5 else key[:-1] or "x"] = value.pop(key)
        elif kind < 0.7 and isinstance(value, dict):
            value[rng.choice(["gpus", "flop", "hiden", "extra", "Name", "count ", "__line__"])] = 1
        elif kind < 0.8 and isinstance(value, list) and value:
            value.extend(copy.deepcopy(rng.choice(value)) for _ in range(rng.choice([1, 3, 40])))
        elif kind < 0.88 and isinstance(value, dict):
            value[rng.choice(["count", "num_layers", "num_micro_batches", "data_parallel", "max_machines", "hidden_dim"])] = rng.choice(
                [10**6, 10**21, -5, 0, 4097, 1025, 2**31])
        elif kind < 0.94:
            doc = _set(doc, path, rng.choice([[], {}, "text", 3, None]))
        else:
            doc = rng.choice([[doc], None, "just text", 42])
    return doc


def _dump(rng: random.Random, doc, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(doc, indent=rng.choice([None, 2]))
    try:
        return yaml.safe_dump(doc, default_flow_style=rng.choice([None, True, False]), allow_unicode=True)
    except yaml.YAMLError:
        return json.dumps(doc)


def _mutate_text(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        pos = rng.randint(0, len(text))
        if kind < 0.3:
            text = text[:pos] + rng.choice(TEXT_NOISE) + text[pos:]
        elif kind < 0.45:
            text = text[:pos]
        elif kind < 0.6:
            lines = text.splitlines(keepends=True)
            if lines:
                i = rng.randrange(len(lines))
                lines.insert(i, lines[i])  # a repeated line: duplicate keys, doubled rows
            text = "".join(lines)
        elif kind < 0.7:
            lines = text.splitlines(keepends=True)
            if lines:
                del lines[rng.randrange(len(lines))]
            text = "".join(lines)
        else:
            text = text[:pos] + text[pos + rng.randint(1, 20):]
    return text


def _encode(rng: random.Random, text: str) -> bytes:
    kind = rng.random()
    if kind < 0.8:
        return text.encode("utf-8")
    if kind < 0.85:
        return text.encode("utf-16")
    if kind < 0.9:
        return text.replace("a", "\u00e4", 1).encode("latin-1", "replace")
    if kind < 0.95:
        data = bytearray(text.encode())
        data.insert(rng.randint(0, len(data)), rng.choice([0, 0xFF, 0xC3, 0x80]))
        return bytes(data)
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))


def _bomb(rng: random.Random, key: str) -> str:
    width = rng.choice([5, 10])
    head = f"a0: &a0 [{', '.join(['lol'] * width)}]\n"
    body = "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n" for i in range(1, 12))
    if rng.random() < 0.5:
        return head + body + f"{key}: *a11\n"
    merge = "m0: &m0 {k0: 1, k1: 2}\n" + "".join(f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}\n" for i in range(1, 40))
    return merge + f"{key}: [*m39]\n"


def _hostile_file(rng: random.Random, path: Path, key: str) -> None:
    """Whole-file attacks: bombs, deep nesting, endless devices, directories, pipes, emptiness."""
    kind = rng.randrange(8)
    if kind == 0:
        path.write_text(_bomb(rng, key))
    elif kind == 1:
        depth = rng.choice([40, 900, 5000, 50_000])
        path.write_text(f'{{"{key}": ' + "[" * depth + "]" * depth + "}")
    elif kind == 2:
        path.write_text(f"{key}:\n" + "".join("  " * (i + 1) + "- \n" for i in range(rng.choice([40, 300]))))
    elif kind == 3:
        os.symlink(rng.choice(["/dev/zero", "/dev/urandom", "/dev/null"]), path)
    elif kind == 4:
        path.mkdir()
    elif kind == 5 and hasattr(os, "mkfifo"):
        os.mkfifo(path)
    elif kind == 6:
        path.write_text(rng.choice(["", "# only a comment\n", "---\n---\n", "null\n", "[]\n", "a: 1\n---\nb: 2\n"]))
    else:
        path.write_text(f"{key}: &x [1, *x]\n")


def _csv(rows) -> str:
    return "".join(",".join(r) + "\n" for r in rows)


def _mutate_rows(rng: random.Random, rows: list[list[str]], header: bool) -> list[list[str]]:
    rows = [list(r) for r in rows]
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        i = rng.randrange(1 if header else 0, len(rows)) if len(rows) > (1 if header else 0) else 0
        if kind < 0.5 and rows:
            row = rows[i]
            row[rng.randrange(len(row))] = rng.choice(HOSTILE_CELLS)
        elif kind < 0.65 and rows:
            rows[i] = rows[i] + ["extra"] if rng.random() < 0.5 else rows[i][:-1]
        elif kind < 0.8 and rows:
            rows.insert(i, list(rows[i]))
        elif kind < 0.9 and rows:
            del rows[i]
        else:
            start = len(rows)
            count = rng.choice([50, 5000])
            if header:
                rows += [[str(start + k), "Berlin", "7", "96"] for k in range(count)]
            else:
                rows += [[str(k % 4), str((k + 1) % 4), str(k)] for k in range(count)]
    return rows


# ---- one case per format ----------------------------------------------------------------------------


def _mapping_case(doc: dict, key: str) -> Callable[[random.Random, Path], Path]:
    def write(rng: random.Random, root: Path) -> Path:
        suffix = rng.choice([".yaml", ".json", ".yml"])
        path = root / f"case{suffix}"
        if rng.random() < 0.12:
            _hostile_file(rng, path, key)
            return path
        text = _dump(rng, _mutate_doc(rng, doc) if rng.random() < 0.85 else doc, suffix)
        if rng.random() < 0.4:
            text = _mutate_text(rng, text)
        path.write_bytes(_encode(rng, text))
        return path

    return write


def _paper_case(rng: random.Random, root: Path) -> Path:
    folder = root / "paper"
    folder.mkdir()
    nodes, edges = NODES, EDGES
    if rng.random() < 0.8:
        nodes = _mutate_rows(rng, NODES, header=True) if rng.random() < 0.6 else NODES
        edges = _mutate_rows(rng, EDGES, header=False) if rng.random() < 0.6 else EDGES
    for name, text in (("node_feature.csv", _csv(nodes)), ("edge.txt", "".join(" ".join(r) + "\n" for r in edges))):
        path = folder / name
        if rng.random() < 0.08:
            _hostile_file(rng, path, "x")
            continue
        if rng.random() < 0.2:
            text = _mutate_text(rng, text)
        path.write_bytes(_encode(rng, text))
    return folder


def _policy_case(rng: random.Random, root: Path) -> Path:
    folder = root / "policy"
    folder.mkdir()
    path = folder / "policy.json"
    if rng.random() < 0.1:
        _hostile_file(rng, path, "policy")
    else:
        text = json.dumps(_mutate_doc(rng, POLICY) if rng.random() < 0.85 else POLICY)
        if rng.random() < 0.3:
            text = _mutate_text(rng, text)
        path.write_bytes(_encode(rng, text))
    if rng.random() < 0.5:
        (folder / "weights.pt").write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 64))))
    return folder


def _load_cluster(path: Path):
    from hulk_env.cluster import load_cluster

    return load_cluster(path)


def _load_workload(path: Path):
    from hulk_env.workload import load_workload

    return load_workload(path)


def _load_policy(path: Path):
    from agents.network.saved_policy import load_policy

    return load_policy(path)


FORMATS: dict[str, tuple[Callable[[random.Random, Path], Path], Callable[[Path], object]]] = {
    "cluster-file": (_mapping_case(CLUSTER, "machines"), _load_cluster),
    "cluster-paper": (_paper_case, _load_cluster),
    "workload-transformer": (_mapping_case(TRANSFORMER, "transformer"), _load_workload),
    "workload-layers": (_mapping_case(LAYERS, "layers"), _load_workload),
    "policy": (_policy_case, _load_policy),
}


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def load_checked(label: str, path: Path, load: Callable[[Path], Any]) -> tuple[bool, Any]:
    """``load(path)`` under a hang alarm: ``(True, result)``, or ``(False, None)`` on a clean error.

    Raises:
        AssertionError: a traceback-worthy exception, a hang, or a message that is not one
            line naming the file.
    """
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        return True, load(path)
    except HulkInputError as err:
        message = err.one_line()
        assert "\n" not in message and "\r" not in message, f"{label}: {message!r}"
        assert path.name in message or str(path) in message, f"{label}: message names no file: {message}"
        assert len(message) < 2_000, f"{label}: {len(message)} characters"
        return False, None
    except _Hang:
        raise AssertionError(f"{label}: no answer in {HANG_S} s ({path})") from None
    except Exception as err:  # noqa: BLE001 - every other exception is the bug we look for
        raise AssertionError(f"{label}: {type(err).__name__}: {str(err)[:300]} ({path})") from err
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_one(fmt: str, seed: int, root: Path) -> str:
    """Write case ``seed`` of ``fmt`` under ``root`` and load it: ``"valid"`` or ``"clean"``."""
    write, load = FORMATS[fmt]
    path = write(random.Random(f"{fmt}-{seed}"), root)
    loaded, _ = load_checked(f"{fmt} #{seed}", path, load)
    return "valid" if loaded else "clean"


def _run(fmt: str, seeds: range, tmp_path: Path) -> Counter:
    outcomes: Counter = Counter()
    for seed in seeds:
        root = tmp_path / f"{fmt}-{seed}"
        root.mkdir()
        outcomes[check_one(fmt, seed, root)] += 1
    return outcomes


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_loader_fuzz(fmt, tmp_path):
    outcomes = _run(fmt, range(60), tmp_path)
    print(f"\n{fmt}: {dict(outcomes)}")
    assert outcomes["clean"] > 0  # the corpus breaks things
    assert sum(outcomes.values()) == 60


@pytest.mark.slow
def test_loader_fuzz_10000_files(tmp_path):
    total: Counter = Counter()
    per_format = 10_000 // len(FORMATS)
    for fmt in FORMATS:
        outcomes = _run(fmt, range(1_000, 1_000 + per_format), tmp_path)
        print(f"\n{fmt}: {dict(outcomes)}")
        total.update(outcomes)
    assert sum(total.values()) == 10_000
    print(f"\nloader fuzz: {sum(total.values())} files, {total['clean']} clean errors, {total['valid']} valid, 0 crashes")


# ---- the hostile corpus through the command line ----------------------------------------------------

# file or directory in tests/data/bad/hostile -> words the one error line must hold
HOSTILE = {
    "cluster_alias_bomb.yaml": ["alias bomb"],
    "cluster_binary.yaml": ["NUL byte"],
    "cluster_binary_nodes": ["node_feature.csv", "NUL byte"],
    "cluster_case_names.yaml": ["'SJ'", "only in case"],
    "cluster_count_million.yaml": ["count", "MAX_MACHINES"],
    "cluster_counts_add_up.yaml": ["add up", "MAX_MACHINES"],
    "cluster_deep.json": ["nested more than"],
    "cluster_deep.yaml": ["nest"],
    "cluster_deep_block.yaml": ["nested more than"],
    "cluster_duplicate_key.yaml": ["'machines' given twice"],
    "cluster_int_400_digits.yaml": ["num_gpus", "<="],
    "cluster_int_5000_digits.json": ["4,300 digits"],
    "cluster_latin1.yaml": ["not UTF-8", "0xfc"],
    "cluster_latin1_edge": ["edge.txt", "not UTF-8", "0xfc"],
    "cluster_memory_1e308.json": ["memory_gb", "MAX_MACHINE_MEMORY_BYTES"],
    "cluster_merge_bomb.yaml": ["alias bomb"],
    "cluster_paper_huge_latency": ["edge.txt", "latency_ms", "MAX_LATENCY_MS"],
    "cluster_paper_huge_numbers": ["node_feature.csv", "Memory", "MAX_MACHINE_MEMORY_BYTES"],
    "cluster_recursive_alias.yaml": ["recursive"],
    "cluster_tflops_1e308.yaml": ["tflops", "MAX_MACHINE_FLOPS"],
    "cluster_tiny_bandwidth.yaml": ["bandwidth_gbps", "MIN_BANDWIDTH_GBPS"],
    "cluster_utf16.yaml": ["UTF-16"],
    "model_alias_bomb.yaml": ["alias bomb"],
    "model_binary.json": ["not UTF-8"],
    "model_data_parallel_huge.json": ["data_parallel", "MAX_DATA_PARALLEL"],
    "model_deep.json": ["nested more than"],
    "model_duplicate_key.json": ["'flops' given twice"],
    "model_flops_1e300.yaml": ["layers[1]", "flops", "MAX_LAYER_FLOPS"],
    "model_hidden_huge.yaml": ["hidden", "MAX_TRANSFORMER_DIM"],
    "model_int_400_digits.json": ["layers[0]", "flops", "<="],
    "model_micro_batches_huge.yaml": ["num_micro_batches", "MAX_MICRO_BATCHES"],
    "model_num_layers_million.yaml": ["num_layers", "MAX_TRANSFORMER_BLOCKS"],
    "model_utf16.yaml": ["NUL byte"],
    "policy_binary": ["policy.json", "not UTF-8"],
    "policy_deep": ["policy.json", "nested more than"],
    "policy_heads_not_dividing": ["policy.json", "multiple of heads"],
    "policy_huge_max_machines": ["policy.json", "padding.max_machines", "MAX_MACHINES"],
    "policy_negative_hidden_dim": ["policy.json", "policy.hidden_dim", ">= 1"],
    "policy_unknown_key": ["policy.json", "hiden_dim", "did you mean 'hidden_dim'"],
    "policy_weights_outside": ["policy.json", "weights", "file name"],
}


def test_hostile_corpus_is_complete():
    assert {p.name for p in BAD.iterdir()} == set(HOSTILE)


def _command(name: str) -> list[str]:
    path = str(BAD / name)
    if name.startswith("cluster_"):
        return ["show", "cluster", path]
    if name.startswith("model_"):
        return ["show", "model", path]
    return ["place", "--cluster", "cloud-3region", "--model", "gpt3-350m", "--policy", path]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_file_is_one_clear_line(name):
    from hulk_cli.app import app
    from hulk_cli.output import EXIT_BAD_INPUT

    result = CliRunner().invoke(app, _command(name), catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert name in lines[0]
    for word in HOSTILE[name]:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("kind", ["cluster", "model"])
def test_link_to_an_endless_device_is_refused(tmp_path, kind, target):
    from hulk_cli.app import app

    path = tmp_path / f"{kind}.yaml"
    os.symlink(target, path)
    result = CliRunner().invoke(app, ["show", kind, str(path)], catch_exceptions=False)
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_many_rows_and_layers_are_refused_before_building(tmp_path):
    from hulk_env.cluster import load_cluster
    from hulk_env.validation import limits
    from hulk_env.workload import load_workload

    paper = tmp_path / "paper"
    paper.mkdir()
    rows = "".join(f"{i},Berlin,7,96\n" for i in range(limits.MAX_MACHINES + 1))
    (paper / "node_feature.csv").write_text("node,City,Capability,Memory\n" + rows)
    (paper / "edge.txt").write_text("0 1 5\n")
    with pytest.raises(HulkInputError, match="MAX_MACHINES"):
        load_cluster(paper)
    layers = tmp_path / "model.yaml"
    layer = "  - {{name: l{i}, flops: 1, params: 1, activation_bytes: 1, stash_bytes: 1}}\n"
    layers.write_text("layers:\n" + "".join(layer.format(i=i) for i in range(20_000)))
    with pytest.raises(HulkInputError, match="MAX_LAYERS"):
        load_workload(layers)
