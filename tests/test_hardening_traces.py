"""Issue 38, event simulation in floating point: equal times keep the given order (no machine
made immortal), rates float time cannot resolve and runs that would draw too many events are
refused with the bound before any event is drawn, and replays are checked against their trace."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.output import EXIT_BAD_INPUT
from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.replacement import traces
from hulk_env.replacement.traces import (
    FAIL,
    RECOVER,
    Trace,
    TraceEvent,
    check_alternating,
    check_totals,
    random_trace,
    replay,
)
from tests.replacement_cases import two_stage

runner = CliRunner()
CLI = ("simulate-failures", "--cluster", "cloud-3region", "--model", "gpt3-1.3b", "--methods", "repair")


def small() -> tuple[Instance, object]:
    c, w, old, _ = two_stage()
    return Instance(c, w, "two-stage"), old


def one_error_line(result) -> str:
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_equal_times_keep_the_given_order_so_a_repair_never_follows_the_next_failure():
    """A repair and the machine's next failure rounded onto one float time: the old rule
    (failures first) applied fail, fail, recover -- the machine then stayed up for good."""
    t = 2.0
    events = (TraceEvent(1.0, FAIL, (0,), "m0"), TraceEvent(t, RECOVER, (0,), "m0"),
              TraceEvent(t, FAIL, (0,), "m0"), TraceEvent(3.0, RECOVER, (0,), "m0"))
    trace = Trace(events)
    assert [e.kind for e in trace.events] == [FAIL, RECOVER, FAIL, RECOVER]
    check_alternating(trace)
    old_rule = sorted(events, key=lambda e: (e.time_s, e.kind != FAIL))
    with pytest.raises(HulkInputError, match="twice in a row"):
        check_alternating(_unsorted(old_rule))


def _unsorted(events) -> Trace:
    trace = Trace(())
    object.__setattr__(trace, "events", tuple(events))
    return trace


def test_machine_is_down_after_a_same_time_repair_and_failure():
    """Replay: with m0 failing again at the instant it is repaired, the run ends with m0 down
    (the last event is its failure), and the totals agree with the trace."""
    inst, start = small()
    t0 = cost.iteration_time(inst.cluster, inst.workload, start)
    events = (TraceEvent(2.5 * t0, FAIL, (0,), "m0"), TraceEvent(4.5 * t0, RECOVER, (0,), "m0"),
              TraceEvent(4.5 * t0, FAIL, (0,), "m0"))
    result = replay(inst, start, Trace(events, checkpoint_every=5), 50, "repair")
    assert [e.kind for e in result.timeline] == [FAIL, RECOVER, FAIL]
    assert result.finished


def test_rate_beyond_float_resolution_is_refused_with_the_bound():
    line = one_error_line(runner.invoke(app, [*CLI, "--rate", "1e20", "--iterations", "1000"]))
    assert "beyond what float time resolves" in line and "at most" in line and "MIN_EVENT_GAP_ULPS" in line


def test_huge_iterations_are_refused_before_drawing_events(monkeypatch):
    def no_drawing(*args, **kwargs):
        raise AssertionError("events drawn")

    monkeypatch.setattr(traces, "_up_down", no_drawing)
    inst, _ = small()
    with pytest.raises(HulkInputError, match="refused before drawing any event"):
        random_trace(inst.cluster, 4e12, 0.01)
    line = one_error_line(runner.invoke(app, [*CLI, "--rate", "0.01", "--iterations", str(10**12)]))
    assert "--iterations" in line


def test_random_traces_alternate_and_replays_agree_with_them():
    inst, start = small()
    t0 = cost.iteration_time(inst.cluster, inst.workload, start)
    trace = random_trace(inst.cluster, 200 * t0, 3600 / (20 * t0), seed=3, mean_repair_h=5 * t0 / 3600, checkpoint_every=5)
    assert trace.failures > 3
    check_alternating(trace)
    result = replay(inst, start, trace, 100, "repair")
    check_totals(result, trace)  # replay checked it too; this is the explicit contract
    dropped = dataclasses.replace(result, timeline=result.timeline[:-1])
    with pytest.raises(HulkInputError, match="disagree with trace"):
        check_totals(dropped, trace)
    negative = dataclasses.replace(result, stalled_s=-1.0)
    with pytest.raises(HulkInputError, match="stalled_s"):
        check_totals(negative, trace)
