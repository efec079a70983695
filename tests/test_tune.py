"""``hulk tune``: the search space, a 4-trial sweep of a very short training on a local Ray."""

from __future__ import annotations

import csv
import json
import math

import pytest
import yaml
from typer.testing import CliRunner

from agents.training.config import TrainSettings
from agents.training.runs import read_run_config
from agents.training.tune import TuneSettings, load_space, override, trial_dir_name, tune
from hulk_cli.app import app
from hulk_env.errors import HulkInputError

# A very short training: one rollout of 64 steps x 2 envs, evaluated after 64 and 128 steps.
SHORT = ("train.total_timesteps=128", "eval.eval_every=64", "train.torch_threads=1", "train.checkpoint_every=0")


@pytest.fixture(scope="module")
def base():
    return TrainSettings("smoke", SHORT).resolve()


def _space(tmp_path, text: str):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_space_reads_every_distribution(tmp_path, base):
    dims = load_space(_space(tmp_path, (
        "ppo.learning_rate: {loguniform: [1.0e-4, 3.0e-3]}\n"
        "ppo.ent_coef: {uniform: [0, 0.1]}\n"
        "ppo.n_epochs: {randint: [2, 8]}\n"
        "policy.hidden_dim: [8, 16]\n"
        "env.reward: {choice: [stay, dense]}\n"
        "ppo.gamma: {grid: [0.99, 1.0]}\n"
    )), base)  # fmt: skip
    assert [(d.key, d.kind, d.values) for d in dims] == [
        ("ppo.learning_rate", "loguniform", (1e-4, 3e-3)),
        ("ppo.ent_coef", "uniform", (0.0, 0.1)),
        ("ppo.n_epochs", "randint", (2, 8)),
        ("policy.hidden_dim", "choice", (8, 16)),
        ("env.reward", "choice", ("stay", "dense")),
        ("ppo.gamma", "grid", (0.99, 1.0)),
    ]
    assert override("env.reward", "dense") == 'env.reward="dense"'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ppo.learning_rat: [0.1]\n", "unknown key 'ppo.learning_rat'"),
        ("ppo.learning_rate: {normal: [0, 1]}\n", "unknown distribution 'normal'"),
        ("ppo.learning_rate: {loguniform: [0, 1]}\n", "needs low < high and low > 0"),
        ("ppo.learning_rate: {uniform: [1]}\n", r"needs \[low, high\] as two numbers"),
        ("ppo.n_epochs: {randint: [1.5, 4]}\n", "needs integer ends"),
        ("policy.hidden_dim: [16, many]\n", "expected an integer, got 'many'"),
        ("- ppo.learning_rate\n", "a search space is a mapping of dotted config keys"),
        ("ppo.learning_rate: {uniform: [0.1, 0.2], choice: [1]}\n", "give one distribution"),
    ],
)
def test_bad_space_is_one_clear_error(tmp_path, base, text, message):
    with pytest.raises(HulkInputError, match=message) as err:
        load_space(_space(tmp_path, text), base)
    assert "space.yaml" in err.value.one_line()


def test_trial_directory_names():
    assert trial_dir_name("3f2a1_00007") == "trial-007"


def test_cli_bad_input_is_one_line(tmp_path):
    space = _space(tmp_path, "ppo.nope: [1, 2]\n")
    result = CliRunner().invoke(app, ["tune", "--config", "smoke", "--space", str(space), "--out", str(tmp_path / "sweep")])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {space}: field 'ppo.nope': unknown key 'ppo.nope'; keys of 'ppo': learning_rate")
    no_eval = CliRunner().invoke(
        app, ["tune", "--config", "smoke", "--space", str(space), "--set", "eval.eval_every=0", "--out", str(tmp_path / "s2")]
    )
    assert no_eval.exit_code == 2 and "training must evaluate" in no_eval.output
    assert not (tmp_path / "sweep").exists() and not (tmp_path / "s2").exists()  # nothing written


def test_four_trials_write_run_directories_and_the_best_config(tmp_path):
    pytest.importorskip("ray")
    space = _space(tmp_path, "ppo.learning_rate: {loguniform: [1.0e-4, 3.0e-3]}\npolicy.hidden_dim: [8, 16]\n")
    sweep = tmp_path / "sweep"
    result = tune(TuneSettings("smoke", space, trials=4, out=sweep, overrides=SHORT, ray="local", workers=2))

    assert [t.trial for t in result.trials] == ["trial-000", "trial-001", "trial-002", "trial-003"]
    for t in result.trials:
        run = sweep / "trials" / t.trial  # the usual run-directory layout
        for name in ("config.yaml", "versions.json", "env_spec.json", "eval/evaluations.csv", "best_policy/policy.json"):
            assert (run / name).is_file(), (t.trial, name)
        assert list((run / "tb").rglob("events.out.tfevents*")), "TensorBoard logs per trial"
        config = read_run_config(run)
        assert config.ppo.learning_rate == t.params["ppo.learning_rate"]
        assert config.policy.hidden_dim == t.params["policy.hidden_dim"] in (8, 16)
        assert 1e-4 <= config.ppo.learning_rate <= 3e-3
        with (run / "eval" / "evaluations.csv").open() as fh:
            evaluations = [float(r["mean_speedup"]) for r in csv.DictReader(fh)]
        assert t.val_speedup == pytest.approx(max(evaluations), rel=1e-5)  # what training reported
        assert t.status in ("finished", "stopped early (ASHA)")
        assert (t.status == "finished") == (t.timesteps == 128) == (run / "policy" / "policy.json").is_file()
    assert len({t.params["ppo.learning_rate"] for t in result.trials}) == 4

    best = max(result.trials, key=lambda t: t.val_speedup)
    assert result.best == best and math.isfinite(best.val_speedup)
    resolved = yaml.safe_load((sweep / "best_config.yaml").read_text())
    assert resolved == read_run_config(sweep / "trials" / best.trial).to_dict()  # written resolved
    summary = json.loads((sweep / "best.json").read_text())
    assert summary["trial"] == best.trial and summary["params"] == best.params
    with (sweep / "trials.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["trial"] for r in rows] == [t.trial for t in result.trials]
    assert {r["status"] for r in rows} <= {"finished", "stopped early (ASHA)"}


def test_a_failing_trial_is_listed_with_its_error(tmp_path):
    pytest.importorskip("ray")
    # Each value is valid alone; together they are not (hidden_dim must divide into heads).
    space = _space(tmp_path, "policy.heads: [3]\npolicy.hidden_dim: [16]\n")
    result = tune(TuneSettings("smoke", space, trials=1, out=tmp_path / "sweep", overrides=SHORT))
    (trial,) = result.trials
    assert trial.status.startswith("error: ") and "multiple of heads 3" in trial.status
    assert math.isnan(trial.val_speedup) and result.best is None and result.best_config is None
    with (tmp_path / "sweep" / "trials.csv").open() as fh:
        assert [r["status"] for r in csv.DictReader(fh)] == [trial.status]
    assert not (tmp_path / "sweep" / "best_config.yaml").exists()
