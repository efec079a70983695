"""Failure traces over a training run: files, seeded random traces, and their replay.

A trace file (YAML or JSON)::

    checkpoint_every: 500        # iterations between checkpoints (optional, default 500)
    events:                      # in any order; times in hours (at_h) or seconds (at_s)
      - at_h: 1.5
        fail: region:Tokyo       # a failure spec: NAME[,NAME...], region:NAME or P%
      - at_h: 2.25
        recover: region:Tokyo

Replay (:func:`replay`) runs ``iterations`` iterations of training from a starting placement.
Between events training advances at the current placement's iteration time. At a failure that
hits the running placement, the method re-places it (horizon: the iterations still to do) and
training stops for the migration; when some layer's state survived nowhere, training also
rolls back to the last checkpoint (taken every ``checkpoint_every`` iterations; each machine
keeps its own shard, so survivors roll back locally) and redoes the iterations since. The
iteration in progress at a failure is lost. When no placement fits on the machines left,
training stalls until machines come back. When a machine that failed under the run comes back
and the run is slower than it started, the method is asked again and its answer taken if that
lowers the time to finish (migration included). A machine that
comes back holds no state. Events during a migration are applied once it ends. Decision time
(the method's wall clock) is reported apart and not charged to the run, so replays are
reproducible.

Floating point. Events at equal times are applied **in the order they were given**
(a file's order; a random trace's order of generation: machine by machine, each machine's
failure before its own repair before its next failure, then the regions): the sort is stable
on time alone. No rule that ranks kinds (failures first) can be safe: when a repair and the
next failure of one machine round to the same float time, ranking failures first applies the
failure, then the repair, and the machine stays up for good (a 1e20/h rate did exactly that).
A random trace is refused before any event is drawn when its rates are beyond what float time
resolves (the mean time between one machine's failures under ``MIN_EVENT_GAP_ULPS`` float
steps of the trace's end time) or when they would give more than ``MAX_TRACE_EVENTS`` events
on average; every replay's totals are checked against its trace (:func:`check_totals`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from hulk_env import cost
from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.replacement.failures import parse_failures, region_machines
from hulk_env.replacement.methods import ReplaceMethod, run_method
from hulk_env.replacement.migration import CheckpointStore
from hulk_env.replacement.problem import ReplacementProblem
from hulk_env.validation import limits
from hulk_env.validation.reading import safe_repr

HOUR_S = 3600.0
DEFAULT_CHECKPOINT_EVERY = 500
FAIL, RECOVER = "fail", "recover"
MAX_EVENTS = limits.MAX_TRACE_EVENTS
# A run this much slower than its start counts as degraded (asks again at a recovery).
_DEGRADED = 1.0 + 1e-9
_ROUND = 1e-9  # iterations that end within this fraction of an event count as done


@dataclass(frozen=True)
class TraceEvent:
    """Machines failing or coming back at one moment.

    Attributes:
        time_s: seconds since the start of training.
        kind: ``"fail"`` or ``"recover"``.
        machines: machine indices.
        label: the spec it came from, e.g. ``"region:Tokyo"``.
    """

    time_s: float
    kind: str
    machines: tuple[int, ...]
    label: str


@dataclass(frozen=True)
class Trace:
    """Events in time order and the checkpoint interval.

    Attributes:
        events: sorted by time; equal times keep the order given (module docstring).
        checkpoint_every: iterations between checkpoints.
        name: a label for plots.
    """

    events: tuple[TraceEvent, ...]
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
    name: str = "trace"

    def __post_init__(self) -> None:
        if int(self.checkpoint_every) < 1:
            raise HulkInputError(f"must be >= 1, got {self.checkpoint_every}", field="checkpoint_every")
        ordered = sorted(self.events, key=lambda e: e.time_s)  # stable: equal times keep their order
        object.__setattr__(self, "events", tuple(ordered))

    @property
    def failures(self) -> int:
        return sum(e.kind == FAIL for e in self.events)


# ---- files --------------------------------------------------------------------------------------
def load_trace(path: str | Path, cluster: Cluster, seed: int = 0) -> Trace:
    """A trace from a YAML/JSON file (format in the module docstring), checked against ``cluster``.

    Read through :func:`hulk_env.validation.reading.read_data`: a regular file of at most
    ``MAX_MAPPING_FILE_BYTES``, UTF-8, no alias bombs, deep nesting or repeated keys, and at most
    ``MAX_TRACE_EVENTS`` events counted before they are built.
    """
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_data

    src = str(path)
    data = read_data(
        path, syntax="yaml", what="trace file",
        list_limits={"events": (limits.MAX_TRACE_EVENTS, "MAX_TRACE_EVENTS")},
    )  # fmt: skip
    if not isinstance(data, dict) or "events" not in data:
        raise HulkInputError("a trace file is a mapping with an 'events' list (see `hulk simulate-failures --help`)", source=src)
    unknown = sorted(set(data) - {"events", "checkpoint_every", "name"})
    if unknown:
        raise HulkInputError(f"unknown key(s) {unknown}; allowed: events, checkpoint_every, name", source=src)
    raw = data["events"]
    if not isinstance(raw, list):
        raise HulkInputError("must be a list of events", source=src, field="events")
    if len(raw) > MAX_EVENTS:
        raise HulkInputError(f"{len(raw)} events; at most {MAX_EVENTS}", source=src, field="events")
    events = [_event(item, i + 1, src, cluster, seed) for i, item in enumerate(raw)]
    every = data.get("checkpoint_every", DEFAULT_CHECKPOINT_EVERY)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise HulkInputError(f"must be a whole number of iterations >= 1, got {safe_repr(every)}", source=src, field="checkpoint_every")
    name = data.get("name", Path(path).stem)
    if not isinstance(name, str | int | float) or isinstance(name, bool):
        raise HulkInputError(f"must be a name (text), got {type(name).__name__}", source=src, field="name")
    return Trace(tuple(events), every, str(name).strip() or Path(path).stem)


def _event(item: object, row: int, src: str, cluster: Cluster, seed: int) -> TraceEvent:
    if not isinstance(item, dict):
        raise HulkInputError("an event is a mapping such as {at_h: 1.5, fail: region:Tokyo}", source=src, row=row)
    unknown = sorted(set(item) - {"at_h", "at_s", FAIL, RECOVER})
    if unknown:
        raise HulkInputError(f"unknown key(s) {unknown}; allowed: at_h or at_s, and fail or recover", source=src, row=row)
    times = [k for k in ("at_h", "at_s") if k in item]
    kinds = [k for k in (FAIL, RECOVER) if k in item]
    if len(times) != 1 or len(kinds) != 1:
        raise HulkInputError("an event needs exactly one of at_h/at_s and one of fail/recover", source=src, row=row)
    value = item[times[0]]
    try:  # a 400-digit integer does not fit a float: refused here, not an OverflowError
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise HulkInputError(f"must be a finite time >= 0, got {safe_repr(value)}", source=src, row=row, field=times[0])
    time_s = number * (HOUR_S if times[0] == "at_h" else 1.0)
    if time_s > limits.MAX_TRACE_TIME_S:  # 1e308 hours would be an infinite time
        raise HulkInputError(
            f"{time_s:.4g} s is past {limits.MAX_TRACE_TIME_S:.0e} s ({limits.cite('MAX_TRACE_TIME_S')})",
            source=src, row=row, field=times[0],
        )
    spec = item[kinds[0]]
    if isinstance(spec, list):
        spec = ",".join(str(x) for x in spec)
    try:
        scenario = parse_failures(cluster, str(spec), seed)
    except HulkInputError as exc:
        raise HulkInputError(exc.message, source=src, row=row, field=kinds[0]) from None
    return TraceEvent(time_s, kinds[0], scenario.failed, scenario.label)


# ---- random traces ------------------------------------------------------------------------------
def random_trace(
    cluster: Cluster,
    duration_s: float,
    rate_per_hour: float,
    seed: int = 0,
    *,
    region_rates: dict[str, float] | None = None,
    region_outage_per_hour: float = 0.0,
    mean_repair_h: float = 1.0,
    mean_outage_h: float = 1.0,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
) -> Trace:
    """A seeded trace of machine failures and correlated region outages over ``duration_s``.

    Each machine fails as a Poisson process of ``rate_per_hour`` (or its region's rate in
    ``region_rates``) while it is up, and comes back after an exponential repair time of mean
    ``mean_repair_h``. Each region goes down as a whole (every machine at once) as a Poisson
    process of ``region_outage_per_hour`` and comes back after a mean ``mean_outage_h``.
    Same seed, same trace.
    """
    for label, value in (("rate_per_hour", rate_per_hour), ("region_outage_per_hour", region_outage_per_hour),
                         ("mean_repair_h", mean_repair_h), ("mean_outage_h", mean_outage_h), ("duration_s", duration_s)):
        if not (math.isfinite(value) and value >= 0):
            raise HulkInputError(f"must be finite and >= 0, got {value}", field=label)
    rates = dict.fromkeys(cluster.regions, float(rate_per_hour))
    for region, rate in (region_rates or {}).items():
        key = next((r for r in cluster.regions if r.lower() == str(region).strip().lower()), None)
        if key is None:
            raise HulkInputError(f"unknown region '{region}'; regions: {', '.join(cluster.regions)}", field="region_rates")
        if not (math.isfinite(rate) and rate >= 0):
            raise HulkInputError(f"rate of region '{region}' must be finite and >= 0, got {rate}", field="region_rates")
        rates[key] = float(rate)
    check_rates(cluster, duration_s, rates, region_outage_per_hour, mean_repair_h, mean_outage_h)
    rng = np.random.default_rng(seed)
    events: list[TraceEvent] = []
    for i, mc in enumerate(cluster.machines):
        events += _up_down(rng, rates[mc.region], mean_repair_h, duration_s, (i,), mc.name)
    for region in cluster.regions:
        machines = region_machines(cluster, region)
        events += _up_down(rng, region_outage_per_hour, mean_outage_h, duration_s, machines, f"region:{region}")
    if len(events) > MAX_EVENTS:
        raise HulkInputError(f"the rates give {len(events)} events; at most {MAX_EVENTS}: lower them")
    trace = Trace(tuple(events), checkpoint_every, f"random (seed {seed})")
    check_alternating(trace)
    return trace


def check_alternating(trace: Trace) -> None:
    """Each machine's (or region's) events alternate fail, recover, fail... in time order: no
    repair is ever applied before its failure, so no machine comes back for good by rounding.

    Raises:
        HulkInputError: the first label whose events do not alternate.
    """
    last: dict[str, str] = {}
    for e in trace.events:
        if last.get(e.label, RECOVER) == e.kind:
            raise HulkInputError(
                f"'{e.label}' would {e.kind} twice in a row at {e.time_s!r} s: its events are closer than "
                "float time resolves; lower the rate"
            )
        last[e.label] = e.kind


def max_resolved_rate(duration_s: float) -> float:
    """The highest failure rate per hour whose mean gap float time still resolves at ``duration_s``:
    ``HOUR_S / (MIN_EVENT_GAP_ULPS x ulp(duration_s))``."""
    return HOUR_S / (limits.MIN_EVENT_GAP_ULPS * float(np.spacing(max(float(duration_s), 1.0))))


def expected_events(duration_s: float, rate_per_hour: float, mean_down_h: float) -> float:
    """Mean events (failures and repairs) of one up/down process over ``duration_s``: one
    cycle lasts ``1 / rate + mean_down_h`` hours on average (renewal theory)."""
    if rate_per_hour <= 0:
        return 0.0
    return 2.0 * (duration_s / HOUR_S) / (1.0 / rate_per_hour + max(mean_down_h, 0.0))


def check_rates(
    cluster: Cluster, duration_s: float, rates: dict[str, float], region_outage_per_hour: float,
    mean_repair_h: float, mean_outage_h: float,
) -> None:
    """Refuse rates that float time cannot resolve or that give too many events, before drawing any.

    Raises:
        HulkInputError: naming the bound (``MIN_EVENT_GAP_ULPS`` or ``MAX_TRACE_EVENTS``).
    """
    bound = max_resolved_rate(duration_s)
    for label, rate in (("rate_per_hour", max(rates.values(), default=0.0)), ("region_outage_per_hour", region_outage_per_hour)):
        if rate > bound:
            raise HulkInputError(
                f"{rate:g} failures an hour is beyond what float time resolves over a {duration_s:,.4g} s "
                f"trace: at most {bound:.3g} an hour (the mean gap must span {limits.MIN_EVENT_GAP_ULPS:,} float "
                f"steps, {limits.cite('MIN_EVENT_GAP_ULPS')}); lower it",
                field=label,
            )
    counts = np.bincount(cluster.region_index, minlength=len(cluster.regions))
    mean = sum(expected_events(duration_s, rates[r], mean_repair_h) * int(n) for r, n in zip(cluster.regions, counts, strict=True))
    mean += len(cluster.regions) * expected_events(duration_s, region_outage_per_hour, mean_outage_h)
    if mean > limits.MAX_TRACE_EVENTS:
        raise HulkInputError(
            f"the rates give about {mean:,.3g} events over the {duration_s / HOUR_S:,.4g} h the trace spans, more "
            f"than {limits.MAX_TRACE_EVENTS:,} ({limits.cite('MAX_TRACE_EVENTS')}); lower the rates or the "
            "iterations (refused before drawing any event)",
            field="rate_per_hour",
        )


def _up_down(
    rng: np.random.Generator, rate_per_hour: float, mean_down_h: float, duration_s: float,
    machines: tuple[int, ...], label: str,
) -> list[TraceEvent]:
    """Alternating failure and recovery events of one machine or region over ``duration_s``."""
    out: list[TraceEvent] = []
    if rate_per_hour <= 0:
        return out
    t = 0.0
    while True:
        t += rng.exponential(HOUR_S / rate_per_hour)
        if t >= duration_s or len(out) > MAX_EVENTS:
            return out
        out.append(TraceEvent(t, FAIL, machines, label))
        t += rng.exponential(HOUR_S * mean_down_h) if mean_down_h > 0 else 0.0
        out.append(TraceEvent(t, RECOVER, machines, label))


# ---- replay -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimelineEntry:
    """One event as the run saw it.

    Attributes:
        time_s: when it happened.
        iterations_done: net iterations done just before it.
        kind: ``"fail"`` or ``"recover"``.
        label: what failed or came back.
        action: ``"none"`` (placement not hit), ``"replaced"``, ``"stalled"`` (nothing fits),
            ``"kept"`` (a new answer was not better), ``"resumed"``.
        iteration_time_s: the iteration time running after it (``nan`` while stalled).
        migration_s: seconds spent moving state.
        moved_bytes: bytes moved.
        rolled_back: iterations redone because state was lost.
        decision_s: the method's wall-clock time.
    """

    time_s: float
    iterations_done: int
    kind: str
    label: str
    action: str
    iteration_time_s: float
    migration_s: float = 0.0
    moved_bytes: float = 0.0
    rolled_back: int = 0
    decision_s: float = 0.0


@dataclass
class TraceResult:
    """A replay's outcome.

    Attributes:
        method: the re-placement method.
        iterations: the iterations asked for.
        iterations_done: net iterations done (``iterations`` when finished).
        finished: the run reached ``iterations``.
        wall_s: wall-clock seconds of the run (to the end, or to the last event if stalled).
        failure_free_s: ``iterations x`` the starting iteration time.
        migration_s: seconds spent moving state.
        rollback_s: seconds of iterations redone after restoring a checkpoint.
        interrupted_s: seconds of iterations cut short by a failure.
        stalled_s: seconds with nothing running (no placement fitted).
        slowdown_s: the rest of ``lost_s``: running slower (or faster) placements than the
            starting one, and redone iterations run at another speed than they first ran.
        moved_bytes: bytes moved in all.
        decisions: method calls.
        decision_s: their wall-clock seconds (not charged to ``wall_s``).
        cost_evals: cost-model evaluations by the method.
        timeline: the events as the run saw them.
        progress: ``(time_s, iterations_done)`` points of the run, for plots.
    """

    method: str
    iterations: int
    iterations_done: int = 0
    finished: bool = False
    wall_s: float = 0.0
    failure_free_s: float = 0.0
    migration_s: float = 0.0
    rollback_s: float = 0.0
    interrupted_s: float = 0.0
    stalled_s: float = 0.0
    slowdown_s: float = 0.0
    moved_bytes: float = 0.0
    decisions: int = 0
    decision_s: float = 0.0
    cost_evals: int = 0
    timeline: list[TimelineEntry] = field(default_factory=list)
    progress: list[tuple[float, float]] = field(default_factory=list)

    @property
    def lost_s(self) -> float:
        """``wall_s - failure_free_s``: everything the failures cost."""
        return self.wall_s - self.failure_free_s

    def to_dict(self, with_timeline: bool = True) -> dict:
        keys = ("method", "iterations", "iterations_done", "finished", "wall_s", "failure_free_s", "migration_s",
                "rollback_s", "interrupted_s", "stalled_s", "slowdown_s", "moved_bytes", "decisions",
                "decision_s", "cost_evals")
        out = {k: getattr(self, k) for k in keys}
        out["lost_s"] = self.lost_s
        if with_timeline:
            out["timeline"] = [
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(e).items()}
                for e in self.timeline
            ]
        return out


@dataclass
class _Run:
    """The replay's mutable state."""

    placement: np.ndarray | None  # running placement (None while stalled)
    last: np.ndarray  # where the state lives (the last placement that ran)
    iteration_s: float
    time_s: float = 0.0
    done: int = 0
    down: set[int] = field(default_factory=set)
    stale: set[int] = field(default_factory=set)  # came back since ``last`` started: no state
    lost: set[int] = field(default_factory=set)  # machines that failed under a running placement
    partial_s: float = 0.0  # time spent on the iteration in progress


