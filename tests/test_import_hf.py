"""Hugging Face config.json -> workload file: published totals, same totals as the catalog."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk_env.errors import HulkInputError
from hulk_env.importers import write_workload_file
from hulk_env.importers.hf_config import (
    DEFAULT_MAX_SEQ_LEN,
    import_hf_config,
    read_config,
    workload_from_hf_config,
)
from hulk_env.workload import load_workload, load_workload_file

HF = Path(__file__).resolve().parent / "data" / "hf"
BAD = Path(__file__).resolve().parent / "data" / "bad"

# Published parameter totals of the models whose configs are in tests/data/hf.
PUBLISHED = {
    # Hugging Face checkpoint counts (model.safetensors.index.json total_size / 2 bytes).
    "llama-2-70b.json": 68_976_648_192,
    "llama-3-8b.json": 8_030_261_248,
    "llama-3-70b.json": 70_553_706_496,
    "mistral-7b.json": 7_241_732_096,  # announced as "7.3B"
    "gpt-neox-20b.json": 20_554_567_680,
    "gpt2-xl.json": 1_557_611_200,  # Radford et al. 2019: 1542M
    # Qwen2 technical report (Yang et al. 2024), Table 1.
    "qwen2-72b.json": 72.71e9,
    # The Hub's counts of the Falcon checkpoints (lm_head stored apart from the embedding).
    "falcon-7b-legacy.json": 7.22e9,
    "falcon-40b.json": 41.8e9,
    # Almazrouei et al. 2023, "The Falcon Series of Open Language Models".
    "falcon-180b.json": 180e9,
    # Zhang et al. 2022, "OPT", Table 1.
    "opt-66b.json": 66e9,
    # bigscience/bloom model card.
    "bloom-176b.json": 176_247_271_424,
    # Raffel et al. 2020 say "11 billion"; the t5-11b checkpoint holds 11.3e9.
    "t5-11b.json": 11.3e9,
}
# Config file -> the catalog model of the same architecture.
CATALOG = {
    "llama-2-70b.json": "llama-2-70b",
    "llama-3-8b.json": "llama-3-8b",
    "llama-3-70b.json": "llama-3-70b",
    "mistral-7b.json": "mistral-7b",
    "qwen2-72b.json": "qwen2-72b",
    "falcon-40b.json": "falcon-40b",
    "falcon-180b.json": "falcon-180b",
    "bloom-176b.json": "bloom-176b",
    "t5-11b.json": "t5-11b",
}


def _imported(tmp_path, name: str, suffix: str = ".yaml", **kwargs):
    out = write_workload_file(import_hf_config(HF / name, **kwargs), tmp_path / f"model{suffix}")
    return load_workload_file(out)


def test_every_config_has_a_published_total():
    assert {p.name for p in HF.glob("*.json")} == set(PUBLISHED)
    families = {read_config(HF / n)["model_type"] for n in PUBLISHED}
    assert len(families) >= 6


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_import_gives_the_published_total(tmp_path, name):
    workload = _imported(tmp_path, name)
    assert workload.total_params == pytest.approx(PUBLISHED[name], rel=0.01)
    assert workload.total_flops > 0 and workload.num_layers > 2


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_import_matches_the_catalog_model(tmp_path, name):
    imported = _imported(tmp_path, name, suffix=".json")
    catalog = load_workload(CATALOG[name], layers_per_block=1)
    assert imported.total_params == pytest.approx(catalog.total_params, rel=1e-12)
    assert imported.num_layers == catalog.num_layers


def test_falcon_40b_grouped_kv_heads_count():
    """41.8 B with 8 shared key/value heads; 49.4 B if every query head had its own."""
    data = import_hf_config(HF / "falcon-40b.json")
    assert data["transformer"]["num_kv_heads"] == 8
    config = read_config(HF / "falcon-40b.json")
    config["num_kv_heads"] = config["num_attention_heads"]
    mha = workload_from_hf_config(config)
    assert "num_kv_heads" not in mha["transformer"]


def test_multi_query_legacy_falcon_has_one_kv_head():
    data = import_hf_config(HF / "falcon-7b-legacy.json")
    assert data["transformer"]["num_kv_heads"] == 1
    assert data["transformer"]["heads"] == 71


def test_seq_len_defaults_and_override(tmp_path):
    llama2 = import_hf_config(HF / "llama-2-70b.json")
    assert llama2["transformer"]["seq_len"] == 4096
    qwen = import_hf_config(HF / "qwen2-72b.json")
    assert qwen["transformer"]["seq_len"] == DEFAULT_MAX_SEQ_LEN
    assert "131072" in qwen["description"] and "capped" in qwen["description"]
    short = _imported(tmp_path, "llama-3-8b.json", seq_len=1024)
    long = _imported(tmp_path, "llama-3-8b.json", seq_len=2048)
    assert long.total_params == short.total_params
    assert long.total_flops > 2 * short.total_flops * 0.99  # linear part doubles, attention 4x


def test_learned_positions_bound_the_sequence():
    with pytest.raises(HulkInputError, match="1024 learned positions"):
        import_hf_config(HF / "gpt2-xl.json", seq_len=2048)


def test_name_comes_from_the_config():
    assert import_hf_config(HF / "mistral-7b.json")["name"] == "mistral-7b-v0.1"
    assert import_hf_config(HF / "t5-11b.json")["name"] == "t5-11b"
    assert import_hf_config(HF / "t5-11b.json", name="mine")["name"] == "mine"


# file -> words the one-line message must contain (besides the file's path)
BAD_HF = {
    "hf_unknown_model_type.json": ["'model_type'", "'jamba'", "supported: llama"],
    "hf_missing_key.json": ["'intermediate_size'", "model_type 'llama'"],
    "hf_no_model_type.json": ["missing required key 'model_type'"],
    "hf_wrong_type.json": ["'num_attention_heads'", "integer", "'64'"],
    "hf_syntax.json": ["not valid JSON", "row 5"],
    "hf_opt_projection.json": ["'word_embed_proj_dim'", "512", "1024"],
    "hf_not_an_object.json": ["one JSON object"],
}


def test_bad_corpus_is_complete():
    assert {p.name for p in BAD.glob("hf_*")} == set(BAD_HF)


@pytest.mark.parametrize("name", sorted(BAD_HF))
def test_bad_config_is_one_clear_line(name):
    path = BAD / name
    with pytest.raises(HulkInputError) as err:
        import_hf_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    for words in BAD_HF[name]:
        assert words in message, f"{words!r} not in {message!r}"
