"""The input-validation layer: safe reading, schemas with limits, errors as one located line."""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

import pytest

from hulk_env.errors import HulkInputError
from hulk_env.validation import limits, reading, schemas, sizes

LINE = schemas.LINE_KEY


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(HulkInputError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ---- limits ------------------------------------------------------------------------------------


def test_every_limit_is_listed_once_and_cited_by_name():
    names = [limit.name for limit in limits.LIMITS]
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(limits, name) == dict((n.name, n.value) for n in limits.LIMITS)[name]
        assert name in limits.cite(name)
    with pytest.raises(KeyError):
        limits.cite("MAX_NOTHING")


def test_products_of_the_limits_stay_finite():
    """The worst iteration-time and memory products the cost model can form are finite."""
    worst_time_s = (
        3 * limits.MAX_LAYER_FLOPS * limits.MAX_LAYERS * limits.MAX_MICRO_BATCHES * limits.MAX_DATA_PARALLEL
        / limits.MIN_MACHINE_FLOPS
    )
    worst_transfer_s = (
        limits.MAX_LAYER_BYTES * limits.MAX_LAYER_EDGES * limits.MAX_MICRO_BATCHES * limits.MAX_DATA_PARALLEL
        / (limits.MIN_BANDWIDTH_GBPS * 1e9 / 8)
    )
    worst_memory = limits.MAX_BYTES_PER_VALUE * limits.MAX_LAYER_PARAMS * limits.MAX_SLOTS + (
        limits.MAX_LAYER_BYTES * limits.MAX_MICRO_BATCHES * limits.MAX_SLOTS
    )
    for value in (worst_time_s, worst_transfer_s, worst_memory, worst_time_s * worst_transfer_s):
        assert value < 1e150


# ---- reading -----------------------------------------------------------------------------------


def test_read_bytes_refuses_devices_directories_and_big_files(tmp_path):
    link = tmp_path / "endless.yaml"
    os.symlink("/dev/zero", link)
    assert "not a regular file" in _error(reading.read_bytes, link, 100)
    assert "directory" in _error(reading.read_bytes, tmp_path, 100)
    assert "no such file" in _error(reading.read_bytes, tmp_path / "nope.yaml", 100)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a" * 101)
    assert "larger than" in _error(reading.read_bytes, big, 100)
    assert reading.read_bytes(big, 101) == b"a" * 101


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_named_pipe_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in _error(reading.read_mapping, fifo)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("a: 1\n".encode("utf-16"), ["UTF-16", "byte offset 0"]),
        ("a: 1\n".encode("utf-32"), ["UTF-32"]),
        ("a: 1\n".encode("utf-16-le"), ["NUL byte at byte offset 1"]),
        (b"a: 1\nb: M\xfcnchen\n", ["byte 0xfc at byte offset 9", "row 2", "Latin-1"]),
        (b"\x89PNG\r\n\x1a\n\x00", ["NUL byte"]),
    ],
)
def test_text_that_is_not_utf8_names_the_byte(data, words):
    message = _error(reading.decode_text, data, "f.yaml")
    assert message.startswith("f.yaml: ")
    for word in words:
        assert word in message


def test_utf8_byte_order_mark_is_dropped():
    assert reading.decode_text(b"\xef\xbb\xbfa: 1\n", "f.yaml") == "a: 1\n"


def _bomb(levels: int = 9) -> str:
    head = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    return head + "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, levels + 1)
    )


def test_alias_bomb_is_refused_before_expanding():
    message = _error(reading.load_yaml, _bomb(), "bomb.yaml")
    assert "alias bomb" in message and "MAX_YAML_NODES" in message
    assert len(message) < 300  # the message does not print the expansion


def test_merge_key_bomb_is_refused():
    text = "m0: &m0 {k0: 1, k1: 2}\n" + "".join(
        f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], x{i}: {i}}}\n" for i in range(1, 30)
    )
    assert "alias bomb" in _error(reading.load_yaml, text, "merge.yaml")


def test_moderate_aliases_and_merges_still_work():
    text = "base: &b {gpu: A100-80GB, num_gpus: 8}\nmachines:\n  - {<<: *b, region: Paris}\n  - {<<: *b, region: Rome, num_gpus: 4}\n"
    data = reading.load_yaml(text, "ok.yaml")
    assert data["machines"][1] == {"gpu": "A100-80GB", "num_gpus": 4, "region": "Rome"}
    assert reading.scan_yaml(_bomb(4), "small.yaml") < limits.MAX_YAML_NODES


