"""``hulk bench learn``: does PPO, from scratch, reach ``latency-chain-dp``'s speed-up?

The main job's config (``agents/configs/default.yaml``, or another) trains a fresh network with
masked PPO -- no imitation, no checkpoint loaded -- on one fixed instance per run, for a budget
of environment steps, on several seeds. Every ``eval_every`` steps the network's own greedy
rollout (:func:`agents.decision.inference.sampled_rollouts` with one start: the slot-by-slot argmax of
the policy, what PPO trains; no plan candidates, no naive fallback) places the training
instance; the run reports the first step count at which that placement is at least as fast
as ``latency-chain-dp``'s (``null`` if never within the budget) and the gap of the last one,
``time / chain_dp_time - 1`` (negative where the network is faster).

The instances (:data:`BENCH_INSTANCES`), fixed by their seeds, differ in shape:

* ``default``: the main job's instance, the paper's 47 machines in 12 cities x GPT-3 1.3B
  (26 layers, D = 1);
* ``multi-replica``: the same cluster x GPT-3 1.3B with D = 2 data-parallel replicas (52 slots);
* ``128-machines``: 8 training cities x 16 machines of the ``cloud`` GPU mix
  (:data:`agents.training.distribution.GPU_MIXES`, seed 128) x :data:`MODEL_128`, picked by a rule
  written down before any learning run: the smallest of GPT-3 2.7B, 6.7B, 13B for which
  ``compute-greedy`` is more than 1% slower than ``latency-chain-dp`` on that cluster (a model
  where the one-machine-per-stage greedy is already optimal measures nothing: GPT-3 1.3B,
  2.7B and 6.7B are all at +0.0%; 13B is at +2.85%, so the rule picks GPT-3 13B, 42 layers);
* ``memory-tight``: 4 training cities x 3 machines of the ``cloud`` mix (seed 7) x LLaMA-65B,
  which needs 58% of the cluster's memory (:func:`hulk_env.feasibility.memory_tightness`).

Every one is placeable (the naive placement fits; checked when built). Training cities only
(:func:`agents.training.distribution.training_cities`): no validation or unseen city is read.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance

BENCH_INSTANCES = ("default", "multi-replica", "128-machines", "memory-tight")
REACH_RTOL = 1e-6  # "reaches chain-dp": at most this much slower (float noise of the same placement)
MODEL_128 = "gpt3-13b"  # the 128-machines rule's pick (module docstring; test_bench_learn re-applies it)


def bench_instance(name: str) -> Instance:
    """One of :data:`BENCH_INSTANCES`, built from its fixed seed (the module docstring)."""
    from agents.training.distribution import GPU_MIXES, training_cities
    from hulk_env.baselines.naive import naive
    from hulk_env.cluster import geo_cluster
    from hulk_env.generators import fixed_instance
    from hulk_env.workload import catalog

    cities = training_cities()
    if name == "default":
        inst = fixed_instance("default", "default")
    elif name == "multi-replica":
        inst = fixed_instance("default", "default", data_parallel=2)
    elif name == "128-machines":
        cluster = geo_cluster(cities[:8], 16, GPU_MIXES["cloud"], seed=128, name="bench-learn-128")
        inst = Instance(cluster, catalog.get_model(MODEL_128), "bench-learn/128-machines")
    elif name == "memory-tight":
        cluster = geo_cluster(cities[8:12], 3, GPU_MIXES["cloud"], seed=7, name="bench-learn-tight")
        inst = Instance(cluster, catalog.get_model("llama-65b"), "bench-learn/memory-tight")
    else:
        raise HulkInputError(f"unknown bench-learn instance '{name}'; choose from {', '.join(BENCH_INSTANCES)}", field="instances")
    if not naive(inst).feasible:  # the env needs a placeable instance (a catalog change would show here)
        raise HulkInputError(f"bench-learn instance '{name}' no longer fits in memory", field="instances")
    return inst


def reaches(gap: float | None) -> bool:
    """Whether a greedy evaluation's gap counts as reaching chain-dp (:data:`REACH_RTOL`)."""
    return gap is not None and gap <= REACH_RTOL


def first_reach(curve: tuple[tuple[int, float | None], ...]) -> int | None:
    """The steps of the first evaluation in ``curve`` that reaches chain-dp (``None``: none)."""
    return next((steps for steps, gap in curve if reaches(gap)), None)


