"""RLlib's PPO with action masking on ``hulk/Placement-v*``, through Ray's env registration.

    python -m experiments.rllib_ppo [--env hulk/Placement-v1] [--iterations 5] [--json]

The env is registered with ``ray.tune.registry.register_env`` under :data:`RLLIB_ENV` (the
Gymnasium env ``--env`` on the toy generator, wrapped by :class:`MaskedObservation` into the
``{"action_mask", "observations"}`` dict that RLlib's ``ActionMaskingTorchRLModule`` expects).
PPO trains for ``--iterations`` iterations; each prints the mean speed-up over the naive
placement of the episodes it sampled (a dead end counts as speed-up 0, and is counted). Then
the greedy policy places every instance of the ``tiny-v0`` suite (the toy generator's
distribution; optimum known) and the script prints the geometric-mean speed-up over naive and
over the optimum's.

Environment: RLlib 2.60 pins ``gymnasium==1.2.2`` and the core package accepts
``gymnasium>=1.2.2,<1.5``, so RLlib gets its own virtualenv: ``make rllib-env`` creates
``.venv-rllib`` (torch CPU, ``hulk-env[rllib]``); ``make test`` runs
``tests/test_rllib_example.py`` there.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import hulk_env  # noqa: F401  (registers hulk/Placement-v*)
from hulk_env import cost
from hulk_env.env import ENV_ID_V1
from hulk_env.evaluation import geometric_mean, load_suite
from hulk_env.feasibility import Padding
from hulk_env.generators import exhaustive_optimum
from hulk_env.reference import naive_placement

RLLIB_ENV = "hulk-masked"  # the name RLlib knows the wrapped env by
EVAL_SUITE = "tiny-v0"


class MaskedObservation(gym.ObservationWrapper):
    """A hulk placement env as RLlib's action-masking module wants it: the action mask apart,
    every other observation key flattened into one ``observations`` Box (same order as
    ``spaces.flatten`` of the env's ``Dict`` without ``action_mask``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._rest = spaces.Dict({k: s for k, s in env.observation_space.spaces.items() if k != "action_mask"})
        self.observation_space = spaces.Dict({
            "action_mask": env.observation_space["action_mask"],
            "observations": spaces.flatten_space(self._rest),
        })  # fmt: skip

    def observation(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rest = {k: obs[k] for k in self._rest.spaces}
        return {"action_mask": obs["action_mask"], "observations": spaces.flatten(self._rest, rest)}


def make_env(env_config: dict[str, Any]) -> gym.Env:
    """The env RLlib builds (``env_config``: ``env_id``, padding and ``reward``)."""
    env = gym.make(
        env_config.get("env_id", ENV_ID_V1),
        generator="toy",
        reward=env_config.get("reward", "dense"),
        max_machines=env_config["max_machines"],
        max_layers=env_config["max_layers"],
        max_edges=env_config["max_edges"],
    )
    return MaskedObservation(env)


def toy_padding() -> Padding:
    """The toy generator's largest instance, and the evaluation suite's, in one padding."""
    probe = gym.make(ENV_ID_V1, generator="toy").unwrapped
    own = Padding(probe.max_machines, probe.max_layers, probe.max_edges)
    return own.at_least(Padding.of(load_suite(EVAL_SUITE)))


def build_algo(env_id: str, seed: int, padding: Padding, batch_steps: int):
    """PPO with RLlib's action-masking module; sampling in this process (2-core friendly)."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.callbacks.callbacks import RLlibCallback
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.examples.rl_modules.classes.action_masking_rlm import ActionMaskingTorchRLModule
    from ray.tune.registry import register_env

    class SpeedupMetrics(RLlibCallback):
        def on_episode_end(self, *, episode, metrics_logger, **kwargs) -> None:
            info = episode.get_infos(-1)
            metrics_logger.log_value("speedup", float(info.get("speedup", 0.0)), reduce="mean", window=10_000)
            metrics_logger.log_value("dead_end", float(bool(info.get("dead_end"))), reduce="mean", window=10_000)

    register_env(RLLIB_ENV, make_env)
    env_config = {"env_id": env_id, "reward": "dense", "max_machines": padding.max_machines,
                  "max_layers": padding.max_layers, "max_edges": padding.max_edges}
    config = (
        PPOConfig()
        .environment(RLLIB_ENV, env_config=env_config)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .training(
            train_batch_size_per_learner=batch_steps, minibatch_size=min(128, batch_steps), num_epochs=4,
            gamma=1.0, lambda_=0.95, lr=3e-4, entropy_coeff=0.01,
        )
        .rl_module(rl_module_spec=RLModuleSpec(
            module_class=ActionMaskingTorchRLModule, model_config={"fcnet_hiddens": [64, 64]},
        ))
        .callbacks(SpeedupMetrics)
        .debugging(seed=seed)
    )  # fmt: skip
    return config.build_algo()


def greedy_placements(algo, env_id: str, padding: Padding) -> list[tuple[Any, np.ndarray]]:
    """The trained module's greedy placement of every evaluation instance."""
    import torch

    module = algo.get_module()
    env = make_env({"env_id": env_id, "max_machines": padding.max_machines,
                    "max_layers": padding.max_layers, "max_edges": padding.max_edges})
    out = []
    for inst in load_suite(EVAL_SUITE):
        obs, _ = env.reset(options={"instance": inst})
        done = False
        while not done:
            batch = {"obs": {k: torch.as_tensor(v)[None] for k, v in obs.items()}}
            with torch.no_grad():
                logits = module.forward_inference(batch)["action_dist_inputs"][0]
            obs, _, terminated, truncated, _ = env.step(int(torch.argmax(logits)))
            done = terminated or truncated
        out.append((inst, env.unwrapped.placement))
    return out


def run(env_id: str = ENV_ID_V1, iterations: int = 5, seed: int = 0, batch_steps: int = 1000, quiet: bool = False) -> dict:
    """Train, print each iteration's mean speed-up, evaluate greedily; returns the figures."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="error", log_to_driver=False)
    try:
        padding = toy_padding()
        algo = build_algo(env_id, seed, padding, batch_steps)
        history = []
        for it in range(1, iterations + 1):
            result = algo.train()
            runners = result["env_runners"]
            row = {"iteration": it, "steps": int(runners.get("num_env_steps_sampled_lifetime", 0)),
                   "episodes": int(runners.get("num_episodes", 0)),
                   "mean_speedup": float(runners.get("speedup", math.nan)),
                   "dead_end_share": float(runners.get("dead_end", math.nan)),
                   "return_mean": float(runners.get("episode_return_mean", math.nan))}
            history.append(row)
            if not quiet:
                print(f"iteration {it}: mean speed-up over naive x{row['mean_speedup']:.3f} over "
                      f"{row['episodes']} episodes ({100 * row['dead_end_share']:.0f}% dead ends, return {row['return_mean']:.3f})", flush=True)
        placed = greedy_placements(algo, env_id, padding)
        algo.stop()
    finally:
        if started:
            ray.shutdown()
    evaluated = []
    for inst, placement in placed:
        t_s = _iteration_time_s(inst, placement)  # nan: a dead end (v0) or does not fit
        t_naive = _iteration_time_s(inst, naive_placement(inst))
        evaluated.append({
            "instance": inst.instance_id,
            "placement": np.asarray(placement).tolist(),
            "speedup": t_naive / t_s if math.isfinite(t_s) else 0.0,
            "of_optimum": exhaustive_optimum(inst)[1] / t_s if math.isfinite(t_s) else 0.0,
        })  # fmt: skip
    speedups = [e["speedup"] for e in evaluated]
    of_optimum = [e["of_optimum"] for e in evaluated]
    figures = {
        "env": env_id,
        "iterations": history,
        "eval_suite": EVAL_SUITE,
        "eval_instances": len(placed),
        "eval_feasible": sum(s > 0 for s in speedups),
        "eval_geomean_speedup": _geomean(speedups),
        "eval_geomean_of_optimum": _geomean(of_optimum),
        "eval": evaluated,
    }
    if not quiet:
        print(f"greedy policy on {EVAL_SUITE}: {figures['eval_feasible']}/{len(placed)} feasible, geometric-mean "
              f"speed-up over naive x{figures['eval_geomean_speedup']:.3f}, "
              f"{100 * figures['eval_geomean_of_optimum']:.1f}% of the optimum's")
    return figures


def _iteration_time_s(inst, placement: np.ndarray) -> float:
    if placement is None or (np.asarray(placement) < 0).any():
        return math.nan
    breakdown = cost.evaluate(inst.cluster, inst.workload, placement)
    return float(breakdown.iteration_time_s) if breakdown.memory_feasible else math.nan


def _geomean(values: Sequence[float]) -> float:
    """Geometric mean; 0 when any value is 0 (an infeasible placement is not averaged away)."""
    return 0.0 if any(v <= 0 for v in values) else float(geometric_mean(values))


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default=ENV_ID_V1, help="hulk/Placement-v0 or hulk/Placement-v1")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--batch-steps", type=int, default=1000, help="env steps per PPO iteration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args(argv)
    figures = run(args.env, args.iterations, args.seed, args.batch_steps, quiet=args.json)
    if args.json:
        print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
