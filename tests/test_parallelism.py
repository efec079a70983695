"""Plan settings: tensor parallel inside machines, ZeRO, DiLoCo; analytic vs simulator."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost, parallelism
from hulk_env.cluster import Cluster, Machine
from hulk_env.cluster.model import geo_cluster
from hulk_env.errors import HulkInputError
from hulk_env.hardware.gpus import DEFAULT_MFU, GPUS
from hulk_env.simulate import simulate
from hulk_env.workload import Workload, apply_overrides, load_workload

A100 = GPUS["A100-80GB"]


def _one_machine(num_gpus: int = 8, intra_bps: float | None = None) -> Cluster:
    mc = Machine("m0", "Frankfurt", A100.name, num_gpus, num_gpus * A100.effective_flops(), num_gpus * A100.memory_bytes,
                 intra_node_bandwidth_bps=intra_bps)
    return Cluster((mc,), np.zeros((1, 1)), np.full((1, 1), np.inf), name="one")


def _chain(micro_batch_size: int = 4, **settings) -> Workload:
    return Workload(
        name="two", layer_names=("a", "b"), flops=np.array([1e12, 1e12]), params=np.array([1e8, 1e8]),
        activation_bytes=np.array([1e8, 1e8]), stash_bytes=np.array([1e9, 1e9]), edges=np.array([[0, 1]]),
        micro_batch_size=micro_batch_size, num_micro_batches=4, **settings,
    )


def test_eight_gpu_stage_by_hand():
    """One 8 x A100 machine, two layers of 1 TFLOP forward and 100 MB output, b = 4, m = 4."""
    cluster = _one_machine()
    old = cost.evaluate(cluster, _chain(), np.array([[0, 0]]))
    flops_s = 8 * 312e12 * DEFAULT_MFU  # 998.4 TFLOP/s
    assert old.iteration_time_s == pytest.approx(4 * 2 * 3e12 / flops_s, rel=1e-12)
    # t = 8: one group (d = 1); per layer and pass two all-reduces of 100 MB = 200 MB over a
    # ring of 8 GPUs on NVLink 3 (300 GB/s one way): 2 * 7/8 * 200e6 / 300e9 s.
    tp_pass_s = 2 * 7 / 8 * 200e6 / 300e9
    per_mb = 2 * (3e12 / flops_s + 2 * tp_pass_s)
    tp8 = cost.evaluate(cluster, _chain(tensor_parallel=8), np.array([[0, 0]]))
    assert tp8.compute_s_per_mb[0] == pytest.approx(per_mb, rel=1e-12)
    assert tp8.iteration_time_s == pytest.approx(4 * per_mb, rel=1e-12)
    assert tp8.iteration_time_s > old.iteration_time_s * 1.5
    # t = 2: d = 4 groups of one sequence each; the ring of 2 carries a quarter of the bytes;
    # then the 4 groups all-reduce their 1/2-shards of 2 x 1e8 fp16 gradients once.
    tp2 = cost.evaluate(cluster, _chain(tensor_parallel=2), np.array([[0, 0]]))
    tp2_pass_s = 2 * 1 / 2 * 200e6 / 4 / 300e9
    assert tp2.compute_s_per_mb[0] == pytest.approx(2 * (3e12 / flops_s + 2 * tp2_pass_s), rel=1e-12)
    assert tp2.dp_sync_s == pytest.approx(2 * 3 / 4 * (2 * 2e8 / 2) / 300e9, rel=1e-12)
    # the simulator replays the same case on its own
    for w in (_chain(tensor_parallel=8), _chain(tensor_parallel=2)):
        sim = simulate(cluster, w, np.array([[0, 0]]), record=False)
        assert sim.iteration_time_s == pytest.approx(cost.evaluate(cluster, w, np.array([[0, 0]])).iteration_time_s, rel=1e-9)


@pytest.mark.parametrize("gpu", ["A100-80GB", "H100", "V100-32GB", "A10"])
@pytest.mark.parametrize("degree", [2, 4, 8])
def test_tensor_parallel_costs_more_than_free_splitting(gpu, degree):
    """Wherever tensor parallelism communicates, every layer's seconds on an 8-GPU machine are
    above the old estimate (FLOPs over the whole machine's FLOP/s)."""
    spec = GPUS[gpu]
    mc = Machine("m0", "Tokyo", spec.name, 8, 8 * spec.effective_flops(), 8 * spec.memory_bytes)
    cluster = Cluster((mc,), np.zeros((1, 1)), np.full((1, 1), np.inf))
    w = load_workload("gpt3-1.3b", micro_batch_size=8, tensor_parallel=degree)
    table = parallelism.layer_seconds(cluster, w)
    old = cost.train_flops(w) / cluster.flops[0]
    communicates = w.tp_allreduce_bytes > 0
    assert communicates.sum() >= w.num_layers - 1
    assert np.all(table.train_s[0][communicates] > old[communicates])
    # t = 1 with 8 sequences over 8 GPUs communicates nothing per micro-batch: the old estimate
    same = parallelism.layer_seconds(cluster, w.with_training(tensor_parallel=1)).train_s[0]
    assert np.allclose(same, old, rtol=1e-12)


def test_memory_follows_degree_and_zero():
    """Zero 0 replicates the state over a machine's groups; t = g shards it; ZeRO stages shard it
    by Rajbhandari et al. 2020's formulas (Figure 1: 7.5B parameters, N_d = 64, K = 12)."""
    psi = np.array([7.5e9])
    paper = [120e9, 31.4e9, 16.6e9, 1.88e9]
    w = _chain()
    for stage, expected in enumerate(paper):
        got = parallelism.rank_state_bytes(w.with_training(zero=stage), psi, 64.0)[0]
        assert got == pytest.approx(expected, rel=0.01)
    cluster = _one_machine()
    place = np.array([[0, 0]])
    mem = {t: cost.evaluate(cluster, _chain(tensor_parallel=t), place).memory_bytes[0] for t in (1, 2, 8)}
    state = 16 * 2e8
    stash = 2 * 1e9 * 1  # 1F1B, one stage: one micro-batch stashed
    assert mem[8] == pytest.approx(state + stash)
    assert mem[2] == pytest.approx(4 * state + stash)
    # 8 groups for 4 sequences: the binding GPU holds one sequence, 1/4 of the stash, so the
    # machine counts as 8 such GPUs (memory is checked per GPU, scaled to the machine)
    assert mem[1] == pytest.approx(8 * state + 2 * stash)
    zero3 = cost.evaluate(cluster, _chain(tensor_parallel=1, zero=3), place).memory_bytes[0]
    assert zero3 == pytest.approx(state + 2 * stash)


def test_zero_does_not_shard_across_diloco_workers():
    """ZeRO shards over ``D d_m`` ranks with every-step sync, but over ``d_m`` only under DiLoCo:
    its workers exchange nothing between outer steps, so each keeps its own full state."""
    w = _chain(tensor_parallel=1, zero=3, data_parallel=2)
    cluster = _one_machine()  # one 8-GPU machine: d_m = 8 groups of t = 1
    every = parallelism.slot_state_bytes(cluster, w)
    dil = parallelism.slot_state_bytes(cluster, w.with_training(sync="diloco", inner_steps=100))
    # ZeRO-3: per rank 16 Psi / N, times the machine's 8 ranks: N = 16 vs N = 8
    assert every[0, 0] == pytest.approx(8 * 16 * 1e8 / 16)
    assert dil[0, 0] == pytest.approx(8 * 16 * 1e8 / 8)
    assert parallelism.state_lower_bytes(w.with_training(sync="diloco", inner_steps=100))[0] == pytest.approx(16 * 1e8)
    assert parallelism.state_lower_bytes(w)[0] == pytest.approx(16 * 1e8 / 2)


def _geo(cities: list[str]) -> Cluster:
    return geo_cluster(cities, 2, [("A100-80GB", 8, 1.0)], seed=3, name="geo")


def _spread(cluster: Cluster, d: int, n_layers: int, per_replica: int) -> np.ndarray:
    cuts = np.array_split(np.arange(n_layers), per_replica)
    rows = []
    for r in range(d):
        row = np.empty(n_layers, dtype=np.int64)
        for s, layers in enumerate(cuts):
            row[layers] = (r * per_replica + s) % cluster.num_machines
        rows.append(row)
    return np.array(rows)


def test_zero3_rings_and_simulator():
    cluster = _geo(["Ashburn", "Frankfurt"])
    w = load_workload("gpt3-350m", data_parallel=2, num_micro_batches=4)
    place = _spread(cluster, 2, w.num_layers, 2)
    base = cost.evaluate(cluster, w, place).dp_sync_s
    z3 = w.with_training(zero=3)
    assert cost.evaluate(cluster, z3, place).dp_sync_s == pytest.approx(base * (2 * 4 + 1) / 2, rel=1e-9)
    for stage in (1, 2):  # reduce-scatter + all-gather: the all-reduce's volume
        assert cost.evaluate(cluster, w.with_training(zero=stage), place).dp_sync_s == pytest.approx(base, rel=1e-12)
    sim = simulate(cluster, z3, place, record=False).iteration_time_s
    assert cost.evaluate(cluster, z3, place).iteration_time_s == pytest.approx(sim, rel=0.05)


def test_diloco_h100_8bit_cross_continent():
    """H = 100, 8-bit pseudo-gradients across three continents: the data-parallel share of the
    time per inner step is at least 100x below every-step sync's (fp16 all-reduce every step)."""
    cluster = _geo(["Ashburn", "Frankfurt", "Singapore"])
    w = load_workload("gpt3-1.3b", data_parallel=3, num_micro_batches=8)
    place = _spread(cluster, 3, w.num_layers, 2)
    every = cost.evaluate(cluster, w, place)
    dil = cost.evaluate(cluster, w.with_training(sync="diloco", inner_steps=100, outer_bits=8), place)
    # the data-parallel seconds per step: 2 bytes -> 1 byte per parameter, once every 100 steps
    assert every.dp_sync_s / dil.dp_sync_s >= 100
    # its share of the step falls from almost all of it to a minority
    assert every.dp_sync_s / every.iteration_time_s > 0.99 > 0.7 > dil.dp_sync_s / dil.iteration_time_s
    # the amortised exchange by formula: the rings at 1 byte per parameter, divided by H
    outer = cost.evaluate(cluster, w.with_training(grad_bytes_per_param=1.0), place).dp_sync_s
    assert dil.dp_sync_s == pytest.approx(outer / 100, rel=1e-9)
    assert dil.pipeline_s == pytest.approx(every.pipeline_s, rel=1e-12)
    sim = simulate(cluster, w.with_training(sync="diloco", inner_steps=100, outer_bits=8), place, record=False)
    assert sim.iteration_time_s == pytest.approx(dil.iteration_time_s, rel=0.05)
    # streaming overlaps the exchange with the next H inner steps: only the excess counts
    stream = w.with_training(sync="diloco", inner_steps=100, outer_bits=8, streaming=True)
    excess = max(outer - 100 * every.pipeline_s, 0.0) / 100
    assert cost.evaluate(cluster, stream, place).dp_sync_s == pytest.approx(excess, rel=1e-9)
    assert cost.evaluate(cluster, stream.with_training(inner_steps=500), place).dp_sync_s == 0.0


@pytest.mark.parametrize(
    "settings",
    [dict(tensor_parallel=8), dict(tensor_parallel=2, zero=1), dict(tensor_parallel=4, zero=3),
     dict(zero=3), dict(sync="diloco", outer_bits=4, inner_steps=50)],
)
def test_analytic_matches_simulator(settings):
    cluster = _geo(["Ashburn", "Frankfurt", "Tokyo"])
    w = load_workload("gpt3-350m", data_parallel=2, num_micro_batches=4, micro_batch_size=4, **settings)
    errors = []
    for depth in (1, 2, 3):
        place = _spread(cluster, 2, w.num_layers, depth)
        a = cost.evaluate(cluster, w, place).iteration_time_s
        s = simulate(cluster, w, place, record=False).iteration_time_s
        errors.append(abs(a - s) / s)
        # every entry point gives the same figure
        assert cost.evaluate_one(cluster, w, place).iteration_time_s == pytest.approx(a, rel=1e-12)
        assert cost.iteration_times(cluster, w, place[None]).iteration_time_s[0] == pytest.approx(a, rel=1e-12)
    assert np.median(errors) <= 0.05 and max(errors) <= 0.15


def test_settings_validated_and_carried(tmp_path):
    with pytest.raises(HulkInputError, match="zero"):
        load_workload("gpt3-350m", zero=4)
    with pytest.raises(HulkInputError, match="outer_bits"):
        load_workload("gpt3-350m", outer_bits=12)
    with pytest.raises(HulkInputError, match="sync"):
        load_workload("gpt3-350m", sync="sometimes")
    w = apply_overrides(load_workload("gpt3-350m", tensor_parallel=4, sync="diloco"), layers_per_block=4)
    assert (w.tensor_parallel, w.sync) == (4, "diloco")
    assert w.tp_allreduce_bytes.sum() == pytest.approx(load_workload("gpt3-350m").tp_allreduce_bytes.sum())
    path = tmp_path / "m.yaml"
    path.write_text("transformer: {num_layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 16}\nzero: 2\ntensor_parallel: 2\n")
    assert (load_workload(path).zero, load_workload(path).tensor_parallel) == (2, 2)


def test_cluster_file_intra_node_override(tmp_path):
    from hulk_env.cluster.files import load_cluster_file

    path = tmp_path / "c.yaml"
    path.write_text(
        "machines:\n  - {name: a, region: Tokyo, gpu: A100-80GB, num_gpus: 8, intra_node_gb_per_s: 100}\n"
        "  - {name: b, region: Tokyo, gpu: H100, num_gpus: 8}\n"
    )
    cluster = load_cluster_file(path)
    assert cluster.intra_node_bandwidth_bps.tolist() == [100e9, 450e9]
    path.write_text("machines:\n  - {name: a, region: Tokyo, gpu: A100-80GB, intra_node_gb_per_s: -3}\n")
    with pytest.raises(HulkInputError, match="intra_node_gb_per_s"):
        load_cluster_file(path)


def test_diloco_share_100x_below_on_inter_datacenter_links(tmp_path):
    """Three continents joined by 10 Gbit/s links, one 8 x H100 replica each (tensor parallel
    8, 128 micro-batches of 8 sequences): DiLoCo (H = 100, 8 bits) puts the data-parallel share
    of a step at least 100x below every-step sync's, and the amortised exchange is the rings at
    one byte per parameter over H."""
    from hulk_env.cluster.files import load_cluster_file

    path = tmp_path / "continents.yaml"
    path.write_text(
        "machines:\n"
        "  - {name: us, region: aws:us-east-1, gpu: H100, num_gpus: 8}\n"
        "  - {name: eu, region: gcp:europe-west4, gpu: H100, num_gpus: 8}\n"
        "  - {name: as, region: azure:southeastasia, gpu: H100, num_gpus: 8}\n"
        "links:\n"
        "  - {a: us, b: eu, rtt_ms: 80, bandwidth_gbps: 10}\n"
        "  - {a: us, b: as, rtt_ms: 220, bandwidth_gbps: 10}\n"
        "  - {a: eu, b: as, rtt_ms: 160, bandwidth_gbps: 10}\n"
    )
    cluster = load_cluster_file(path)
    w = load_workload("gpt3-1.3b", data_parallel=3, micro_batch_size=8, num_micro_batches=128, tensor_parallel=8)
    place = np.repeat(np.arange(3)[:, None], w.num_layers, axis=1)
    every = cost.evaluate(cluster, w, place)
    dil = cost.evaluate(cluster, w.with_training(sync="diloco", inner_steps=100, outer_bits=8), place)
    share_every = every.dp_sync_s / every.iteration_time_s
    share_dil = dil.dp_sync_s / dil.iteration_time_s
    assert share_every / share_dil >= 100
    # the ring of 3 sends 2 (k-1)/k of the 1-byte pseudo-gradients over its slowest link, plus
    # 2 (k-1) hops of the ring's mean one-way latency, once every 100 steps
    params = float(w.params.sum())
    ring_s = 2 * 2 / 3 * params / 1.25e9 + 4 * (0.040 + 0.110 + 0.080) / 3
    assert dil.dp_sync_s == pytest.approx(ring_s / 100, rel=1e-6)


def test_env_carries_the_plan_settings_in_its_info_and_costs_under_them():
    from hulk_env.bench_settings import SETTINGS_SUITE, case_instance
    from hulk_env.env.placement_env import PlacementEnv
    from hulk_env.instance import Instance

    base = case_instance(SETTINGS_SUITE[0])
    w = base.workload.with_training(tensor_parallel=8, zero=2, sync="diloco", inner_steps=100, outer_bits=8)
    inst = Instance(base.cluster, w, "planned")
    slots = w.data_parallel * w.num_layers
    env = PlacementEnv(generator="toy", max_machines=8, max_layers=slots, max_edges=slots)
    obs_base, info_base = env.reset(seed=0, options={"instance": base})
    obs, info = env.reset(seed=0, options={"instance": inst})
    expected = {"tensor_parallel": 8, "zero": 2, "sync": "diloco", "micro_batch_size": 1, "num_micro_batches": 8,
                "inner_steps": 100, "outer_bits": 8, "streaming": False}  # fmt: skip
    assert info["plan_settings"] == expected
    assert info_base["plan_settings"]["tensor_parallel"] == 0 and set(info_base["plan_settings"]) == set(expected)
    assert {k: v.shape for k, v in obs.items()} == {k: v.shape for k, v in obs_base.items()}
    done = False
    while not done:
        obs, _, done, _, info = env.step(int(np.flatnonzero(obs["action_mask"])[0]))
    assert info["plan_settings"] == expected
    placement = np.array(info["placement"])
    assert info["iteration_time_s"] == pytest.approx(float(cost.evaluate(inst.cluster, w, placement).iteration_time_s), rel=1e-12)
    assert info["iteration_time_s"] != pytest.approx(float(cost.evaluate(base.cluster, base.workload, placement).iteration_time_s))