class LearnRun(NamedTuple):
    """One training run: the JSON row's keys, then what the log and tests read."""

    instance: str
    seed: int
    steps_to_chain_dp: int | None  # first evaluation at which greedy <= chain-dp (None: never)
    final_gap: float | None  # last greedy time / chain-dp time - 1 (None: the rollout did not complete)
    chain_dp_time_s: float
    curve: tuple[tuple[int, float | None], ...]  # (steps, gap) at every evaluation

    @property
    def initial_gap(self) -> float | None:
        """The untrained network's gap (the evaluation at step 0): what PPO started from."""
        return self.curve[0][1] if self.curve and self.curve[0][0] == 0 else None

    def row(self) -> dict[str, Any]:
        return {"instance": self.instance, "seed": self.seed, "steps_to_chain_dp": self.steps_to_chain_dp,
                "final_gap": self.final_gap, "initial_gap": self.initial_gap}  # fmt: skip

    def saved_row(self) -> dict[str, Any]:
        """The row with its curve (``[steps, gap]`` at every evaluation): a ``runs.jsonl`` line,
        read back by :func:`run_from_row`."""
        return {**self.row(), "curve": [list(point) for point in self.curve]}


def run_from_row(row: dict[str, Any]) -> LearnRun:
    """A :class:`LearnRun` back from a saved ``runs.jsonl`` row (its curve included)."""
    try:
        curve = tuple((int(steps), None if gap is None else float(gap)) for steps, gap in row["curve"])
        run = LearnRun(str(row["instance"]), int(row["seed"]), row["steps_to_chain_dp"], row["final_gap"], float("nan"), curve)
    except (KeyError, TypeError, ValueError) as exc:
        raise HulkInputError(f"a saved bench-learn run needs instance, seed, steps_to_chain_dp, final_gap and curve ([steps, gap] pairs): {exc!r}", field="runs") from None
    reached = first_reach(curve)
    if reached != run.steps_to_chain_dp:  # a hand-edited row would be summarised wrongly
        raise HulkInputError(f"{run.instance} seed {run.seed}: steps_to_chain_dp {run.steps_to_chain_dp} does not match its curve (first reach at {reached})", field="runs")
    return run


def greedy_time_s(policy: Any, instance: Instance, lookahead: bool | str, plan: bool) -> float | None:
    """The iteration time of the network's own greedy rollout on ``instance`` (``None``: no
    completed episode)."""
    from agents.decision.inference import sampled_rollouts

    training = policy.training
    policy.set_training_mode(False)
    try:
        done = sampled_rollouts(policy, instance, lookahead, plan=plan, starts=1)
    finally:
        policy.set_training_mode(training)
    return done[0].iteration_time_s if done else None


def gap_of(time_s: float | None, reference_s: float) -> float | None:
    """``time / reference - 1`` (``None`` for no placement)."""
    return None if time_s is None else float(time_s / reference_s - 1.0)


