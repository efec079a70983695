"""Train the placement policy with masked PPO: ``train(config) -> run directory``.

Reads top to bottom (CleanRL style): config (every setting checked) -> seeds -> instances ->
run directory (created atomically, locked: :mod:`agents.training.runs`) -> envs -> model -> callbacks ->
learn -> save. A bad setting, cluster or model stops the run before its directory exists. Everything a run writes lives in its directory::

    RUN_DIR/
      config.yaml        the resolved RunConfig (re-read by --resume)
      versions.json      Python, package versions, git commit (agents.training.runs.run_metadata)
      env_spec.json      env id, constructor arguments, padding, instance ids, spaces
      checkpoint.pt      latest training state (weights-only torch file, written atomically)
      policy/            final policy: policy.json + weights.pt (see agents.network.saved_policy)
      best_policy/       best evaluation on the held-out instances so far (same format)
      bc_policy/         the policy right after behaviour cloning (with imitation only)
      eval/evaluations.csv   held-out evaluations over time (step 0: after imitation)
      eval/imitation.csv     behaviour-cloning curve per epoch (with imitation only)
      eval/imitation.json    the demonstrations: count, slots replayed under the mask, methods
      tb/                TensorBoard logs (SB3 scalars + placement/* metrics)

With ``imitation.demonstrations > 0`` the network is first trained by behaviour cloning
(:mod:`agents.training.imitation`) on demonstrations of the strongest fast baselines on instances of the
training generator, then fine-tuned by masked PPO. The held-out instances (``env.heldout_suite``,
e.g. ``val-v0``: neither training nor test instances) are placed greedily at their own size
every ``eval.eval_every`` steps and after imitation; the best evaluation is ``best_policy/``.

Checkpoint and resume: ``checkpoint.pt`` holds the policy and optimizer ``state_dict``s, the
timestep count, the torch RNG state and the best evaluation so far -- tensors and plain
values only, loaded with ``torch.load(weights_only=True)``. It is written every
``train.checkpoint_every`` steps at a rollout boundary and at the end, through a temporary file
and ``os.replace``, so a kill at any moment leaves the previous complete checkpoint.
``train(config, resume=RUN_DIR)`` rebuilds the model from ``RUN_DIR/config.yaml``, restores the
checkpoint (a run killed before its first one starts again from step 0) and continues until the
same ``total_timesteps`` (SB3 rounds up to whole rollouts,
``n_steps x n_envs``, both times, so both runs stop at the same count).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from agents.decision.plan import PlanHint
from agents.network.files import atomic_torch_save, safe_torch_load
from agents.network.policy import policy_class_and_kwargs
from agents.network.saved_policy import policy_observation_space, save_policy
from agents.training.config import (
    RunConfig,
    TrainSettings,
    config_from_dict,
    config_text,
    lookahead_mode,
    validate_config,
)
from agents.training.imitation import trainable_parameters
from agents.training.runs import (
    BEST_POLICY_DIR,
    CONFIG_FILE,
    EVAL_POLICIES_DIR,
    EVALUATIONS_CSV,
    FINAL_POLICY_DIR,
    TENSORBOARD_DIR,
    VERSIONS_FILE,
    clean_for_resume,
    create_run_dir,
    lock_run_dir,
    read_run_config,
    run_metadata,
)
from agents.training.shaping import StayLookahead
from agents.training.sources import padding_for, training_source
from hulk_env import cost
from hulk_env.env import ENV_ID_V1, PlacementEnvV1
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import Padding
from hulk_env.files import atomic_write_text
from hulk_env.instance import Instance
from hulk_env.rewards import DEAD_END_REWARD, log_saving_reward, log_speedup_reward
from hulk_env.traffic import wan_share

CHECKPOINT = "checkpoint.pt"
CHECKPOINT_FORMAT = "hulk-checkpoint/1"


# --------------------------------------------------------------------------------- envs
class PlacementMetrics(gym.Wrapper):
    """Adds ``wan_traffic_share`` to the final step's info (the instance is gone after reset)."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated and not info.get("dead_end", False) and "placement" in info:
            info["wan_traffic_share"] = wan_share(self.env.unwrapped.instance, info["placement"])
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()


REWARDS = ("terminal", "dense", "stay", "cost", "mixed")
DOLLAR_REWARDS = ("cost", "mixed")  # scored in dollars too (hulk_env.rewards.CostReward, MixedReward)


