"""Grouped-query attention, activation recomputation and sequence length in the builder; their
effect on the cost model, the simulator and the memory diagnosis."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.baselines.naive import naive
from hulk_env.cluster import load_cluster
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import diagnose_memory, passes_bounds
from hulk_env.generators import fixed_instance
from hulk_env.instance import Instance
from hulk_env.simulate import simulate
from hulk_env.workload import (
    TransformerConfig,
    apply_overrides,
    build_transformer,
    get_model,
    transformer_block,
    with_full_recompute,
)
from tests.strategies import make_chain

# Korthikanti et al. 2022, Table 3: GPT shapes (a heads, h hidden) at s = 2048, b = 1.
SHAPES = {"22B": (64, 6144), "175B": (96, 12288), "530B": (128, 20480)}


def _gpt(a: int, h: int, **kw) -> TransformerConfig:
    return TransformerConfig(name="gpt", num_layers=4, hidden=h, heads=a, vocab=51200, seq_len=2048, **kw)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_stash_matches_the_published_formula(shape):
    """Per layer, p = 2: none ``s b h (34 + 5 a s / h)`` (Eq. 2), selective ``34 s b h`` (Eq. 6),
    full ``2 s b h`` (only the layer input)."""
    a, h = SHAPES[shape]
    s, b = 2048, 1
    sbh = s * b * h
    published = {"none": sbh * (34 + 5 * a * s / h), "selective": 34 * sbh, "full": 2 * sbh}
    for mode, expected in published.items():
        block = transformer_block(_gpt(a, h, recompute=mode))
        assert block.stash_bytes == pytest.approx(expected, rel=1e-12), mode


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_recomputation_costs_extra_forward_flops(shape):
    a, h = SHAPES[shape]
    s = 2048
    none, selective, full = (transformer_block(_gpt(a, h, recompute=m)) for m in ("none", "selective", "full"))
    assert none.flops == selective.flops == full.flops == pytest.approx(24 * s * h * h + 4 * s * s * h)
    assert none.recompute_flops == 0
    assert selective.recompute_flops == pytest.approx(4 * s * s * h)  # Q K^T and x V again
    assert full.recompute_flops == full.flops  # the whole forward again
    # training FLOPs per layer: +0.9% (175B) for selective, +1/3 for full
    assert (3 * none.flops + selective.recompute_flops) / (3 * none.flops) - 1 < 0.02
    assert (3 * none.flops + full.recompute_flops) / (3 * none.flops) == pytest.approx(4 / 3)


def test_falcon_40b_shape_with_and_without_grouped_kv_heads():
    falcon = get_model("falcon-40b")
    assert falcon.total_params == pytest.approx(41.8e9, rel=0.005)
    mha = build_transformer(replace(falcon.config, num_kv_heads=None))
    assert mha.total_params == pytest.approx(49.4e9, rel=0.005)
    # K and V projections shrink 16x; attention scores still run over all 128 query heads
    h, d_kv, s = 8192, 8 * 64, 2048
    gqa_block, mha_block = transformer_block(replace(falcon.config, layers_per_block=1)), transformer_block(mha.config)
    assert mha_block.params - gqa_block.params == 2 * h * (h - d_kv)
    assert mha_block.flops - gqa_block.flops == 2 * s * 2 * h * (h - d_kv)
    assert mha_block.stash_bytes - gqa_block.stash_bytes == 2 * s * 2 * (h - d_kv)


def test_multi_query_attention_is_one_kv_head():
    mqa = transformer_block(_gpt(16, 2048, num_kv_heads=1))
    h, hd = 2048, 128
    # Q, out h x h; K, V h x 128; biases d + 2 d_kv + h; FFN 8 h^2 + 5 h; two LayerNorms 4 h
    assert mqa.params == 2 * h * h + 2 * h * hd + (2 * h + 2 * hd) + 8 * h * h + 5 * h + 4 * h


def test_kv_heads_must_divide_heads():
    with pytest.raises(HulkInputError, match="num_kv_heads 6 must divide heads 32"):
        _gpt(32, 4096, num_kv_heads=6)
    with pytest.raises(HulkInputError, match="unknown recompute 'some'"):
        _gpt(32, 4096, recompute="some")


def test_encoder_decoder_full_recompute_keeps_both_inputs():
    t5 = replace(get_model("t5-11b").config, recompute="full")
    cross = transformer_block(t5, "cross")
    b, h, p = t5.micro_batch_size, t5.hidden, t5.bytes_per_activation
    assert cross.stash_bytes == p * b * (t5.decoder_seq_len + t5.seq_len) * h
    w = build_transformer(t5)
    assert w.recompute == "full" and w.recompute_flops.sum() > 0
    assert w.recompute_flops[0] == 0 and w.recompute_flops[-1] == 0  # embedding, head


def test_seq_len_is_a_training_setting():
    short, long = get_model("llama-3-8b", seq_len=2048), get_model("llama-3-8b", seq_len=4096)
    assert short.total_params == long.total_params
    assert long.stash_bytes[1] > 2 * short.stash_bytes[1]  # the a s^2 terms grow 4x
    with pytest.raises(HulkInputError, match="seq_len rebuilds a transformer"):
        apply_overrides(make_chain([1e9, 1e9], [1e6, 1e6]), seq_len=128)


def test_apply_overrides_rebuilds_a_transformer_and_relabels_explicit_layers():
    base = get_model("gpt3-350m")
    assert apply_overrides(base, micro_batch_size=2).total_flops == pytest.approx(2 * base.total_flops)
    assert apply_overrides(base, recompute="selective").stash_bytes.sum() < base.stash_bytes.sum()
    chain = make_chain([1e9, 2e9, 3e9], [1e6, 2e6, 3e6], stash=[5e6, 6e6, 7e6])
    full = apply_overrides(chain, recompute="full", num_micro_batches=3)
    assert full.num_micro_batches == 3 and full.recompute == "full"
    # each layer keeps its input (its predecessor's output); the first keeps its own stash
    np.testing.assert_allclose(full.stash_bytes, [5e6, 1e6, 2e6])
    np.testing.assert_allclose(full.recompute_flops, [0, 2e9, 3e9])
    with pytest.raises(HulkInputError, match="already describes recompute 'full'"):
        with_full_recompute(full)
    with pytest.raises(HulkInputError, match="needs a transformer"):
        apply_overrides(chain, recompute="selective")


def test_recompute_flops_enter_cost_model_and_simulator_alike():
    cluster = load_cluster("cloud-3region")[0]
    plain = get_model("gpt3-1.3b", num_micro_batches=4)
    full = apply_overrides(plain, recompute="full")
    placement = np.repeat(np.arange(cluster.num_machines), -(-plain.num_layers // cluster.num_machines))
    placement = placement[: plain.num_layers][None]
    compute = [cost.machine_compute_s(cluster, w, placement[None])[0].sum() for w in (plain, full)]
    assert compute[1] == pytest.approx(compute[0] * 4 / 3, rel=0.02)  # blocks dominate
    times = [cost.evaluate(cluster, w, placement).iteration_time_s for w in (plain, full)]
    sims = [simulate(cluster, w, placement, record=False).iteration_time_s for w in (plain, full)]
    assert times[1] > times[0] and sims[1] > sims[0]
    assert sims[1] / sims[0] == pytest.approx(times[1] / times[0], rel=0.05)


# ---- memory diagnosis ----------------------------------------------------------------------


def _v100_cluster(tmp_path, count=64):
    path = tmp_path / "v100.yaml"
    path.write_text(f"machines:\n  - {{name: v100, region: aws:us-east-1, gpu: V100-16GB, count: {count}}}\n")
    return load_cluster(path)[0]


def test_mpt_30b_on_v100s_names_the_1f1b_stash(tmp_path):
    inst = fixed_instance(_v100_cluster(tmp_path), "mpt-30b", num_micro_batches=4)
    diagnosis = diagnose_memory(inst)
    assert diagnosis.binding == "stash"
    message = diagnosis.message
    # deep pipelines stash 4 micro-batches per layer, more than a 16 GB V100 holds ...
    assert "from S=4 stages on, layer 'block1' needs 9.9 GB state + 4 x 1.8 GB stash = 17.2 GB" in message
    assert "16.0 GB of the largest machine" in message
    # ... shallow ones have too few machines; what fits instead is checked, not guessed
    assert "with S<=3 stages the 3 largest machines hold 48.0 GB" in message
    assert diagnosis.fixes == ("--micro-batches 3", "--recompute selective")
    for fix in (dict(num_micro_batches=3), dict(recompute="selective")):
        assert passes_bounds(replace(inst, workload=apply_overrides(inst.workload, **fix)))
    assert "\n" not in message


def test_a_layer_larger_than_any_machine_and_state_beyond_the_cluster(tmp_path):
    diagnosis = diagnose_memory(fixed_instance(_v100_cluster(tmp_path), "gpt3-175b"))
    assert diagnosis.binding == "layer" and diagnosis.fixes == ()
    assert "layer 'block2..block3' needs at least 63.7 GB (58.0 GB model state" in diagnosis.message
    assert "the model state alone is 2,793.7 GB" in diagnosis.message
    assert "use more or larger machines" in diagnosis.message


def test_too_many_replicas_says_how_many_fit(tmp_path):
    diagnosis = diagnose_memory(fixed_instance(_v100_cluster(tmp_path), "gpt3-13b", data_parallel=8))
    assert diagnosis.binding == "total"
    assert "8 replica(s) need at least 2,031.5 GB" in diagnosis.message
    assert diagnosis.fixes == ("--data-parallel 1",)


def test_gpt3_175b_two_replicas_on_the_paper_cluster():
    """Without recomputation the bounds pass at 99% of the memory and naive cannot pack it;
    with full recomputation the naive placement fits and simulates."""
    plain = fixed_instance("hulk-paper", "gpt3-175b", data_parallel=2)
    assert not naive(plain).feasible
    diagnosis = diagnose_memory(plain)
    assert diagnosis.binding == "none" and "99%" in diagnosis.message
    assert "--recompute selective" in diagnosis.fixes
    full = fixed_instance("hulk-paper", "gpt3-175b", data_parallel=2, recompute="full")
    assert full.num_machines == 47
    result = naive(full)
    assert result.feasible
    breakdown = cost.evaluate(full.cluster, full.workload, result.placement)
    assert breakdown.memory_feasible and np.isfinite(breakdown.iteration_time_s)


def test_explicit_layer_instance_can_take_full_recompute_as_a_fix():
    chain = make_chain([1e12] * 4, [1e9] * 4, params=[1e6] * 4, stash=[4e9] * 4, num_micro_batches=4)
    from hulk_env.cluster.model import Cluster, Machine

    machines = tuple(Machine(f"m{i}", "r", "custom", 1, 1e14, 10e9) for i in range(4))
    lat = np.full((4, 4), 1e-3)
    inst = Instance(Cluster(machines, lat, np.full((4, 4), 1e9), name="four"), chain)
    diagnosis = diagnose_memory(inst)
    assert diagnosis.binding != "none" and "--recompute full" in diagnosis.fixes
