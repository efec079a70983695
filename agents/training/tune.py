"""Hyper-parameter sweeps of the agent on Ray Tune: ``tune(TuneSettings) -> SweepResult``.

A sweep samples the agent's config (:class:`agents.training.config.RunConfig`) from a search space of
dotted keys, the ones ``--set`` takes, trains one run per trial with :func:`agents.training.train.train`
and stops the weaker trials early with ASHA on the validation score that training reports
at every evaluation: ``exp`` of ``eval/evaluations.csv``'s ``mean_reward``, the geometric-mean
factor over the naive placement on the run's held-out validation instances of the objective
being trained -- the speed-up for the speed rewards, the dollar saving for ``env.reward=cost``,
the geometric mean of the two for ``mixed`` (the metric keeps its name ``val_speedup``).

The search space (``SPACE.yaml``), one dotted key per line::

    ppo.learning_rate: {loguniform: [1.0e-4, 3.0e-3]}   # log-uniform between the two
    ppo.ent_coef: {uniform: [0.0, 0.1]}
    ppo.n_epochs: {randint: [2, 8]}                      # an integer, both ends included
    policy.hidden_dim: [16, 32, 64]                      # a list: one of them at random
    env.reward: {choice: [stay, dense]}                  # the same, spelled out
    ppo.gamma: {grid: [0.99, 1.0]}                       # every value, each --trials times

Every key and value is checked against the config before any trial starts. The sweep
directory::

    SWEEP/
      space.yaml          the space as given
      base_config.yaml    the base config, resolved (before the space)
      trials/trial-000/   one run directory per trial, the usual layout (config.yaml,
                          eval/evaluations.csv, tb/ TensorBoard logs, policy/, best_policy/)
      trials.csv          one row per trial: its values, best validation speed-up, steps
                          trained, status (finished, stopped early by ASHA, error)
      best_config.yaml    the best trial's config, resolved (``hulk train --config`` takes it)
      best.json           the best trial, its validation speed-up and run directory
      ray/                Ray Tune's own experiment state

Trials are seeded alike (``train.seed``: they differ only by the sampled values) and the
sampling is seeded by ``TuneSettings.seed``: the same command samples the same trials.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.training.config import (
    RunConfig,
    TrainSettings,
    apply_overrides,
    config_from_dict,
    save_config,
)
from agents.training.runs import FINAL_POLICY_DIR, read_run_config
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import write_csv
from hulk_env.evaluation.distributed import import_ray, ray_session
from hulk_env.files import atomic_write_text

METRIC = "val_speedup"  # the validation objective's geometric-mean factor over naive (module docstring)
TIME_ATTR = "timesteps"
DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice", "grid")
TRIALS_DIR = "trials"
REDUCTION_FACTOR = 2  # ASHA keeps the best half at each rung


@dataclass(frozen=True)
class Dimension:
    """One key of the search space: ``kind`` in :data:`DISTRIBUTIONS` over ``values``
    (``[low, high]`` for ranges, the options for ``choice``/``grid``)."""

    key: str
    kind: str
    values: tuple

    def to_tune(self) -> Any:
        from ray import tune

        if self.kind == "uniform":
            return tune.uniform(*self.values)
        if self.kind == "loguniform":
            return tune.loguniform(*self.values)
        if self.kind == "randint":
            return tune.randint(self.values[0], self.values[1] + 1)  # Tune's upper end is exclusive
        if self.kind == "choice":
            return tune.choice(list(self.values))
        return tune.grid_search(list(self.values))


@dataclass(frozen=True)
class TuneSettings:
    """A sweep.

    Attributes:
        config: the base config (a name under ``agents/configs/`` or a YAML path).
        space: the search space file (see the module docstring).
        trials: samples of the space (with ``grid`` keys: samples per grid point).
        out: the sweep directory (created; must not hold a sweep already).
        overrides: ``section.key=value`` applied to the base before the space.
        ray: ``"local"``, ``"auto"`` or a cluster address (see
            :func:`hulk_env.evaluation.distributed.ray_session`).
        workers: trials at a time (default: one per CPU of the cluster).
        seed: seeds the sampling of the space.
        verbose: Ray Tune's progress output (0 silent, 1 status table).
    """

    config: str | Path | None
    space: str | Path
    trials: int = 4
    out: str | Path = "runs/tune"
    overrides: tuple[str, ...] = ()
    ray: str = "local"
    workers: int | None = None
    seed: int = 0
    verbose: int = 0


@dataclass(frozen=True)
class TrialRow:
    """One trial of a finished sweep."""

    trial: str
    val_speedup: float
    timesteps: int
    status: str
    run_dir: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: every trial and the best one (``best`` is ``None`` if all failed)."""

    sweep_dir: Path
    trials: list[TrialRow]
    best: TrialRow | None
    best_config: Path | None


