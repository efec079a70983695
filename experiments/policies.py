"""Trained policies as placement methods on instances of any size (same weights, wider padding).

The agent's policy network is size-agnostic -- one score per machine from weights shared by all
machines -- but a saved policy records the observation padding it was trained with, and
:func:`agents.inference.load_policy_method` refuses larger instances. :class:`WidePolicy` loads the
weights into a network built for each instance's own padding, so one policy places clusters
and models of any size. Policies whose weights depend on the padding (the ``mlp`` extractor)
raise :class:`HulkInputError` on a larger instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hulk_env.baselines import PlacementResult
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import Padding
from hulk_env.instance import Instance


class WidePolicy:
    """A saved policy, rebuilt for each instance's own padding (same weights).

    Args:
        run_dir: a run directory (``best_policy/`` preferred) or a policy directory.
    """

    def __init__(self, run_dir: Path) -> None:
        from agents.saved_policy import load_policy

        self.loaded = load_policy(run_dir)
        self._cache: dict[Any, Any] = {}

    def for_instance(self, inst: Instance):
        """A :class:`agents.saved_policy.LoadedPolicy` whose padding fits ``inst`` exactly (or
        the saved one, when that already fits)."""
        from agents.saved_policy import LoadedPolicy, build_policy_network, lookahead_of

        saved = self.loaded.padding
        need = Padding.of([inst])
        if need.max_machines <= saved.max_machines and need.max_layers <= saved.max_layers and need.max_edges <= saved.max_edges:
            return self.loaded
        if need not in self._cache:
            net = build_policy_network(self.loaded.meta["policy"], need, lookahead_of(self.loaded.meta))
            try:
                net.load_state_dict(self.loaded.policy.state_dict())
            except RuntimeError as exc:
                raise HulkInputError(
                    f"the policy's weights depend on its padding, it cannot place larger instances ({str(exc).splitlines()[0]})",
                    source=str(self.loaded.directory),
                ) from None
            net.set_training_mode(False)
            self._cache[need] = LoadedPolicy(net, need, self.loaded.meta, self.loaded.directory)
        return self._cache[need]

    def place(self, inst: Instance, seed: int, samples: int):
        from agents.inference import policy_placement

        return policy_placement(self.for_instance(inst), inst, seed=seed, samples=samples, name="policy")

    def widening_check(self, inst: Instance) -> bool:
        """Same greedy placement from the saved network and from one with more padding."""
        from agents.inference import policy_placement
        from agents.saved_policy import LoadedPolicy, build_policy_network, lookahead_of

        p = self.loaded.padding
        bigger = Padding(p.max_machines + 5, p.max_layers + 7, p.max_edges + 7)
        net = build_policy_network(self.loaded.meta["policy"], bigger, lookahead_of(self.loaded.meta))
        net.load_state_dict(self.loaded.policy.state_dict())
        net.set_training_mode(False)
        wide = LoadedPolicy(net, bigger, self.loaded.meta, self.loaded.directory)
        a = policy_placement(self.loaded, inst).placement
        b = policy_placement(wide, inst).placement
        return a is not None and b is not None and np.array_equal(a, b)

    def method(self, samples: int = 0, name: str = "policy"):
        """A leaderboard method ``(instance, seed, budget) -> PlacementResult``."""

        def place(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
            result = self.place(instance, seed, samples)
            return PlacementResult(name, result.placement, result.cost_evals, result.reason)

        return place
