"""Speed benchmarks behind ``hulk bench`` (one function per benchmark, JSON-ready dicts)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

# ---- env ----------------------------------------------------------------------------------------

BENCH_CLUSTER = "default"  # the built-in 47-machine cluster (paper-12city-47)
BENCH_MODEL = "gpt3-1.3b"
SLICES = 10  # alternating measurement slices per env


class _Stepper:
    """Steps one env with random actions, in slices, keeping its episode going between slices."""

    def __init__(self, env: gym.Env, pick, seed: int) -> None:
        self.env, self.pick = env, pick
        self.rng = np.random.default_rng(seed)
        self.obs, _ = env.reset(seed=seed)
        self.steps = self.episodes = 0
        self.seconds = 0.0

    def run(self, seconds: float) -> None:
        env, pick, rng, obs = self.env, self.pick, self.rng, self.obs
        start = time.perf_counter()
        deadline = start + seconds
        while True:
            for _ in range(256):
                obs, _, terminated, truncated, _ = env.step(pick(obs, rng))
                if terminated or truncated:
                    obs, _ = env.reset()
                    self.episodes += 1
            self.steps += 256
            now = time.perf_counter()
            if now >= deadline:
                break
        self.obs = obs
        self.seconds += now - start

    @property
    def rate(self) -> float:
        return self.steps / self.seconds


def bench_env(seconds: float = 3.0, data_parallel: int | None = None) -> dict:
    """Steps per second of ``hulk/Placement-v0`` against Gymnasium's CartPole-v1.

    Both envs are made with ``gymnasium.make`` (same wrappers) and stepped by the same loop, in
    alternating slices (so that load from other processes affects both alike):
    a uniformly random action, for the placement env among the machines its ``action_mask``
    allows (the observation is built every step), resetting when an episode ends. The
    placement env is the fixed instance "default" cluster (47 machines) x gpt3-1.3b with the
    terminal reward; every episode ends with a full cost-model evaluation.

    Args:
        seconds: time spent on each env (about ``2 x seconds`` in all).
        data_parallel: replicas ``D`` of the model (``None`` = the model's default, 1).

    Returns:
        ``env_steps_per_s``, ``cartpole_steps_per_s``, ``ratio`` and what was measured.
    """
    import hulk_env  # noqa: F401  (registers the env)

    kwargs = {} if data_parallel is None else {"generator_kwargs": {"data_parallel": data_parallel}}
    env = gym.make("hulk/Placement-v0", cluster=BENCH_CLUSTER, model=BENCH_MODEL, **kwargs)

    def masked(obs, rng):
        valid = np.flatnonzero(obs["action_mask"])
        return int(valid[rng.integers(len(valid))])

    def uniform(obs, rng):
        return int(rng.integers(2))

    hulk = _Stepper(env, masked, seed=0)
    cartpole = _Stepper(gym.make("CartPole-v1"), uniform, seed=0)
    # Alternate short slices so that load from other processes hits both envs alike.
    for _ in range(SLICES):
        hulk.run(seconds / SLICES)
        cartpole.run(seconds / SLICES)
    inst = env.unwrapped.instance
    env.close()
    cartpole.env.close()
    hulk_rate, hulk_episodes, cart_rate = hulk.rate, hulk.episodes, cartpole.rate
    return {
        "env_steps_per_s": hulk_rate,
        "cartpole_steps_per_s": cart_rate,
        "ratio": hulk_rate / cart_rate,
        "instance": inst.instance_id,
        "machines": inst.num_machines,
        "layers": inst.num_layers,
        "data_parallel": inst.data_parallel,
        "steps_per_episode": inst.num_layers * inst.data_parallel,
        "episodes": hulk_episodes,
        "seconds": seconds,
    }


# ---- cost ---------------------------------------------------------------------------------------


def bench_cost(
    num_placements: int = 20_000,
    loop_placements: int = 500,
    sim_cases: int = 500,
    seed: int = 0,
) -> dict:
    """Cost-model throughput (vectorised vs one call at a time) and its error against simulation.

    The reference case is the built-in 47-machine cluster x gpt3-1.3b with ``D = 1``; the
    placements are uniformly random (what a search proposes), the same array for both paths.
    The simulator comparison uses :func:`hulk_env.simulate.validation_cases` (seeded, across the
    built-in clusters and models, both schedules, ``D`` in {1, 2, 4}).

    Returns:
        ``batch_evals_per_s``, ``loop_evals_per_s``, ``batch_vs_loop``, ``sim_median_rel_err``,
        ``sim_p95_rel_err`` and what was measured.
    """
    from hulk_env import cost
    from hulk_env.cluster import get_cluster
    from hulk_env.simulate import analytic_vs_simulated, validation_cases
    from hulk_env.workload import get_model

    cluster, workload = get_cluster(BENCH_CLUSTER), get_model(BENCH_MODEL, data_parallel=1)
    rng = np.random.default_rng(seed)
    placements = rng.integers(0, cluster.num_machines, (num_placements, 1, workload.num_layers))
    cost.iteration_times(cluster, workload, placements[:64])  # warm caches
    batch_s = _best_of(3, lambda: cost.iteration_times(cluster, workload, placements))
    singles = placements[:loop_placements]

    def loop() -> None:
        for placement in singles:
            cost.iteration_time(cluster, workload, placement)

    loop_s = _best_of(3, loop)
    batch_rate = num_placements / batch_s
    loop_rate = loop_placements / loop_s
    comparison = analytic_vs_simulated(validation_cases(sim_cases, seed=seed))
    return {
        "batch_evals_per_s": batch_rate,
        "loop_evals_per_s": loop_rate,
        "batch_vs_loop": batch_rate / loop_rate,
        "sim_median_rel_err": comparison.median_rel_err,
        "sim_p95_rel_err": comparison.p95_rel_err,
        "sim_cases": sim_cases,
        "sim_by_schedule": comparison.summary()["by_schedule"],
        "cluster": cluster.name,
        "machines": cluster.num_machines,
        "model": workload.name,
        "layers": workload.num_layers,
        "num_placements": num_placements,
    }


def _best_of(repeats: int, fn) -> float:
    """Shortest wall time of ``repeats`` calls (the least disturbed by a shared machine)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
