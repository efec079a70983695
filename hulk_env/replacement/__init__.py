"""Re-placement after machine or region failures: what moves, what it costs, how to choose.

- :mod:`~hulk_env.replacement.migration`: bytes moved and migration seconds of a change of
  placement (pure functions beside :mod:`hulk_env.cost`), and the horizon total
  ``migration_s + H x iteration_time_s``;
- :mod:`~hulk_env.replacement.problem`: the problem record and a method's typed answer;
- :mod:`~hulk_env.replacement.methods`: ``scratch``, ``repair`` and ``search``;
- :mod:`~hulk_env.replacement.failures`: failure specs (``NAME``, ``region:NAME``, ``10%``);
- :mod:`~hulk_env.replacement.traces`: failure traces over a training run and their replay.
"""

from hulk_env.replacement.failures import FailureScenario, parse_failures, standard_scenarios
from hulk_env.replacement.methods import (
    REPLACE_METHODS,
    get_replace_method,
    replace_method_names,
    run_method,
)
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
    "REPLACE_METHODS",
    "CheckpointStore",
    "FailureScenario",
    "Migration",
    "Outcome",
    "ReplacementProblem",
    "ReplacementResult",
    "get_replace_method",
    "horizon_totals",
    "migration",
    "outcome",
    "parse_failures",
    "replace_method_names",
    "run_method",
    "sources",
    "standard_scenarios",
]
