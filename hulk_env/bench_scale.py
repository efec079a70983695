"""``hulk bench scale``: how showing, placing and stepping grow with the number of machines.

For each size (default 128, 512 and 2,048 machines) a cluster file is written -- the machines
spread evenly over 32 cities on every continent, GPUs drawn from the random generator's mix
(:data:`hulk_env.generators.DEFAULT_GPU_MIX`), links from the geo model -- and a fresh Python
process measures, on that file x GPT-3 13B:

* ``show_s``: what ``hulk show cluster FILE --json`` does (read and validate the file, build the
  cluster and its link matrices, summarise it);
* ``place_chain_dp_s``: ``latency-chain-dp`` on the instance (its default settings);
* ``env_steps_per_s``: the placement env with the size-agnostic observation (``hulk/Placement-v1``,
  no ``M x M`` array) on the instance, stepping uniformly random valid actions (the observation
  is built every step; an episode ends with a full cost evaluation);
* ``peak_rss_mb``: the process's peak resident memory, imports included.

One process per size, so that each peak is that size's own. ``growth_exponent`` is the
least-squares slope of ``log(place_chain_dp_s)`` over ``log(machines)``: 1 is linear, 2
quadratic.

Run as ``python -m hulk_env.bench_scale MACHINES`` it measures one size and prints its JSON.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SIZES = (128, 512, 2_048)
MODEL = "gpt3-13b"
NUM_CITIES = 32
ENV_SECONDS = 3.0
MIN_ENV_STEPS = 64


def scale_cities() -> list[str]:
    """``NUM_CITIES`` cities, taken round-robin over the continents (sorted names within each)."""
    from hulk_env.hardware import geo

    by_continent: dict[str, list[str]] = {}
    for name in sorted(geo.CITIES):
        by_continent.setdefault(geo.CITIES[name].continent, []).append(name)
    picked: list[str] = []
    while len(picked) < min(NUM_CITIES, len(geo.CITIES)):
        for names in by_continent.values():
            if names and len(picked) < NUM_CITIES:
                picked.append(names.pop(0))
    return picked


def write_scale_cluster(path: Path, num_machines: int, seed: int = 0) -> Path:
    """A cluster file of ``num_machines`` machines (see the module docstring)."""
    import yaml

    from hulk_env.generators import DEFAULT_GPU_MIX

    cities = scale_cities()
    rng = np.random.default_rng(seed)
    weights = np.array([w for _, _, w in DEFAULT_GPU_MIX])
    picks = rng.choice(len(DEFAULT_GPU_MIX), size=num_machines, p=weights / weights.sum())
    machines = []
    for i, pick in enumerate(picks):
        gpu, count, _ = DEFAULT_GPU_MIX[pick]
        city = cities[i % len(cities)]
        machines.append({"name": f"m{i}", "region": city, "gpu": gpu, "num_gpus": count})
    doc = {"name": f"scale-{num_machines}", "machines": machines}
    path.write_text(yaml.safe_dump(doc, default_flow_style=None, sort_keys=False))
    return path


def _peak_rss_mb() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20  # KiB on Linux, bytes on macOS


def _env_steps_per_s(env_cls, instance, seconds: float) -> tuple[float, int]:
    """Random valid steps per second of an env class on one instance (padding: its own size)."""
    from hulk_env.generators import InstanceListGenerator

    env = env_cls(generator=InstanceListGenerator([instance]))
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    steps = 0
    start = time.perf_counter()
    while True:
        valid = np.flatnonzero(obs["action_mask"])
        obs, _, terminated, truncated, _ = env.step(int(valid[rng.integers(len(valid))]))
        steps += 1
        if terminated or truncated:
            obs, _ = env.reset()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and steps >= MIN_ENV_STEPS:
            env.close()
            return steps / elapsed, steps


def measure_size(num_machines: int, env_seconds: float = ENV_SECONDS) -> dict:
    """The figures of one size, measured in this process (see the module docstring)."""
    from hulk_env.baselines import get_method
    from hulk_env.cluster import load_cluster
    from hulk_env.instance import Instance
    from hulk_env.workload import get_model

    with tempfile.TemporaryDirectory() as tmp:
        path = write_scale_cluster(Path(tmp) / f"scale-{num_machines}.yaml", num_machines)
        start = time.perf_counter()
        cluster, _ = load_cluster(path)
        json.dumps(cluster.summary())
        show_s = time.perf_counter() - start
    instance = Instance(cluster, get_model(MODEL), f"scale-{num_machines}")
    start = time.perf_counter()
    result = get_method("latency-chain-dp")(instance, 0, None)
    place_s = time.perf_counter() - start
    from hulk_env import env as envs

    scalable = getattr(envs, "PlacementEnvV1", envs.PlacementEnv)  # the sparse observation
    steps_per_s, steps = _env_steps_per_s(scalable, instance, env_seconds)
    return {
        "machines": num_machines,
        "layers": instance.num_layers,
        "show_s": show_s,
        "place_chain_dp_s": place_s,
        "place_cost_evals": result.cost_evals,
        "place_feasible": result.feasible,
        "env_steps_per_s": steps_per_s,
        "env_steps": steps,
        "env_id": getattr(scalable, "spec_id", None) or scalable.__name__,
        "peak_rss_mb": _peak_rss_mb(),
    }


def growth_exponent(sizes: Sequence[float], seconds: Sequence[float]) -> float:
    """Least-squares slope of ``log(seconds)`` over ``log(sizes)``."""
    x, y = np.log(np.asarray(sizes, float)), np.log(np.maximum(np.asarray(seconds, float), 1e-9))
    slope, _ = np.polyfit(x, y, 1)
    return float(slope)


def bench_scale(sizes: Sequence[int] = SIZES, env_seconds: float = ENV_SECONDS, timeout_s: float = 1800) -> dict:
    """Measure every size in its own process; see the module docstring for the figures.

    Returns:
        ``{"model", "sizes": [per-size dicts], "growth_exponent"}``; a size whose process
        failed or ran past ``timeout_s`` has ``"error"`` instead of figures (and is left out of
        the exponent).
    """
    rows = []
    for size in sizes:
        cmd = [sys.executable, "-m", "hulk_env.bench_scale", str(int(size)), str(float(env_seconds))]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            rows.append({"machines": int(size), "error": f"no answer in {timeout_s:g} s"})
            continue
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            rows.append({"machines": int(size), "error": tail})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    measured = [r for r in rows if "error" not in r]
    exponent = (
        growth_exponent([r["machines"] for r in measured], [r["place_chain_dp_s"] for r in measured])
        if len(measured) >= 2
        else math.nan
    )
    return {"model": MODEL, "sizes": rows, "growth_exponent": exponent}


if __name__ == "__main__":  # one size, in a fresh process (bench_scale runs this)
    size = int(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else ENV_SECONDS
    print(json.dumps(measure_size(size, seconds)))
