"""Saved policies: weights-only files, identical actions in a fresh process, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.decision.inference import policy_placement
from agents.decision.methods import load_policy_method
from agents.network.saved_policy import build_policy_network, load_policy, save_policy
from agents.training.runs import FINAL_POLICY_DIR
from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite
from hulk_env.feasibility import Padding

REPO = Path(__file__).resolve().parents[1]
POLICY = {"extractor": "gnn", "hidden_dim": 16, "machine_rounds": 1, "layer_rounds": 1, "heads": 2}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A run directory holding a randomly initialised policy for tiny-v0 instances."""
    torch.manual_seed(1)
    run = tmp_path_factory.mktemp("run")
    padding = Padding.of(load_suite("tiny-v0"))
    net = build_policy_network(POLICY, padding, lookahead=True)
    save_policy(net, run / FINAL_POLICY_DIR, policy_config=POLICY, padding=padding, lookahead=True)
    return run


_CHILD = """
import json, sys
from agents.decision.inference import policy_placement
from agents.network.saved_policy import load_policy
from hulk_env.evaluation import load_suite
loaded = load_policy(sys.argv[1])
out = [getattr(policy_placement(loaded, inst, seed=3, samples=2).placement, "tolist", lambda: None)() for inst in load_suite("tiny-v0")[:6]]
print(json.dumps(out))
"""


def test_fresh_process_gives_identical_actions(saved):
    loaded = load_policy(saved)
    here = [getattr(policy_placement(loaded, inst, seed=3, samples=2).placement, "tolist", lambda: None)() for inst in load_suite("tiny-v0")[:6]]
    assert any(p is not None for p in here)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(saved)], cwd=REPO, capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(child.stdout.strip().splitlines()[-1]) == here


def test_files_are_weights_only_and_described(saved):
    meta = json.loads((saved / FINAL_POLICY_DIR / "policy.json").read_text())
    assert meta["format"] == "hulk-policy/1" and meta["policy"] == POLICY and meta["observation"] == {"lookahead": True, "plan": False}
    state = torch.load(saved / FINAL_POLICY_DIR / "weights.pt", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())


def test_policy_method_places_feasibly_or_says_why(saved):
    """An untrained policy may paint itself into a memory corner: then it says so."""
    method = load_policy_method(saved, samples=4)
    feasible = 0
    for inst in load_suite("tiny-v0"):
        result = method(inst, 0, None)
        if not result.feasible:
            assert "dead end" in result.reason
            continue
        feasible += 1
        assert cost.evaluate(inst.cluster, inst.workload, result.placement).memory_feasible
        assert result.placement.shape == (inst.data_parallel, inst.num_layers)
    assert feasible >= 10


def test_sampling_never_worse_than_greedy(saved):
    loaded = load_policy(saved)
    for inst in load_suite("tiny-v0")[:8]:
        greedy = policy_placement(loaded, inst)
        sampled = policy_placement(loaded, inst, seed=1, samples=8)
        assert sampled.cost_evals >= greedy.cost_evals
        if greedy.feasible:
            t = [cost.iteration_time(inst.cluster, inst.workload, r.placement) for r in (greedy, sampled)]
            assert t[1] <= t[0] + 1e-12


def test_larger_instance_is_placed(saved):
    """The policy was saved with tiny-v0's padding (4 machines); the network runs at any size."""
    from hulk_env.generators import fixed_instance

    big = fixed_instance("default", "default")
    result = load_policy_method(saved)(big, 0, None)
    assert result.feasible and result.placement.shape == (big.data_parallel, big.num_layers)
    assert cost.evaluate(big.cluster, big.workload, result.placement).memory_feasible


def test_dense_observation_policy_is_refused(saved, tmp_path):
    """A policy of hulk/Placement-v0 (before the size-agnostic network) says to retrain."""
    run = _copy(saved, tmp_path)
    meta_path = run / FINAL_POLICY_DIR / "policy.json"
    meta = json.loads(meta_path.read_text())
    meta["env_id"] = "hulk/Placement-v0"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(HulkInputError, match="Placement-v0.*retrain"):
        load_policy(run)


def _copy(saved: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / FINAL_POLICY_DIR).mkdir(parents=True)
    for f in (saved / FINAL_POLICY_DIR).iterdir():
        (run / FINAL_POLICY_DIR / f.name).write_bytes(f.read_bytes())
    return run


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (lambda d: (d / "weights.pt").write_bytes(b"not a torch file"), "checksum"),
        (lambda d: (d / "weights.pt").unlink(), "not found"),
        (lambda d: (d / "policy.json").write_text("{"), "not valid JSON"),
        (lambda d: (d / "policy.json").write_text('{"format": "other"}'), "not a hulk-policy/1"),
    ],
)
def test_damaged_policy_files_are_one_clear_error(saved, tmp_path, damage, fragment):
    run = _copy(saved, tmp_path)
    damage(run / FINAL_POLICY_DIR)
    with pytest.raises(HulkInputError) as err:
        load_policy(run)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_weights_that_do_not_fit_the_description(saved, tmp_path):
    run = _copy(saved, tmp_path)
    meta_path = run / FINAL_POLICY_DIR / "policy.json"
    meta = json.loads(meta_path.read_text())
    meta["policy"]["hidden_dim"] = 32
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(HulkInputError, match="do not fit the network"):
        load_policy(run)


def test_not_a_run_directory(tmp_path):
    with pytest.raises(HulkInputError, match="no such run directory"):
        load_policy(tmp_path / "missing")
    with pytest.raises(HulkInputError, match="no saved policy here"):
        load_policy(tmp_path)


def test_pickled_code_is_refused(saved, tmp_path):
    """A weights file holding an arbitrary object (what pickle-based formats allow) is refused."""
    run = _copy(saved, tmp_path)
    weights = run / FINAL_POLICY_DIR / "weights.pt"
    torch.save({"payload": np.dtype("float64")}, weights)  # a non-tensor global in the pickle
    meta_path = run / FINAL_POLICY_DIR / "policy.json"
    meta = json.loads(meta_path.read_text())
    import hashlib

    meta["weights_sha256"] = hashlib.sha256(weights.read_bytes()).hexdigest()
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(HulkInputError, match="not a weights-only torch file"):
        load_policy(run)
