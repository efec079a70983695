"""What every generator shares: the protocol the env needs, keys, range checks, resampling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.reference import reference_fits

KEY_RANGE = 2**31  # instance keys are drawn in [0, KEY_RANGE)


class InstanceGenerator(Protocol):
    """What the env needs from a generator."""

    @property
    def max_machines(self) -> int: ...

    @property
    def max_slots(self) -> int: ...

    @property
    def max_edges(self) -> int: ...

    def __call__(self, np_random: np.random.Generator) -> Instance: ...


def is_feasible(instance: Instance) -> bool:
    """Whether the naive placement (the env's reference) fits in memory."""
    return reference_fits(instance)


def naive_fits_memory(instance: Instance) -> bool:
    """Whether the naive placement fits under the cost model's own memory rule
    (:func:`hulk_env.cost.memory_use_bytes`, less the masks' ``MEMORY_RTOL`` margin): what the
    env's witness checks at reset. Stricter than :func:`is_feasible` under plan settings, whose
    bound (:func:`hulk_env.parallelism.state_lower_bytes`) takes one data-parallel group per
    machine; the same at the default settings."""
    from hulk_env import cost
    from hulk_env.feasibility import MEMORY_RTOL
    from hulk_env.reference import naive_placement

    placement = naive_placement(instance)
    if placement is None:
        return False
    used = cost.memory_use_bytes(instance.cluster, instance.workload, placement[None])[0]
    return bool(np.all(used <= instance.cluster.memory_bytes * (1.0 - MEMORY_RTOL)))


def int_range(value: object, label: str) -> tuple[int, int]:
    """A ``(low, high)`` integer range from a pair or a single integer; validated."""
    lo, hi = (value, value) if isinstance(value, int | np.integer) else tuple(value)  # type: ignore[misc]
    if int(lo) != lo or int(hi) != hi or lo < 1 or hi < lo:
        raise HulkInputError(f"must be an integer range (low, high) with 1 <= low <= high, got {value!r}", field=label)
    return int(lo), int(hi)


def choices(value: object, label: str) -> tuple:
    """A non-empty tuple of choices (lists from YAML/JSON become tuples)."""
    out = tuple(value) if isinstance(value, list | tuple) else (value,)
    if not out:
        raise HulkInputError("needs at least one choice", field=label)
    return out


def resample(build: Callable[[int], Instance], np_random: np.random.Generator, max_tries: int, what: str) -> Instance:
    """Draw keys until ``build(key)`` gives a feasible instance."""
    for _ in range(max_tries):
        key = int(np_random.integers(KEY_RANGE))
        instance = build(key)
        if is_feasible(instance):
            return instance
    raise HulkInputError(
        f"{what}: no feasible instance in {max_tries} draws (the naive placement never fit in "
        "memory); allow more or larger machines, smaller models, fewer micro-batches or replicas"
    )