def replay(
    instance: Instance,
    start: np.ndarray,
    trace: Trace,
    iterations: int,
    method: str,
    *,
    seed: int = 0,
    budget: int | None = None,
    store: CheckpointStore | None = None,
    method_fn: ReplaceMethod | None = None,
) -> TraceResult:
    """Replay ``trace`` over ``iterations`` iterations from placement ``start`` (module docstring).

    Args:
        instance: the cluster and workload.
        start: ``[D, L]`` the placement training starts with (memory-feasible).
        trace: the events.
        iterations: iterations to train.
        method: the re-placement method's name (see :mod:`hulk_env.replacement.methods`).
        seed, budget: passed to the method.
        store: where checkpoints live.
        method_fn: the method itself, for methods not in the registry (the agent).
    """
    if not 1 <= iterations <= limits.MAX_TRAIN_ITERATIONS:
        raise HulkInputError(
            f"must be between 1 and {limits.MAX_TRAIN_ITERATIONS:,} ({limits.cite('MAX_TRAIN_ITERATIONS')}), got {iterations}",
            field="iterations",
        )
    c, w = instance.cluster, instance.workload
    start = cost.validate_placement(start, c, w)[0]
    t0 = float(cost.evaluate(c, w, start).iteration_time_s)
    run = _Run(start, start, t0)
    out = TraceResult(method, iterations, failure_free_s=iterations * t0)
    out.progress.append((0.0, 0.0))
    for event in trace.events:
        if not _advance(run, out, event.time_s, iterations):
            break
        kind_down = event.kind == FAIL
        run.down = run.down | set(event.machines) if kind_down else run.down - set(event.machines)
        if kind_down:
            run.stale -= set(event.machines)
        else:
            run.stale |= set(event.machines)
        hit = run.placement is not None and bool(set(run.placement.ravel().tolist()) & set(event.machines))
        if kind_down and hit:
            run.lost |= set(event.machines) & set(run.placement.ravel().tolist())
        if kind_down and not hit:
            out.timeline.append(_entry(run, event, "none"))
            continue
        if not kind_down and run.placement is not None and (
            run.iteration_s <= t0 * _DEGRADED or not set(event.machines) & run.lost
        ):
            out.timeline.append(_entry(run, event, "none"))
            continue
        _decide(instance, run, out, event, iterations, trace, method, seed, budget, store, method_fn)
    else:
        _advance(run, out, math.inf, iterations)
    out.iterations_done = run.done
    out.finished = run.done >= iterations
    out.wall_s = run.time_s
    accounted = out.failure_free_s + out.migration_s + out.rollback_s + out.interrupted_s + out.stalled_s
    out.slowdown_s = out.wall_s - accounted if out.finished else 0.0
    check_totals(out, trace)
    return out


