"""Evaluation as independent tasks, in this process or on a Ray cluster, saved as they finish.

Every (instance, method, seed) is one task: one call of the runner's per-run function
(:func:`hulk_env.evaluation.runner.run_one`, the one :func:`run_methods` uses), so a serial run
and a Ray run give the same rows apart from ``wall_s``. :func:`evaluate_tasks` runs the tasks
of a plan and keeps the output directory current:

* ``results.csv`` -- every finished task appends its row (one write, flushed to disk:
  :func:`hulk_env.evaluation.results.append_csv`), so the file always holds every finished
  row and never half of one (a resume cuts a line the machine did not finish). While the run
  goes on, rows are in the order they finish and ``gap_to_best`` is empty (it needs every
  method of the instance); the final write (:func:`hulk_env.evaluation.write_results`, with
  ``results.json`` and ``summary.md``) rewrites the file in plan order with it.
* ``evaluate.json`` -- what the rows were made with (seed, per-method budget, instance
  fingerprints) and why each failed row failed (the CSV has no reason column); ``resume``
  checks a rerun against it.

``resume=True`` skips the rows already in ``results.csv``: an interrupted run (Ctrl-C, a killed
driver) loses at most the tasks in flight. On Ray a task whose worker process dies is run
again (``max_retries``); only the driver writes rows, so each row is written once.

Ray is optional (``pip install 'hulk-env[ray]'``) and imported only when a run uses it.
``ray`` is ``"local"`` (start a Ray on this machine with ``workers`` CPUs, stopped afterwards),
``"auto"`` (the cluster started with ``ray start`` on this machine) or a cluster address
(``"ray://head:10001"``, ``"10.0.0.5:6379"``); a Ray already initialized in this process is
used as it is. Every node needs hulk-env installed (the same version).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hulk_env.baselines import get_method
from hulk_env.baselines.naive import naive
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.report import write_results
from hulk_env.evaluation.results import (
    CHECKSUM_CHARS,
    JOURNAL_COLUMNS,
    RESULT_COLUMNS,
    ResultRow,
    append_csv,
    csv_cell,
    read_results_csv,
    row_checksum,
    with_checksum,
    write_csv,
)
from hulk_env.evaluation.runner import MethodFn, Progress, rows_for_instance, run_one
from hulk_env.evaluation.search_reference import instance_fingerprint
from hulk_env.files import atomic_write_text
from hulk_env.instance import Instance

RAY_INSTALL = "pip install 'hulk-env[ray]'"
RAY_MODES = ("local", "auto")
MANIFEST = "evaluate.json"
MANIFEST_FORMAT = 1
MAX_RETRIES = 3  # Ray re-runs a task whose worker died this many times
CONNECT_TIMEOUT_S = 5.0
WORKER_NICENESS_ENV = "RAY_worker_niceness"  # read by the raylet that ray.init starts
_COMPARED = tuple(c for c in RESULT_COLUMNS if c != "wall_s")  # what "the same rows" means


@dataclass(frozen=True)
class Task:
    """One placement run: ``method`` on instance ``instance_id`` with ``seed``."""

    instance_id: str
    method: str
    seed: int


@dataclass(frozen=True)
class TaskResult:
    """A finished task: :func:`run_one`'s outcome and the instance's naive reference.

    Attributes:
        task: what ran.
        iteration_time_s: the placement's iteration time (``nan`` when infeasible).
        reference_time_s: the naive placement's iteration time (``nan`` when infeasible).
        cost_evals: cost-model evaluations the method reported.
        wall_s: the method's wall seconds (on the worker that ran it).
        reason: why there is no feasible placement ("" when there is one).
    """

    task: Task
    iteration_time_s: float
    reference_time_s: float
    cost_evals: int
    wall_s: float
    reason: str = ""

    @property
    def raw(self) -> tuple[float, int, float, str]:
        """The runner's ``(iteration_time_s, cost_evals, wall_s, reason)``."""
        return self.iteration_time_s, self.cost_evals, self.wall_s, self.reason


