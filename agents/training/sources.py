"""Where a run's instances come from: the training generator, the held-out set, the padding.

Everything here follows from a :class:`agents.training.config.RunConfig` alone, so training, the final
comparison and the experiments rebuild the same instances from a run's ``config.yaml``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.training.config import RunConfig
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite
from hulk_env.feasibility import Padding
from hulk_env.generators import InstanceListGenerator, fixed_instance, make_generator
from hulk_env.instance import Instance

HELDOUT_SEED_OFFSET = 1_000_003  # held-out generator draws never share the training seed


def training_source(config: RunConfig) -> tuple[Any, list[Instance]]:
    """``(generator for the training envs, held-out instances for evaluation)``."""
    env, seed = config.env, config.train.seed
    if env.plan_settings and env.generator != "random":
        raise HulkInputError(
            f"env.plan_settings draws settings for env.generator=random only, not '{env.generator}' "
            "(a fixed instance or a suite carries its own settings)",
            field="env.plan_settings",
        )
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
    elif env.generator in ("toy", "random", "generalist"):
        if env.generator == "generalist":
            generator = generalist_generator(config)
        else:
            options: dict[str, Any] = {}
            if env.generator == "random" and env.cities:
                options["cities"] = tuple(env.cities)
            if env.plan_settings:
                options["plan_settings"] = True
            generator = make_generator(env.generator, **options)
        rng = np.random.default_rng(seed + HELDOUT_SEED_OFFSET)
        heldout = [generator(rng) for _ in range(max(1, config.eval.heldout_instances))]
    else:
        raise HulkInputError(
            f"unknown env.generator '{env.generator}'; choose fixed, suite, toy, random or generalist", field="env.generator"
        )
    if env.heldout_suite:
        heldout = load_suite(env.heldout_suite)
    return generator, heldout


def generalist_generator(config: RunConfig) -> Any:
    """The ``generalist`` training distribution with the config's city pool and machine range."""
    from agents.training.distribution import GeneralistGenerator

    kwargs: dict[str, Any] = {"cities": tuple(config.env.cities)}
    if config.env.machines:
        if len(config.env.machines) != 2 or config.env.machines[0] > config.env.machines[1]:
            raise HulkInputError(
                f"env.machines must be [low, high] with low <= high, got {config.env.machines}", field="env.machines"
            )
        kwargs["num_machines"] = tuple(config.env.machines)
    return GeneralistGenerator(**kwargs)


def padding_for(config: RunConfig, generator: Any, heldout: list[Instance]) -> Padding:
    """The training envs' observation padding: the config's, else the generator's largest
    instance (PPO's rollout buffer needs one shape). The held-out instances need not fit: the
    policy network runs at any size (:mod:`agents.decision.inference`)."""
    del heldout
    needed = Padding(generator.max_machines, generator.max_slots, max(1, generator.max_edges))
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
