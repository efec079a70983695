"""``hulk report RUN_DIR | EVAL_DIR``: one self-contained HTML page of a run or an evaluation.

Gathers the parts (:class:`hulk_env.render.report_page.Report`) and writes the page atomically:

* an evaluation directory (``hulk evaluate --out DIR``: ``results.csv``, ``evaluate.json``, and
  ``evaluate_settings.json`` from this version on): the leaderboard and every row; the winning
  method's placement of the first instance it solved, placed again with the evaluation's seed and
  budget (the page says whether the iteration time matches the saved row), on the map and as a
  simulated schedule; the speed-ups per method; the settings;
* a training run (``hulk train``: ``config.yaml``, ``versions.json``, ``tb/``, ``eval/``): the
  trained policy's placement of the first held-out instance, its schedule, the comparison with
  the baselines (``eval/results.json``, written at the end of ``hulk train``), the learning
  curves and the config. Needs the agent stack (the policy is a torch network).

:func:`write_report` is what ``hulk train`` and ``hulk evaluate`` call at their end.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

import typer

from hulk_cli.output import clean_errors, console, require_agent
from hulk_env.errors import HulkInputError

REPORT_FILE = "report.html"
SETTINGS_FILE = "evaluate_settings.json"  # what `hulk evaluate` was asked (suite, methods, overrides)
MANIFEST_FILE = "evaluate.json"  # hulk_env.evaluation.distributed's manifest: seed, budgets, fingerprints
VERSION_PACKAGES = ("hulk-env", "numpy", "gymnasium", "matplotlib", "torch", "stable-baselines3", "torch-geometric")


@clean_errors
def report(
    path: Annotated[Path, typer.Argument(help="A run directory (hulk train) or an evaluation directory (hulk evaluate --out).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="The HTML file (default: PATH/report.html).")] = None,
) -> None:
    """Write one self-contained HTML page of a run or an evaluation (map, schedule, leaderboard,
    curves, settings); it opens offline in any browser."""
    console.print(f"report: {write_report(path, out)}")


def write_report(path: str | Path, out: str | Path | None = None) -> Path:
    """The report of a run or evaluation directory, written to ``out`` (default
    ``PATH/report.html``); returns its path. A failure leaves no file.

    Raises:
        HulkInputError: ``path`` is neither kind of directory, or its files are unreadable.
    """
    from hulk_env.render.report_page import write_report_file

    src = Path(path)
    if (src / "config.yaml").is_file():
        page = run_report(src)
    elif (src / "results.csv").is_file():
        page = evaluation_report(src)
    else:
        raise HulkInputError(
            "neither a run directory (no config.yaml: made by `hulk train`) nor an evaluation directory "
            "(no results.csv: made by `hulk evaluate --out DIR`)", source=str(src),
        )
    return write_report_file(Path(out) if out is not None else src / REPORT_FILE, page)


# ---- evaluation directories -----------------------------------------------------------------


def evaluation_settings(suite: str, methods: Sequence[str], policies: Mapping[str, str], seed: int,
                        budget: int | None, limit: int | None, overrides: Mapping[str, Any],
                        hulk_data: str | None) -> dict[str, Any]:
    """What ``hulk evaluate`` writes to ``evaluate_settings.json``: enough to rebuild its
    instances and methods, and the versions that ran them."""
    return {
        "suite": suite, "methods": list(methods), "policies": dict(policies), "seed": seed, "budget": budget,
        "limit": limit, "overrides": dict(overrides), "hulk_data": hulk_data, "versions": versions(),
    }


def evaluation_report(eval_dir: Path, instances: Sequence[Any] | None = None):
    """The :class:`Report` of an evaluation directory (``instances``: those evaluated, when the
    caller has them; else rebuilt from ``evaluate_settings.json`` or the instance ids)."""
    from hulk_env.evaluation import leaderboard
    from hulk_env.render import leaderboard_figure
    from hulk_env.render.report_page import Picture, Report, figure_png, settings_text

    rows = read_rows(eval_dir)
    settings = _read_json(eval_dir / SETTINGS_FILE) or {}
    manifest = _read_json(eval_dir / MANIFEST_FILE) or {}
    board = leaderboard(rows)
    suite = settings.get("suite") or _suite_of(rows)
    if instances is None:
        instances = _rebuild_instances(settings, suite, manifest, eval_dir)
    seed = int(manifest.get("seed", settings.get("seed", 0)))
    budgets = manifest.get("budgets", {})
    pictures, notes = _best_placement(rows, board, instances, seed, budgets, settings.get("policies", {}))
    try:
        pictures.append(Picture("plot", "speed-up over naive per method: geometric mean (bar) and each instance (dots)",
                                figure_png(leaderboard_figure(rows, title=f"{suite}: speed-up over naive"))))
    except HulkInputError as err:  # no method solved anything: the table says so
        notes.append(f"no speed-up plot: {err.message}")
    failed = sum(1 for r in rows if not r.feasible)
    n_inst = len({r.instance for r in rows})
    top = board[0]
    summary = (
        f"{suite}: {n_inst} instance{'s' if n_inst != 1 else ''} x {len(board)} methods. "
        f"{top['method']} ranks first: x{top['geomean_speedup_vs_naive']:.3f} geometric-mean speed-up over naive, "
        f"solved {top['solved']}/{top['instances']}. "
        + (f"{failed} row{'s' if failed != 1 else ''} found no feasible placement (listed below)." if failed else "Every row is feasible.")
    )
    shown = {"seed": seed, "budgets": budgets}
    shown.update({k: v for k, v in settings.items() if k != "versions"})
    text = {"evaluation": settings_text(shown)}
    if settings.get("versions"):
        text["versions (when it ran)"] = json.dumps(settings["versions"], indent=2)
    else:
        text["versions (when this report was made; the evaluation did not record its own)"] = json.dumps(versions(), indent=2)
    return Report(f"hulk evaluate: {suite}", summary, pictures, board, [_row_dict(r) for r in rows], text, notes)


def read_rows(eval_dir: Path) -> list[Any]:
    """The result rows of ``eval_dir`` (``results.json``, with reasons; else ``results.csv``)."""
    from hulk_env.evaluation import ResultRow, read_results_csv

    payload = _read_json(eval_dir / "results.json")
    raw = payload.get("rows") if isinstance(payload, dict) else None
    if raw is None:
        raw = read_results_csv(eval_dir / "results.csv")
    rows = []
    for n, r in enumerate(raw, start=1):
        try:
            rows.append(ResultRow(
                str(r["instance"]), str(r["method"]), _float(r.get("iteration_time_s")), _float(r.get("speedup_vs_naive")),
                _float(r.get("gap_to_best")), int(_float(r.get("cost_evals")) or 0), _float(r.get("wall_s")),
                _feasible(r), str(r.get("reason") or ""),
            ))
        except (KeyError, TypeError, ValueError) as err:
            raise HulkInputError(f"result row {n} is malformed ({err})", source=str(eval_dir)) from None
    if not rows:
        raise HulkInputError("no result rows to report", source=str(eval_dir))
    return rows


def _best_placement(rows, board, instances, seed: int, budgets: Mapping[str, Any], policies: Mapping[str, str]):
    """Map and Gantt of the best-ranked method that can be placed again (its first solved
    instance), with a note when the time differs from the saved row or a method could not run."""

    by_id = {inst.instance_id: inst for inst in instances}
    notes: list[str] = []
    for entry in board:
        name = entry["method"]
        row = next((r for r in rows if r.method == name and r.feasible and r.instance in by_id), None)
        if row is None:
            continue
        inst = by_id[row.instance]
        try:
            fn = _method(name, policies)
            budget = budgets.get(name)
            result = fn(inst, seed, None if budget is None else int(budget))
        except HulkInputError as err:
            notes.append(f"{name} could not be placed again for the map ({err.message}); showing the next method")
            continue
        if not result.feasible:
            notes.append(f"{name} found no feasible placement of {inst.instance_id} when placed again; showing the next method")
            continue
        pictures, time_s = placement_pictures(inst, result.placement, name)
        if not math.isclose(time_s, row.iteration_time_s, rel_tol=1e-9):
            notes.append(f"{name} placed {inst.instance_id} again in {time_s:.6f} s per iteration; the evaluation "
                         f"saved {row.iteration_time_s:.6f} s (a method whose result depends on time or machine)")
        return pictures, notes
    notes.append("no method's placement could be drawn (none solved an instance that could be rebuilt)")
    return [], notes


def placement_pictures(instance, placement, method: str):
    """``([map, gantt], iteration_time_s)`` of one placement (the schedule is simulated)."""
    from hulk_env import cost
    from hulk_env.render import gantt_figure, placement_figure
    from hulk_env.render.report_page import Picture, figure_png
    from hulk_env.simulate import simulate

    c, w = instance.cluster, instance.workload
    time_s = float(cost.iteration_time(c, w, placement))
    where = f"{method} on {instance.instance_id}"
    fig = placement_figure(instance, placement, title=f"{where}: {time_s:.4f} s per iteration")
    geographic = all(m.lat is not None and m.lon is not None for m in c.machines)
    pictures = [Picture("map" if geographic else "placement",
                        f"placement of {where}: " + ("machines at their cities on the world map, " if geographic else "")
                        + "colour: pipeline stage; links as wide as the bytes they carry", figure_png(fig))]
    sim = simulate(c, w, placement, record=True)
    pictures.append(Picture("gantt", f"simulated schedule of one iteration ({where})",
                            figure_png(gantt_figure(sim, instance))))
    return pictures, time_s


def _method(name: str, policies: Mapping[str, str]) -> Callable:
    from hulk_cli.methods import policy_method, resolve_method

    if name in policies:
        return policy_method(Path(policies[name]))
    return resolve_method(name)


def _rebuild_instances(settings: Mapping[str, Any], suite: str, manifest: Mapping[str, Any], eval_dir: Path) -> list[Any]:
    """The evaluated instances, rebuilt and checked against the manifest's fingerprints."""
    from dataclasses import replace

    from hulk_env.evaluation import load_suite
    from hulk_env.evaluation.search_reference import instance_fingerprint
    from hulk_env.workload import apply_overrides

    instances = load_suite(suite, hulk_data=settings.get("hulk_data"))[: settings.get("limit")]
    overrides = settings.get("overrides") or {}
    if overrides:
        instances = [replace(i, workload=apply_overrides(i.workload, **overrides)) for i in instances]
    prints = manifest.get("instances") or {}
    wrong = [i.instance_id for i in instances if i.instance_id in prints and prints[i.instance_id] != instance_fingerprint(i)]
    if wrong:
        raise HulkInputError(
            f"the instances evaluated here are not {suite}'s as built now ({', '.join(wrong[:3])} differ): "
            f"the evaluation used other settings; run `hulk evaluate` again with this version", source=str(eval_dir),
        )
    return instances