@dataclass(frozen=True)
class EvaluationRun:
    """What :func:`evaluate_tasks` did.

    Attributes:
        rows: every row of the plan, instance-major, methods in the plan's order.
        ran: tasks run now.
        skipped: tasks whose rows were already in ``results.csv`` (``resume``).
        paths: the files written (``csv``, ``json``, ``summary``, ``manifest``).
        workers: tasks run at a time (1 serially).
    """

    rows: list[ResultRow]
    ran: int
    skipped: int
    paths: dict[str, Path]
    workers: int


# ---- tasks --------------------------------------------------------------------------------------


def plan_tasks(instances: Sequence[Instance], methods: Sequence[str], seed: int) -> list[Task]:
    """Every (instance, method) with ``seed``, instance-major (the order of the rows)."""
    return [Task(inst.instance_id, m, seed) for inst in instances for m in methods]


def run_task(task: Task, fn: MethodFn, instance: Instance, budget: int | None) -> TaskResult:
    """Run one task: the method, checked by the cost model, and the naive reference.

    The reference makes the row's ``speedup_vs_naive`` known as soon as the task ends; the
    naive placement is deterministic, so every task of an instance gets the same one.
    """
    t, evals, wall, reason = run_one(fn, instance, task.seed, budget)
    reference = t if task.method == "naive" else run_one(naive, instance, task.seed, None)[0]
    return TaskResult(task, t, reference, int(evals), wall, reason)


def row_of(result: TaskResult) -> ResultRow:
    """The result row of one finished task, as saved while the run goes on: ``gap_to_best``
    is ``nan`` until the final write (it needs every method of the instance)."""
    (row,) = rows_for_instance(result.task.instance_id, {result.task.method: result.raw}, result.reference_time_s)
    return replace(row, gap_to_best=math.nan)


def rows_equal(a: Sequence[Mapping[str, Any] | ResultRow], b: Sequence[Mapping[str, Any] | ResultRow]) -> bool:
    """Whether two result tables have the same rows in the same order, apart from ``wall_s``.

    Rows are :class:`ResultRow` or dicts as :func:`read_results_csv` returns them; numbers are
    compared exactly (``nan`` equals ``nan``).
    """
    if len(a) != len(b):
        return False
    return all(_comparable(x) == _comparable(y) for x, y in zip(a, b, strict=True))


def _comparable(row: Mapping[str, Any] | ResultRow) -> tuple:
    get = row.get if isinstance(row, Mapping) else lambda k: getattr(row, k)
    out = []
    for c in _COMPARED:
        v = get(c)
        if isinstance(v, int | float) and not isinstance(v, bool):
            v = None if math.isnan(v) else float(v)
        out.append(v)
    return tuple(out)


# ---- the output directory -----------------------------------------------------------------------


@dataclass
class _Journal:
    """The output directory of a run: ``results.csv`` and ``evaluate.json`` kept current."""

    out: Path
    manifest: dict
    results: dict[tuple[str, str], TaskResult]

    @property
    def csv_path(self) -> Path:
        return self.out / "results.csv"

    @property
    def manifest_path(self) -> Path:
        return self.out / MANIFEST

    def add(self, result: TaskResult) -> None:
        """Save one finished task (its reason first: a row never lacks the reason it had)."""
        key = (result.task.instance_id, result.task.method)
        if result.reason:
            self.manifest["reasons"][_reason_key(*key)] = result.reason
            self.save_manifest()
        self.results[key] = result
        append_csv(self.csv_path, [self.journal_row(row_of(result))], JOURNAL_COLUMNS)

    def provenance(self, instance_id: str, method: str) -> dict:
        """The ``seed``, ``budget`` and ``settings`` cells of a row of this run."""
        budget = self.manifest["budgets"].get(method)
        seed = self.manifest["seed"]
        fingerprint = self.manifest["instances"].get(instance_id)
        return {"seed": seed, "budget": "" if budget is None else budget,
                "settings": settings_fingerprint(fingerprint, method, budget, seed)}

    def journal_row(self, row: ResultRow) -> dict:
        """A results.csv row: the result cells, the provenance cells and the checksum."""
        return with_checksum({**_csv_dict(row), **self.provenance(row.instance, row.method)})

    def save_manifest(self) -> None:
        atomic_write_text(self.manifest_path, json.dumps(self.manifest, indent=2, sort_keys=True) + "\n")


