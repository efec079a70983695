"""The `hulk` command: JSON figures, and one clear line (exit 2) for every bad input file."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.output import EXIT_BAD_INPUT
from tests.conftest import BAD_FILES

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_show_paper_cluster_json(hulk_data):
    result = run("show", "cluster", str(hulk_data), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["machines"] == 47 and summary["regions"] == 12
    cleaning = summary["cleaning"]
    assert cleaning["self_loops"] == 2 and cleaning["duplicate_pairs"] == 2
    assert cleaning["impossible_edges"] >= 1
    assert summary["imputed_pairs"] == cleaning["imputed_pairs"] > 0
    assert summary["total_memory_bytes"] > 0


def test_impossible_edge_threshold(hulk_data):
    # Strict physics flags Tokyo-Berlin (4 ms) and the China-California pairs that beat light in
    # fibre; a 10% tolerance keeps only the grossly impossible Tokyo-Berlin edge.
    strict = json.loads(run("show", "cluster", str(hulk_data), "--json").stdout)["cleaning"]
    loose = json.loads(
        run("show", "cluster", str(hulk_data), "--json", "--min-rtt-fraction", "0.1").stdout
    )["cleaning"]
    assert loose["impossible_edges"] == 1
    assert strict["impossible_edges"] > loose["impossible_edges"]
    assert any("Berlin-Tokyo" in note for note in loose["notes"])
    assert strict["measured_pairs"] + strict["impossible_edges"] == loose["measured_pairs"] + 1


def test_show_default_needs_no_file():
    cluster = json.loads(run("show", "cluster", "default", "--json").stdout)
    model = json.loads(run("show", "model", "default", "--json").stdout)
    assert cluster["machines"] >= 8 and cluster["total_memory_bytes"] > 0
    assert model["layers"] > 2 and model["params"] > 1e9
    assert model["forward_flops_per_micro_batch"] > 0


def test_show_model_t5_is_a_dag():
    model = json.loads(run("show", "model", "t5-11b", "--json").stdout)
    assert not model["is_chain"] and model["edges"] > model["layers"]


BAD = sorted(p for p in BAD_FILES.iterdir() if p.name.startswith(("cluster_", "model_")))


@pytest.mark.parametrize("path", BAD, ids=[p.name for p in BAD])
def test_every_bad_file_is_one_clear_line(path):
    kind = "cluster" if path.name.startswith("cluster_") else "model"
    result = run("show", kind, str(path))
    assert result.exit_code == EXIT_BAD_INPUT
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and path.name in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("show", "cluster", "no-such-cluster"), "no-such-cluster"),
        (("show", "model", "gpt5-1t"), "gpt5-1t"),
        (("show", "cluster", "/nonexistent/dir/cluster.yaml"), "cluster.yaml"),
        (("place", "--method", "telepathy"), "telepathy"),
        (("evaluate", "--suite", "nope-v0"), "nope-v0"),
        (("evaluate", "--suite", "paper-v0", "--hulk-data", "/nonexistent/hulk"), "/nonexistent/hulk"),
    ],
)
def test_unknown_names_are_one_clear_line(args, needle):
    result = run(*args)
    assert result.exit_code == EXIT_BAD_INPUT
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_place_json_beats_or_equals_naive(tmp_path):
    png = tmp_path / "placement.png"
    result = run("place", "--cluster", "cloud-3region", "--model", "gpt3-350m", "--method",
                 "latency-chain-dp", "--json", "--plot", str(png))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["cost"]["memory_feasible"]
    assert out["speedup_vs_naive"] >= 1.0 - 1e-9
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


_WITHOUT_AGENT = """
import json, sys
BLOCKED = {"torch", "torch_geometric", "stable_baselines3", "sb3_contrib", "tensorboard"}

class NoAgentStack:  # as if `pip install hulk-env` had been run without the [agent] extra
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoAgentStack())
from typer.testing import CliRunner
from hulk_cli.app import app

out = []
for args in json.loads(sys.argv[1]):
    result = CliRunner().invoke(app, args)
    out.append({"code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                "exception": repr(result.exception) if result.exit_code not in (0, 2) else None})
print(json.dumps(out))
"""


def test_torch_free_commands_work_without_the_agent_stack(tmp_path):
    """show/place/evaluate need no torch; train, bench train and the policy methods say in one
    line how to install the agent stack (exit 2)."""
    import subprocess
    import sys
    from pathlib import Path

    torch_free = [
        ["show", "cluster", "default", "--json"],
        ["place", "--cluster", "cloud-3region", "--model", "gpt3-350m", "--json"],
        ["evaluate", "--suite", "tiny-v0", "--methods", "naive,compute-greedy", "--limit", "2", "--out", str(tmp_path)],
    ]
    needs_agent = [
        ["train", "--config", "smoke"],
        ["bench", "train"],
        ["place", "--method", "hulk-gcn"],
        ["place", "--policy", str(tmp_path)],
        ["evaluate", "--suite", "tiny-v0", "--methods", f"naive,{tmp_path}", "--limit", "1"],
    ]
    child = subprocess.run(
        [sys.executable, "-c", _WITHOUT_AGENT, json.dumps(torch_free + needs_agent)],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    results = json.loads(child.stdout.strip().splitlines()[-1])
    for args, result in zip(torch_free, results, strict=False):
        assert result["code"] == 0, (args, result)
    assert json.loads(results[1]["stdout"])["cost"]["memory_feasible"]
    assert (tmp_path / "results.csv").is_file()
    for args, result in zip(needs_agent, results[len(torch_free):], strict=True):
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        assert result["code"] == EXIT_BAD_INPUT and len(lines) == 1, (args, result)
        assert "pip install 'hulk-env[agent]'" in lines[0] and "torch" in lines[0], (args, lines)


def test_run_policy_name_is_not_a_method_by_itself():
    result = run("place", "--method", "policy")
    assert result.exit_code == EXIT_BAD_INPUT and "--policy RUN_DIR" in result.stderr


def test_shipped_policy_places_after_install():
    result = run("place", "--method", "gnn-ppo", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["cost"]["memory_feasible"]