def test_recursive_alias_is_refused():
    assert "recursive" in _error(reading.load_yaml, "a: &a [1, *a]\n", "r.yaml")


@pytest.mark.parametrize(
    ("text", "suffix"),
    [
        ("a: " + "[" * 100 + "]" * 100, ".yaml"),
        ("".join("  " * i + "k:\n" for i in range(60)), ".yaml"),
        ('{"a": ' + "[" * 5000 + "]" * 5000 + "}", ".json"),
        ('{"a": ' + "{\"b\": " * 40 + "1" + "}" * 41, ".json"),
    ],
)
def test_deep_nesting_is_one_line_not_recursion_error(tmp_path, text, suffix):
    path = tmp_path / f"deep{suffix}"
    path.write_text(text)
    message = _error(reading.read_mapping, path)
    assert "nested more than" in message or "nesting depth" in message


def test_brackets_inside_json_strings_do_not_count_as_nesting():
    text = '{"name": "' + "[" * 100 + '", "x": [1, [2]]}'
    assert reading.load_json(text, "f.json")["x"] == [1, [2]]


@pytest.mark.parametrize(
    ("text", "loader", "words"),
    [
        ("a: 1\nb: 2\na: 3\n", reading.load_yaml, ["'a' given twice", "row 3", "first at row 1"]),
        ('{"a": 1, "a": 2}', reading.load_json, ["'a' given twice"]),
        ("a: " + "9" * 5000 + "\n", reading.load_yaml, ["4,300 digits"]),
        ('{"a": ' + "9" * 5000 + "}", reading.load_json, ["4,300 digits"]),
        ("a: [1, 2\n", reading.load_yaml, ["not valid YAML"]),
        ('{"a": }', reading.load_json, ["not valid JSON", "row 1"]),
        ("a: " + "x" * 20_000 + "\n", reading.load_yaml, ["20,000 characters"]),
    ],
)
def test_parse_problems_are_located(text, loader, words):
    message = _error(loader, text, "f")
    for word in words:
        assert word in message


def test_merge_keys_may_be_overridden_without_a_duplicate_error():
    data = reading.load_yaml("b: &b {x: 1, y: 2}\nm: {<<: *b, x: 3}\n", "f.yaml")
    assert data["m"] == {"x": 3, "y": 2}


def test_read_mapping_adds_lines_to_yaml_and_json(tmp_path):
    for suffix, text in ((".yaml", "a:\n  - {b: 1}\n  - {b: 2}\n"), (".json", '{"a": [\n{"b": 1},\n{"b": 2}]}')):
        path = tmp_path / f"f{suffix}"
        path.write_text(text)
        data = reading.read_mapping(path, line_key=LINE)
        assert [item[LINE] for item in data["a"]] == ([2, 3] if suffix == ".yaml" else [2, 3])
    (tmp_path / "list.yaml").write_text("- 1\n")
    assert "one mapping" in _error(reading.read_mapping, tmp_path / "list.yaml")
    assert "unknown file type" in _error(reading.read_mapping, tmp_path / "f.toml")


def test_check_depth_on_parsed_data():
    nested: list = []
    for _ in range(40):
        nested = [nested]
    assert "nested more than" in _error(reading.check_depth, nested, "x")
    reading.check_depth({"a": [[1]]}, "x")


def test_names_are_unique_ignoring_case():
    reading.check_unique_names(["sj", "ber"], "c.yaml", [2, 3])
    message = _error(reading.check_unique_names, ["sj", "ber", "SJ"], "c.yaml", [2, 3, 4])
    assert "row 4" in message and "'SJ'" in message and "'sj' (row 2)" in message and "case" in message
    exact = _error(reading.check_unique_names, ["sj", "sj"], "c.yaml", [2, 3])
    assert "duplicate machine name 'sj' (first at row 2)" in exact


def test_safe_repr_is_short_on_shared_structures():
    shared: list = ["x"] * 10
    for _ in range(30):
        shared = [shared] * 10  # 10^30 leaves if expanded
    assert len(reading.safe_repr(shared)) < 200
    assert len(reading.safe_repr(10**400)) < 100


def test_check_name():
    assert reading.check_name(" sj ", "f") == "sj"
    assert reading.check_name(7, "f") == "7"
    for bad in ("", "  ", "a\nb", "x" * 201, [1], None, True):
        _error(reading.check_name, bad, "f")