def settings_fingerprint(instance_fingerprint: Any, method: str, budget: int | None, seed: int) -> str:
    """What a row was made with, in 16 hex digits: the instance's fingerprint (workload and
    cluster), the method, its budget and the seed (SHA-256 of their JSON)."""
    text = json.dumps([MANIFEST_FORMAT, instance_fingerprint, method, budget, seed], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:CHECKSUM_CHARS]


def _csv_dict(row: ResultRow) -> dict:
    return {c: getattr(row, c) for c in RESULT_COLUMNS}


def _reason_key(instance_id: str, method: str) -> str:
    return f"{instance_id} | {method}"


def _new_manifest(instances: Sequence[Instance], names: Sequence[str], seed: int, budgets: Mapping[str, int | None]) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "seed": seed,
        "budgets": {n: budgets.get(n) for n in names},
        "instances": {inst.instance_id: instance_fingerprint(inst) for inst in instances},
        "reasons": {},
    }


def _open_journal(
    out: Path,
    instances: Sequence[Instance],
    names: Sequence[str],
    seed: int,
    budgets: Mapping[str, int | None],
    resume: bool,
) -> _Journal:
    """A fresh journal, or with ``resume`` the rows already in ``out`` (checked to belong)."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = _new_manifest(instances, names, seed, budgets)
    journal = _Journal(out, manifest, {})
    if resume and journal.csv_path.exists():
        old = _read_manifest(journal.manifest_path)
        _check_resumable(old, manifest, journal.manifest_path)
        manifest["reasons"] = dict(old.get("reasons", {}))
        # Every row is checked before anything on disk changes: a refused resume leaves it as it was.
        journal.results, whole = _saved_results(journal, seed)
        if whole is not None:
            os.truncate(journal.csv_path, whole)  # cut a row the machine did not finish writing
    else:
        write_csv(journal.csv_path, [], JOURNAL_COLUMNS)  # the header: a fresh run
    journal.save_manifest()
    return journal


def _read_manifest(path: Path) -> dict:
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_data

    if not path.exists() and not path.is_symlink():
        raise HulkInputError(
            f"cannot resume: no {MANIFEST} beside results.csv (not written by `hulk evaluate`); "
            "run without --resume or choose another --out",
            source=str(path.parent),
        )
    try:
        data = read_data(path, syntax="json", what=MANIFEST, max_bytes=limits.MAX_MAPPING_FILE_BYTES)
    except HulkInputError as exc:
        raise HulkInputError(f"cannot resume: {exc.message}", source=exc.source, row=exc.row, field=exc.field) from None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise HulkInputError(f"cannot resume: not a format-{MANIFEST_FORMAT} {MANIFEST}", source=str(path))
    return data


def _check_resumable(old: dict, new: dict, path: Path) -> None:
    """The saved rows must have been made as this run would make them."""
    if old.get("seed") != new["seed"]:
        raise HulkInputError(
            f"cannot resume: the saved rows were made with --seed {old.get('seed')}, this run has "
            f"--seed {new['seed']}; use the same seed or another --out",
            source=str(path),
        )
    for name, budget in old.get("budgets", {}).items():
        if name in new["budgets"] and new["budgets"][name] != budget:
            raise HulkInputError(
                f"cannot resume: {name} was run with budget {budget}, this run gives it "
                f"{new['budgets'][name]}; use the same --budget or another --out",
                source=str(path),
            )
    for inst, fingerprint in old.get("instances", {}).items():
        if inst in new["instances"] and new["instances"][inst] != fingerprint:
            raise HulkInputError(
                f"cannot resume: instance {inst} is not the one the saved rows were made on "
                "(other workload or cluster settings); use the same options or another --out",
                source=str(path),
            )


_REFUSALS = {  # why a saved row is refused, in the words of the message
    "cells": "cut or padded (another number of cells)",
    "checksum": "failed the row checksum (edited?)",
    "seed": "made with another seed",
    "budget": "made with another budget",
    "settings": "made on other settings (instance, method or budget)",
    "values": "with cells that are not numbers",
    "duplicate": "repeated",
}


def _saved_results(journal: _Journal, seed: int) -> tuple[dict[tuple[str, str], TaskResult], int | None]:
    """The rows of an earlier run as task results (reasons from the manifest), each checked.

    A row is kept only when it has every cell of :data:`JOURNAL_COLUMNS`, its checksum matches
    its cells, and its seed, budget and settings fingerprint are this run's. Any other row
    refuses the whole resume (one line: how many and why), before anything is changed.

    Returns:
        The results, and the byte length of the whole lines when the file ends in a line the
        machine did not finish writing (to cut it), else ``None``.
    """
    from hulk_env.validation import limits
    from hulk_env.validation.reading import decode_text, parse_csv_text, read_bytes

    csv_path = journal.csv_path
    src = str(csv_path)
    data = read_bytes(csv_path, limits.MAX_TEXT_FILE_BYTES, what="results file")
    whole = data.rfind(b"\n") + 1 if data and not data.endswith(b"\n") else None
    table = parse_csv_text(decode_text(data[: whole if whole is not None else len(data)], src), src)
    if not table:
        return {}, whole
    header = tuple(table[0])
    if header != JOURNAL_COLUMNS:
        old = header == RESULT_COLUMNS
        raise HulkInputError(
            "cannot resume: "
            + ("the rows carry no seed, budget, settings or checksum (written by an older hulk)"
               if old else f"the header is not {','.join(JOURNAL_COLUMNS)}")
            + "; rerun without --resume or choose another --out",
            source=src,
            row=1,
        )
    manifest = journal.manifest
    budgets, instances = manifest["budgets"], manifest["instances"]
    saved: dict[tuple[str, str], TaskResult] = {}
    refused: dict[str, int] = {}
    first: int | None = None
    rows = [(n, cells) for n, cells in enumerate(table[1:], start=2) if cells]
    for n, cells in rows:
        why = _refusal(cells, journal, instances, budgets, src, n)
        key = (cells[0], cells[1]) if why is None else None
        result = None
        if why is None:
            result = _task_result(dict(zip(JOURNAL_COLUMNS, cells, strict=True)), manifest, seed)
            why = "values" if result is None else ("duplicate" if key in saved else None)
        if why is not None:
            refused[why] = refused.get(why, 0) + 1
            first = first or n
            continue
        saved[key] = result
    if refused:
        count = sum(refused.values())
        reasons = ", ".join(f"{k} {_REFUSALS[why]}" for why, k in refused.items())
        raise HulkInputError(
            f"cannot resume: {count} of {len(rows)} saved rows do not match this run ({reasons}; the first at "
            f"row {first}); nothing was changed: delete those rows, or rerun without --resume or with another --out",
            source=src,
        )
    return saved, whole


def _refusal(cells: list[str], journal: _Journal, instances: Mapping, budgets: Mapping, src: str, n: int) -> str | None:
    """Why a saved row is refused (a key of :data:`_REFUSALS`), or ``None``.

    Raises:
        HulkInputError: a whole, intact row of an instance or method this run does not have
            (the run was narrowed: say how to widen it).
    """
    if len(cells) != len(JOURNAL_COLUMNS):
        return "cells"
    if row_checksum(cells[:-1]) != cells[-1]:
        return "checksum"
    row = dict(zip(JOURNAL_COLUMNS, cells, strict=True))
    instance, method = row["instance"], row["method"]
    if instance not in instances or method not in budgets:
        what = f"instance {instance}" if instance not in instances else f"method {method}"
        raise HulkInputError(
            f"cannot resume: the saved rows include {what}, which this run does not have; "
            "add it back (--methods, --limit) or choose another --out",
            source=src,
            row=n,
        )
    expected = {k: csv_cell(v) for k, v in journal.provenance(instance, method).items()}
    for column in ("seed", "budget", "settings"):
        if row[column] != expected[column]:
            return column
    return None


def _task_result(row: dict, manifest: dict, seed: int) -> TaskResult | None:
    """A saved row as a task result, or ``None`` when a number cell is not a number."""
    try:
        t = float(row["iteration_time_s"]) if row["iteration_time_s"] else math.nan
        speedup = float(row["speedup_vs_naive"]) if row["speedup_vs_naive"] else math.nan
        wall = float(row["wall_s"]) if row["wall_s"] else math.nan
        evals = int(row["cost_evals"])
    except ValueError:
        return None
    if evals < 0 or (math.isnan(t) != (row["feasible"] == "false")):
        return None
    key = (row["instance"], row["method"])
    reference = t * speedup if not math.isnan(t) else math.nan  # only shown while running
    reason = manifest["reasons"].get(_reason_key(*key), "" if not math.isnan(t) else "no feasible placement")
    return TaskResult(Task(key[0], key[1], seed), t, reference, evals, wall, reason)


# ---- running ------------------------------------------------------------------------------------


def evaluate_tasks(
    instances: Sequence[Instance],
    methods: Sequence[str],
    out_dir: str | Path,
    *,
    seed: int = 0,
    budgets: Mapping[str, int | None] | None = None,
    extra_methods: Mapping[str, MethodFn] | None = None,
    ray: str | None = None,
    workers: int | None = None,
    resume: bool = False,
    progress: bool = True,
    title: str = "Leaderboard",
) -> EvaluationRun:
    """Run every (instance, method) once, saving each row as it finishes; then the final files.

    Args:
        instances: e.g. ``load_suite("geo-v0")``.
        methods: registered names or names in ``extra_methods`` (run after those named here).
        out_dir: directory for ``results.csv``, ``results.json``, ``summary.md``, ``evaluate.json``.
        seed: passed to every method.
        budgets: per-method evaluation budget (methods not listed get their default).
        extra_methods: more methods by name, ``callable(instance, seed, budget)``.
        ray: ``None`` runs here, one task at a time; else ``"local"``, ``"auto"`` or an address.
        workers: tasks at a time on Ray (default: the cluster's CPUs; with ``"local"`` the CPUs
            of the Ray started here).
        resume: skip the rows already saved in ``out_dir`` (made with the same seed, budgets and
            instances, else :class:`HulkInputError`).
        progress: a progress bar of finished tasks on stderr.
        title: the leaderboard's title in ``summary.md``.

    Raises:
        HulkInputError: an unknown method, a directory that cannot be resumed, ``ray`` without
            Ray installed, a bad address or ``workers``.
    """
    extra = dict(extra_methods or {})
    names = list(dict.fromkeys([*methods, *extra]))
    if not names:
        raise HulkInputError("no methods to run: give at least one (e.g. --methods naive,genetic)", field="methods")
    table = {n: extra[n] if n in extra else get_method(n) for n in names}
    budgets = {n: (budgets or {}).get(n) for n in names}
    if workers is not None and workers < 1:
        raise HulkInputError(f"--workers must be at least 1, got {workers}")
    # Connect first: a cluster that is not there must not cost the saved rows.
    with ray_session(ray, workers) if ray is not None else nullcontext(1) as cpus:
        journal = _open_journal(Path(out_dir), instances, names, seed, budgets, resume)
        todo = [t for t in plan_tasks(instances, names, seed) if (t.instance_id, t.method) not in journal.results]
        with Progress(progress, len(todo)) as advance:

            def done(result: TaskResult) -> None:
                journal.add(result)
                advance(f"{result.task.instance_id} {result.task.method}")

            if ray is None:
                used = 1
                by_id = {inst.instance_id: inst for inst in instances}
                for task in todo:
                    done(run_task(task, table[task.method], by_id[task.instance_id], budgets[task.method]))
            else:
                used = _run_on_ray(todo, table, instances, budgets, cpus, workers, done)
    rows = final_rows(instances, names, journal.results, seed)
    paths = write_results(rows, journal.out, title=title)
    # results.csv again with each row's seed, budget, settings and checksum: a later --resume checks them.
    write_csv(paths["csv"], [journal.journal_row(r) for r in rows], JOURNAL_COLUMNS)
    paths["manifest"] = journal.manifest_path
    return EvaluationRun(rows, len(todo), len(instances) * len(names) - len(todo), paths, used)


def final_rows(
    instances: Sequence[Instance],
    names: Sequence[str],
    results: Mapping[tuple[str, str], TaskResult],
    seed: int = 0,
) -> list[ResultRow]:
    """The rows :func:`run_methods` gives for the same runs (instance-major, ``gap_to_best``)."""
    rows: list[ResultRow] = []
    for inst in instances:
        raw = {n: results[(inst.instance_id, n)].raw for n in names}
        if "naive" in raw:
            reference = raw["naive"][0]
        else:  # the same deterministic naive placement the tasks used
            reference = run_one(naive, inst, seed, None)[0]
        rows += rows_for_instance(inst.instance_id, raw, reference)
    return rows


def _run_on_ray(
    todo: Sequence[Task],
    table: Mapping[str, MethodFn],
    instances: Sequence[Instance],
    budgets: Mapping[str, int | None],
    cpus: int,
    workers: int | None,
    done: Callable[[TaskResult], None],
) -> int:
    """Run the tasks as Ray tasks on a cluster of ``cpus`` CPUs, at most ``workers`` at a
    time; ``done`` as each finishes. Returns the number of tasks run at a time."""
    ray = import_ray()
    limit = max(1, min(workers or cpus, cpus))
    # With no more CPUs than workers Ray itself runs at most `limit` tasks at a time: submit
    # every task, so that a free CPU takes the next one without waiting for this loop. On a
    # larger cluster keep `limit` tasks in flight.
    in_flight = len(todo) if (workers is None or cpus <= workers) else limit
    remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(run_task)
    # One copy of each instance and method in the object store, not one per task.
    needed = {t.instance_id for t in todo}
    inst_refs = {i.instance_id: ray.put(i) for i in instances if i.instance_id in needed}
    fn_refs = {m: ray.put(table[m]) for m in dict.fromkeys(t.method for t in todo)}
    queue = list(reversed(todo))
    pending: list = []
    try:
        while queue or pending:
            while queue and len(pending) < in_flight:
                t = queue.pop()
                pending.append(remote.remote(t, fn_refs[t.method], inst_refs[t.instance_id], budgets[t.method]))
            ready, pending = ray.wait(pending, num_returns=1)
            done(ray.get(ready[0]))
    except BaseException:  # Ctrl-C or a failed task: stop the others; the saved rows stay
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return limit


def import_ray():
    """The ``ray`` module, or :class:`HulkInputError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise HulkInputError(f"--ray needs Ray, which is not installed: {RAY_INSTALL}") from None
    return ray


@contextmanager
def ray_session(address: str, workers: int | None = None) -> Iterator[int]:
    """Connect to (or start) Ray for the block; yields the cluster's CPUs.

    ``"local"`` starts a Ray on this machine with ``workers`` CPUs (default all) and stops it
    afterwards; ``"auto"`` or an address connects to a running cluster. A Ray already
    initialized in this process is used as it is and left running.
    """
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        if not address:
            raise HulkInputError("--ray needs 'local', 'auto' or a cluster address such as 10.0.0.5:6379")
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "error", "log_to_driver": False}
        if address == "local":
            kwargs["num_cpus"] = workers or os.cpu_count() or 1
            # Ray starts workers at nice 15 (to keep its own daemons responsive): on a shared
            # machine they would then get a fraction of the CPU a serial run gets.
            os.environ.setdefault(WORKER_NICENESS_ENV, "0")
        else:
            check_reachable(address)
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HulkInputError(
                f"cannot connect to the Ray cluster at {address!r}: {first} (start one with "
                "`ray start --head`, or use --ray local)"
            ) from None
        started = True
    try:
        yield int(ray.cluster_resources().get("CPU", 1))
    finally:
        if started:
            ray.shutdown()


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A ``host:port`` (or ``ray://host:port``) address must accept a connection: Ray itself
    waits minutes for a cluster that is not there."""
    if address in RAY_MODES:
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise HulkInputError(
            f"--ray {address!r}: give local, auto or a cluster address host:port (e.g. 10.0.0.5:6379 "
            "or ray://10.0.0.5:10001)"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise HulkInputError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (start one with "
            "`ray start --head`, or use --ray local)"
        ) from None


# ---- the benchmark ------------------------------------------------------------------------------


BENCH_SUITE = "tiny-v0"
BENCH_METHODS = ("genetic", "anneal", "random")
BENCH_BUDGET = 10_000
BENCH_SLICES = 4  # alternating serial / Ray slices, so that other load affects both alike


def bench_evaluate(
    workers: int = 2,
    suite: str = BENCH_SUITE,
    methods: Sequence[str] = BENCH_METHODS,
    budget: int = BENCH_BUDGET,
    limit: int | None = None,
    slices: int = BENCH_SLICES,
    work_dir: str | Path | None = None,
) -> dict:
    """The same evaluation serially and on a local Ray with ``workers`` CPUs, in one run.

    The suite's instances are cut into ``slices`` consecutive slices; each slice runs serially
    and on Ray (alternating which goes first), both through :func:`evaluate_tasks` into fresh
    directories, so that load from other processes that comes and goes affects both alike.
    ``ray_s`` is timed from the first task submitted to the final files written, on a Ray
    started once before the first slice (as a cluster would be running already): starting and
    stopping the local Ray are not counted; its workers' first imports are.

    Returns:
        ``tasks``, ``serial_s``, ``ray_s``, ``workers``, ``speedup`` (``serial_s / ray_s``) and
        ``rows_equal`` (the serial and the Ray ``results.csv`` files have the same rows apart
        from ``wall_s``).
    """
    import tempfile

    from hulk_env.evaluation.suites import load_suite

    instances = load_suite(suite)[:limit]
    budgets = {m: budget for m in methods}
    cuts = [instances[k::slices] for k in range(min(slices, len(instances)))]
    seconds = {"serial": 0.0, "ray": 0.0}
    saved: dict[str, list] = {"serial": [], "ray": []}
    with tempfile.TemporaryDirectory(prefix="hulk-bench-evaluate-", dir=work_dir) as tmp, ray_session("local", workers):
        for k, part in enumerate(cuts):
            for how in ("serial", "ray") if k % 2 == 0 else ("ray", "serial"):
                out = Path(tmp) / f"{how}-{k}"
                start = time.perf_counter()
                evaluate_tasks(
                    part, methods, out, budgets=budgets, progress=False,
                    ray=None if how == "serial" else "local", workers=workers,
                )
                seconds[how] += time.perf_counter() - start
                saved[how] += read_results_csv(out / "results.csv")
    return {
        "tasks": len(instances) * len(methods),
        "serial_s": round(seconds["serial"], 3),
        "ray_s": round(seconds["ray"], 3),
        "workers": workers,
        "speedup": round(seconds["serial"] / seconds["ray"], 3),
        "rows_equal": rows_equal(saved["serial"], saved["ray"]),
    }
