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


BENCH_ENV = "hulk/Placement-v1"
LARGE_SIZES = (128, 2048)  # machines of the large-cluster cases
LARGE_CITIES = 16  # cities of a large bench cluster (machines spread evenly)


def bench_cluster(machines: int):
    """The large-cluster bench instance's cluster: ``machines`` over 16 cities, the random
    generator's GPU mix, 10% link noise (seed 0)."""
    from hulk_env.cluster import geo_cluster
    from hulk_env.generators.random_geo import DEFAULT_GPU_MIX
    from hulk_env.hardware import geo

    cities = sorted(geo.CITIES)[:: max(1, len(geo.CITIES) // LARGE_CITIES)][:LARGE_CITIES]
    counts = [machines // len(cities) + (i < machines % len(cities)) for i in range(len(cities))]
    return geo_cluster(cities, counts, DEFAULT_GPU_MIX, seed=0, name=f"bench-{machines}", link_noise=0.1)


def _masked(obs, rng):
    valid = np.flatnonzero(obs["action_mask"])
    return int(valid[rng.integers(len(valid))])


def _uniform(obs, rng):
    return int(rng.integers(2))


def _measure(env: gym.Env, seconds: float) -> tuple[_Stepper, _Stepper]:
    """Step ``env`` and CartPole-v1 in alternating slices (load from other processes hits both
    alike); the first reset (building the instance) is not timed."""
    hulk = _Stepper(env, _masked, seed=0)
    cartpole = _Stepper(gym.make("CartPole-v1"), _uniform, seed=0)
    for _ in range(SLICES):
        hulk.run(seconds / SLICES)
        cartpole.run(seconds / SLICES)
    cartpole.env.close()
    return hulk, cartpole


def bench_env(
    seconds: float = 3.0,
    data_parallel: int | None = None,
    env_id: str = BENCH_ENV,
    large: tuple[int, ...] = LARGE_SIZES,
) -> dict:
    """Steps per second of the placement env against Gymnasium's CartPole-v1, in the same run.

    Both envs are made with ``gymnasium.make`` (same wrappers) and stepped by the same loop, in
    alternating slices: a uniformly random action, for the placement env among the machines its
    ``action_mask`` allows (the observation is built every step), resetting when an episode
    ends. The default case is the fixed instance "default" cluster (47 machines) x gpt3-1.3b
    with the terminal reward; every episode ends with a full cost-model evaluation. The large
    cases place gpt3-1.3b on :func:`bench_cluster` clusters of ``large`` machines; ``v0_ratio``
    is ``hulk/Placement-v0`` on the default case, for comparison.

    Args:
        seconds: time spent on each env of each case (about ``2 x seconds`` per case).
        data_parallel: replicas ``D`` of the model (``None`` = the model's default, 1).
        env_id: the env measured (default ``hulk/Placement-v1``).
        large: machines of the large-cluster cases (``()`` for none).

    Returns:
        ``env_steps_per_s``, ``cartpole_steps_per_s``, ``ratio`` and what was measured, for the
        default case; ``env_steps_per_s_<M>`` and ``ratio_<M>`` for each large case;
        ``v0_ratio``.
    """
    import hulk_env  # noqa: F401  (registers the envs)
    from hulk_env.generators import FixedGenerator

    kwargs = {} if data_parallel is None else {"generator_kwargs": {"data_parallel": data_parallel}}
    env = gym.make(env_id, cluster=BENCH_CLUSTER, model=BENCH_MODEL, **kwargs)
    hulk, cartpole = _measure(env, seconds)
    inst = env.unwrapped.instance
    env.close()
    out = {
        "env": env_id,
        "env_steps_per_s": hulk.rate,
        "cartpole_steps_per_s": cartpole.rate,
        "ratio": hulk.rate / cartpole.rate,
        "instance": inst.instance_id,
        "machines": inst.num_machines,
        "layers": inst.num_layers,
        "data_parallel": inst.data_parallel,
        "steps_per_episode": inst.num_layers * inst.data_parallel,
        "episodes": hulk.episodes,
        "seconds": seconds,
    }
    for machines in large:
        generator = FixedGenerator(cluster=bench_cluster(machines), model=BENCH_MODEL, data_parallel=data_parallel)
        big = gym.make(env_id, generator=generator)
        hulk, cartpole = _measure(big, seconds)
        big.close()
        out[f"env_steps_per_s_{machines}"] = hulk.rate
        out[f"ratio_{machines}"] = hulk.rate / cartpole.rate
    if env_id != "hulk/Placement-v0":
        v0 = gym.make("hulk/Placement-v0", cluster=BENCH_CLUSTER, model=BENCH_MODEL, **kwargs)
        hulk, cartpole = _measure(v0, seconds)
        v0.close()
        out["v0_ratio"] = hulk.rate / cartpole.rate
    return out


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
