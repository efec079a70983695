"""Issue 35: the plan settings as instance features (observation, generator, suite, baselines),
older policies loading unchanged, and training validated on the cost objective."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.network.saved_policy import (
    GLOBALS_READERS,
    LEGACY_GLOBALS,
    TRAILING_COLUMNS,
    load_policy,
    pad_new_globals,
)
from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.env import GLOBAL_FEATURES, PlacementEnvV1
from hulk_env.env.observation import GLOBAL_HIGH, GLOBAL_INDEX, plan_features
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite, suite_instance
from hulk_env.evaluation.suites import SETTINGS_V0_CASES
from hulk_env.generators import InstanceListGenerator, make_generator, naive_fits_memory
from hulk_env.generators.random_geo import PLAN_INNER_STEPS, PLAN_OUTER_BITS
from hulk_env.money import dollars
from hulk_env.parallelism import plan_info
from hulk_env.reference import naive_placement, reference_fits

REPO = Path(__file__).resolve().parents[1]
PRETRAINED = REPO / "agents" / "pretrained" / "gnn-ppo"
PLAN_COLUMNS = GLOBAL_FEATURES[LEGACY_GLOBALS:]


@pytest.fixture(scope="module")
def settings_suite():
    return load_suite("settings-v0")


# ---------------------------------------------------------------------------- observation
def test_plan_columns_are_zero_at_the_default_settings():
    """The first instance of every cheap suite keeps the defaults: its plan columns read 0."""
    for inst in (load_suite("tiny-v0")[0], suite_instance("val-v0", 0)):
        assert all(v == 0.0 for v in plan_features(inst.workload).values()), inst.instance_id
        env = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
        obs, _ = env.reset(seed=0)
        assert obs["globals"][[GLOBAL_INDEX[c] for c in PLAN_COLUMNS]].tolist() == [0.0] * len(PLAN_COLUMNS)
    assert GLOBAL_FEATURES[:LEGACY_GLOBALS] == ("progress", "replica", "micro_batches_log", "is_1f1b", "stash")
    assert len(GLOBAL_HIGH) == len(GLOBAL_FEATURES)


def test_plan_columns_read_the_settings():
    w = suite_instance("tiny-v0", 0).workload.with_training(
        tensor_parallel=8, zero=2, sync="diloco", inner_steps=100, outer_bits=8, streaming=True, micro_batch_size=4
    )
    assert plan_features(w) == pytest.approx({
        "tensor_parallel_on": 1.0, "tensor_parallel_log": 0.75, "micro_batch_log": 0.5, "zero_stage": 2 / 3,
        "diloco": 1.0, "inner_steps_log": 2 / 3, "outer_compression": 2 / 3, "streaming": 1.0,
    })  # fmt: skip
    # t = 1 is on (machines GPU by GPU) though log2(1) = 0; DiLoCo's H and bits are moot under every-step.
    one = plan_features(w.with_training(tensor_parallel=1, sync="every-step"))
    assert one["tensor_parallel_on"] == 1.0 and one["tensor_parallel_log"] == 0.0
    assert one["diloco"] == one["inner_steps_log"] == one["outer_compression"] == one["streaming"] == 0.0


def test_settings_suite_observations_fit_the_space_and_differ(settings_suite):
    seen = set()
    for inst in settings_suite[:4]:
        env = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs), inst.instance_id
        assert info["plan_settings"]["tensor_parallel"] == inst.workload.tensor_parallel
        seen.add(tuple(obs["globals"][LEGACY_GLOBALS:].round(6)))
    assert len(seen) == 4


# ------------------------------------------------------------------ older policies load unchanged
# The shipped policy (5 globals) on main before the plan columns: first-slot logits (plan shown)
# and the greedy rollout's placement.
MAIN_FIRST_LOGITS = {
    ("tiny-v0", 3): [6.46188, 5.72712],
    ("val-v0", 0): [6.29544, 4.2535, 5.57113, 4.64278, 4.92634, 6.68052, 4.50581, 4.51503],
}
MAIN_GREEDY_TINY3 = [0, 0, 1]


def test_shipped_policy_decides_as_on_main():
    from agents.decision.inference import instance_env, masked_logits, rollout

    loaded = load_policy(PRETRAINED)
    current = loaded.policy.features_extractor.current
    assert current.in_features == 32 + len(GLOBAL_FEATURES) + TRAILING_COLUMNS
    assert not current.weight[:, 32 + LEGACY_GLOBALS : 32 + len(GLOBAL_FEATURES)].any()  # the padded columns
    for (suite, index), want in MAIN_FIRST_LOGITS.items():
        inst = suite_instance(suite, index)
        env = instance_env(inst, False, plan=True)
        obs, _ = env.reset(options={"instance": inst})
        with torch.inference_mode():
            logits, _ = masked_logits(loaded.policy, obs, env.action_masks())
        np.testing.assert_allclose(logits.numpy(), want, atol=2e-4)
        if suite == "tiny-v0":
            with torch.inference_mode():
                done = rollout(loaded.policy, env, inst)
            assert done.placement.reshape(-1).tolist() == MAIN_GREEDY_TINY3


def test_pad_new_globals_inserts_zero_columns_before_the_trailing_ones():
    new_g = len(GLOBAL_FEATURES)
    want = {"a.current.weight": torch.zeros(3, 4 + new_g + TRAILING_COLUMNS), "other.weight": torch.zeros(3, 9)}
    old = torch.arange(3 * (4 + LEGACY_GLOBALS + TRAILING_COLUMNS), dtype=torch.float32).view(3, -1)
    state = {"a.current.weight": old, "other.weight": torch.ones(3, 7)}
    out = pad_new_globals(state, want)
    padded = out["a.current.weight"]
    assert padded.shape == want["a.current.weight"].shape
    keep = 4 + LEGACY_GLOBALS
    assert torch.equal(padded[:, :keep], old[:, :keep]) and torch.equal(padded[:, -TRAILING_COLUMNS:], old[:, keep:])
    assert not padded[:, keep:-TRAILING_COLUMNS].any()
    assert out["other.weight"] is state["other.weight"]  # not a globals reader: left to load_state_dict
    assert all(key.endswith(GLOBALS_READERS) for key in ("x.current.weight", "mlp_extractor.context.weight"))


def _tampered_copy(tmp_path: Path, change) -> Path:
    target = tmp_path / "policy"
    shutil.copytree(PRETRAINED, target)
    state = torch.load(target / "weights.pt", weights_only=True)
    change(state)
    torch.save(state, target / "weights.pt")
    meta = json.loads((target / "policy.json").read_text())
    meta["weights_sha256"] = hashlib.sha256((target / "weights.pt").read_bytes()).hexdigest()
    (target / "policy.json").write_text(json.dumps(meta))
    return target


def test_other_weight_mismatches_stay_one_clear_error(tmp_path):
    def narrower_machine_input(state):
        state["features_extractor.machine_in.0.weight"] = state["features_extractor.machine_in.0.weight"][:, :-1]

    with pytest.raises(HulkInputError, match="weights do not fit the network"):
        load_policy(_tampered_copy(tmp_path / "a", narrower_machine_input))

    def globals_too_few(state):  # fewer globals than any policy ever had: not padded
        key = "features_extractor.current.weight"
        state[key] = torch.cat([state[key][:, :33], state[key][:, -TRAILING_COLUMNS:]], dim=1)

    with pytest.raises(HulkInputError, match="weights do not fit the network"):
        load_policy(_tampered_copy(tmp_path / "b", globals_too_few))


# ---------------------------------------------------------------------- generator and suite
def test_random_generator_draws_plan_settings_only_when_asked():
    plain, planned = make_generator("random"), make_generator("random", plan_settings=True)
    assert plain.plan_settings is False
    drawn = []
    for key in (11, 12, 13, 14, 15, 16, 17, 18):
        a, b = plain.instance(key), planned.instance(key)
        assert a.workload.tensor_parallel == 0 and a.workload.zero == 0 and a.workload.sync == "every-step"
        # the same cluster and model: the settings have a random stream of their own
        assert np.array_equal(a.cluster.flops, b.cluster.flops) and np.array_equal(a.workload.flops, b.workload.flops)
        w, gpus = b.workload, int(b.cluster.num_gpus.max())
        assert w.tensor_parallel == 0 or gpus % w.tensor_parallel == 0
        assert 0 <= w.zero <= 3
        if w.sync == "diloco":
            assert w.inner_steps in PLAN_INNER_STEPS and w.outer_bits in PLAN_OUTER_BITS
        assert naive_fits_memory(b)  # what the env's witness needs at reset
        drawn.append((w.tensor_parallel, w.zero, w.sync))
    assert len(set(drawn)) > 4
    with pytest.raises(HulkInputError, match="true or false"):
        make_generator("random", plan_settings="yes")


def test_env_on_drawn_plan_settings_passes_check_env():
    from gymnasium.utils.env_checker import check_env

    env = PlacementEnvV1(generator="random", generator_kwargs={"plan_settings": True})
    seen = set()
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        assert obs["globals"][GLOBAL_INDEX["zero_stage"]] == pytest.approx(info["plan_settings"]["zero"] / 3)
        seen.add(tuple(obs["globals"][LEGACY_GLOBALS:].round(6)))
    assert len(seen) > 3
    check_env(env, skip_render_check=True)


def test_settings_suite_varies_the_settings(settings_suite):
    assert [i.instance_id for i in settings_suite] == [f"settings-v0/{i}" for i in range(len(SETTINGS_V0_CASES))]
    ws = [i.workload for i in settings_suite]
    assert {w.tensor_parallel for w in ws} >= {0, 1, 2, 4, 8}
    assert {w.zero for w in ws} == {0, 1, 2, 3}
    assert {w.sync for w in ws} == {"every-step", "diloco"}
    assert {w.outer_bits for w in ws if w.sync == "diloco"} == {4, 8, 16, 32}
    assert any(w.streaming for w in ws) and not all(w.streaming for w in ws if w.sync == "diloco")
    assert all(reference_fits(i) and naive_fits_memory(i) and int(i.cluster.num_gpus.min()) > 1 for i in settings_suite)
    for (machines, _model, replicas, settings), inst in zip(SETTINGS_V0_CASES, settings_suite, strict=True):
        assert inst.num_machines == machines and inst.data_parallel == replicas
        assert all(getattr(inst.workload, k) == v for k, v in settings.items())
    alone = suite_instance("settings-v0", 5)
    assert np.array_equal(alone.cluster.flops, settings_suite[5].cluster.flops)
    assert plan_info(alone.workload) == plan_info(settings_suite[5].workload)


def _assert_places(method: str, instances) -> None:
    for inst in instances:
        result = get_method(method)(inst, 0, None)
        assert result.feasible and result.cost_evals > 0, (inst.instance_id, result.reason)
        placed = cost.evaluate(inst.cluster, inst.workload, result.placement)
        assert bool(placed.memory_feasible) and 0 < float(placed.iteration_time_s) < np.inf


def test_baselines_place_settings_instances(settings_suite):
    """Both take every setting; the chain DP on the cases under 0.8 s (TP 8, TP 2 + ZeRO 1, ZeRO 3)."""
    _assert_places("compute-greedy", settings_suite)
    _assert_places("latency-chain-dp", [settings_suite[i] for i in (0, 1, 3)])


@pytest.mark.slow
def test_chain_dp_places_every_settings_instance(settings_suite):  # 40 s: DiLoCo cases of 32-64 machines
    _assert_places("latency-chain-dp", settings_suite)


# ------------------------------------------------------------------ training on the cost reward
def test_objective_per_reward():
    from agents.training.train import objective

    speed, saving = math.log(2.0), math.log(3.0)
    assert objective("terminal", 1.0, 2.0, None, None) == pytest.approx(speed)
    assert objective("stay", 1.0, 2.0, None, None) == pytest.approx(speed)
    assert objective("cost", 1.0, 2.0, 1.0, 3.0) == pytest.approx(saving)
    assert objective("mixed", 1.0, 2.0, 1.0, 3.0) == pytest.approx((speed + saving) / 2)


def test_cost_reward_run_validates_on_dollars(tmp_path):
    """A 128-step run with reward=cost: its validation score is the mean over held-out instances
    of the best log dollar saving among the policy's candidates, priced here independently."""
    from agents.decision.inference import START_CANDIDATES, sampled_rollouts
    from agents.training.config import TrainSettings, lookahead_mode
    from agents.training.sources import training_source
    from agents.training.train import train

    overrides = ("train.torch_threads=1", "env.reward=cost", "train.total_timesteps=128", "eval.eval_every=128",
                 "train.tensorboard=false", "train.name=cost")  # fmt: skip
    config = TrainSettings("smoke", overrides, out=tmp_path).resolve()
    run = train(config)
    rows = (run / "eval" / "evaluations.csv").read_text().splitlines()
    assert rows[0] == "timesteps,mean_reward,mean_speedup,best_mean_reward,rollout_speedup" and len(rows) == 2
    recorded = float(rows[1].split(",")[1])

    policy = load_policy(run, "best").policy
    _, heldout = training_source(config)
    scores = []
    for inst in heldout[: config.eval.n_eval_episodes]:
        c, w = inst.cluster, inst.workload
        reference = dollars(c, w, naive_placement(inst), impute=True).usd_per_iteration
        done = sampled_rollouts(policy, inst, lookahead_mode(config), plan=config.env.plan, starts=START_CANDIDATES)
        scores.append(max(max(math.log(reference / dollars(c, w, r.placement, impute=True).usd_per_iteration), -5.0) for r in done))
    assert recorded == pytest.approx(float(np.mean(scores)), abs=2e-6)


def test_env_mask_keeps_tensor_parallel_groups_within_memory():
    """settings-v0/2 (TP 4, ZeRO 2, D 2; d_m = 2 on its 8-GPU boxes): the highest-index allowed
    machine at every step ended 1.27x over one machine's memory under cost.memory_use_bytes when
    the mask bounded a slot with one data-parallel group per machine; the mask now
    uses every machine's own rates (feasibility.plan_slot_memory)."""
    inst = suite_instance("settings-v0", 2)
    env = PlacementEnvV1(generator=InstanceListGenerator((inst,)))
    obs, _ = env.reset(options={"instance": inst})
    done = False
    while not done:
        obs, _, done, _, info = env.step(int(np.flatnonzero(obs["action_mask"])[-1]))
    assert not info["dead_end"]
    placed = cost.evaluate(inst.cluster, inst.workload, np.array(info["placement"]))
    assert bool(placed.memory_feasible)
