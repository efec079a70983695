"""The YAML/JSON workload format: good files load, every bad file gets a clear one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hulk_env.errors import HulkInputError
from hulk_env.workload import catalog, load_workload, load_workload_file

BAD = Path(__file__).resolve().parent / "data" / "bad"

# file -> words the message must contain (besides the file's path)
BAD_MODELS = {
    "model_cycle.yaml": ["cycle a -> b -> c -> a"],
    "model_self_loop.json": ["cycle b -> b"],
    "model_disconnected.yaml": ["disconnected", "island"],
    "model_nan.yaml": ["layers[1]", "'flops'", "nan"],
    "model_nan.json": ["layers[0]", "'activation_mb'", "nan"],
    "model_negative.json": ["layers[1]", "'params'", ">= 0", "-5"],
    "model_unknown_key.yaml": ["layers[1]", "'flop'", "did you mean 'flops'"],
    "model_missing_field.yaml": ["layers[1]", "missing required key params"],
    "model_unknown_edge.yaml": ["edges[0]", "'blok2'", "did you mean 'block2'"],
    "model_transformer_typo.yaml": ["'hiden'", "did you mean 'hidden'"],
    "model_transformer_missing.yaml": ["missing required key(s) heads"],
    "model_encdec_no_decoder.yaml": ["'num_decoder_layers'", "encoder-decoder"],
    "model_bad_schedule.yaml": ["'schedule'", "pipedream", "gpipe"],
    "model_both_forms.yaml": ["exactly one of 'transformer'", "'layers'"],
    "model_syntax.yaml": ["row 3", "not valid YAML"],
    # grouped-query attention, recomputation and sequence length
    "model_kv_heads_not_divisor.yaml": ["'num_kv_heads'", "6 must divide heads 32"],
    "model_bad_recompute.yaml": ["'recompute'", "'partial'", "none, selective, full"],
    "model_selective_explicit.yaml": ["'recompute'", "needs a transformer"],
    "model_seq_len_explicit.yaml": ["'seq_len'", "explicit layers"],
}


def test_corpus_is_complete():
    on_disk = {p.name for p in BAD.glob("model_*")}
    assert on_disk == set(BAD_MODELS)
    assert len(on_disk) >= 6


@pytest.mark.parametrize("name", sorted(BAD_MODELS))
def test_bad_file_gets_a_clear_one_line_error(name):
    path = BAD / name
    with pytest.raises(HulkInputError) as err:
        load_workload(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message and "Traceback" not in message
    for words in BAD_MODELS[name]:
        assert words in message, f"{words!r} not in {message!r}"


def test_missing_file_and_unknown_type(tmp_path):
    with pytest.raises(HulkInputError, match="cannot read"):
        load_workload(str(tmp_path / "nope.yaml"))
    (tmp_path / "m.toml").write_text("x = 1")
    with pytest.raises(HulkInputError, match="unknown file type"):
        load_workload_file(tmp_path / "m.toml")


def _layer(name: str, **numbers) -> dict:
    row = dict(name=name, flops=1e9, params=1e3, activation_bytes=100.0, stash_bytes=10.0)
    if "tflops" in numbers:
        del row["flops"]
    row.update(numbers)
    return row


def test_explicit_layers_in_any_order_are_sorted(tmp_path):
    # A diamond given back to front, edges by name and by index.
    layers = [_layer("out"), _layer("right", tflops=2), _layer("left"), _layer("in", flops=0)]
    edges = [["in", "left"], ["in", 1], [2, "out"], ["right", "out"]]
    path = tmp_path / "diamond.json"
    path.write_text(json.dumps({"layers": layers, "edges": edges, "num_micro_batches": 4}))
    w = load_workload(str(path))
    assert w.layer_names == ("in", "right", "left", "out")
    assert w.name == "diamond" and w.num_micro_batches == 4 and not w.is_chain
    assert np.all(w.edges[:, 0] < w.edges[:, 1]) and len(w.edges) == 4
    assert w.flops[1] == 2e12  # tflops converted to FLOPs


def test_chain_by_default_units_and_overrides(tmp_path):
    path = tmp_path / "net.yaml"
    path.write_text(
        "name: my-net\nschedule: gpipe\nlayers:\n"
        "  - {name: a, flops: 1e9, params: 10, activation_mb: 8, stash_mb: 4}\n"
        "  - {name: b, tflops: 0.5, params: 20, activation_bytes: 1, stash_bytes: 2}\n"
        "  - {name: c, flops: 0, params: 30, activation_bytes: 1, stash_bytes: 2}\n"
    )
    w = load_workload_file(path, data_parallel=3)
    assert w.is_chain and w.name == "my-net" and w.schedule == "gpipe" and w.data_parallel == 3
    assert w.flops.tolist() == [1e9, 0.5e12, 0.0]  # YAML's "1e9" string is accepted
    assert w.activation_bytes[0] == 8e6 and w.stash_bytes[0] == 4e6
    coarse = load_workload_file(path, layers_per_block=2)
    assert coarse.num_layers == 2 and coarse.total_params == 60


def test_transformer_file_matches_the_catalog(tmp_path):
    cfg = catalog.get_model_config("llama-7b")
    keys = ("num_layers", "hidden", "heads", "vocab", "seq_len", "ffn", "gated_ffn",
            "tied_embeddings", "biases", "norm")
    path = tmp_path / "llama.yaml"
    body = "\n".join(f"  {k}: {json.dumps(getattr(cfg, k))}" for k in keys)
    path.write_text(f"micro_batch_size: 2\ntransformer:\n{body}\n")
    w = load_workload_file(path)
    ref = catalog.get_model("llama-7b", micro_batch_size=2)
    np.testing.assert_allclose(w.flops, ref.flops)
    np.testing.assert_allclose(w.params, ref.params)
    np.testing.assert_allclose(w.stash_bytes, ref.stash_bytes)
    # An override beats the file, and rebuilds for the new micro-batch size.
    assert load_workload_file(path, micro_batch_size=1).total_flops == pytest.approx(w.total_flops / 2)


def test_setting_given_twice_is_an_error(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(
        "micro_batch_size: 2\ntransformer: {num_layers: 2, hidden: 64, heads: 4, vocab: 100,"
        " seq_len: 16, micro_batch_size: 4}\n"
    )
    with pytest.raises(HulkInputError, match="given both"):
        load_workload_file(path)


def test_both_unit_spellings_is_an_error(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text("layers:\n  - {name: a, flops: 1, tflops: 1, params: 1, activation_bytes: 1, stash_bytes: 1}\n")
    with pytest.raises(HulkInputError, match=r"layers\[0\].*give only one of flops or tflops"):
        load_workload_file(path)