def check_totals(result: TraceResult, trace: Trace) -> None:
    """A replay's totals must agree with its trace (float time once made a machine
    immortal and the totals came out wrong with exit 0).

    * every event before the end was applied, once, in the trace's order, and none after it
      (an event at the very time the run finishes comes too late);
    * the time components are finite and >= 0, progress never goes back in time, and a
      finished run did all its iterations;

    Raises:
        HulkInputError: which total disagrees (the trace's times are closer than float time
            resolves, or the trace is inconsistent).
    """
    def bad(what: str) -> HulkInputError:
        return HulkInputError(
            f"the replay's totals disagree with trace '{trace.name}': {what}; the event times are "
            "probably closer than float time resolves (lower the rate, or space the events)"
        )

    applied = [e for e in trace.events if not result.finished or e.time_s < result.wall_s]
    seen = [(t.time_s, t.kind, t.label) for t in result.timeline]
    if seen != [(e.time_s, e.kind, e.label) for e in applied]:
        raise bad(f"{len(seen)} events applied, the trace has {len(applied)} before the end")
    for name in ("wall_s", "failure_free_s", "migration_s", "rollback_s", "interrupted_s", "stalled_s"):
        value = getattr(result, name)
        if not (math.isfinite(value) and value >= 0):
            raise bad(f"{name} = {value}")
    if not math.isfinite(result.slowdown_s):
        raise bad(f"slowdown_s = {result.slowdown_s}")
    times = [t for t, _ in result.progress]
    if any(b < a for a, b in zip(times, times[1:], strict=False)):
        raise bad("progress goes back in time")
    if result.finished != (result.iterations_done >= result.iterations):
        raise bad(f"{result.iterations_done} of {result.iterations} iterations done but finished={result.finished}")


