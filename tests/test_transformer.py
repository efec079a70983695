"""The transformer builder against the closed forms in the literature."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hulk_env.errors import HulkInputError
from hulk_env.workload import TransformerConfig, build_transformer, transformer_block

GPT = TransformerConfig(
    name="gpt", num_layers=6, hidden=256, heads=8, vocab=1000, seq_len=128, max_positions=128,
    micro_batch_size=2,
)


def test_gpt_block_matches_megatron_closed_forms():
    b, s, h, a = 2, 128, 256, 8
    block = transformer_block(GPT)
    # Narayanan et al. 2021: 12 h^2 weights (+13 h biases and norms) per layer,
    # 24 b s h^2 + 4 b s^2 h forward FLOPs.
    assert block.params == 12 * h * h + 13 * h
    assert block.flops == 24 * b * s * h * h + 4 * b * s * s * h
    # Korthikanti et al. 2022, Sec. 4.1: s b h (34 + 5 a s / h) bytes, no recomputation.
    assert block.stash_bytes == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


def test_whole_gpt_model():
    w = build_transformer(GPT)
    b, s, h, v = 2, 128, 256, 1000
    assert w.layer_names == ("embed", *(f"block{i}" for i in range(1, 7)), "head")
    assert w.params[0] == v * h + s * h  # token + learned position embeddings
    assert w.params[-1] == 2 * h  # final LayerNorm; the tied head is counted on the embedding
    assert w.flops[0] == 0
    assert w.flops[-1] == 2 * b * s * h * v
    assert w.activation_bytes[1] == b * s * h * 2
    assert w.activation_bytes[-1] == 0
    untied = build_transformer(replace(GPT, tied_embeddings=False))
    assert untied.total_params - w.total_params == v * h


def test_flops_scale_with_micro_batch_and_six_n_rule():
    w1 = build_transformer(GPT)
    w4 = build_transformer(replace(GPT, micro_batch_size=8))
    assert w4.total_flops == pytest.approx(4 * w1.total_flops)
    assert w4.stash_bytes.sum() == pytest.approx(4 * w1.stash_bytes.sum())
    # Forward FLOPs ~ 2 x matmul params x tokens (Kaplan et al. 2020); the attention scores add
    # s / (6 h) ~ 2% here. The tied head's V h weights are used though counted on the embedding.
    big = build_transformer(replace(GPT, num_layers=4, hidden=2048, heads=16, seq_len=256))
    n_matmul = big.params[1:-1].sum() + 1000 * 2048
    tokens = 2 * 256
    assert big.total_flops == pytest.approx(2 * n_matmul * tokens, rel=0.03)
    assert big.total_flops > 2 * n_matmul * tokens


def test_gated_ffn_has_three_matrices():
    llama = replace(GPT, gated_ffn=True, ffn=688, biases=False, norm="rmsnorm", max_positions=0)
    block = transformer_block(llama)
    h, f = 256, 688
    assert block.params == 4 * h * h + 3 * h * f + 2 * h
    assert block.flops == 2 * 2 * 128 * (4 * h * h + 3 * h * f) + 4 * 2 * 128 * 128 * h


def test_t5_attention_inner_size_differs_from_hidden():
    t5 = TransformerConfig(
        name="t5", architecture="encoder-decoder", num_layers=2, num_decoder_layers=2,
        hidden=64, heads=8, head_dim=32, ffn=1024, vocab=100, seq_len=40, decoder_seq_len=10,
        biases=False, norm="rmsnorm",
    )
    h, d, f, se, sd = 64, 256, 1024, 40, 10
    enc, dec = transformer_block(t5, "self"), transformer_block(t5, "cross")
    assert enc.params == 4 * h * d + 2 * h * f + 2 * h
    assert dec.params == 8 * h * d + 2 * h * f + 3 * h
    cross_flops = 2 * (2 * sd + 2 * se) * h * d + 4 * sd * se * d
    self_flops = 8 * sd * h * d + 4 * sd * sd * d
    assert dec.flops == self_flops + cross_flops + 4 * sd * h * f
    w = build_transformer(t5)
    # The last encoder block carries the encoder's final norm.
    assert w.params[2] == enc.params + h
    assert w.flops[-1] == 2 * sd * h * 100


def test_bert_head_has_mlm_transform_and_pooler():
    bert = replace(GPT, architecture="encoder")
    w = build_transformer(bert)
    b, s, h, v = 2, 128, 256, 1000
    assert w.params[-1] == (h * h + h) + 2 * h + v + (h * h + h)
    assert w.flops[-1] == 2 * b * s * h * h + 2 * b * s * h * v + 2 * b * h * h


def test_layers_per_block_coarsens():
    w = build_transformer(replace(GPT, layers_per_block=3))
    assert w.num_layers == 3 and w.is_chain
    full = build_transformer(replace(GPT, layers_per_block=3), layers_per_block=1)
    assert full.num_layers == 8 and full.total_params == w.total_params


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (dict(heads=7), "heads"),
        (dict(architecture="rnn"), "architecture"),
        (dict(num_decoder_layers=2), "num_decoder_layers"),
        (dict(norm="batchnorm"), "norm"),
        (dict(hidden=0), "hidden"),
        (dict(bytes_per_activation=float("nan")), "bytes_per_activation"),
        (dict(layers_per_block=0), "layers_per_block"),
    ],
)
def test_bad_configs(changes, field):
    with pytest.raises(HulkInputError) as err:
        replace(GPT, **changes)
    assert err.value.field == field