# ---- schemas: numbers --------------------------------------------------------------------------


class _Numbers(schemas.Strict):
    count: schemas.Number(1, 100, integer=True, limit_high="MAX_MACHINES") = 1
    rate: schemas.Number(0, 1e9, positive=True, unit="TFLOP/s") | None = None


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"count": True}, ["expected an integer, got True"]),
        ({"count": None}, ["expected an integer, got None"]),
        ({"count": "eight"}, ["expected an integer, got 'eight'"]),
        ({"count": 1.5}, ["expected an integer, got 1.5"]),
        ({"count": 0}, ["must be >= 1, got 0"]),
        ({"count": 10**400}, ["must be <= 100", "MAX_MACHINES"]),
        ({"count": "9" * 400}, ["must be <= 100"]),
        ({"rate": float("nan")}, ["must be a finite number"]),
        ({"rate": float("inf")}, ["must be a finite number"]),
        ({"rate": 0}, ["must be positive"]),
        ({"rate": 1e308}, ["must be <= 1e+09 TFLOP/s", "got 1e+308"]),
        ({"rate": [1]}, ["expected a number, got [1]"]),
        ({"cuont": 1}, ["unknown key", "did you mean 'count'?", "field 'cuont'"]),
        ([1, 2], ["expected a mapping"]),
    ],
)
def test_numbers_follow_one_rule(data, words):
    message = _error(schemas.validate, _Numbers, data, "n.yaml")
    assert message.startswith("n.yaml: ")
    for word in words:
        assert word in message, message


def test_numeric_strings_are_numbers():
    parsed = schemas.validate(_Numbers, {"count": "12", "rate": "1e9"}, "n.yaml")
    assert (parsed.count, parsed.rate) == (12, 1e9)
    assert schemas.validate(_Numbers, {"count": 3.0}, "n.yaml").count == 3


# ---- schemas: cluster files --------------------------------------------------------------------


def _cluster(**machine) -> dict:
    entry = {LINE: 3, "name": "a", "region": "Paris", "gpu": "A100-80GB", **machine}
    return {LINE: 1, "machines": [{LINE: 2, "region": "Rome", "gpu": "A10"}, entry]}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (_cluster(count=1_000_000), ["row 3", "field 'count'", "MAX_MACHINES"]),
        (_cluster(tflops=1e308, memory_gb=80), ["row 3", "field 'tflops'", "MAX_MACHINE_FLOPS"]),
        (_cluster(memory_gb=1e308), ["row 3", "field 'memory_gb'", "MAX_MACHINE_MEMORY_BYTES"]),
        (_cluster(num_gpus="9" * 400), ["row 3", "field 'num_gpus'"]),
        (_cluster(lat=91, lon=0), ["row 3", "field 'lat'", "<= 90"]),
        (_cluster(gpus=8), ["row 3", "field 'gpus'", "did you mean 'gpu'"]),
        ({LINE: 1, "machines": [{LINE: 2, "region": "Paris", "gpu": "A10", "count": 4000}] * 2},
         ["row 2", "counts add up", "MAX_MACHINES"]),
        ({LINE: 1, "machines": [{"region": "Paris"}],
          "links": [{LINE: 5, "a": "x", "b": "y", "latency_ms": 10, "bandwidth_gbps": 1e-300}]},
         ["row 5", "field 'bandwidth_gbps'", "MIN_BANDWIDTH_GBPS"]),
        ({LINE: 1, "machines": "many"}, ["field 'machines'", "expected a list"]),
        ({LINE: 1, "machines": ["oops"]}, ["machines[0]", "expected a mapping"]),
    ],
)
def test_cluster_file_schema(data, words):
    message = _error(schemas.validate, schemas.ClusterFile, data, "c.yaml", rows="line")
    for word in words:
        assert word in message, message


def test_cluster_file_schema_accepts_a_valid_file():
    parsed = schemas.validate(schemas.ClusterFile, _cluster(count=3), "c.yaml", rows="line")
    assert [m.count for m in parsed.machines] == [1, 3]


def test_cluster_schema_keys_are_the_loader_keys():
    from hulk_env.cluster import files

    assert set(schemas.ClusterFile.model_fields) == set(files._TOP_KEYS)
    assert set(schemas.MachineEntry.model_fields) == set(files._MACHINE_KEYS)
    assert set(schemas.LinkEntry.model_fields) == set(files._LINK_KEYS)