# ---- the search space ---------------------------------------------------------------------------


def _space_text(path: str | Path) -> str:
    """The search-space file's text (already checked by :func:`load_space`), kept with the sweep."""
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_text

    return read_text(path, limits.MAX_SMALL_FILE_BYTES, what="search-space file")


def load_space(path: str | Path, base: RunConfig) -> list[Dimension]:
    """Read and check a search space: every key a config key, every value one it accepts."""
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_data

    src = Path(path)
    data = read_data(src, syntax="yaml", what="search-space file", max_bytes=limits.MAX_SMALL_FILE_BYTES)
    if not isinstance(data, dict) or not data:
        raise HulkInputError(
            "a search space is a mapping of dotted config keys, e.g. 'ppo.learning_rate: {loguniform: [1.0e-4, 1.0e-2]}'",
            source=str(src),
        )
    dims = [_dimension(str(k), v, str(src)) for k, v in data.items()]
    for dim in dims:
        for value in dim.values:  # ranges: both ends; choices and grids: every value
            try:
                apply_overrides(config_from_dict(base.to_dict()), [override(dim.key, value)])
            except HulkInputError as err:
                raise HulkInputError(err.message, source=str(src), field=dim.key) from None
    return dims


def _dimension(key: str, spec: Any, source: str) -> Dimension:
    if isinstance(spec, list):
        spec = {"choice": spec}
    if not isinstance(spec, dict) or len(spec) != 1:
        raise HulkInputError(
            f"give one distribution ({', '.join(DISTRIBUTIONS)}) or a list of values", source=source, field=key
        )
    ((kind, values),) = spec.items()
    if kind not in DISTRIBUTIONS:
        raise HulkInputError(f"unknown distribution '{kind}'; use one of {', '.join(DISTRIBUTIONS)}", source=source, field=key)
    if not isinstance(values, list) or not values:
        raise HulkInputError(f"'{kind}' needs a list of values", source=source, field=key)
    if kind in ("uniform", "loguniform", "randint"):
        if len(values) != 2 or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise HulkInputError(f"'{kind}' needs [low, high] as two numbers", source=source, field=key)
        low, high = values
        if not low < high or (kind == "loguniform" and low <= 0):
            raise HulkInputError(
                f"'{kind}' needs low < high{' and low > 0' if kind == 'loguniform' else ''}, got {values}",
                source=source, field=key,
            )
        if kind == "randint" and not all(float(v).is_integer() for v in values):
            raise HulkInputError(f"'randint' needs integer ends, got {values}", source=source, field=key)
        values = [int(v) for v in values] if kind == "randint" else [float(v) for v in values]
    return Dimension(key, kind, tuple(values))


def override(key: str, value: Any) -> str:
    """``key=value`` as ``--set`` takes it (JSON is valid YAML, so the value reads back as is)."""
    return f"{key}={json.dumps(value)}"


# ---- the sweep ----------------------------------------------------------------------------------


def tune(settings: TuneSettings) -> SweepResult:
    """Run the sweep; see the module docstring for what it writes.

    Raises:
        HulkInputError: a bad base config or space, a sweep directory that holds a sweep, a
            config without evaluations (ASHA needs them), Ray not installed or unreachable.
    """
    import_ray()
    base = TrainSettings(config=settings.config, overrides=tuple(settings.overrides)).resolve()
    base.train.progress_bar = False
    ev, tc = base.eval, base.train
    if ev.eval_every <= 0 or ev.eval_every > tc.total_timesteps:
        raise HulkInputError(
            f"tuning stops trials on their validation speed-up, so training must evaluate: set "
            f"eval.eval_every between 1 and train.total_timesteps ({tc.total_timesteps}), got {ev.eval_every}"
        )
    if settings.trials < 1:
        raise HulkInputError(f"--trials must be at least 1, got {settings.trials}")
    dims = load_space(settings.space, base)
    sweep = Path(settings.out).resolve()
    if (sweep / TRIALS_DIR).exists() and any((sweep / TRIALS_DIR).iterdir()):
        raise HulkInputError("the sweep directory already holds trials; choose another --out", source=str(sweep))
    (sweep / TRIALS_DIR).mkdir(parents=True, exist_ok=True)
    atomic_write_text(sweep / "space.yaml", _space_text(settings.space))
    save_config(base, sweep / "base_config.yaml")

    with ray_session(settings.ray, settings.workers):
        grid = _run_tuner(settings, base, dims, sweep)
    trials = [_trial_row(r, sweep, dims) for r in grid]
    trials.sort(key=lambda t: t.trial)
    return _write_summary(sweep, trials, dims)