def make_env(generator: Any, padding: Padding, config: RunConfig) -> gym.Env:
    """One training env: ``hulk/Placement-v1`` at the training padding, stay shaping and
    lookahead (:mod:`agents.training.shaping`), the DP plan (:mod:`agents.decision.plan`), placement metrics, SB3's
    Monitor (no file)."""
    reward = config.env.reward
    if reward not in REWARDS:
        raise HulkInputError(f"unknown env.reward '{reward}'; choose one of {', '.join(REWARDS)}", field="env.reward")
    env: gym.Env = PlacementEnvV1(
        generator=generator,
        max_machines=padding.max_machines,
        max_layers=padding.max_layers,
        max_edges=padding.max_edges,
        reward="terminal" if reward == "stay" else reward,
        invalid_action=config.env.invalid_action,
    )
    if reward == "stay" or config.env.lookahead:
        env = StayLookahead(env, shape=reward == "stay", lookahead=config.env.lookahead, completion=config.env.completion)
    if config.env.plan:
        env = PlanHint(env)
    return Monitor(PlacementMetrics(env))


def make_vec_env(generator: Any, padding: Padding, config: RunConfig, n_envs: int) -> DummyVecEnv:
    """``n_envs`` in-process envs (the network, not the env, is the cost on 2 cores)."""
    return DummyVecEnv([lambda: make_env(generator, padding, config) for _ in range(n_envs)])


# ------------------------------------------------------------------------------ model
def build_model(config: RunConfig, vec_env: DummyVecEnv, tb_dir: Path | None) -> MaskablePPO:
    """MaskablePPO with the configured policy and hyper-parameters."""
    p = config.policy
    policy_cls, policy_kwargs = policy_class_and_kwargs(p.extractor, p.hidden_dim, p.machine_rounds, p.layer_rounds, p.heads, p.gain_prior)
    ppo = asdict(config.ppo)
    trainable = ppo.pop("trainable")
    if ppo.pop("anneal_lr"):
        ppo["learning_rate"] = linear_schedule(config.ppo.learning_rate)
    model = MaskablePPO(
        policy_cls,
        vec_env,
        policy_kwargs=policy_kwargs,
        tensorboard_log=str(tb_dir) if tb_dir else None,
        seed=config.train.seed,
        device=config.train.device,
        verbose=0,
        **ppo,
    )
    if trainable != "all":
        # Only these move: the optimizer holds nothing else (built here, so a resumed run's
        # saved optimizer state has the same groups).
        policy = model.policy
        params = trainable_parameters(policy, trainable) + list(policy.value_net.parameters())
        policy.optimizer = policy.optimizer_class(params, lr=model.lr_schedule(1), **policy.optimizer_kwargs)
    return model


def linear_schedule(initial: float) -> Callable[[float], float]:
    """SB3's learning-rate schedule for ``ppo.anneal_lr``: ``initial`` x the share of the run's
    steps still to go (SB3's ``progress_remaining``, 1 -> 0)."""
    return lambda progress_remaining: initial * progress_remaining


