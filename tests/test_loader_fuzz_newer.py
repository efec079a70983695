"""Fuzz the four newer readers: placements, failure traces, Hugging Face configs and the
results.csv a ``--resume`` picks up. Like :mod:`tests.test_loader_fuzz` (same mutations, same
hostile files): every case is one clean line naming the file, or a valid object -- and a valid
object is checked by an oracle written apart from the loader, so an invalid file that is
silently accepted fails here too.

The default run checks a deterministic sample (60 files a format); ``-m slow`` runs 10,000.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import random
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.test_loader_fuzz import (
    _dump,
    _encode,
    _hostile_file,
    _mutate_doc,
    _mutate_rows,
    _mutate_text,
    load_checked,
)

# ---- valid starting points -------------------------------------------------------------------------

MACHINES = ["ashburn-0", "ashburn-1", "dublin-0", "dublin-1", "frankfurt-0", "frankfurt-1"]
TRACE = {
    "name": "fuzz-trace",
    "checkpoint_every": 500,
    "events": [
        {"at_h": 1.5, "fail": "region:Frankfurt"},
        {"at_h": 2.25, "recover": "region:Frankfurt"},
        {"at_s": 100, "fail": "dublin-0"},
        {"at_s": 900.5, "recover": ["dublin-0"]},
        {"at_h": 3, "fail": "10%"},
    ],
}
HF = {
    "model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 4,
    "num_hidden_layers": 4, "intermediate_size": 1376, "vocab_size": 32000, "max_position_embeddings": 1024,
    "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}


@cache
def _instance():
    from hulk_env.generators import fixed_instance

    return fixed_instance("cloud-3region", "gpt3-1.3b")


def _placement_doc() -> dict:
    layers = _instance().workload.num_layers
    row = [MACHINES[i * len(MACHINES) // layers] for i in range(layers)]
    return {"placement": [row], "machines": sorted(set(row))}


# ---- one case per format ----------------------------------------------------------------------------


def _mapping_case(doc_fn: Callable[[], object], key: str, suffixes: tuple[str, ...]):
    def write(rng: random.Random, root: Path) -> Path:
        suffix = rng.choice(suffixes)
        path = root / f"case{suffix}"
        if rng.random() < 0.12:
            _hostile_file(rng, path, key)
            return path
        doc = doc_fn()
        if rng.random() < 0.1 and isinstance(doc, dict) and "placement" in doc:
            doc = doc["placement"]  # the bare [[...]] form
        text = _dump(rng, _mutate_doc(rng, doc) if rng.random() < 0.85 else doc, suffix)
        if rng.random() < 0.4:
            text = _mutate_text(rng, text)
        path.write_bytes(_encode(rng, text))
        return path

    return write


@cache
def _results_base(root: str) -> tuple[Path, object]:
    """One real ``hulk evaluate`` output directory (results.csv + evaluate.json) and its journal."""
    from hulk_env.evaluation import load_suite
    from hulk_env.evaluation.distributed import _new_manifest, evaluate_tasks

    instances = load_suite("tiny-v0")[:2]
    out = Path(root) / "base"
    evaluate_tasks(instances, ["naive", "compute-greedy"], out, progress=False)
    manifest = _new_manifest(instances, ["naive", "compute-greedy"], 0, {"naive": None, "compute-greedy": None})
    return out, manifest


def _results_case(base_root: Path) -> Callable[[random.Random, Path], Path]:
    def write(rng: random.Random, root: Path) -> Path:
        base, _ = _results_base(str(base_root))
        path = root / "results.csv"
        if rng.random() < 0.1:
            _hostile_file(rng, path, "instance")
            return path
        text = (base / "results.csv").read_text()
        if rng.random() < 0.85:
            rows = list(csv.reader(io.StringIO(text)))
            text = "".join(",".join(r) + "\n" for r in _mutate_rows(rng, rows, header=True))
        if rng.random() < 0.4:
            text = _mutate_text(rng, text)
        path.write_bytes(_encode(rng, text))
        return path

    return write


# ---- loaders (the entry points the commands use) and their oracles ------------------------------------


def _load_placement(path: Path):
    from hulk_env.replacement.problem import placement_from_file, read_placement_file

    return placement_from_file(read_placement_file(path), _instance())


def _placement_ok(path: Path, out) -> None:
    data = json.loads(path.read_bytes().decode("utf-8-sig"))
    rows = data["placement"] if isinstance(data, dict) else data
    names = {m.name.lower(): i for i, m in enumerate(_instance().cluster.machines)}
    expected = [[names[x.lower()] if isinstance(x, str) else x for x in row] for row in rows]
    assert all(isinstance(x, int) and not isinstance(x, bool) for row in expected for x in row)
    np.testing.assert_array_equal(out, np.array(expected))
    assert out.shape == (_instance().workload.data_parallel, _instance().workload.num_layers)
    assert out.min() >= 0 and out.max() < _instance().num_machines


def _load_trace(path: Path):
    from hulk_env.replacement.traces import load_trace

    return load_trace(path, _instance().cluster)


def _trace_ok(path: Path, trace) -> None:
    data = yaml.safe_load(path.read_bytes().decode("utf-8-sig"))
    assert isinstance(data, dict) and set(data) <= {"events", "checkpoint_every", "name"}
    every = data.get("checkpoint_every", 500)
    assert isinstance(every, int) and not isinstance(every, bool) and every >= 1 and trace.checkpoint_every == every
    events = data["events"]
    assert isinstance(events, list) and len(events) == len(trace.events)
    for item in events:
        assert isinstance(item, dict) and len(item) == 2
        (t_key,) = set(item) & {"at_h", "at_s"}
        assert len(set(item) & {"fail", "recover"}) == 1
        t = item[t_key]
        assert isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) and t >= 0
    assert all(math.isfinite(e.time_s) and e.machines for e in trace.events)


def _load_hf(path: Path):
    import tempfile

    from hulk_cli.imports import write_checked
    from hulk_env.importers.hf_config import import_hf_config
    from hulk_env.workload import load_workload_file

    data = import_hf_config(path)
    with tempfile.TemporaryDirectory() as tmp:  # the command's path: checked, then written
        out = write_checked(data, Path(tmp) / "model.yaml", str(path))
        return data, load_workload_file(out)


def _hf_ok(path: Path, result) -> None:
    config = json.loads(path.read_bytes().decode("utf-8-sig"))
    _, workload = result
    assert isinstance(config, dict)
    layers = config.get("num_hidden_layers", config.get("n_layer", config.get("num_layers")))
    if layers is not None:  # a layer count written as text, a float or a bool is not one
        assert isinstance(layers, int) and not isinstance(layers, bool) and layers >= 1
    assert workload.num_layers >= 1 and np.isfinite(workload.total_flops)


def _load_results(path: Path):
    from hulk_env.evaluation.distributed import _Journal, _saved_results

    base_root = path.parent.parent.parent / "results-base"
    _, manifest = _results_base(str(base_root))
    journal = _Journal(path.parent, copy.deepcopy(manifest), {})
    return _saved_results(journal, 0)


def _results_ok(path: Path, result) -> None:
    base_root = path.parent.parent.parent / "results-base"
    base, _ = _results_base(str(base_root))
    original = (base / "results.csv").read_text().splitlines()
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1] if not data.endswith(b"\n") else data
    lines = [line for line in whole.decode("utf-8").splitlines() if line]
    if lines:  # every kept row is byte for byte one the run wrote, once
        assert lines[0] == original[0]
        assert set(lines[1:]) <= set(original[1:]) and len(set(lines[1:])) == len(lines) - 1
    saved, _ = result
    assert len(saved) == max(0, len(lines) - 1)


FORMATS: dict[str, tuple[Callable, Callable, Callable]] = {
    "placement": (_mapping_case(_placement_doc, "placement", (".json",)), _load_placement, _placement_ok),
    "trace": (_mapping_case(lambda: TRACE, "events", (".yaml", ".json", ".yml")), _load_trace, _trace_ok),
    "hf-config": (_mapping_case(lambda: HF, "model_type", (".json",)), _load_hf, _hf_ok),
    "results-csv": (None, _load_results, _results_ok),
}


def check_one(fmt: str, seed: int, root: Path, base_root: Path) -> str:
    """Write case ``seed`` of ``fmt`` under ``root`` and load it: ``"valid"`` or ``"clean"``."""
    write, load, oracle = FORMATS[fmt]
    write = write or _results_case(base_root)
    rng = random.Random(f"{fmt}-{seed}")
    path = write(rng, root)
    loaded, out = load_checked(f"{fmt} #{seed}", path, load)
    if not loaded:
        return "clean"
    try:
        oracle(path, out)
    except Exception as err:  # noqa: BLE001
        raise AssertionError(f"{fmt} #{seed}: accepted an invalid file ({type(err).__name__}: {err}) ({path})") from err
    return "valid"


def _run(fmt: str, seeds: range, tmp_path: Path) -> Counter:
    outcomes: Counter = Counter()
    base_root = tmp_path / "results-base"
    base_root.mkdir(exist_ok=True)
    for seed in seeds:
        root = tmp_path / "cases" / f"{fmt}-{seed}"
        root.mkdir(parents=True)
        outcomes[check_one(fmt, seed, root, base_root)] += 1
    return outcomes


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_newer_loader_fuzz(fmt, tmp_path):
    outcomes = _run(fmt, range(60), tmp_path)
    print(f"\n{fmt}: {dict(outcomes)}")
    assert outcomes["clean"] > 0 and outcomes["valid"] > 0  # the corpus breaks things, and keeps some whole
    assert sum(outcomes.values()) == 60


@pytest.mark.slow
def test_newer_loader_fuzz_10000_files(tmp_path):
    total: Counter = Counter()
    per_format = 10_000 // len(FORMATS)
    for fmt in FORMATS:
        outcomes = _run(fmt, range(1_000, 1_000 + per_format), tmp_path)
        print(f"\n{fmt}: {dict(outcomes)}")
        total.update(outcomes)
    assert sum(total.values()) == 10_000
    print(f"\nnewer loader fuzz: {sum(total.values())} files, {total['clean']} clean errors, {total['valid']} valid "
          "(each checked by its oracle), 0 tracebacks, 0 hangs")