def _run_tuner(settings: TuneSettings, base: RunConfig, dims: Sequence[Dimension], sweep: Path):
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.basic_variant import BasicVariantGenerator

    tc = base.train
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, base=base.to_dict(), trials_dir=str(sweep / TRIALS_DIR), cwd=os.getcwd()),
        {"cpu": max(1, tc.torch_threads)},
    )
    scheduler = ASHAScheduler(
        time_attr=TIME_ATTR,
        max_t=tc.total_timesteps + 1,  # at max_t ASHA ends a trial: let it save its final policy
        grace_period=min(base.eval.eval_every, tc.total_timesteps),
        reduction_factor=REDUCTION_FACTOR,
    )
    tuner = tune.Tuner(
        trainable,
        param_space={d.key: d.to_tune() for d in dims},
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode="max",
            scheduler=scheduler,
            num_samples=settings.trials,
            search_alg=BasicVariantGenerator(random_state=settings.seed),
            max_concurrent_trials=settings.workers,
        ),
        run_config=tune.RunConfig(name="tune", storage_path=str(sweep / "ray"), verbose=settings.verbose),
    )
    return tuner.fit()


def trial_dir_name(trial_id: str) -> str:
    """``trial-007`` for Tune's ``<experiment>_00007``."""
    return f"trial-{int(trial_id.rsplit('_', 1)[-1]):03d}"


def run_trial(params: Mapping[str, Any], *, base: dict, trials_dir: str, cwd: str) -> None:
    """One trial (runs in a Ray worker): train the base config with the sampled values and
    report the validation speed-up after every evaluation."""
    from ray import tune

    from agents.training.train import train

    if os.path.isdir(cwd):  # relative paths in the config mean the caller's directory
        os.chdir(cwd)
    name = trial_dir_name(tune.get_context().get_trial_id())
    settings = TrainSettings(
        config=config_from_dict(base),
        overrides=tuple(override(k, v) for k, v in params.items()),
        out=trials_dir,
        name=name,
    )

    def report(timesteps: int, speedup: float) -> None:
        tune.report({METRIC: speedup, TIME_ATTR: timesteps})

    train(settings, on_eval=report)


def _trial_row(result: Any, sweep: Path, dims: Sequence[Dimension]) -> TrialRow:
    df = result.metrics_dataframe
    # A trial that failed before reporting has no metrics: its id is in its directory's name
    # (run_trial_<experiment>_<index>_...).
    trial_id = result.metrics.get("trial_id") or re.match(r"\w+?_([0-9a-f]+_\d+)_", Path(result.path).name).group(1)
    name = trial_dir_name(trial_id)
    best = float(df[METRIC].max()) if df is not None and METRIC in df else math.nan
    steps = int(df[TIME_ATTR].max()) if df is not None and TIME_ATTR in df else 0
    params = {d.key: result.config.get(d.key) for d in dims}
    if result.error is not None:
        status = f"error: {str(result.error).strip().splitlines()[-1][:200]}"
    elif (sweep / TRIALS_DIR / name / FINAL_POLICY_DIR / "policy.json").is_file():
        status = "finished"
    else:  # ASHA ended it: its run directory has best_policy/ but no final policy/
        status = "stopped early (ASHA)"
    return TrialRow(name, best, steps, status, str(sweep / TRIALS_DIR / name), params)


def _write_summary(sweep: Path, trials: list[TrialRow], dims: Sequence[Dimension]) -> SweepResult:
    rows = [
        {"trial": t.trial, **t.params, METRIC: t.val_speedup, TIME_ATTR: t.timesteps, "status": t.status, "run_dir": t.run_dir}
        for t in trials
    ]
    write_csv(sweep / "trials.csv", rows, ["trial", *(d.key for d in dims), METRIC, TIME_ATTR, "status", "run_dir"])
    scored = [t for t in trials if math.isfinite(t.val_speedup)]
    if not scored:
        return SweepResult(sweep, trials, None, None)
    best = max(scored, key=lambda t: t.val_speedup)  # ties: the first trial (sorted by name)
    best_config = sweep / "best_config.yaml"
    save_config(read_run_config(Path(best.run_dir)), best_config)
    summary = {"trial": best.trial, METRIC: best.val_speedup, TIME_ATTR: best.timesteps, "params": best.params,
               "run_dir": best.run_dir, "config": str(best_config), "trials": len(trials)}
    atomic_write_text(sweep / "best.json", json.dumps(summary, indent=2) + "\n")
    return SweepResult(sweep, trials, best, best_config)

