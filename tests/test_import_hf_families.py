"""`hulk import hf` on the families: published totals, active parameters, refused keys,
names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hulk_env import moe
from hulk_env.errors import HulkInputError
from hulk_env.importers import write_workload_file
from hulk_env.importers.hf_config import import_hf_config, read_config, workload_from_hf_config
from hulk_env.workload import load_workload_file

FAMILIES = Path(__file__).resolve().parent / "data" / "hf" / "families"

# file -> (published total, published active or None)
PUBLISHED = {
    # checkpoint counts (model.safetensors.index.json total_size / 2 bytes) and model cards
    "mixtral-8x7b.json": (46_702_792_704, 12.9e9),  # Mistral AI: 46.7B total, 12.9B active
    "mixtral-8x22b.json": (141e9, 39e9),  # Mistral AI: 141B total, 39B active
    "qwen1.5-moe-a2.7b.json": (14.3e9, 2.7e9),  # model card: 14.3B total, 2.7B activated
    "deepseek-moe-16b.json": (16.4e9, 2.8e9),  # Dai et al. 2024 (arXiv 2401.06066), Table 4
    "deepseek-llm-7b.json": (6_910_365_696, None),  # deepseek-llm-7b-base checkpoint
    "gemma-7b.json": (8_537_680_896, None),  # google/gemma-7b checkpoint
    "gemma-2-9b.json": (9_241_705_984, None),  # google/gemma-2-9b checkpoint
    "phi-3-mini-4k.json": (3_821_079_552, None),  # Phi-3-mini-4k-instruct checkpoint
    "gpt-j-6b.json": (6_053_381_344, None),  # EleutherAI/gpt-j-6b checkpoint
}


def _imported(tmp_path, name: str, **kwargs):
    return load_workload_file(write_workload_file(import_hf_config(FAMILIES / name, **kwargs), tmp_path / "m.yaml"))


def test_the_new_families_are_all_here():
    assert {p.name for p in FAMILIES.glob("*.json")} == set(PUBLISHED)
    types = {read_config(FAMILIES / n)["model_type"] for n in PUBLISHED}
    assert {"mixtral", "qwen2_moe", "deepseek", "gemma", "gemma2", "phi3", "gptj"} <= types


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_import_gives_the_published_total_and_active(tmp_path, name):
    w = _imported(tmp_path, name)
    total, active = PUBLISHED[name]
    assert w.total_params == pytest.approx(total, rel=0.01)
    if active is None:
        assert w.moe is None
    else:  # published active counts are rounded to 0.1 B: within 1% or that rounding
        got = float(moe.active_params(w).sum())
        assert abs(got - active) <= max(0.01 * active, 0.05e9), (got, active)


def test_mixtral_relabelled_mistral_is_refused_naming_the_expert_key():
    config = read_config(FAMILIES / "mixtral-8x7b.json")
    config["model_type"] = "mistral"
    with pytest.raises(HulkInputError) as err:
        workload_from_hf_config(config, source="mixtral.json")
    message = str(err.value)
    assert "num_local_experts" in message and "\n" not in message


@pytest.mark.parametrize(
    ("key", "value"),
    [("q_lora_rank", 1536), ("attention_type", "linear"), ("num_local_experts", 8), ("sliding_window", 512)],
)
def test_unknown_keys_are_refused_never_ignored(key, value):
    config = read_config(FAMILIES / "deepseek-llm-7b.json")  # a llama reader: no window, no experts
    config[key] = value
    with pytest.raises(HulkInputError, match=f"'{key}'"):
        workload_from_hf_config(config)


def test_sliding_window_caps_the_default_length_and_refuses_longer():
    data = import_hf_config(FAMILIES / "phi-3-mini-4k.json")
    assert data["transformer"]["seq_len"] == 2047 and "sliding window 2047" in data["description"]
    with pytest.raises(HulkInputError, match="sliding_window.*seq_len 4096 exceeds the sliding window 2047"):
        import_hf_config(FAMILIES / "phi-3-mini-4k.json", seq_len=4096)
    assert import_hf_config(FAMILIES / "gemma-2-9b.json", seq_len=4096)["transformer"]["seq_len"] == 4096


def test_moe_keys_arrive_in_the_builder(tmp_path):
    w = _imported(tmp_path, "deepseek-moe-16b.json")
    assert w.moe.num_experts.tolist()[:3] == [0, 0, 64]  # embedding, dense first block, MoE
    assert w.moe.top_k.max() == 6


def test_names_come_from_the_config_file_or_architectures(tmp_path):
    assert import_hf_config(FAMILIES / "mixtral-8x7b.json")["name"] == "mixtral-8x7b-v0.1"
    assert import_hf_config(FAMILIES / "gemma-7b.json")["name"] == "gemma-7b"  # no _name_or_path
    config = read_config(FAMILIES / "gemma-7b.json")
    (tmp_path / "yi-34b.config.json").write_text(json.dumps(config))
    assert import_hf_config(tmp_path / "yi-34b.config.json")["name"] == "yi-34b"
    folder = tmp_path / "my-gemma"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    assert import_hf_config(folder / "config.json")["name"] == "my-gemma"
    assert workload_from_hf_config(config, source="config.json")["name"] == "gemma-8.5b"
    assert import_hf_config(FAMILIES / "gemma-7b.json", name="mine")["name"] == "mine"