def _advance(run: _Run, out: TraceResult, until_s: float, iterations: int) -> bool:
    """Train until ``until_s`` or the end; False once the run has finished (or stalls for good)."""
    if until_s < run.time_s:  # an event during a migration: applied now, once it has ended
        return True
    if run.placement is None:
        if math.isinf(until_s):
            return False
        out.stalled_s += until_s - run.time_s
        run.time_s = until_s
        out.progress.append((run.time_s, float(run.done)))
        return True
    finish = run.time_s - run.partial_s + (iterations - run.done) * run.iteration_s
    if finish <= until_s:
        run.time_s, run.done, run.partial_s = finish, iterations, 0.0
        out.progress.append((run.time_s, float(run.done)))
        return False
    busy = run.partial_s + until_s - run.time_s
    whole = int(np.floor(busy / run.iteration_s + _ROUND))
    run.done += whole
    run.partial_s = max(0.0, busy - whole * run.iteration_s)
    run.time_s = until_s
    out.progress.append((run.time_s, run.done + run.partial_s / run.iteration_s))
    return True


def _interrupt(run: _Run, out: TraceResult) -> None:
    """The iteration in progress is lost (the placement changes or stops)."""
    out.interrupted_s += run.partial_s
    run.partial_s = 0.0


def _decide(
    instance: Instance, run: _Run, out: TraceResult, event: TraceEvent, iterations: int, trace: Trace,
    method: str, seed: int, budget: int | None, store: CheckpointStore | None, method_fn: ReplaceMethod | None,
) -> None:
    """Ask the method for a placement on the machines up now and apply its answer."""
    m = instance.num_machines
    if len(run.down) == m:
        _interrupt(run, out)
        run.placement = None
        out.timeline.append(_entry(run, event, "stalled"))
        return
    remaining = iterations - run.done
    problem = ReplacementProblem(
        instance, run.last, sorted(run.down), horizon_iterations=remaining, store=store or CheckpointStore(),
        label=event.label, stale=sorted(run.stale - run.down),
    )
    result = run_method(problem, method, seed, budget, method_fn)
    out.decisions += 1
    out.decision_s += result.decision_s
    out.cost_evals += result.cost_evals
    if not result.feasible:
        _interrupt(run, out)
        run.placement = None
        out.timeline.append(_entry(run, event, "stalled", decision_s=result.decision_s))
        return
    o = result.outcome
    running = run.placement is not None and not (set(run.placement.ravel().tolist()) & run.down)
    if running and o.total_s >= remaining * run.iteration_s:  # staying put is at least as good
        out.timeline.append(_entry(run, event, "kept", decision_s=result.decision_s))
        return
    _interrupt(run, out)
    rolled = 0
    if o.lost_layers:
        rolled = run.done - (run.done // trace.checkpoint_every) * trace.checkpoint_every
        out.rollback_s += rolled * run.iteration_s
        run.done -= rolled
    action = "replaced" if run.placement is not None else "resumed"
    out.progress.append((run.time_s, float(run.done)))
    run.time_s += o.migration_s
    out.migration_s += o.migration_s
    out.moved_bytes += o.moved_bytes
    run.placement = run.last = result.placement
    run.iteration_s = o.iteration_time_s
    run.stale = set()
    out.progress.append((run.time_s, float(run.done)))
    out.timeline.append(
        _entry(run, event, action, o.migration_s, o.moved_bytes, rolled, result.decision_s)
    )


def _entry(
    run: _Run, event: TraceEvent, action: str, migration_s: float = 0.0, moved_bytes: float = 0.0,
    rolled_back: int = 0, decision_s: float = 0.0,
) -> TimelineEntry:
    return TimelineEntry(
        event.time_s, run.done, event.kind, event.label, action,
        run.iteration_s if run.placement is not None else math.nan,
        migration_s, moved_bytes, rolled_back, decision_s,
    )


def compare_methods(
    instance: Instance,
    start: np.ndarray,
    trace: Trace,
    iterations: int,
    methods: dict[str, ReplaceMethod | None],
    *,
    seed: int = 0,
    budget: int | None = None,
    store: CheckpointStore | None = None,
) -> list[TraceResult]:
    """:func:`replay` of one trace with each method (``name -> function``, ``None`` = by name)."""
    return [
        replay(instance, start, trace, iterations, name, seed=seed, budget=budget, store=store, method_fn=fn)
        for name, fn in methods.items()
    ]