def test_machine_count_check_is_before_allocation():
    sizes.check_machine_count(limits.MAX_MACHINES, "x")
    assert "MAX_MACHINES" in _error(sizes.check_machine_count, limits.MAX_MACHINES + 1, "x")


# ---- schemas: workload files -------------------------------------------------------------------


def _workload_model():
    from hulk_env.workload.model import TRAINING_KEYS
    from hulk_env.workload.transformer import TransformerConfig

    settings = tuple((f.name, str(f.type)) for f in dataclasses.fields(TransformerConfig))
    return schemas.workload_file_model(settings, tuple(TRAINING_KEYS))


LAYER = {"name": "a", "flops": 1, "params": 1, "activation_bytes": 1, "stash_bytes": 1}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"layers": [LAYER, {**LAYER, "name": "b", "flops": 1e300}]}, ["row layers[1]", "field 'flops'", "MAX_LAYER_FLOPS"]),
        ({"layers": [{**LAYER, "params": -5}]}, ["row layers[0]", "field 'params'", ">= 0", "-5"]),
        ({"layers": [{**LAYER, "flops": 10**400}]}, ["field 'flops'", "<= 1e+24"]),
        ({"layers": [LAYER] * (limits.MAX_LAYERS + 1)}, ["field 'layers'", "MAX_LAYERS"]),
        ({"layers": []}, ["at least 1"]),
        ({"transformer": {"num_layers": 1_000_000}}, ["row transformer", "field 'num_layers'", "MAX_TRANSFORMER_BLOCKS"]),
        ({"transformer": {"hiden": 64}}, ["row transformer", "'hiden'", "did you mean 'hidden'"]),
        ({"transformer": {"hidden": 2**40}}, ["field 'hidden'", "MAX_TRANSFORMER_DIM"]),
        ({"transformer": {}, "num_micro_batches": 10**21}, ["field 'num_micro_batches'", "MAX_MICRO_BATCHES"]),
        ({"transformer": {}, "data_parallel": 10**21}, ["field 'data_parallel'", "MAX_DATA_PARALLEL"]),
        ({"layers": [LAYER], "edges": [["a"]]}, ["row edges[0]", "[from, to] pair"]),
        ({"layers": [LAYER], "edges": [["a", None]]}, ["row edges[0]", "layer name or index"]),
    ],
)
def test_workload_file_schema(data, words):
    message = _error(schemas.validate, _workload_model(), data, "w.yaml")
    for word in words:
        assert word in message, message


def test_workload_schema_covers_every_transformer_field():
    from hulk_env.workload.model import TRAINING_KEYS
    from hulk_env.workload.transformer import TransformerConfig

    model = _workload_model()
    block = model.model_fields["transformer"].annotation.__args__[0]
    assert set(block.model_fields) == {f.name for f in dataclasses.fields(TransformerConfig)}
    assert set(TRAINING_KEYS) <= set(model.model_fields)


def test_workload_schema_keys_are_the_loader_keys():
    from hulk_env.workload import files

    assert set(_workload_model().model_fields) == set(files._TOP_KEYS)
    assert set(schemas.LayerEntry.model_fields) == set(files._LAYER_KEYS)


def test_check_workload_limits_on_built_models():
    from hulk_env.cluster import get_cluster
    from hulk_env.instance import Instance
    from hulk_env.workload import catalog
    from hulk_env.workload.transformer import TransformerConfig

    gpt = catalog.get_model("gpt3-1.3b")
    sizes.check_workload_limits(gpt, "gpt3-1.3b")
    assert "MAX_MICRO_BATCHES" in _error(dataclasses.replace, gpt, num_micro_batches=10**21)
    assert "MAX_DATA_PARALLEL" in _error(catalog.get_model, "gpt3-1.3b", data_parallel=10**21)
    flops = gpt.flops.copy()
    flops[3] = 1e300
    assert "MAX_LAYER_FLOPS" in _error(dataclasses.replace, gpt, flops=flops)
    wide = catalog.get_model("gpt3-1.3b", data_parallel=1000)
    assert "MAX_SLOTS" in _error(Instance, get_cluster("cloud-3region"), wide, "wide")
    big = dict(name="x", num_layers=5000, hidden=64, heads=2, vocab=10, seq_len=8)
    assert "raise layers_per_block" in _error(TransformerConfig, **big)


# ---- schemas: policy.json and the run config ---------------------------------------------------