def learn_run(
    config: Any, name: str, instance: Instance, seed: int, timesteps: int, eval_every: int,
    chain_dp_s: float, log: Callable[[str], None] | None = None, stop_at_chain_dp: bool = False,
) -> LearnRun:  # fmt: skip
    """Train a fresh network on ``instance`` for ``timesteps`` steps (``config``'s PPO and
    network, ``seed``); greedy evaluations every ``eval_every`` steps and at the end.
    ``stop_at_chain_dp``: stop at the first evaluation that reaches chain-dp (saves CPU; the
    final gap is then that evaluation's)."""
    from stable_baselines3.common.callbacks import BaseCallback

    from agents.training.config import config_from_dict, lookahead_mode
    from agents.training.train import build_model, make_vec_env, seed_everything
    from hulk_env.feasibility import Padding
    from hulk_env.generators import InstanceListGenerator

    cfg = config_from_dict(config.to_dict())
    cfg.train.seed = seed
    seed_everything(seed, cfg.train.torch_threads)
    generator = InstanceListGenerator((instance,))
    padding = Padding(generator.max_machines, generator.max_slots, max(1, generator.max_edges))
    vec_env = make_vec_env(generator, padding, cfg, cfg.train.n_envs)
    model = build_model(cfg, vec_env, None)
    curve: list[tuple[int, float | None]] = []

    def evaluate(steps: int) -> None:
        gap = gap_of(greedy_time_s(model.policy, instance, lookahead_mode(cfg), cfg.env.plan), chain_dp_s)
        curve.append((steps, gap))
        if log:
            log(f"{name} seed {seed}: {steps:,} steps, greedy gap to latency-chain-dp "
                f"{'n/a' if gap is None else f'{gap:+.4f}'}")  # fmt: skip

    class Every(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.last = 0

        def _on_step(self) -> bool:
            if self.model.num_timesteps - self.last >= eval_every:
                self.last = self.model.num_timesteps
                evaluate(self.model.num_timesteps)
                gap = curve[-1][1]
                return not (stop_at_chain_dp and reaches(gap))
            return True

    evaluate(0)
    model.learn(total_timesteps=timesteps, callback=Every(), progress_bar=False)
    if curve[-1][0] != model.num_timesteps:
        evaluate(model.num_timesteps)
    vec_env.close()
    return LearnRun(name, seed, first_reach(tuple(curve)), curve[-1][1], chain_dp_s, tuple(curve))


def summary(runs: list[LearnRun]) -> dict[str, Any]:
    """The JSON: ``runs``, ``reached_fraction`` (runs that reached chain-dp / runs),
    ``steps_to_chain_dp_median`` (over the runs that reached it; ``None`` if none did) and
    ``untrained_reached_fraction`` (runs whose untrained network already did, at step 0: the
    part of ``reached_fraction`` that the lookahead prior gives before PPO learns anything)."""
    keys = [(r.instance, r.seed) for r in runs]
    if len(set(keys)) != len(keys):
        raise HulkInputError("the same instance and seed appear twice among the runs", field="runs")
    reached = [r.steps_to_chain_dp for r in runs if r.steps_to_chain_dp is not None]
    untrained = [r for r in runs if reaches(r.initial_gap)]
    return {
        "runs": [r.row() for r in runs],
        "reached_fraction": len(reached) / len(runs) if runs else 0.0,
        "steps_to_chain_dp_median": float(statistics.median(reached)) if reached else None,
        "untrained_reached_fraction": len(untrained) / len(runs) if runs else 0.0,
    }


def bench_learn(
    timesteps: int = 100_000,
    seeds: int | list[int] = 3,
    instances: tuple[str, ...] | list[str] = BENCH_INSTANCES,
    config: str | None = None,
    overrides: tuple[str, ...] = (),
    eval_every: int = 2_048,
    log: Callable[[str], None] | None = None,
    on_run: Callable[[LearnRun], None] | None = None,
    stop_at_chain_dp: bool = False,
) -> dict[str, Any]:
    """Train from scratch on every instance x seed (instance by instance) and summarise
    (:func:`summary`). ``seeds``: a count (``0 .. n-1``) or the seeds themselves; ``config``,
    ``overrides``: the training config (default: the main job's); ``on_run`` is told each
    finished run (e.g. to save partial results); ``stop_at_chain_dp``: see :func:`learn_run`."""
    from agents.training.config import load_config
    from hulk_env.baselines import get_method

    if timesteps < 1 or eval_every < 1:
        raise HulkInputError("timesteps and eval_every must be positive", field="timesteps")
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seed_list:
        raise HulkInputError("give at least one seed", field="seeds")
    cfg = load_config(config, overrides)
    if cfg.imitation.demonstrations:
        raise HulkInputError("bench learn trains from scratch: set imitation.demonstrations=0", field="imitation.demonstrations")
    runs = []
    for name in instances:
        inst = bench_instance(name)
        chain = get_method("latency-chain-dp")(inst, 0, None)
        if chain.placement is None:
            raise HulkInputError(f"latency-chain-dp finds no placement of '{name}': {chain.reason}")
        from hulk_env import cost

        chain_s = float(cost.iteration_time(inst.cluster, inst.workload, np.asarray(chain.placement)))
        for seed in seed_list:
            run = learn_run(cfg, name, inst, seed, timesteps, eval_every, chain_s, log, stop_at_chain_dp)
            runs.append(run)
            if on_run:
                on_run(run)
    return summary(runs)
