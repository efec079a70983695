"""The model and cluster inputs of the command line: `hulk import hf|torch`, the model flags of place/evaluate,
cloud regions and round-trip links in `hulk show cluster --links`, infeasibility messages."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_env.workload import load_workload
from tests.cli_checks import one_error_line
from tests.conftest import BAD_FILES

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "data" / "hf"
runner = CliRunner()

CLOUD = """\
name: cloud-rtt
machines:
  - {name: or, region: aws:us-west-2, gpu: A100-80GB, num_gpus: 8, count: 2}
  - {name: town, region: Oregon, gpu: V100-32GB, num_gpus: 8}
  - {name: ie, region: eu-west-1, gpu: A100-40GB, num_gpus: 8}
  - {name: nl, region: gcp:europe-west4, gpu: H100, num_gpus: 8}
  - {name: va, region: eastus, gpu: A10, num_gpus: 4}
links:
  - {a: aws:us-west-2, b: eu-west-1, rtt_ms: 124}
  - {a: ie, b: nl, latency_ms: 9.5, bandwidth_gbps: 2}
"""
LABELS = {"aws:us-west-2", "Oregon", "eu-west-1", "gcp:europe-west4", "eastus"}


def run(*args: str, columns: int = 80):
    return runner.invoke(app, list(args), catch_exceptions=False, env={"COLUMNS": str(columns)})


@pytest.fixture
def cloud(tmp_path) -> Path:
    path = tmp_path / "cloud.yaml"
    path.write_text(CLOUD)
    return path


# ---- hulk import hf --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "catalog"),
    [("llama-2-70b.json", "llama-2-70b"), ("qwen2-72b.json", "qwen2-72b"), ("falcon-40b.json", "falcon-40b"), ("t5-11b.json", "t5-11b")],
)
def test_import_hf_gives_the_catalog_total(tmp_path, config, catalog):
    out = tmp_path / "model.yaml"
    result = run("import", "hf", str(HF / config), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["params"] == pytest.approx(load_workload(catalog).total_params, rel=1e-12)
    shown = json.loads(run("show", "model", str(out), "--json").stdout)
    assert shown["params"] == summary["params"]


def test_import_hf_seq_len_option(tmp_path):
    out = tmp_path / "m.json"
    result = run("import", "hf", str(HF / "mistral-7b.json"), "--out", str(out), "--seq-len", "1024", "--name", "m7")
    assert result.exit_code == 0, result.output
    assert "seq len 1024" in " ".join(result.stdout.split())
    assert json.loads(out.read_text())["transformer"]["seq_len"] == 1024


BAD_HF = sorted(BAD_FILES.glob("hf_*"))


@pytest.mark.parametrize("path", BAD_HF, ids=[p.name for p in BAD_HF])
def test_bad_hf_config_is_one_line(tmp_path, path):
    line = one_error_line(run("import", "hf", str(path), "--out", str(tmp_path / "x.yaml")))
    assert path.name in line
    assert not (tmp_path / "x.yaml").exists()  # nothing half written


def test_import_refuses_an_unknown_output_type(tmp_path):
    line = one_error_line(run("import", "hf", str(HF / "gpt2-xl.json"), "--out", str(tmp_path / "x.toml")))
    assert "unknown output type" in line


# ---- hulk import torch -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "shapes", "dtype"),
    [
        ("tests.torch_models:gpt_gqa", ["2,64"], "long"),
        # each `hulk import torch` is a child process importing torch (~4 s of CPU): the CLI path
        # stays covered by gpt_gqa above, these two models' import (parameters, FLOPs, DAG) in
        # process by test_import_torch::test_parameters_exact_and_flops_match_the_counter
        pytest.param("tests.torch_models:encoder_decoder", ["2,48", "2,16"], "long", marks=pytest.mark.slow),
        pytest.param("tests.torch_models:resnet", ["4,3,32,32"], "float", marks=pytest.mark.slow),
    ],
)
def test_import_torch_then_place(tmp_path, monkeypatch, spec, shapes, dtype):
    pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)  # MODULE is importable from the current directory
    out = tmp_path / "net.yaml"
    args = ["import", "torch", spec, "--out", str(out), "--input-dtype", dtype, "--json"]
    for shape in shapes:
        args += ["--input-shape", shape]
    result = run(*args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert abs(float(summary["flops_vs_flop_counter"].rstrip("%"))) <= 2.0
    placed = run("place", "--cluster", "cloud-3region", "--model", str(out), "--method", "latency-chain-dp", "--json")
    assert placed.exit_code == 0, placed.output
    assert json.loads(placed.stdout)["cost"]["memory_feasible"]


BAD_TORCH = sorted(BAD_FILES.glob("torch_*.py"))
# Each is a child process importing torch (2-4 s of CPU): one runs by default (the child's error
# reaches the CLI as one line); every module's message is checked in process by
# test_import_torch::test_bad_module_is_one_clear_line, the others through the CLI with -m slow.
FAST_BAD_TORCH = "torch_not_a_module.py"


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, id=p.name, marks=() if p.name == FAST_BAD_TORCH else pytest.mark.slow) for p in BAD_TORCH],
)
def test_bad_torch_module_is_one_line(tmp_path, monkeypatch, path):
    pytest.importorskip("torch")
    monkeypatch.chdir(BAD_FILES)
    monkeypatch.delitem(sys.modules, path.stem, raising=False)
    line = one_error_line(run("import", "torch", f"{path.stem}:build", "--input-shape", "2,8", "--out", str(tmp_path / "x.yaml")))
    assert path.stem in line


def test_import_torch_without_torch_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails as if not installed
    line = one_error_line(run("import", "torch", "a:b", "--input-shape", "2,8", "--out", str(tmp_path / "x.yaml")))
    assert "pip install 'hulk-env[agent]'" in line


# ---- clusters: cloud regions, round trips, links ---------------------------------------------


def test_show_cluster_keeps_names_and_lists_every_link(cloud):
    summary = json.loads(run("show", "cluster", str(cloud), "--links", "--json").stdout)
    assert {row["region"] for row in summary["by_region"]} == LABELS
    assert "one-way" in summary["latency_convention"]
    links = summary["links"]
    assert len(links) == 6 * 5 // 2
    by_pair = {(row["a"], row["b"]): row for row in links}
    ping = by_pair[("or-0", "ie")]
    assert ping["measured"] and ping["rtt_ms"] == pytest.approx(124) and ping["latency_ms"] == pytest.approx(62)
    assert "rtt_ms 124" in ping["basis"]
    assert by_pair[("ie", "nl")]["latency_ms"] == pytest.approx(9.5)
    lan = by_pair[("or-0", "or-1")]
    assert not lan["measured"] and "same region 'aws:us-west-2'" in lan["basis"]
    assert "distance model" in by_pair[("ie", "va")]["basis"]
    text = " ".join(run("show", "cluster", str(cloud), "--links", columns=250).stdout.split())
    assert "one-way" in text and "rtt_ms" in text and "measured: rtt_ms 124" in text


def test_place_with_model_flags_keeps_region_labels(cloud):
    result = run(
        "place", "--cluster", str(cloud), "--model", "mistral-7b", "--method", "latency-chain-dp",
        "--seq-len", "2048", "--micro-batch-size", "1", "--layers-per-block", "2", "--recompute", "selective", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {row["region"] for row in out["rows"]} <= LABELS
    assert out["cost"]["memory_feasible"]
    table = run("place", "--cluster", str(cloud), "--model", "mistral-7b", "--recompute", "selective", columns=250).stdout
    assert all(row["region"] in table for row in out["rows"])


def test_place_bad_model_flags_are_one_line(cloud):
    assert "'recompute'" in one_error_line(run("place", "--cluster", str(cloud), "--model", "gpt3-125m", "--recompute", "half"))
    assert "--seq-len" in one_error_line(run("place", "--cluster", str(cloud), "--model", "gpt3-125m", "--seq-len", "0"))


def test_infeasible_place_names_the_1f1b_stash(tmp_path):
    path = tmp_path / "v100.yaml"
    path.write_text("machines:\n  - {name: v100, region: us-east-1, gpu: V100-16GB, count: 64}\n")
    line = one_error_line(run("place", "--cluster", str(path), "--model", "mpt-30b", "--micro-batches", "4", "--method", "naive"))
    assert "the stash binds" in line and "4 x 1.8 GB stash = 17.2 GB" in line
    assert "--micro-batches 3 or --recompute selective" in line


def test_evaluate_takes_the_model_flags(tmp_path):
    out = tmp_path / "eval"
    result = run("evaluate", "--suite", "tiny-v0", "--methods", "naive", "--limit", "2", "--recompute", "full", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "recompute=full" in (out / "summary.md").read_text()


NEW_MODELS = ("llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b", "falcon-40b", "falcon-180b", "qwen2-72b", "mpt-30b")


@pytest.mark.parametrize("name", NEW_MODELS)
def test_show_model_gives_the_published_total(name):
    from hulk_env.workload import PUBLISHED_PARAMS

    summary = json.loads(run("show", "model", name, "--json").stdout)
    assert summary["params"] == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)
