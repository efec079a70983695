"""Workload validation, coarsening, and the shape of built graphs."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from hulk_env.errors import HulkInputError
from hulk_env.workload import TransformerConfig, Workload, build_transformer, load_workload


def chain(n: int = 4, **changes) -> dict:
    """Arguments of a valid n-layer chain workload, with ``changes`` applied."""
    args = dict(
        name="toy",
        layer_names=[f"l{i}" for i in range(n)],
        flops=np.arange(1.0, n + 1) * 1e9,
        params=np.full(n, 1e6),
        activation_bytes=np.arange(1.0, n + 1) * 1e3,
        stash_bytes=np.full(n, 5e3),
        edges=[(i, i + 1) for i in range(n - 1)],
    )
    args.update(changes)
    return args


def t5_small(**changes) -> TransformerConfig:
    args = dict(
        name="t5-small-ish",
        architecture="encoder-decoder",
        num_layers=3,
        num_decoder_layers=3,
        hidden=64,
        heads=4,
        vocab=100,
        seq_len=32,
        decoder_seq_len=8,
    )
    args.update(changes)
    return TransformerConfig(**args)


def test_valid_chain():
    w = Workload(**chain())
    assert w.num_layers == 4 and w.is_chain
    assert w.total_flops == pytest.approx(10e9)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (dict(edges=[(0, 1), (2, 1), (2, 3)]), "edges", "backwards"),
        (dict(edges=[(0, 1), (1, 2), (2, 0)]), "edges", "backwards"),  # a cycle needs a back edge
        (dict(edges=[(0, 1), (2, 3)]), "edges", "disconnected"),
        (dict(edges=[(0, 1), (1, 2), (2, 7)]), "edges", "outside"),
        (dict(flops=[1.0, np.nan, 1.0, 1.0]), "flops", "finite"),
        (dict(params=[1.0, 1.0, -1.0, 1.0]), "params", ">= 0"),
        (dict(stash_bytes=[1.0, np.inf, 1.0, 1.0]), "stash_bytes", "finite"),
        (dict(activation_bytes=[1.0, 2.0]), "activation_bytes", "shape"),
        (dict(layer_names=["a", "a", "b", "c"]), None, "duplicate"),
        (dict(num_micro_batches=0), "num_micro_batches", ">= 1"),
        (dict(schedule="zb"), "schedule", "gpipe"),
    ],
)
def test_invalid_workloads_are_rejected(changes, field, words):
    with pytest.raises(HulkInputError) as err:
        Workload(**chain(**changes))
    assert err.value.field == field
    assert words in str(err.value)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7])
def test_coarsen_preserves_totals(k):
    w = build_transformer(t5_small(num_layers=5, num_decoder_layers=4))
    c = w.coarsen(k)
    assert c.num_layers == -(-w.num_layers // k)
    for label in ("flops", "params", "stash_bytes"):
        assert getattr(c, label).sum() == pytest.approx(getattr(w, label).sum(), rel=1e-12)
    assert np.all(c.edges[:, 0] < c.edges[:, 1])
    assert nx.is_weakly_connected(_graph(c))


def test_coarsen_chain_keeps_block_output_size():
    w = Workload(**chain(n=5))
    c = w.coarsen(2)  # blocks {0,1} {2,3} {4}
    assert c.layer_names == ("l0..l1", "l2..l3", "l4")
    assert c.is_chain
    np.testing.assert_allclose(c.activation_bytes, [2e3, 4e3, 5e3])


def test_encoder_decoder_is_a_dag_not_a_chain():
    w = build_transformer(t5_small())
    g = _graph(w)
    assert not w.is_chain
    assert nx.is_directed_acyclic_graph(g)
    assert np.all(w.edges[:, 0] < w.edges[:, 1])
    names = w.layer_names
    assert names == ("embed", "enc1", "enc2", "enc3", "dec1", "dec2", "dec3", "head")
    idx = {n: i for i, n in enumerate(names)}
    # The final encoder block feeds every decoder block (cross-attention).
    for j in (1, 2, 3):
        assert g.has_edge(idx["enc3"], idx[f"dec{j}"])
    assert g.has_edge(idx["embed"], idx["dec1"]) and g.has_edge(idx["embed"], idx["enc1"])
    assert not g.has_edge(idx["enc1"], idx["dec1"])
    assert g.has_edge(idx["dec3"], idx["head"]) and g.out_degree(idx["head"]) == 0
    # Decoder outputs carry decoder tokens, encoder outputs encoder tokens (b s h p).
    assert w.activation_bytes[idx["enc1"]] == 1 * 32 * 64 * 2
    assert w.activation_bytes[idx["dec1"]] == 1 * 8 * 64 * 2


def test_decoder_only_and_encoder_only_are_chains():
    for arch in ("decoder", "encoder"):
        cfg = TransformerConfig(
            name=arch, architecture=arch, num_layers=4, hidden=32, heads=4, vocab=50, seq_len=16
        )
        w = build_transformer(cfg)
        assert w.is_chain and w.num_layers == 6
        assert w.layer_names[0] == "embed" and w.layer_names[-1] == "head"


def test_summary_is_json_ready():
    import json

    s = build_transformer(t5_small()).summary()
    assert json.loads(json.dumps(s))["layers"] == 8


def _graph(w: Workload) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(w.num_layers))
    g.add_edges_from(map(tuple, w.edges.tolist()))
    return g


def test_training_settings_change_a_copy_and_reject_unknown_keywords():
    w = Workload(**chain())
    copy = w.with_training(data_parallel=3, schedule="gpipe", num_micro_batches=None)
    assert (copy.data_parallel, copy.schedule, copy.num_micro_batches) == (3, "gpipe", 8)
    assert (w.data_parallel, w.schedule) == (1, "1f1b")
    with pytest.raises(TypeError, match="name"):
        w.with_training(name="renamed")  # not a training setting: no silent rename
    with pytest.raises(TypeError, match="data_paralel"):
        load_workload("gpt3-125m", data_paralel=2)
    assert load_workload("gpt3-125m", data_parallel=2, layers_per_block=None).data_parallel == 2
