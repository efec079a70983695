"""Named models: parameter totals against the published ones, sizes and defaults."""

from __future__ import annotations

import pytest

from hulk_env.errors import HulkInputError
from hulk_env.workload import catalog, load_workload

REQUIRED = {
    "gpt3-125m", "gpt3-350m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b",
    "opt-175b", "bloom-176b", "llama-7b", "llama-13b", "llama-65b", "t5-11b", "bert-large",
}


def test_catalog_has_the_required_models_and_their_published_totals():
    assert REQUIRED <= set(catalog.model_names())
    assert set(catalog.model_names()) == set(catalog.PUBLISHED_PARAMS)


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_params_within_two_percent_of_published(name):
    built = catalog.get_model(name, layers_per_block=1).total_params
    published = catalog.PUBLISHED_PARAMS[name]
    assert built == pytest.approx(published, rel=0.02), f"{name}: {built:.4g} vs {published:.4g}"


@pytest.mark.parametrize(
    ("name", "exact"),
    [("llama-7b", 6_738_415_616), ("llama-13b", 13_015_864_320), ("llama-65b", 65_285_660_672)],
)
def test_llama_matches_hf_checkpoints_exactly(name, exact):
    assert catalog.get_model(name).total_params == exact


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_default_coarsening_keeps_graphs_moderate(name):
    w = catalog.get_model(name)
    full = catalog.get_model(name, layers_per_block=1)
    cfg = catalog.get_model_config(name)
    assert w.num_layers <= 50
    assert full.num_layers == cfg.num_layers + cfg.num_decoder_layers + 2
    assert w.total_params == pytest.approx(full.total_params, rel=1e-12)
    assert 1 <= w.micro_batch_size <= 4 and w.data_parallel == 1


def test_default_is_a_1b_class_decoder():
    w = catalog.get_model("default")
    assert w.name == catalog.DEFAULT_MODEL == "gpt3-1.3b"
    assert 1e9 < w.total_params < 2e9 and w.is_chain
    assert load_workload("default").total_flops == w.total_flops


def test_overrides_rebuild_for_the_micro_batch_size():
    base = catalog.get_model("gpt3-125m", micro_batch_size=1)
    w = catalog.get_model("gpt3-125m", micro_batch_size=4, num_micro_batches=16, data_parallel=2,
                          schedule="gpipe")
    assert w.total_flops == pytest.approx(4 * base.total_flops)
    assert (w.num_micro_batches, w.data_parallel, w.schedule) == (16, 2, "gpipe")
    assert load_workload("GPT3-125M", micro_batch_size=1).total_flops == base.total_flops


def test_unknown_model_lists_valid_names():
    with pytest.raises(HulkInputError) as err:
        load_workload("gpt3-1.3")
    message = str(err.value)
    assert "unknown model 'gpt3-1.3'" in message and "did you mean 'gpt3-1.3b'" in message
    assert "llama-65b" in message and "\n" not in message
