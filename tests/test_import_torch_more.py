"""`hulk import torch` on any common network: inferred input dtypes, reused
parameter-free modules, data-dependent routing refused in one line; 0.00% error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hulk_env.errors import HulkInputError  # noqa: E402
from hulk_env.importers.torch_module import import_torch_module  # noqa: E402
from tests import torch_models, torch_models_extra  # noqa: E402

# spec -> input shapes; no input dtype is given: each follows its first consumer
NEW = {
    "tests.torch_models_extra:vit": [(2, 3, 32, 32)],
    "tests.torch_models_extra:unet": [(1, 3, 32, 32)],
    "tests.torch_models_extra:moe_dense": [(2, 16)],
}
EXISTING = {  # imported (with dtypes given) by tests/test_import_torch.py too: behind slow here
    "tests.torch_models:gpt_gqa": [(2, 64)],
    "tests.torch_models:encoder_decoder": [(2, 48), (2, 16)],
    "tests.torch_models:resnet": [(4, 3, 32, 32)],
}


@pytest.fixture(scope="module")
def imported():
    return {spec: import_torch_module(spec, shapes) for spec, shapes in NEW.items()}


@pytest.fixture(scope="module")
def imported_existing():
    return {spec: import_torch_module(spec, shapes) for spec, shapes in EXISTING.items()}


def _built(spec: str):
    module, _, factory = spec.partition(":")
    source = torch_models_extra if module.endswith("extra") else torch_models
    return getattr(source, factory)()


def _exact(result, spec: str) -> None:
    layers = result.workload["layers"]
    assert sum(layer["params"] for layer in layers) == result.total_params
    assert result.total_params == sum(p.numel() for p in _built(spec).parameters())
    assert result.counter_flops > 0 and round(abs(result.flops_error) * 100, 2) == 0.0  # 0.00%


@pytest.mark.parametrize("spec", sorted(NEW))
def test_exact_parameters_and_flops(imported, spec):
    _exact(imported[spec], spec)


@pytest.mark.slow
@pytest.mark.parametrize("spec", sorted(EXISTING))
def test_exact_parameters_and_flops_of_the_existing_modules(imported_existing, spec):
    _exact(imported_existing[spec], spec)


def test_input_dtypes_follow_the_first_consumer(imported):
    assert "float 2,3,32,32" in imported["tests.torch_models_extra:vit"].workload["description"]
    assert "long 2,16" in imported["tests.torch_models_extra:moe_dense"].workload["description"]


@pytest.mark.slow
def test_input_dtypes_of_the_existing_modules(imported_existing):
    described = {spec: imported_existing[spec].workload["description"] for spec in EXISTING}
    assert "float 4,3,32,32" in described["tests.torch_models:resnet"]
    assert "long 2,64" in described["tests.torch_models:gpt_gqa"]
    assert "long 2,48; long 2,16" in described["tests.torch_models:encoder_decoder"]


def test_shared_pooling_module_is_not_a_layer(imported):
    names = [layer["name"] for layer in imported["tests.torch_models_extra:unet"].workload["layers"]]
    assert "pool" not in names and names[:2] == ["enc1", "enc2"] and names[-1] == "out"
    edges = imported["tests.torch_models_extra:unet"].workload["edges"]
    assert ["enc1", "up1"] in edges  # the skip connection (the concatenation joins up1)


def test_dense_dispatch_moe_runs_every_expert(imported):
    layers = imported["tests.torch_models_extra:moe_dense"].workload["layers"]
    assert [layer["name"] for layer in layers] == ["embed", "blocks.0", "blocks.1", "head"]


def test_index_routing_is_refused_in_one_line_saying_what_to_do():
    with pytest.raises(HulkInputError) as err:
        import_torch_module("tests.torch_models_extra:moe_indexed", [(2, 16)])
    message = str(err.value)
    assert "\n" not in message and "data-dependent control flow" in message
    assert "dense-dispatch" in message and "hulk import hf" in message
