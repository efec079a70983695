"""PyTorch module -> workload file: exact parameters, FLOPs of FlopCounterMode, a real layer DAG."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from hulk_env.errors import HulkInputError  # noqa: E402
from hulk_env.importers import write_workload_file  # noqa: E402
from hulk_env.importers.torch_module import import_torch_module, parse_shape  # noqa: E402
from hulk_env.workload import load_workload_file  # noqa: E402
from tests import torch_models  # noqa: E402

BAD = Path(__file__).resolve().parent / "data" / "bad"
CASES = {
    "gpt": ("tests.torch_models:gpt_gqa", [(2, 64)], ["long"]),
    "encdec": ("tests.torch_models:encoder_decoder", [(2, 48), (2, 16)], ["long"]),
    "resnet": ("tests.torch_models:resnet", [(4, 3, 32, 32)], ["float"]),
}


@pytest.fixture(scope="module")
def imported():
    return {
        key: import_torch_module(spec, shapes, input_dtypes=kinds)
        for key, (spec, shapes, kinds) in CASES.items()
    }


def _module(key: str):
    spec = CASES[key][0]
    return getattr(torch_models, spec.partition(":")[2])()


@pytest.mark.parametrize("key", sorted(CASES))
def test_parameters_exact_and_flops_match_the_counter(imported, key):
    result = imported[key]
    layers = result.workload["layers"]
    assert sum(layer["params"] for layer in layers) == result.total_params
    assert result.total_params == sum(p.numel() for p in _module(key).parameters())
    assert result.counter_flops > 0
    assert abs(result.flops_error) <= 0.02


def test_gpt_layers_and_bytes(imported):
    shape = torch_models.GPT_SHAPE
    data = imported["gpt"].workload
    names = [layer["name"] for layer in data["layers"]]
    assert names == ["embed", *[f"blocks.{i}" for i in range(shape["layers"])], "head"]
    assert data["edges"] == [[a, b] for a, b in zip(names, names[1:], strict=False)]
    b, s, h = 2, 64, shape["hidden"]
    blocks = [layer for layer in data["layers"] if layer["name"].startswith("blocks")]
    assert all(layer["activation_bytes"] == b * s * h * 2 for layer in blocks)  # bf16 output
    assert data["layers"][-1]["activation_bytes"] == 0
    # The tied LM head's weight is counted once, on the embedding.
    head = data["layers"][-1]
    assert head["params"] == 2 * h  # its LayerNorm only
    assert data["micro_batch_size"] == 2


def test_gpt_block_matches_the_published_stash_formula(imported):
    """Autograd's saved tensors of a Megatron-style block vs Korthikanti et al. 2022, with GQA.

    Per block, p = 2 bytes: attention ``(p+1) bsh + p b (2 s d + 2 s d_kv) + (2p+1) a b s^2``,
    FFN ``(p+1) bsh + 2 p b s f``, two norms ``2 p bsh``. The module also keeps the causal
    mask and LayerNorm's fp32 statistics, which the formula leaves out.
    """
    shape = torch_models.GPT_SHAPE
    b, s, h, a = 2, 64, shape["hidden"], shape["heads"]
    d_kv, f, p = h // a * shape["kv_heads"], 4 * h, 2
    formula = (
        (p + 1) * b * s * h + p * b * (2 * s * h + 2 * s * d_kv) + (2 * p + 1) * a * b * s * s
        + (p + 1) * b * s * h + 2 * p * b * s * f
        + 2 * p * b * s * h
    )
    mask = (a // shape["kv_heads"]) * s * s  # bool causal mask, repeated per query group
    stats = 2 * 2 * b * s * 4  # mean and rstd of two LayerNorms, fp32
    block = imported["gpt"].workload["layers"][1]
    assert block["stash_bytes"] == formula + mask + stats


def test_gpt_block_flops_by_hand(imported):
    shape = torch_models.GPT_SHAPE
    b, s, h, a, kv = 2, 64, shape["hidden"], shape["heads"], shape["kv_heads"]
    d_kv = h // a * kv
    weights = h * h + h * 2 * d_kv + h * h + 2 * h * 4 * h
    expected = 2 * b * s * weights + 4 * b * s * s * h  # linears + QK^T and PV over all heads
    assert imported["gpt"].workload["layers"][1]["flops"] == expected


def test_encoder_decoder_is_a_dag(imported):
    data = imported["encdec"].workload
    edges = {tuple(e) for e in data["edges"]}
    shape = torch_models.ENC_DEC_SHAPE
    for j in range(shape["dec_layers"]):
        assert ("enc_norm", f"decoder.{j}") in edges  # cross-attention reads the encoder
    assert ("embed", "decoder.0") in edges and ("embed", "encoder.0") in edges
    decoder = next(layer for layer in data["layers"] if layer["name"] == "decoder.0")
    assert decoder["activation_bytes"] == 2 * 16 * shape["hidden"] * 2
    assert data["micro_batch_size"] == 2


def test_resnet_root_ops_join_the_last_stage(imported):
    data = imported["resnet"].workload
    names = [layer["name"] for layer in data["layers"]]
    assert names[0] == "stem" and names[-1] == "fc" and len(names) == 8
    # adaptive pooling + flatten run in the root's forward: stages.5 sends the pooled vector
    last = data["layers"][-2]
    assert last["activation_bytes"] == 4 * 64 * 2


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_written_file_loads_as_a_workload(imported, tmp_path, suffix):
    result = imported["encdec"]
    path = write_workload_file(result.workload, tmp_path / f"encdec{suffix}")
    workload = load_workload_file(path, num_micro_batches=4)
    assert workload.total_params == result.total_params
    assert workload.total_flops == pytest.approx(result.layer_flops)
    assert not workload.is_chain and workload.num_micro_batches == 4


def test_block_depth_two_splits_blocks():
    coarse = import_torch_module("tests.torch_models:gpt_gqa", [(1, 16)], block_depth=1)
    fine = import_torch_module("tests.torch_models:gpt_gqa", [(1, 16)], block_depth=2)
    assert len(fine.workload["layers"]) > len(coarse.workload["layers"])
    assert fine.total_params == coarse.total_params
    assert sum(lay["params"] for lay in fine.workload["layers"]) == fine.total_params
    assert abs(fine.flops_error) <= 0.02


def test_parse_shape():
    assert parse_shape("2,64") == (2, 64)
    assert parse_shape("4x3x32x32") == (4, 3, 32, 32)
    for bad in ("", "2,-1", "a,b", "0"):
        with pytest.raises(HulkInputError, match="input shape"):
            parse_shape(bad)


# bad module -> (factory, input shape, words the message must contain)
BAD_TORCH = {
    "torch_untraceable.py": ("build", (2, 8), ["torch.fx cannot trace", "group it differently"]),
    "torch_not_a_module.py": ("build", (2, 8), ["returned", "not a torch.nn.Module"]),
    "torch_factory_raises.py": ("build", (2, 8), ["raised TypeError", "no arguments"]),
    "torch_block_called_twice.py": ("build", (2, 8), ["'shared'", "runs again", "group differently"]),
}


def test_bad_corpus_is_complete():
    assert {p.name for p in BAD.glob("torch_*")} == set(BAD_TORCH)


@pytest.mark.parametrize("name", sorted(BAD_TORCH))
def test_bad_module_is_one_clear_line(name, monkeypatch):
    monkeypatch.syspath_prepend(str(BAD))
    factory, shape, words = BAD_TORCH[name]
    with pytest.raises(HulkInputError) as err:
        import_torch_module(f"{Path(name).stem}:{factory}", [shape])
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


@pytest.mark.parametrize(
    ("spec", "shape", "words"),
    [
        ("tests.torch_models", (2, 8), ["MODULE:FACTORY"]),
        ("no_such_module_h11:build", (2, 8), ["cannot import module 'no_such_module_h11'"]),
        ("tests.torch_models:nope", (2, 8), ["has no 'nope'", "gpt_gqa"]),
        ("tests.torch_models:resnet", (2, 64), ["forward failed", "--input-shape"]),
    ],
)
def test_bad_specs_and_inputs(spec, shape, words):
    with pytest.raises(HulkInputError) as err:
        import_torch_module(spec, [shape])
    for word in words:
        assert word in str(err.value)


def test_hulk_env_core_does_not_import_torch():
    code = (
        "import sys, hulk_env, hulk_env.importers, hulk_env.importers.hf_config, "
        "hulk_env.importers.torch_module; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


def test_imported_workload_places_and_simulates(imported, tmp_path):
    from hulk_env import cost
    from hulk_env.baselines import METHODS
    from hulk_env.generators import fixed_instance
    from hulk_env.simulate import simulate

    path = write_workload_file(imported["encdec"].workload, tmp_path / "encdec.yaml")
    inst = fixed_instance("cloud-3region", str(path), data_parallel=2, num_micro_batches=4)
    result = METHODS["latency-chain-dp"](inst, 0, None)
    assert result.feasible
    breakdown = cost.evaluate(inst.cluster, inst.workload, result.placement)
    sim = simulate(inst.cluster, inst.workload, result.placement)
    assert breakdown.memory_feasible and sim.iteration_time_s > 0
    compute_tasks = [t for t in sim.tasks if t.kind in ("forward", "backward")]
    assert len(compute_tasks) == 2 * 2 * 4 * inst.num_layers  # fwd + bwd, D = 2, m = 4
    assert sim.iteration_time_s == pytest.approx(breakdown.iteration_time_s, rel=0.5)
