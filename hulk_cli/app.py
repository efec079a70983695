"""The ``hulk`` command: show instances, place, evaluate, plot, benchmark and train.

Every command turns bad input into one line on stderr and exit status 2, never a traceback
(:mod:`hulk_cli.output`). Each command imports what it needs when it runs, so ``hulk show``
stays fast and every command but ``train`` and ``bench train`` (and the policy methods) works
without the agent stack (torch, SB3, PyG: ``pip install 'hulk-env[agent]'``).
"""

from __future__ import annotations

import typer

from hulk_cli import (
    bench,
    bench_agent,
    bench_learn,
    bench_scale,
    bench_settings,
    evaluate,
    failures,
    imports,
    pareto,
    place,
    plot,
    replace,
    report,
    show,
    train,
    tune,
)
from hulk_cli.output import OneLineUsageErrors

app = typer.Typer(
    cls=OneLineUsageErrors, add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0]
)
app.add_typer(show.app, name="show")
app.add_typer(imports.app, name="import")
app.command("place")(place.place)
app.command("pareto")(pareto.pareto)
app.command("evaluate")(evaluate.evaluate)
app.command("report")(report.report)
app.add_typer(plot.app, name="plot")
app.add_typer(bench.app, name="bench")
bench.app.command("train")(train.bench_train_command)
bench.app.command("scale")(bench_scale.bench_scale_command)
bench.app.command("settings")(bench_settings.bench_settings_command)
app.command("train")(train.train_command)
app.command("replace")(replace.replace)
app.command("simulate-failures")(failures.simulate_failures)
bench.app.command("replace")(replace.bench_replace_command)
app.command("tune")(tune.tune_command)
bench.app.command("evaluate")(evaluate.bench_evaluate_command)
bench.app.command("agent")(bench_agent.bench_agent_command)
bench.app.command("learn")(bench_learn.bench_learn_command)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
