"""Re-placement after machine or region failures: what moves, what it costs, how to choose.

- :mod:`~hulk_env.replacement.migration`: bytes moved and migration seconds of a change of
  placement (pure functions beside :mod:`hulk_env.cost`), and the horizon total
  ``migration_s + H x iteration_time_s``;
- :mod:`~hulk_env.replacement.problem`: the problem record, a method's typed answer, placement
  files (``hulk place --json`` output);
- :mod:`~hulk_env.replacement.failures`: failure specs (``NAME``, ``region:NAME``, ``10%``);
- :mod:`~hulk_env.replacement.episode`: re-placement episodes (the dynamics of
  ``hulk/Replace-v0``, :mod:`hulk_env.env.replace_env`, and of the agent);
- :mod:`~hulk_env.replacement.methods`: ``scratch``, ``repair``, ``search`` and ``agent``
  (:mod:`~hulk_env.replacement.agent`), timed and judged by ``run_method``;
- :mod:`~hulk_env.replacement.traces`: failure traces over a training run and their replay;
- :mod:`~hulk_env.replacement.bench`: ``hulk bench replace``; :mod:`~hulk_env.replacement.plots`:
  timeline and before/after maps; :mod:`~hulk_env.replacement.train_agent`: the agent's training.

This package's ``__init__`` exports only what the env side may use (no searches): import the
methods, traces and bench from their modules.
"""

from hulk_env.replacement.failures import FailureScenario, parse_failures, standard_scenarios
from hulk_env.replacement.migration import (
    CheckpointStore,
    Migration,
    horizon_totals,
    migration,
    sources,
)
from hulk_env.replacement.problem import (
    DEFAULT_HORIZON,
    Outcome,
    ReplacementProblem,
    ReplacementResult,
    outcome,
)

__all__ = [
    "DEFAULT_HORIZON",
    "CheckpointStore",
    "FailureScenario",
    "Migration",
    "Outcome",
    "ReplacementProblem",
    "ReplacementResult",
    "horizon_totals",
    "migration",
    "outcome",
    "parse_failures",
    "sources",
    "standard_scenarios",
]
