"""``random`` and ``random-best-of-n``: random memory-feasible contiguous placements.

A uniform draw over all ``M^(D L)`` placements almost never fits in memory for a large model and
scatters every layer; the sampler instead draws what a placement usually looks like: per replica,
a random machine order and random contiguous stage sizes, each stage as long as a uniform draw
between one layer and the most that fit in the machine's free memory (machines that fit none are
skipped). Replicas are drawn in turn and share the memory left. Every draw is checked by the cost
model's exact memory rule. Draws escalate through modes until one fits (the next draw starts from
the mode that last worked):

1. uniform stage sizes, stash of the deepest possible pipeline (fits whatever the depth);
2. uniform stage sizes, one-stage stash (1F1B pipelines stash less when shallow);
3. and 4. the same with *full* stages (each machine takes all it can: random-order first-fit),
   for memory so tight that wasting any of it fails;
5. last resort, deterministic: first-fit in listed machine order (``naive``'s fallback).
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.common import Evaluator
from hulk_env.cost import memory_use_bytes
from hulk_env.feasibility import capacity_reason, layer_memory_bytes, stash_count
from hulk_env.instance import Instance
from hulk_env.reference import fill_in_order

DEFAULT_SAMPLES = 1000
MAX_TRIES = 200  # draws tried per returned sample before giving up


def sample_placement(
    instance: Instance, rng: np.random.Generator, stash: int, full_stages: bool = False
) -> np.ndarray | None:
    """One random contiguous placement ``[D, L]`` that fits with ``stash`` micro-batches stashed.

    Args:
        instance: the cluster and workload.
        rng: drives the machine orders and stage sizes.
        stash: micro-batches of activations assumed stashed per layer.
        full_stages: each machine takes every layer it can hold, instead of a uniform number.
    """
    c, w = instance.cluster, instance.workload
    n_layers = w.num_layers
    need = layer_memory_bytes(instance, stash)
    prefix = np.concatenate([[0.0], np.cumsum(need)])
    free = c.memory_bytes.astype(np.float64).copy()
    placement = np.empty((w.data_parallel, n_layers), dtype=np.int64)
    for r in range(w.data_parallel):
        layer = 0
        for mach in rng.permutation(c.num_machines):
            # The most layers from `layer` on that fit in this machine's free memory.
            fit = int(np.searchsorted(prefix, prefix[layer] + free[mach], side="right")) - 1 - layer
            fit = min(fit, n_layers - layer)
            if fit < 1:
                continue
            take = fit if full_stages else int(rng.integers(1, fit + 1))
            placement[r, layer : layer + take] = mach
            free[mach] -= prefix[layer + take] - prefix[layer]
            layer += take
            if layer == n_layers:
                break
        if layer < n_layers:
            return None
    return placement


def sampling_modes(instance: Instance) -> list[tuple[int, bool]]:
    """``(stash, full_stages)`` of modes 1-4 (see the module docstring), duplicates removed."""
    deepest = stash_count(instance, min(instance.num_machines, instance.num_layers))
    shallow = stash_count(instance, 1)
    return list(dict.fromkeys([(deepest, False), (shallow, False), (deepest, True), (shallow, True)]))


def sample_feasible(
    instance: Instance, rng: np.random.Generator, first_mode: int = 0
) -> tuple[np.ndarray | None, int]:
    """A random placement that passes the cost model's memory check, and the mode that drew it.

    Starts at mode ``first_mode``; returns ``(None, -1)`` when no mode (nor the listed-order
    fallback) fits.
    """
    modes = sampling_modes(instance)
    for k in range(first_mode, len(modes)):
        stash, full = modes[k]
        for _ in range(MAX_TRIES):
            p = sample_placement(instance, rng, stash, full)
            if p is not None and _fits(instance, p):
                return p, k
    fallback = _listed_first_fit(instance)
    return (fallback, len(modes)) if fallback is not None else (None, -1)


def _listed_first_fit(instance: Instance) -> np.ndarray | None:
    free = instance.cluster.memory_bytes.astype(np.float64).copy()
    order = np.arange(instance.num_machines)
    rows = [fill_in_order(instance, order, free) for _ in range(instance.data_parallel)]
    if any(row is None for row in rows):
        return None
    p = np.stack(rows)
    return p if _fits(instance, p) else None


def _fits(instance: Instance, placement: np.ndarray) -> bool:
    c, w = instance.cluster, instance.workload
    return bool(np.all(memory_use_bytes(c, w, placement[None])[0] <= c.memory_bytes))


def random_placement(
    instance: Instance, seed: int = 0, budget: int | None = None
) -> PlacementResult:
    """One random feasible placement (not evaluated: ``cost_evals`` is 0).

    Args:
        instance: the cluster and workload.
        seed: seeds the draw.
        budget: unused (no cost evaluations).
    """
    del budget
    p, _ = sample_feasible(instance, np.random.default_rng(seed))
    if p is None:
        return PlacementResult("random", None, 0, _no_sample_reason(instance))
    return PlacementResult("random", p, 0)


def random_best_of_n(
    instance: Instance, seed: int = 0, budget: int | None = None
) -> PlacementResult:
    """The fastest of ``budget`` random feasible placements (default 1000), one batch evaluation.

    Args:
        instance: the cluster and workload.
        seed: seeds the draws.
        budget: samples drawn and evaluated.
    """
    n = DEFAULT_SAMPLES if budget is None else int(budget)
    rng = np.random.default_rng(seed)
    samples, mode = [], 0
    for _ in range(n):
        p, mode = sample_feasible(instance, rng, mode)
        if p is None:
            break
        samples.append(p)
    evaluator = Evaluator(instance, n)
    if samples:
        evaluator.times(np.stack(samples))
    return evaluator.result("random-best-of-n", "" if samples else _no_sample_reason(instance))


def _no_sample_reason(instance: Instance) -> str:
    return (
        f"no random contiguous placement fits in memory after {2 * MAX_TRIES} draws; "
        + capacity_reason(instance)
    )
