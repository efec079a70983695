"""Placement methods that live with the agent, as ``(instance, seed, budget) -> PlacementResult``.

``hulk-gcn`` (:mod:`agents.hulk_gcn`) and any saved policy (:func:`load_policy_method`), for
:func:`hulk_env.evaluation.run_methods`, the ``hulk`` command and the experiments. Their names
are known without torch (:data:`AGENT_METHODS`); building one imports it.
"""

from __future__ import annotations

from pathlib import Path

from agents.inference import policy_placement
from agents.saved_policy import load_policy
from hulk_env.baselines import Method, PlacementResult
from hulk_env.instance import Instance

AGENT_METHODS = ("hulk-gcn",)  # names known without torch (the CLI lists them, says how to install)


def agent_methods() -> dict[str, Method]:
    """Leaderboard methods that live with the agent (they need torch): :data:`AGENT_METHODS`."""
    from agents.hulk_gcn import NAME, hulk_gcn_method

    return {NAME: hulk_gcn_method}


def load_policy_method(
    run_dir: str | Path, which: str = "best", samples: int = 0, temperature: float = 1.0
) -> Method:
    """A saved policy as a leaderboard method ``(instance, seed, budget) -> PlacementResult``.

    Masked and deterministic by default; with ``samples > 0`` (or a ``budget``, taken as the
    number of rollouts) it also samples that many rollouts and keeps the best placement.
    Loads once; errors (no policy, corrupt files) are raised here, not at the first call.
    """
    loaded = load_policy(run_dir, which)
    name = f"policy:{Path(run_dir).name}"

    def method(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
        extra = samples if budget is None else max(0, int(budget) - 1)
        return policy_placement(loaded, instance, seed=seed, samples=extra, name=name, temperature=temperature)

    return method