POLICY = {
    "format": "hulk-policy/1",
    "env_id": "hulk/Placement-v0",
    "policy": {"extractor": "gnn", "hidden_dim": 32, "machine_rounds": 1, "layer_rounds": 1, "heads": 2},
    "padding": {"max_machines": 47, "max_layers": 26, "max_edges": 25},
    "observation": {"lookahead": True},
    "weights": "weights.pt",
    "weights_sha256": "0" * 64,
    "num_timesteps": 100,
}


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("padding", "max_machines"), 10**9, ["padding.max_machines", "MAX_MACHINES"]),
        (("policy", "hidden_dim"), -8, ["policy.hidden_dim", ">= 1"]),
        (("policy", "hidden_dim"), 33, ["policy.hidden_dim", "multiple of heads"]),
        (("weights",), "../../etc/passwd", ["'weights'", "file name"]),
        (("weights_sha256",), "abc", ["'weights_sha256'", "SHA-256"]),
        (("format",), "hulk-policy/0", ["'format'", "hulk-policy/1"]),
        (("policy", "extractor"), "transformer", ["policy.extractor", "gnn, mlp"]),
    ],
)
def test_policy_file_schema(path, value, words):
    meta = copy.deepcopy(POLICY)
    node = meta
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    message = _error(schemas.validate, schemas.PolicyFile, meta, "p/policy.json", rows="key")
    for word in words:
        assert word in message, message


def test_policy_file_schema_accepts_what_save_policy_writes():
    parsed = schemas.validate(schemas.PolicyFile, POLICY, "policy.json", rows="key")
    assert parsed.padding.max_machines == 47 and parsed.observation.lookahead


def _run_config() -> dict:
    from agents.training.config import RunConfig

    return RunConfig().to_dict()


def test_run_config_schema_matches_the_dataclasses():
    from agents.training.config import SECTIONS

    sections = schemas.RunConfigSchema.model_fields
    assert set(sections) == set(SECTIONS)
    for name, cls in SECTIONS.items():
        model = sections[name].annotation
        assert set(model.model_fields) == {f.name for f in dataclasses.fields(cls)}, name
    schemas.validate(schemas.RunConfigSchema, _run_config(), "default.yaml", rows="key")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("train.n_envs", 0, [">= 1"]),
        ("ppo.batch_size", 0, [">= 1"]),
        ("ppo.batch_size", 1, ["normalize_advantage"]),
        ("ppo.n_steps", 0, [">= 1"]),
        ("ppo.learning_rate", float("nan"), ["finite"]),
        ("policy.heads", 0, [">= 1"]),
        ("policy.hidden_dim", 0, [">= 1"]),
        ("eval.n_eval_episodes", -1, [">= 1"]),
        ("train.torch_threads", -4, [">= 1"]),
        ("train.seed", -1, [">= 0"]),
        ("train.seed", 2**64, ["MAX_SEED"]),
        ("eval.baselines", ["naive", "telepathy"], ["unknown baseline method 'telepathy'"]),
        ("train.name", "../escape", ["run name"]),
        ("train.device", "gpu0", ["cpu, cuda"]),
        ("env.generator", "fixd", ["did you mean 'fixed'"]),
        ("env.cities", ["Atlantis"], ["unknown city 'Atlantis'"]),
        ("env.suite", "nope-v0", ["unknown suite 'nope-v0'"]),
    ],
)
def test_run_config_rejects_bad_settings(key, value, words):
    data = _run_config()
    section, name = key.split(".")
    data[section][name] = value
    from hulk_env.baselines import method_names

    context = {"methods": [*method_names(), "hulk-gcn"], "cities": ["Paris"], "suites": ["tiny-v0"]}
    message = _error(schemas.validate, schemas.RunConfigSchema, data, "--set", rows="key", context=context)
    assert message.startswith(f"--set: field '{key}'"), message
    for word in words:
        assert word in message, message


def test_run_config_names_unchecked_without_context():
    data = _run_config()
    data["eval"]["baselines"] = ["whatever"]
    schemas.validate(schemas.RunConfigSchema, data, "x", rows="key")


def test_hostile_corpus_is_present():
    hostile = Path(__file__).resolve().parent / "data" / "bad" / "hostile"
    names = {p.name for p in hostile.iterdir()}
    assert {"cluster_alias_bomb.yaml", "model_flops_1e300.yaml", "policy_huge_max_machines"} <= names
