"""train(): the run directory, atomic checkpoints, kill + resume, clear errors, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from agents.decision.methods import load_policy_method
from agents.network.saved_policy import load_policy
from agents.training.config import TrainSettings, apply_overrides
from agents.training.runs import read_run_config
from agents.training.train import CHECKPOINT, checkpoint_timesteps, train
from hulk_cli.app import app
from hulk_env.errors import HulkInputError

REPO = Path(__file__).resolve().parents[1]


def _smoke(out: Path, *overrides: str):
    return TrainSettings("smoke", ("train.torch_threads=1", *overrides), out=out).resolve()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    return train(_smoke(out, "train.name=smoke"))


def test_run_directory_holds_everything(run_dir):
    for name in ("config.yaml", "versions.json", "env_spec.json", CHECKPOINT, "policy/policy.json",
                 "policy/weights.pt", "best_policy/policy.json", "eval/evaluations.csv"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tb").rglob("events.out.tfevents*"))
    assert read_run_config(run_dir) == _smoke(run_dir.parent, "train.name=smoke")
    versions = json.loads((run_dir / "versions.json").read_text())
    assert {"torch", "stable_baselines3", "sb3_contrib", "torch_geometric", "gymnasium", "numpy"} <= set(versions)
    spec = json.loads((run_dir / "env_spec.json").read_text())
    assert spec["id"] == "hulk/Placement-v1" and "lookahead" in spec["observation_space"]
    assert "neighbours" in spec["observation_space"] and "links" not in spec["observation_space"]
    assert len(spec["heldout_instances"]) == 2
    # 512 steps in rollouts of n_steps x n_envs = 64 x 2
    assert checkpoint_timesteps(run_dir) == 512
    assert not list(run_dir.rglob("*.tmp*")), "temporary files left behind"


def test_tensorboard_has_placement_metrics(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = list((run_dir / "tb").glob("*"))
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"placement/iteration_time_s", "placement/speedup_vs_naive", "placement/wan_traffic_share"} <= tags
    assert {"eval/mean_reward", "train/entropy_loss"} <= tags


def test_trained_policy_is_a_method(run_dir):
    from hulk_env.evaluation import load_suite

    method = load_policy_method(run_dir)
    results = [method(inst, 0, None) for inst in load_suite("tiny-v0")[:5]]
    assert all(r.feasible or "dead end" in r.reason for r in results)
    assert load_policy(run_dir, "final").meta["num_timesteps"] == 512


def test_same_seed_same_weights(tmp_path):
    cfg = _smoke(tmp_path, "train.total_timesteps=128", "eval.eval_every=0", "train.tensorboard=false")
    a = train(apply_overrides(cfg, ["train.name=a"]))
    b = train(apply_overrides(cfg, ["train.name=b"]))
    wa = torch.load(a / "policy" / "weights.pt", weights_only=True)
    wb = torch.load(b / "policy" / "weights.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_wall_clock_stop_is_said_with_the_steps_done(tmp_path, capsys):
    """train.max_minutes cuts a run short: the output says so, with the steps done and how to go on."""
    cfg = _smoke(tmp_path, "train.total_timesteps=100000", "train.max_minutes=0.0001", "eval.eval_every=0",
                 "train.tensorboard=false", "train.name=cut")
    run = train(cfg)
    done = checkpoint_timesteps(run)
    assert done < 100000
    out = capsys.readouterr().out
    assert f"stopped at {done:,} of 100,000 steps" in out and f"--resume {run}" in out


def test_existing_run_is_not_overwritten(run_dir):
    with pytest.raises(HulkInputError, match="already holds a run"):
        train(_smoke(run_dir.parent, "train.name=smoke"))


def test_corrupt_checkpoint_is_one_clear_error(tmp_path, run_dir):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    # (no checkpoint at all restarts from step 0: tests/test_runs.py)
    (broken / CHECKPOINT).write_bytes(b"\x00garbage")
    with pytest.raises(HulkInputError) as err:
        train(resume=broken)
    assert "corrupt" in str(err.value) and str(broken / CHECKPOINT) in str(err.value)
    result = CliRunner().invoke(app, ["train", "--resume", str(broken)])
    assert result.exit_code == 2
    assert "corrupt" in result.output and "Traceback" not in result.output
    with pytest.raises(HulkInputError, match="not a run directory"):
        train(resume=tmp_path / "nothing")


_TRAINER = """
import sys
from agents.training.config import TrainSettings
from agents.training.train import train
train(TrainSettings("smoke", tuple(sys.argv[2:]))) if sys.argv[1] == "new" else train(resume=sys.argv[1])
"""


@pytest.mark.slow  # ~33 s CPU; kill + resume stay covered fast by test_runs.py::test_killed_*
def test_killed_run_resumes_to_the_same_timesteps(tmp_path):
    total = 2048  # 16 rollouts of 128 steps
    overrides = [f"train.out={tmp_path}", "train.name=killed", f"train.total_timesteps={total}",
                 "train.checkpoint_every=128", "eval.eval_every=512", "train.torch_threads=1"]
    run = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", _TRAINER, "new", *overrides], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if (run / CHECKPOINT).exists() and checkpoint_timesteps(run) >= 512:
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.05)
        else:
            pytest.fail("no checkpoint within 120 s")
        os.kill(proc.pid, signal.SIGKILL)  # mid-rollout or mid-write: no chance to clean up
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = checkpoint_timesteps(run)
    assert 512 <= killed_at < total
    yaml.safe_load((run / "config.yaml").read_text())  # every file left is readable
    for policy_dir in ("policy", "best_policy"):
        if (run / policy_dir / "policy.json").exists():
            load_policy(run / policy_dir)
    subprocess.run([sys.executable, "-c", _TRAINER, str(run)], cwd=REPO, check=True, timeout=300,
                   capture_output=True)
    assert checkpoint_timesteps(run) == total
    assert load_policy(run, "final").meta["num_timesteps"] == total
    assert not list(run.rglob("*.tmp*"))


def test_cli_train_and_compare(tmp_path):
    result = CliRunner().invoke(app, ["train", "--config", "smoke", "--timesteps", "128", "--out", str(tmp_path),
                                      "--set", "eval.eval_every=0", "--set", "train.name=cli"])
    assert result.exit_code == 0, result.output
    assert "policy" in result.output and "exact" in result.output
    assert (tmp_path / "cli" / "eval" / "results.csv").is_file()
    bad = CliRunner().invoke(app, ["train", "--set", "ppo.n_stepz=3"])
    assert bad.exit_code == 2 and "unknown key 'ppo.n_stepz'" in bad.output
    both = CliRunner().invoke(app, ["train", "--resume", str(tmp_path / "cli"), "--timesteps", "5"])
    assert both.exit_code == 2 and "--resume continues a run" in both.output


def test_fine_tuning_starts_from_the_saved_weights(tmp_path, run_dir):
    """train.init_policy: step 0 is the saved policy (its weights exactly, no imitation), and a
    policy of another architecture or observation is refused by name."""
    init = f"train.init_policy={run_dir / 'policy'}"
    run = train(_smoke(tmp_path, init, "train.total_timesteps=0", "train.name=ft", "train.tensorboard=false"))
    saved = torch.load(run_dir / "policy" / "weights.pt", weights_only=True)
    tuned = torch.load(run / "policy" / "weights.pt", weights_only=True)
    assert saved.keys() == tuned.keys() and all(torch.equal(saved[k], tuned[k]) for k in saved)
    header, first = (run / "eval" / "evaluations.csv").read_text().splitlines()[:2]
    assert header.split(",")[-1] == "rollout_speedup" and first.startswith("0,")
    assert float(first.split(",")[-1]) > 0
    with pytest.raises(HulkInputError, match="hidden_dim"):
        train(_smoke(tmp_path, init, "policy.hidden_dim=48", "train.name=ft2"))
    with pytest.raises(HulkInputError, match="imitation.demonstrations=0"):
        train(_smoke(tmp_path, init, "imitation.demonstrations=4", "train.name=ft3"))


def test_keep_policies_saves_every_evaluation_as_a_loadable_policy(tmp_path):
    """eval.keep_policies: one policy directory per evaluation (every eval_every steps),
    each loadable and holding the weights of its step (the first differs from the last)."""
    run = train(_smoke(tmp_path, "eval.keep_policies=true", "train.name=keep", "train.tensorboard=false"))
    steps = [int(line.split(",")[0]) for line in (run / "eval" / "evaluations.csv").read_text().splitlines()[1:]]
    kept = sorted(int(p.name) for p in (run / "eval" / "policies").iterdir())
    assert kept == steps and len(kept) >= 2
    weights = [torch.load(run / "eval" / "policies" / str(s) / "weights.pt", weights_only=True) for s in (kept[0], kept[-1])]
    assert any(not torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # PPO moved the weights in between
    assert load_policy(run / "eval" / "policies" / str(kept[-1])).meta["num_timesteps"] == kept[-1]


def test_ppo_trainable_signals_moves_only_the_signal_weights_and_the_value_head(tmp_path, run_dir):
    """ppo.trainable=signals: after PPO from saved weights, every weight but the pointer head's
    signal weights and the value head is the saved one, and the signal weights moved; with the
    MLP extractor (no signal weights) the config is refused in one clear error."""
    init = f"train.init_policy={run_dir / 'policy'}"
    run = train(_smoke(tmp_path, init, "ppo.trainable=signals", "ppo.learning_rate=0.05", "imitation.demonstrations=0",
                       "train.name=sig", "train.tensorboard=false", "eval.eval_every=0"))  # fmt: skip
    saved = torch.load(run_dir / "policy" / "weights.pt", weights_only=True)
    tuned = torch.load(run / "policy" / "weights.pt", weights_only=True)
    movable = ("mlp_extractor.priors", "mlp_extractor.gain_log_scale", "value_net.")
    moved = {k for k in saved if not torch.equal(saved[k], tuned[k])}
    assert moved and all(k.startswith(movable) for k in moved), sorted(moved)
    assert "mlp_extractor.priors" in moved
    with pytest.raises(HulkInputError, match="ppo.trainable=signals"):
        _smoke(tmp_path, "ppo.trainable=signals", "policy.extractor=mlp")
