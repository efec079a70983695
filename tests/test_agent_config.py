"""Typed run config: YAML files, dotted overrides, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.training.config import (
    CONFIG_DIR,
    RunConfig,
    TrainSettings,
    apply_overrides,
    config_from_dict,
    load_config,
    resolve_config_path,
    save_config,
)
from hulk_env.errors import HulkInputError

TRAINING_CONFIGS = ("default", "smoke", "tiny", "tiny-generalize", "pipeline-lookahead")


def test_every_shipped_config_loads():
    shipped = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    assert set(TRAINING_CONFIGS) <= set(shipped)
    for name in shipped:
        assert isinstance(load_config(name), RunConfig)


def test_configs_are_package_data():
    """Found next to the module (any install), not through the repository root."""
    import agents

    assert CONFIG_DIR.parent == Path(agents.__file__).resolve().parent
    assert resolve_config_path("smoke") == CONFIG_DIR / "smoke.yaml"


def test_train_settings_order_and_types(tmp_path):
    settings = TrainSettings(
        config="smoke", overrides=("train.seed=5", "train.total_timesteps=64", "ppo.n_steps=32"),
        total_timesteps=256, out=tmp_path, name="x",
    )  # fmt: skip
    cfg = settings.resolve()
    assert cfg.train.total_timesteps == 256  # the named field wins over the override
    assert cfg.train.seed == 5 and cfg.ppo.n_steps == 32  # overrides win over the file
    assert cfg.train.out == str(tmp_path) and cfg.train.name == "x"
    assert cfg.env.generator == "toy"  # the rest is smoke.yaml's
    assert settings.label == "smoke" and TrainSettings().label == "default"
    base = RunConfig()
    again = TrainSettings(config=base, seed=3).resolve()
    assert again.train.seed == 3 and base.train.seed == 0  # the base record is not changed
    with pytest.raises(HulkInputError, match="expected an integer"):
        TrainSettings(total_timesteps="lots").resolve()


def test_default_config_is_the_main_job():
    cfg = load_config()
    assert (cfg.env.generator, cfg.env.cluster, cfg.env.model) == ("fixed", "default", "default")
    assert cfg.policy.extractor == "gnn"
    assert cfg.train.total_timesteps > 0


def test_overrides_are_typed():
    cfg = apply_overrides(
        RunConfig(),
        [
            "ppo.learning_rate=1e-4",  # PyYAML reads this as a string; the field is a float
            "train.total_timesteps=1e5",
            "ppo.target_kl=null",
            "eval.baselines=naive,exact",
            "train.progress_bar=false",
            "env.data_parallel=2",
        ],
    )
    assert cfg.ppo.learning_rate == pytest.approx(1e-4)
    assert cfg.train.total_timesteps == 100_000 and isinstance(cfg.train.total_timesteps, int)
    assert cfg.ppo.target_kl is None
    assert cfg.eval.baselines == ["naive", "exact"]
    assert cfg.train.progress_bar is False
    assert cfg.env.data_parallel == 2


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("ppo.learning_rat=1e-4", "unknown key 'ppo.learning_rat'"),
        ("ppx.learning_rate=1e-4", "unknown config section 'ppx'"),
        ("train.total_timesteps=lots", "expected an integer"),
        ("train.total_timesteps=1.5", "expected an integer"),
        ("ppo.learning_rate=fast", "expected a number"),
        ("train.progress_bar=maybe", "expected true or false"),
        ("learning_rate=1e-4", "must look like section.key=value"),
        ("ppo.learning_rate", "must look like section.key=value"),
    ],
)
def test_bad_overrides_are_one_clear_error(override, fragment):
    with pytest.raises(HulkInputError) as err:
        apply_overrides(RunConfig(), [override])
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_yaml_names_the_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("ppo:\n  n_stepz: 12\n")
    with pytest.raises(HulkInputError) as err:
        load_config(path)
    assert str(path) in str(err.value) and "ppo.n_stepz" in str(err.value)
    path.write_text("ppo: [1, 2\n")
    with pytest.raises(HulkInputError, match="not valid YAML"):
        load_config(path)
    path.write_text("ppo: 3\n")
    with pytest.raises(HulkInputError, match="must be a mapping"):
        load_config(path)
    with pytest.raises(HulkInputError, match="no config file"):
        resolve_config_path("no-such-config")


def test_saved_config_round_trips(tmp_path):
    cfg = apply_overrides(RunConfig(), ["ppo.n_steps=64", "eval.baselines=naive", "env.suite=geo-v0"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert again == cfg
    assert config_from_dict(cfg.to_dict()) == cfg


def test_lookahead_completion_setting_and_saved_policy_field():
    """``env.completion`` is checked by name; a saved policy records the rule (and policies
    saved before the setting, ``lookahead: true``, read as the stay completion)."""
    from agents.network.saved_policy import lookahead_of
    from agents.training.config import lookahead_mode
    from hulk_env.validation.schemas import PolicyObservation

    assert lookahead_mode(load_config(None, ["env.completion=pipeline"])) == "pipeline"
    assert lookahead_mode(load_config(None, ["env.completion=stay"])) is True
    assert lookahead_mode(load_config(None, ["env.completion=pipeline", "env.lookahead=false"])) is False
    with pytest.raises(HulkInputError, match="env.completion"):
        load_config(None, ["env.completion=pipe"])
    assert lookahead_of({"observation": {"lookahead": "pipeline"}}) == "pipeline"
    assert lookahead_of({"observation": {"lookahead": "stay"}}) is True
    assert lookahead_of({"observation": {"lookahead": True}}) is True
    assert PolicyObservation.model_validate({"lookahead": "pipeline"}).lookahead == "pipeline"
    with pytest.raises(ValueError, match="pipeline"):
        PolicyObservation.model_validate({"lookahead": "other"})


def test_plan_settings_reach_the_random_generator_and_only_it():
    """`env.plan_settings` makes the training source draw plan settings (the observation's new
    globals then vary); any other generator refuses it rather than ignoring it."""
    from agents.training.sources import training_source
    from hulk_env import parallelism

    config = apply_overrides(
        RunConfig(), ["env.generator=random", "env.plan_settings=true", "eval.heldout_instances=6", "env.cities=[]"]
    )
    _, heldout = training_source(config)
    assert any(parallelism.plan_active(inst.workload) for inst in heldout)
    plain, _ = training_source(apply_overrides(RunConfig(), ["env.generator=random", "eval.heldout_instances=6"]))
    assert not any(parallelism.plan_active(plain(np.random.default_rng(s)).workload) for s in range(6))
    with pytest.raises(HulkInputError, match="env.plan_settings"):
        training_source(apply_overrides(RunConfig(), ["env.plan_settings=true"]))


def test_anneal_lr_decays_the_step_size_linearly_to_zero():
    """``ppo.anneal_lr``: the model's schedule is the configured rate x the share of the run
    still to go; off (the default), the rate stays constant."""
    from agents.training.train import build_model, make_vec_env
    from hulk_env.feasibility import Padding
    from hulk_env.generators import ToyGenerator

    for anneal in (True, False):
        cfg = load_config("smoke", [f"ppo.anneal_lr={str(anneal).lower()}", "ppo.learning_rate=0.002"])
        gen = ToyGenerator()
        model = build_model(cfg, make_vec_env(gen, Padding(8, 16, 32), cfg, 1), None)
        rates = [model.lr_schedule(p) for p in (1.0, 0.5, 0.0)]
        assert rates == ([0.002, 0.001, 0.0] if anneal else [0.002] * 3)
    with pytest.raises(HulkInputError, match="anneal_lr"):
        load_config(None, ["ppo.anneal_lr=maybe"])


def test_completion_rules_agree_with_the_schema():
    """The config and saved-policy schemas accept exactly the lookahead's completion rules."""
    from agents.training.shaping import COMPLETIONS, SHAPING_COMPLETIONS
    from hulk_env.validation.schemas import LOOKAHEAD_COMPLETIONS
    from hulk_env.validation.schemas import SHAPING_COMPLETIONS as SCHEMA_SHAPING

    assert COMPLETIONS == LOOKAHEAD_COMPLETIONS and SHAPING_COMPLETIONS == SCHEMA_SHAPING
    assert load_config(None, ["env.completion=witness", "env.lookahead=false"]).env.completion == "witness"
    with pytest.raises(HulkInputError, match="shapes the reward only"):
        load_config(None, ["env.completion=witness", "env.lookahead=true"])
    assert load_config(None, ["env.completion=split"]).env.completion == "split"