def seed_everything(seed: int, threads: int) -> None:
    """Seed Python, numpy and torch; set torch's thread count."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds third-party code that uses the legacy global RNG
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, threads))


# -------------------------------------------------------------------------- checkpoints
def save_checkpoint(model: MaskablePPO, run_dir: Path, best_mean_reward: float) -> Path:
    """Atomically write ``checkpoint.pt`` (see the module docstring)."""
    state = {
        "format": CHECKPOINT_FORMAT,
        "num_timesteps": int(model.num_timesteps),
        "policy": model.policy.state_dict(),
        "optimizer": model.policy.optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "best_mean_reward": float(best_mean_reward),
        "saved_at": time.time(),
    }
    path = run_dir / CHECKPOINT
    atomic_torch_save(state, path)
    return path


def load_checkpoint(model: MaskablePPO, run_dir: Path) -> float:
    """Restore ``checkpoint.pt`` into ``model``; returns the best evaluation recorded so far.

    Raises:
        HulkInputError: missing, corrupt, or from a different network.
    """
    path = run_dir / CHECKPOINT
    state = safe_torch_load(path, "checkpoint")
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise HulkInputError(f"not a {CHECKPOINT_FORMAT} checkpoint", source=str(path))
    try:
        model.policy.load_state_dict(state["policy"])
        model.policy.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
    except (KeyError, RuntimeError, ValueError, TypeError) as exc:
        raise HulkInputError(
            f"checkpoint does not match the run's config ({type(exc).__name__}: {str(exc).splitlines()[0]})",
            source=str(path),
        ) from None
    model.num_timesteps = int(state["num_timesteps"])
    return float(state.get("best_mean_reward", -np.inf))


# -------------------------------------------------------------------------- callbacks
class PlacementLogger(BaseCallback):
    """TensorBoard ``placement/*``: iteration time, speed-up vs naive, WAN traffic share, dead
    ends (means over the episodes finished since the last log), and seconds per rollout."""

    def __init__(self) -> None:
        super().__init__()
        self._rollout_start = time.perf_counter()

    def _on_rollout_start(self) -> None:
        self._rollout_start = time.perf_counter()

    def _on_rollout_end(self) -> None:
        self.logger.record("time/rollout_s", time.perf_counter() - self._rollout_start)

    def _on_step(self) -> bool:
        for info, done in zip(self.locals["infos"], self.locals["dones"], strict=True):
            if not done:
                continue
            dead = bool(info.get("dead_end", False))
            self.logger.record_mean("placement/dead_end", float(dead))
            if "iteration_time_s" in info:
                self.logger.record_mean("placement/iteration_time_s", info["iteration_time_s"])
                self.logger.record_mean("placement/speedup_vs_naive", info["speedup"])
            if "wan_traffic_share" in info:
                self.logger.record_mean("placement/wan_traffic_share", info["wan_traffic_share"])
        return True


class Checkpointer(BaseCallback):
    """Atomic checkpoints every ``every`` steps (at rollout boundaries) and at the end."""

    def __init__(self, run_dir: Path, every: int, best: Any) -> None:
        super().__init__()
        self.run_dir, self.every, self.best = run_dir, every, best
        self._last = 0

    def _on_training_start(self) -> None:
        self._last = self.model.num_timesteps

    def _on_rollout_start(self) -> None:
        # The previous rollout has been trained on: the model is consistent here.
        if self.every > 0 and self.model.num_timesteps - self._last >= self.every:
            save_checkpoint(self.model, self.run_dir, self.best.best_mean_reward)
            self._last = self.model.num_timesteps

    def _on_step(self) -> bool:
        return True


class TimeLimit(BaseCallback):
    """Stops learning once ``minutes`` of wall-clock time have passed (``train.max_minutes``)."""

    def __init__(self, minutes: float) -> None:
        super().__init__()
        self.seconds = 60.0 * minutes
        self._start = time.perf_counter()

    def _on_training_start(self) -> None:
        self._start = time.perf_counter()

    def _on_step(self) -> bool:
        return self.seconds <= 0 or time.perf_counter() - self._start < self.seconds


# eval/evaluations.csv: ``rollout_speedup`` is the network's own greedy rollout alone (from the
# decision's best start where it reads the plan): what PPO trains, beside the decision's figures.
EVALUATION_COLUMNS = ("timesteps", "mean_reward", "mean_speedup", "best_mean_reward", "rollout_speedup")


def own_rollout(policy: Any, instance: Instance, config: RunConfig, done: list[Any]) -> Any:
    """The policy's own greedy rollout on ``instance`` (``None`` if it did not complete): with the
    plan, rolled out from the fastest plan's start (as ``hulk bench agent`` measures it); without,
    the greedy placement already among ``done``."""
    from agents.decision.inference import START_CANDIDATES, sampled_rollouts

    if not config.env.plan:
        return next((r for r in done if r.source == "rollout"), None)
    rolled = sampled_rollouts(policy, instance, lookahead_mode(config), plan=True, starts=START_CANDIDATES, always_rollout=True,
                              region_aligned=False)  # fmt: skip
    return next((r for r in rolled if r.source == "rollout"), None)


class Validation(BaseCallback):
    """Greedy placements of the held-out instances, each at its own size, every ``every`` steps
    (the decision that ships, :func:`agents.decision.inference.policy_placement`: with the plan, the
    fastest of the best start's rollout, its plan and the naive placement).

    The score is the mean over instances of the objective being trained (:func:`objective`:
    the log speed-up over the naive placement, the env's terminal reward; with ``env.reward``
    ``cost`` the log dollar saving per iteration over it, with ``mixed`` their mean; a rollout
    that does not complete scores ``DEAD_END_REWARD``) of the candidate that scores best on it,
    so the best checkpoint is chosen on what is trained (with the speed rewards: the fastest
    candidate, the geometric-mean speed-up's ranking). Each evaluation is a row of
    ``eval/evaluations.csv`` (``mean_reward``: the score; ``mean_speedup``: the geometric-mean
    speed-up of the chosen candidates; ``rollout_speedup``: the network's own greedy rollout's,
    :func:`own_rollout`) and ``eval/mean_reward``, ``eval/mean_speedup_vs_naive``,
    ``eval/rollout_speedup_vs_naive`` in TensorBoard; a new best is saved as ``best_policy/``; then ``on_eval(timesteps,
    exp(score))`` is told (e.g. a Ray Tune trial, :mod:`agents.training.tune`): the geometric-mean
    speed-up under the speed rewards, the objective's factor under ``cost`` and ``mixed``.

    Args:
        run_dir: the run directory.
        config: the run's config (the policy description saved with the weights).
        padding: the training padding (recorded in ``policy.json``).
        instances: the held-out instances.
        every: steps between evaluations (``0`` = never during PPO).
        on_eval: see above.
    """

    def __init__(
        self, run_dir: Path, config: RunConfig, padding: Padding, instances: list[Instance], every: int,
        on_eval: Callable[[int, float], None] | None = None,
    ) -> None:  # fmt: skip
        super().__init__()
        self.run_dir, self.config, self.padding, self.every, self.on_eval = run_dir, config, padding, every, on_eval
        self.instances = instances
        self.reference_s = [reference_time_s(i) for i in instances]
        dollars = config.env.reward in DOLLAR_REWARDS  # reference dollars only when scored on them
        self.reference_usd = [reference_usd(i, t) if dollars else None for i, t in zip(instances, self.reference_s, strict=True)]
        self.best_mean_reward = -np.inf
        self.last_mean_reward = -np.inf
        self._last = 0

    def _on_training_start(self) -> None:
        self._last = self.model.num_timesteps

    def _on_step(self) -> bool:
        if self.every > 0 and self.model.num_timesteps - self._last >= self.every:
            self._last = self.model.num_timesteps
            self.evaluate(self.model.policy, self.model.num_timesteps)
        return True

    def evaluate(self, policy: Any, timesteps: int) -> float:
        """Place every held-out instance greedily; record, keep the best, tell; the mean reward."""
        from agents.decision.inference import START_CANDIDATES, sampled_rollouts

        rewards, speedups, own_speedups = [], [], []
        training = policy.training
        policy.set_training_mode(False)
        for inst, ref, ref_usd in zip(self.instances, self.reference_s, self.reference_usd, strict=True):
            # The decision that ships (policy_placement): with the plan, the best candidate.
            done = sampled_rollouts(
                policy, inst, lookahead_mode(self.config), plan=self.config.env.plan, starts=START_CANDIDATES
            )
            scored = [(candidate_score(self.config.env.reward, inst, r, ref, ref_usd), r) for r in done]
            score, best = max(scored, key=lambda x: x[0], default=(DEAD_END_REWARD, None))
            rewards.append(score)
            speedups.append(DEAD_END_REWARD if best is None else log_speedup_reward(best.iteration_time_s, ref))
            own = own_rollout(policy, inst, self.config, done)
            own_speedups.append(0.0 if own is None else log_speedup_reward(own.iteration_time_s, ref))  # failed: naive
        policy.set_training_mode(training)
        mean = float(np.mean(rewards))
        self.last_mean_reward = mean
        saved_to = [self.run_dir / EVAL_POLICIES_DIR / str(int(timesteps))] if self.config.eval.keep_policies else []
        if mean > self.best_mean_reward:
            self.best_mean_reward = mean
            saved_to.append(self.run_dir / BEST_POLICY_DIR)
        for directory in saved_to:
            save_policy(
                policy, directory, policy_config=asdict(self.config.policy), padding=self.padding,
                lookahead=lookahead_mode(self.config), plan=self.config.env.plan,
                extra={"num_timesteps": int(timesteps), "mean_reward": mean},
            )  # fmt: skip
        path = self.run_dir / EVALUATIONS_CSV
        rows = path.read_text() if path.exists() else ",".join(EVALUATION_COLUMNS) + "\n"
        speedup = float(np.exp(np.mean(speedups)))  # exp(mean) itself under the speed rewards
        rollout_speedup = float(np.exp(np.mean(own_speedups)))
        values = {"timesteps": f"{int(timesteps)}", "mean_reward": f"{mean:.6f}", "mean_speedup": f"{speedup:.6f}",
                  "best_mean_reward": f"{self.best_mean_reward:.6f}", "rollout_speedup": f"{rollout_speedup:.6f}"}  # fmt: skip
        # in the file's own column order (a run resumed from before a column existed keeps its header)
        rows += ",".join(values.get(c, "") for c in rows.splitlines()[0].split(",")) + "\n"
        atomic_write_text(path, rows)
        if getattr(self, "model", None) is not None:  # during learn(); not for the step-0 evaluation
            self.logger.record("eval/mean_reward", mean)
            self.logger.record("eval/mean_speedup_vs_naive", speedup)
            self.logger.record("eval/rollout_speedup_vs_naive", rollout_speedup)
        what = "speed-up" if self.config.env.reward not in DOLLAR_REWARDS else f"{self.config.env.reward} objective"
        print(f"validation at {int(timesteps)} steps: geometric-mean {what} over naive x{float(np.exp(mean)):.3f} "
              f"(best x{float(np.exp(self.best_mean_reward)):.3f}, speed-up x{speedup:.3f}) on {len(self.instances)} instances",
              flush=True)  # fmt: skip
        if self.on_eval is not None:
            self.on_eval(int(timesteps), float(np.exp(mean)))
        return mean


def objective(reward: str, time_s: float, reference_time_s: float, usd: float | None, reference_usd: float | None) -> float:
    """A completed placement's value under the training reward ``reward`` (the env's terminal
    value, :mod:`hulk_env.rewards`): ``R`` = the log speed-up for ``terminal``, ``dense`` and
    ``stay`` (same episode return), ``C`` = the log dollar saving per iteration for ``cost``,
    ``(R + C) / 2`` for ``mixed`` (``usd``, ``reference_usd`` only needed for those two)."""
    speed = log_speedup_reward(time_s, reference_time_s)
    if reward not in DOLLAR_REWARDS:
        return speed
    saving = log_saving_reward(usd, reference_usd)
    return saving if reward == "cost" else (speed + saving) / 2.0


def candidate_score(reward: str, instance: Instance, candidate: Any, reference_time_s: float, reference_usd: float | None) -> float:
    """:func:`objective` of a candidate placement (:class:`agents.decision.inference.Rollout`), its
    dollars priced as the env prices them (:func:`hulk_env.money.dollars`, imputed list prices)
    from its iteration time (no further cost-model call)."""
    usd = None
    if reward in DOLLAR_REWARDS:
        from hulk_env.money import dollars

        c, w = instance.cluster, instance.workload
        usd = dollars(c, w, candidate.placement, candidate.iteration_time_s, impute=True).usd_per_iteration
    return objective(reward, candidate.iteration_time_s, reference_time_s, usd, reference_usd)


def reference_usd(instance: Instance, reference_time_s: float) -> float:
    """The naive placement's dollars per iteration (the cost reward's reference)."""
    from hulk_env.money import dollars
    from hulk_env.reference import naive_placement

    c, w = instance.cluster, instance.workload
    return dollars(c, w, naive_placement(instance), reference_time_s, impute=True).usd_per_iteration


def reference_time_s(instance: Instance) -> float:
    """The naive placement's iteration time (the env's reward reference)."""
    from hulk_env.reference import naive_placement

    return float(cost.iteration_time(instance.cluster, instance.workload, naive_placement(instance)))


# ---------------------------------------------------------------------------- imitation
IMITATION_SEED = 7_919  # demonstration instances never share the training envs' draws
BC_POLICY_DIR = "bc_policy"
IMITATION_CSV = "eval/imitation.csv"
IMITATION_JSON = "eval/imitation.json"  # the demonstrations: how many, replayed slots, which methods


def warm_start(policy: Any, config: RunConfig, generator: Any, padding: Padding, run_dir: Path) -> Any:
    """Behaviour cloning of ``policy`` (in place) on demonstrations of the training generator's
    instances (:mod:`agents.training.imitation`); writes ``eval/imitation.csv`` and ``bc_policy/``.
    Returns the :class:`agents.training.imitation.BCResult`."""
    from agents.decision.inference import instance_env
    from agents.training.imitation import (
        BCSettings,
        aggregate,
        behaviour_cloning,
        demonstrate,
        replay,
        with_plan,
    )

    im, tc = config.imitation, config.train
    log = print  # minutes of work before PPO's progress bar: say where it is
    rng = np.random.default_rng([tc.seed, IMITATION_SEED])
    started = time.perf_counter()
    make_env = partial(instance_env, lookahead=lookahead_mode(config), shape=config.env.reward == "stay", plan=config.env.plan)
    demos, episodes = [], []
    for i in range(im.demonstrations):
        demo = demonstrate(generator(rng), im.methods, tc.seed, polish_budget=im.polish_budget)
        if demo is not None and config.env.plan:
            demo = with_plan(demo)
        if demo is not None:
            demos.append(demo)
            episodes.append(replay(demo, make_env))
        if (i + 1) % 25 == 0 or i + 1 == im.demonstrations:
            log(f"imitation: {i + 1}/{im.demonstrations} demonstrations, {sum(e.relabelled for e in episodes)} of "
                f"{sum(e.steps for e in episodes)} slots relabelled where the mask refused the demonstrated machine "
                f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
    demo_s = time.perf_counter() - started
    relabelled, slots = sum(e.relabelled for e in episodes), sum(e.steps for e in episodes)
    rows = ["round,epoch,loss,cross_entropy,value_loss,accuracy,wall_s"]
    settings = BCSettings(
        epochs=im.epochs, learning_rate=im.learning_rate, batch_steps=im.batch_steps, vf_coef=im.vf_coef,
        decision_weight=im.decision_weight, seed=tc.seed, max_minutes=im.max_minutes,
    )  # fmt: skip
    for rnd in range(1 + im.dagger_rounds):
        if rnd:
            episodes += [aggregate(policy, demo, make_env) for demo in demos]
            log(f"imitation: DAgger round {rnd}: {len(episodes)} episodes ({time.perf_counter() - started:.0f} s)", flush=True)

        def on_epoch(e: Any, rnd: int = rnd) -> None:
            rows.append(f"{rnd},{e.epoch},{e.loss:.6f},{e.cross_entropy:.6f},{e.value_loss:.6f},{e.accuracy:.6f},{e.wall_s:.1f}")
            atomic_write_text(run_dir / IMITATION_CSV, "\n".join(rows) + "\n")
            log(f"imitation: round {rnd} epoch {e.epoch}/{im.epochs} cross-entropy {e.cross_entropy:.3f} "
                f"accuracy {e.accuracy:.3f} ({e.wall_s:.0f} s)", flush=True)  # fmt: skip

        result = behaviour_cloning(policy, episodes, settings, on_epoch=on_epoch)
    save_policy(
        policy, run_dir / BC_POLICY_DIR, policy_config=asdict(config.policy), padding=padding,
        lookahead=lookahead_mode(config), plan=config.env.plan, extra={"num_timesteps": 0},
    )  # fmt: skip
    summary = {
        "demonstrations": len(demos), "slots": slots, "slots_relabelled": relabelled,
        "methods": {m: sum(d.method.removesuffix("+plan") == m for d in demos) for m in im.methods},
        "planned": sum(d.method.endswith("+plan") for d in demos),
        "demonstration_s": round(demo_s, 1), "dagger_rounds": im.dagger_rounds, "episodes": len(episodes),
        "final_accuracy": result.epochs[-1].accuracy if result.epochs else None,
        "imitation_s": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    atomic_write_text(run_dir / IMITATION_JSON, json.dumps(summary, indent=2) + "\n")
    return result


# ------------------------------------------------------------------------ run directory
def env_spec(config: RunConfig, padding: Padding, generator: Any, heldout: list[Instance]) -> dict[str, Any]:
    """What ``env_spec.json`` records: how to rebuild the training env, and its spaces."""
    kwargs: dict[str, Any] = {
        "max_machines": padding.max_machines,
        "max_layers": padding.max_layers,
        "max_edges": padding.max_edges,
        "reward": config.env.reward,
        "invalid_action": config.env.invalid_action,
    }
    if config.env.generator == "fixed":
        kwargs.update(cluster=config.env.cluster, model=config.env.model, generator_kwargs={
            k: v for k, v in (("data_parallel", config.env.data_parallel), ("num_micro_batches", config.env.num_micro_batches)) if v is not None
        })
    elif config.env.generator in ("toy", "random", "generalist"):
        kwargs["generator"] = config.env.generator
    training_ids = [i.instance_id for i in getattr(generator, "instances", ())]
    space = policy_observation_space(padding, config.env.lookahead, config.env.plan)
    return {
        "id": ENV_ID_V1,
        "entry_point": "hulk_env.env:PlacementEnvV1",
        "kwargs": kwargs,
        "wrappers": [
            f"agents.training.shaping.StayLookahead(shape={config.env.reward == 'stay'}, lookahead={config.env.lookahead}, "
            f"completion='{config.env.completion}')",
            *(["agents.decision.plan.PlanHint"] if config.env.plan else []),
            "agents.training.train.PlacementMetrics", "stable_baselines3.common.monitor.Monitor",
        ],
        "training_instances": training_ids,
        "heldout_instances": [i.instance_id for i in heldout],
        "observation_space": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in space.spaces.items()},
        "action_space": f"Discrete({padding.max_machines})",
    }


# ------------------------------------------------------------------------------ train
def train(
    config: TrainSettings | RunConfig | None = None,
    *,
    resume: str | Path | None = None,
    label: str = "run",
    on_eval: Callable[[int, float], None] | None = None,
) -> Path:
    """Train a policy; returns the run directory (see the module docstring for its files).

    Args:
        config: the run: a :class:`TrainSettings` record (resolved here; its label names a new
            run directory) or a resolved :class:`RunConfig` (``None``: the defaults). Ignored
            with ``resume``: the run's own config is used.
        resume: a run directory to continue from its ``checkpoint.pt``.
        label: prefix of a new run directory's name (for a :class:`RunConfig`).
        on_eval: called after every held-out evaluation with the step count and ``exp`` of the
            mean validation score (``eval/evaluations.csv``'s ``mean_reward``): the speed-up
            over naive for the speed rewards, the dollar-saving factor for ``cost``, their
            geometric mean for ``mixed``.
    """
    # 1. The resolved config, every setting checked: nothing exists on disk before this.
    overrides: tuple[str, ...] = ()
    if resume is not None:
        run_dir = Path(resume)
        config = read_run_config(run_dir)
    else:
        if isinstance(config, TrainSettings):
            overrides = tuple(config.overrides)
            config, label = config.resolve(), config.label
        config = config or RunConfig()
    validate_config(config, None if overrides else "config", overrides, methods=all_method_names())
    check_device(config.train.device)
    tc = config.train

    # 2. Seeds and threads.
    seed_everything(tc.seed, tc.torch_threads)

    # 3. Instances and padding (an unknown cluster, model or suite stops here, too).
    generator, heldout = training_source(config)
    padding = padding_for(config, generator, heldout)

    # 4. The run directory: created atomically and exclusively, or locked to resume it.
    if resume is None:
        files = {CONFIG_FILE: config_text(config), VERSIONS_FILE: json.dumps(run_metadata(), indent=2) + "\n"}
        run_dir, lock = create_run_dir(Path(tc.out), tc.name or None, label, files)
        from_steps = None
    else:
        lock = lock_run_dir(run_dir)
        from_steps = checkpoint_timesteps(run_dir) if (run_dir / CHECKPOINT).exists() else None
        clean_for_resume(run_dir, from_steps)  # killed writes, evaluations past the checkpoint
    with lock:
        try:
            return _train_in(run_dir, config, generator, heldout, padding, from_steps, on_eval)
        except Exception:
            if resume is None and not (run_dir / CHECKPOINT).exists():
                shutil.rmtree(run_dir, ignore_errors=True)  # failed in set-up: leave nothing
            raise


def _train_in(
    run_dir: Path, config: RunConfig, generator: Any, heldout: list[Instance], padding: Padding,
    from_steps: int | None, on_eval: Callable[[int, float], None] | None = None,
) -> Path:
    """Steps 5-9 of :func:`train`, in a run directory it holds the lock of."""
    tc = config.train
    atomic_write_text(run_dir / "env_spec.json", json.dumps(env_spec(config, padding, generator, heldout), indent=2) + "\n")

    # 5. Envs: training (n_envs); the held-out instances are placed at their own size.
    vec_env = make_vec_env(generator, padding, config, tc.n_envs)

    # 6. The model (restored from the checkpoint on resume; a run killed before its first
    #    checkpoint starts again from step 0, imitation included).
    model = build_model(config, vec_env, run_dir / TENSORBOARD_DIR if tc.tensorboard else None)
    (run_dir / EVALUATIONS_CSV).parent.mkdir(exist_ok=True)
    n_eval = min(len(heldout), config.eval.n_eval_episodes or len(heldout))
    validation = Validation(run_dir, config, padding, heldout[:n_eval], config.eval.eval_every, on_eval)
    if from_steps is not None:
        validation.best_mean_reward = load_checkpoint(model, run_dir)
    elif tc.init_policy:
        # 6b'. Fine-tuning: the saved weights, evaluated as step 0, checkpointed.
        init_from_policy(model.policy, config)
        validation.evaluate(model.policy, 0)
        save_checkpoint(model, run_dir, validation.best_mean_reward)
    elif config.imitation.demonstrations > 0:
        # 6b. Warm start: behaviour cloning, evaluated as step 0, checkpointed (a resume skips it).
        warm_start(model.policy, config, generator, padding, run_dir)
        validation.evaluate(model.policy, 0)
        save_checkpoint(model, run_dir, validation.best_mean_reward)

    # 7. Callbacks: placement metrics, held-out evaluation (+ best policy), checkpoints.
    callbacks = CallbackList([
        PlacementLogger(), validation, Checkpointer(run_dir, tc.checkpoint_every, validation), TimeLimit(tc.max_minutes),
    ])

    # 8. Learn up to train.total_timesteps (the remainder when resuming).
    remaining = max(0, tc.total_timesteps - model.num_timesteps)
    if remaining > 0:
        model.learn(
            total_timesteps=remaining,
            callback=callbacks,
            reset_num_timesteps=from_steps is None,
            progress_bar=tc.progress_bar,
            tb_log_name="ppo",
        )

    # A wall-clock stop is said, not hidden: the comparison that follows is of a shorter run.
    if model.num_timesteps < tc.total_timesteps:
        print(f"train.max_minutes ({tc.max_minutes:g}) reached: stopped at {int(model.num_timesteps):,} of "
              f"{tc.total_timesteps:,} steps; `hulk train --resume {run_dir}` continues it", flush=True)

    # 9. Save: final checkpoint and final policy (and a best policy if no evaluation ran).
    if not (run_dir / BEST_POLICY_DIR).exists() and config.eval.eval_every > 0:
        validation.evaluate(model.policy, model.num_timesteps)
    save_checkpoint(model, run_dir, validation.best_mean_reward)
    meta = {"num_timesteps": int(model.num_timesteps)}
    save_policy(
        model.policy, run_dir / FINAL_POLICY_DIR,
        policy_config=asdict(config.policy), padding=padding, lookahead=lookahead_mode(config), plan=config.env.plan, extra=meta,
    )
    vec_env.close()
    return run_dir


ARCHITECTURE_KEYS = ("extractor", "hidden_dim", "machine_rounds", "layer_rounds", "heads")


def init_from_policy(policy: Any, config: RunConfig) -> None:
    """Load ``train.init_policy``'s weights into ``policy`` (the run's new network).

    Raises:
        HulkInputError: no readable policy there, or one of another architecture or observation
            than the config's (named, with the value to set).
    """
    from agents.network.saved_policy import load_policy, lookahead_of, plan_of

    source = config.train.init_policy
    loaded = load_policy(source)
    saved = loaded.meta.get("policy", {})
    wanted = asdict(config.policy)
    for key in ARCHITECTURE_KEYS:
        if key in saved and saved[key] != wanted.get(key):
            raise HulkInputError(
                f"the policy to start from has {key}={saved[key]!r} but this config has {wanted.get(key)!r}; "
                f"set --set policy.{key}={saved[key]} (or start from a policy of this architecture)",
                source=str(source), field="train.init_policy",
            )  # fmt: skip
    observed = {"env.plan": (plan_of(loaded.meta), bool(config.env.plan)),
                "env.lookahead": (bool(lookahead_of(loaded.meta)), bool(config.env.lookahead))}  # fmt: skip
    for key, (theirs, ours) in observed.items():
        if theirs != ours:
            raise HulkInputError(
                f"the policy to start from was trained with {key}={str(theirs).lower()} but this config has "
                f"{str(ours).lower()}; set --set {key}={str(theirs).lower()}",
                source=str(source), field="train.init_policy",
            )  # fmt: skip
    policy.load_state_dict(loaded.policy.state_dict())


def all_method_names() -> list[str]:
    """Every placement method ``eval.baselines`` may name: the baselines and the agent's."""
    from agents.decision.methods import AGENT_METHODS
    from hulk_env.baselines import method_names

    return [*method_names(), *AGENT_METHODS]


def check_device(device: str) -> None:
    """A torch device this machine has (``cuda`` without a GPU is refused before any run)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise HulkInputError(
            f"train.device is '{device}' but torch sees no CUDA GPU here; use cpu", field="train.device"
        )
    if device == "mps" and not torch.backends.mps.is_available():
        raise HulkInputError("train.device is 'mps' but this machine has no MPS device; use cpu", field="train.device")


def checkpoint_timesteps(run_dir: str | Path) -> int:
    """Timesteps recorded in a run's checkpoint (for tests and ``hulk train --resume``)."""
    state = safe_torch_load(Path(run_dir) / CHECKPOINT, "checkpoint")
    return int(state["num_timesteps"])


# ------------------------------------------------------------------------------ bench
def bench_train(config: RunConfig | None = None, rounds: int = 4) -> dict[str, Any]:
    """PPO throughput with the GNN policy and with SB3's default ``MultiInputPolicy``.

    Same env (the config's: by default the built-in default instance with the stay shaping
    and lookahead), same PPO settings, same process and thread count. The two models learn in
    alternating slices of one rollout + update each (``n_steps x n_envs`` steps), ``rounds``
    slices per model after a warm-up slice, so load from other processes on the shared cores
    hits both alike. Steps per second count env steps, rollouts and gradient updates together.
    """
    config = config or RunConfig()
    seed_everything(config.train.seed, config.train.torch_threads)
    generator, heldout = training_source(config)
    padding = padding_for(config, generator, heldout)
    models = {}
    for name in ("gnn", "mlp"):
        variant = config_from_dict(config.to_dict())
        variant.policy.extractor = name
        models[name] = build_model(variant, make_vec_env(generator, padding, variant, variant.train.n_envs), None)
    slice_steps = config.ppo.n_steps * config.train.n_envs
    elapsed = dict.fromkeys(models, 0.0)
    steps = dict.fromkeys(models, 0)
    for model in models.values():  # warm-up: first rollout, allocations, lazy imports
        model.learn(slice_steps, reset_num_timesteps=True)
    for _ in range(rounds):
        for name, model in models.items():
            before = model.num_timesteps
            start = time.perf_counter()
            model.learn(slice_steps, reset_num_timesteps=False)
            elapsed[name] += time.perf_counter() - start
            steps[name] += model.num_timesteps - before
    gnn = steps["gnn"] / elapsed["gnn"]
    mlp = steps["mlp"] / elapsed["mlp"]
    return {
        "gnn_ppo_steps_per_s": gnn,
        "mlp_ppo_steps_per_s": mlp,
        "ratio": gnn / mlp,
        "steps_per_model": steps["gnn"],
        "torch_threads": torch.get_num_threads(),
        "n_envs": config.train.n_envs,
        "n_steps": config.ppo.n_steps,
        "n_epochs": config.ppo.n_epochs,
        "batch_size": config.ppo.batch_size,
        "max_machines": padding.max_machines,
        "max_layers": padding.max_layers,
        "lookahead": config.env.lookahead,
        "reward": config.env.reward,
    }
