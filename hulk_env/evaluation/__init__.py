"""Benchmark suites, running placement methods on them, and the leaderboard.

CompilerGym style: fixed, versioned, seeded suites of instances with stable ids
(``"geo-v0/17"``), named methods (:data:`hulk_env.baselines.METHODS`, plus any callables such as
trained policies), results as CSV/JSON and a Markdown leaderboard that ranks methods by the
instances they solved, then by the geometric-mean speed-up over the ``naive`` placement (the
paper's "without Hulk" reference).

* :mod:`.suites` -- :func:`load_suite` (``tiny-v0``, ``geo-v0``, ``hard-v0``, ``paper-v0``);
* :mod:`.runner` -- :func:`run_methods`, :func:`evaluate_suite`;
* :mod:`.results` -- :class:`ResultRow`, the one CSV writer :func:`write_csv`,
  :func:`read_results_csv`;
* :mod:`.leaderboard` -- :func:`leaderboard`, :func:`summary_markdown`;
* :mod:`.report` -- :func:`write_results` (``results.csv``, ``results.json``, ``summary.md``);
* :mod:`.stats` -- :func:`geometric_mean`, :func:`geometric_summary`.
"""

from hulk_env.baselines import METHODS
from hulk_env.evaluation.leaderboard import leaderboard, summary_markdown
from hulk_env.evaluation.report import write_results
from hulk_env.evaluation.results import (
    RESULT_COLUMNS,
    ResultRow,
    csv_cell,
    read_results_csv,
    write_csv,
)
from hulk_env.evaluation.runner import DEFAULT_METHODS, MethodFn, evaluate_suite, run_methods
from hulk_env.evaluation.stats import GeometricSummary, geometric_mean, geometric_summary
from hulk_env.evaluation.suites import SUITES, load_suite, suite_instance, suite_names
from hulk_env.feasibility import memory_tightness

__all__ = [
    "DEFAULT_METHODS",
    "METHODS",
    "RESULT_COLUMNS",
    "SUITES",
    "GeometricSummary",
    "MethodFn",
    "ResultRow",
    "csv_cell",
    "evaluate_suite",
    "geometric_mean",
    "geometric_summary",
    "leaderboard",
    "load_suite",
    "suite_instance",
    "memory_tightness",
    "read_results_csv",
    "run_methods",
    "suite_names",
    "summary_markdown",
    "write_csv",
    "write_results",
]