def _suite_of(rows: Sequence[Any]) -> str:
    suites = {r.instance.rsplit("/", 1)[0] for r in rows}
    if len(suites) != 1:
        raise HulkInputError(f"the rows come from several suites ({', '.join(sorted(suites))}): no {SETTINGS_FILE} says which")
    return suites.pop()


# ---- training runs --------------------------------------------------------------------------


def run_report(run_dir: Path):
    """The :class:`Report` of a training run directory (needs the agent stack)."""
    require_agent("hulk report RUN_DIR")
    from agents.decision.inference import policy_placement
    from agents.network.saved_policy import load_policy
    from agents.training.runs import read_run_config
    from agents.training.sources import training_source
    from agents.training.tb_curves import read_curves
    from hulk_env.evaluation import leaderboard
    from hulk_env.render import curves_figure
    from hulk_env.render.report_page import Picture, Report, figure_png

    config = read_run_config(run_dir)
    _, instances = training_source(config)
    loaded = load_policy(run_dir, "best")
    notes: list[str] = []
    result = policy_placement(loaded, instances[0], name="policy")
    pictures: list[Picture] = []
    if result.feasible:
        pictures, _ = placement_pictures(instances[0], result.placement, "the trained policy")
    else:
        notes.append(f"the trained policy found no feasible placement of {instances[0].instance_id}: {result.reason}")
    try:
        curves = read_curves(run_dir)
        tags = [t for t in ("placement/speedup_vs_naive", "eval/mean_speedup_vs_naive", "rollout/ep_rew_mean",
                            "train/entropy_loss") if any(c.tag == t for c in curves)]
        pictures.append(Picture("plot", "learning curves (faint: raw; solid: smoothed)",
                                figure_png(curves_figure({run_dir.name: curves}, tags=tags or None))))
    except HulkInputError as err:
        notes.append(f"no learning curves: {err.message}")
    rows = read_rows(run_dir / "eval") if (run_dir / "eval" / "results.csv").is_file() else []
    board = leaderboard(rows) if rows else []
    if not rows:
        notes.append("no comparison with the baselines yet (trained with --no-compare): "
                     f"`hulk evaluate --policy {run_dir}` makes one")
    steps = _checkpoint_steps(run_dir)
    source = {"fixed": f"{config.env.cluster} x {config.env.model}", "suite": f"suite {config.env.suite}"}.get(
        config.env.generator, f"fresh {config.env.generator} instances")
    summary = f"{run_dir.name}: the {config.policy.extractor} policy trained for {steps} steps on {source} (seed {config.train.seed})."
    if board:
        mine = next((e for e in board if e["method"] == "policy"), None)
        summary += f" {board[0]['method']} ranks first of {len(board)} methods"
        summary += f"; the policy ranks {mine['rank']}." if mine and mine["method"] != board[0]["method"] else "."
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_text

    # Through the validation layer: a run directory is user input like any file.
    text = {"config.yaml": read_text(run_dir / "config.yaml", limits.MAX_SMALL_FILE_BYTES, what="config file")}
    if (run_dir / "versions.json").is_file():
        text["versions.json (when it trained)"] = read_text(
            run_dir / "versions.json", limits.MAX_SMALL_FILE_BYTES, what="versions file"
        )
    text["evaluated on"] = "\n".join(i.instance_id for i in instances)
    return Report(f"hulk train: {run_dir.name}", summary, pictures, board, [_row_dict(r) for r in rows], text, notes)


def _checkpoint_steps(run_dir: Path) -> str:
    try:
        from agents.training.train import checkpoint_timesteps

        return f"{checkpoint_timesteps(run_dir):,}"
    except (HulkInputError, OSError, ValueError):
        return "an unknown number of"


# ---- small helpers --------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """Python, platform, the installed versions of the packages that matter, the git commit."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in VERSION_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                                text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    out["git_commit"] = commit or "unknown"
    return out


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    from hulk_env.validation.reading import load_json, read_text

    return load_json(read_text(path), str(path))


def _float(value: Any) -> float:
    return math.nan if value is None or value == "" else float(value)


def _feasible(r: Mapping[str, Any]) -> bool:
    value = r.get("feasible")
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value) if value is not None else math.isfinite(_float(r.get("iteration_time_s")))


def _row_dict(r: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(r)
