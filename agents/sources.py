"""Where a run's instances come from: the training generator, the held-out set, the padding.

Everything here follows from a :class:`agents.config.RunConfig` alone, so training, the final
comparison and the experiments rebuild the same instances from a run's ``config.yaml``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.config import RunConfig
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite
from hulk_env.feasibility import Padding
from hulk_env.generators import InstanceListGenerator, fixed_instance, make_generator
from hulk_env.instance import Instance

HELDOUT_SEED_OFFSET = 1_000_003  # held-out generator draws never share the training seed


class CyclingInstances:
    """A generator that returns its instances in order, round robin (deterministic evals).

    Args:
        instances: the instances to cycle through.
    """

    def __init__(self, instances: list[Instance]) -> None:
        self.instances = tuple(instances)
        self._padding = Padding.of(self.instances)
        self._next = 0

    @property
    def max_machines(self) -> int:
        return self._padding.max_machines

    @property
    def max_slots(self) -> int:
        return self._padding.max_layers

    @property
    def max_edges(self) -> int:
        return self._padding.max_edges

    def __call__(self, np_random: np.random.Generator) -> Instance:
        del np_random  # the order is the point
        instance = self.instances[self._next % len(self.instances)]
        self._next += 1
        return instance


def training_source(config: RunConfig) -> tuple[Any, list[Instance]]:
    """``(generator for the training envs, held-out instances for evaluation)``."""
    env, seed = config.env, config.train.seed
    if env.generator == "fixed":
        instance = fixed_instance(
            env.cluster, env.model, data_parallel=env.data_parallel, num_micro_batches=env.num_micro_batches
        )
        generator = InstanceListGenerator((instance,))
        heldout = [instance]
    elif env.generator == "suite":
        if not env.suite:
            raise HulkInputError("env.generator=suite needs env.suite (e.g. geo-v0)", field="env.suite")
        instances = load_suite(env.suite)
        n = env.suite_instances or len(instances)
        generator = InstanceListGenerator(tuple(instances[:n]))
        heldout = instances[n:] or instances[:n]
    elif env.generator in ("toy", "random"):
        city_pool = {"cities": tuple(env.cities)} if env.generator == "random" and env.cities else {}
        generator = make_generator(env.generator, **city_pool)
        rng = np.random.default_rng(seed + HELDOUT_SEED_OFFSET)
        heldout = [generator(rng) for _ in range(max(1, config.eval.heldout_instances))]
    else:
        raise HulkInputError(
            f"unknown env.generator '{env.generator}'; choose fixed, suite, toy or random", field="env.generator"
        )
    if env.heldout_suite:
        heldout = load_suite(env.heldout_suite)
    return generator, heldout


def padding_for(config: RunConfig, generator: Any, heldout: list[Instance]) -> Padding:
    """The observation padding: the config's, else the largest of the generator and held-out set."""
    needed = Padding(generator.max_machines, generator.max_slots, max(1, generator.max_edges)).at_least(
        Padding.of(heldout)
    )
    env = config.env
    chosen = Padding(
        env.max_machines or needed.max_machines,
        env.max_layers or needed.max_layers,
        env.max_edges or needed.max_edges,
    )
    for key in ("max_machines", "max_layers", "max_edges"):
        if getattr(chosen, key) < getattr(needed, key):
            raise HulkInputError(
                f"env.{key}={getattr(chosen, key)} is below what the instances need ({getattr(needed, key)})",
                field=f"env.{key}",
            )
    return chosen
