"""Failure traces: files, seeded random traces, and replays checked against their parts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.replacement import ReplacementProblem
from hulk_env.replacement.methods import run_method
from hulk_env.replacement.traces import (
    FAIL,
    RECOVER,
    Trace,
    TraceEvent,
    compare_methods,
    load_trace,
    random_trace,
    replay,
)
from tests.replacement_cases import chain_workload, three_region, two_stage


def small() -> tuple[Instance, np.ndarray]:
    c, w, old, _ = two_stage()
    return Instance(c, w, "two-stage"), old


def test_replay_adds_up_interruption_rollback_migration_and_the_rest() -> None:
    inst, start = small()
    t0 = cost.iteration_time(inst.cluster, inst.workload, start)
    trace = Trace((TraceEvent(7.5 * t0, FAIL, (0,), "m0"),), checkpoint_every=5)
    result = replay(inst, start, trace, 100, "repair")
    # 7 iterations done and half of the 8th lost; layer 0 lived only on m0: roll back to the
    # checkpoint at 5, then migrate and do the 95 left at the new speed.
    problem = ReplacementProblem(inst, start, [0], horizon_iterations=95)
    answer = run_method(problem, "repair")
    t1, mig = answer.outcome.iteration_time_s, answer.outcome.migration_s
    assert result.finished and result.iterations_done == 100
    assert result.interrupted_s == pytest.approx(0.5 * t0)
    assert result.rollback_s == pytest.approx(2 * t0)
    assert result.migration_s == pytest.approx(mig) and mig > 0
    assert result.wall_s == pytest.approx(7.5 * t0 + mig + 95 * t1)
    assert result.lost_s == pytest.approx(result.wall_s - 100 * t0)
    parts = result.migration_s + result.rollback_s + result.interrupted_s + result.stalled_s + result.slowdown_s
    assert parts == pytest.approx(result.lost_s)
    entry = result.timeline[0]
    assert (entry.action, entry.rolled_back, entry.iterations_done) == ("replaced", 2, 5)


def test_failures_of_unused_machines_cost_nothing_and_stalls_wait_for_recovery() -> None:
    c, w, old, _ = three_region()
    inst = Instance(c, w, "three-region")
    t0 = cost.iteration_time(c, w, old)
    unused = Trace((TraceEvent(3 * t0, FAIL, (2,), "m2"),))
    quiet = replay(inst, old, unused, 50, "repair")
    assert quiet.wall_s == pytest.approx(50 * t0) and quiet.timeline[0].action == "none"
    # Every machine down: nothing fits, training stalls until two come back.
    everything = tuple(range(c.num_machines))
    trace = Trace((TraceEvent(10 * t0, FAIL, everything, "all"), TraceEvent(20 * t0, RECOVER, (3, 4), "z")))
    result = replay(inst, old, trace, 50, "repair")
    assert [e.action for e in result.timeline] == ["stalled", "resumed"]
    assert result.stalled_s == pytest.approx(10 * t0)
    assert result.finished and result.rollback_s > 0  # all state was lost: from the checkpoint


def test_a_stall_with_no_recovery_never_finishes() -> None:
    inst, start = small()
    trace = Trace((TraceEvent(1.0, FAIL, (0, 1, 2), "all"),))
    result = replay(inst, start, trace, 10_000, "repair")
    assert not result.finished and result.iterations_done < 10_000


def test_random_traces_are_seeded_and_follow_the_rates() -> None:
    c, _, _, _ = three_region()
    a = random_trace(c, 1000 * 3600.0, 0.01, seed=1, region_outage_per_hour=0.005)
    b = random_trace(c, 1000 * 3600.0, 0.01, seed=1, region_outage_per_hour=0.005)
    assert a.events == b.events
    singles = [e for e in a.events if e.kind == FAIL and not e.label.startswith("region:")]
    # 5 machines x 0.01 per hour x ~1000 h up: about 50 failures (Poisson, generous bounds).
    assert 25 <= len(singles) <= 80
    outages = [e for e in a.events if e.kind == FAIL and e.label.startswith("region:")]
    assert outages and all(len(e.machines) == {"region:X": 2, "region:Y": 1, "region:Z": 2}[e.label] for e in outages)
    quiet = random_trace(c, 1000 * 3600.0, 0.01, seed=1, region_rates={"x": 0.0, "Y": 0.0})
    assert {c.machines[e.machines[0]].region for e in quiet.events} == {"Z"}
    with pytest.raises(HulkInputError, match="unknown region"):
        random_trace(c, 10.0, 0.1, region_rates={"Mars": 1.0})


def test_trace_files(tmp_path) -> None:
    c, w, old, _ = three_region()
    path = tmp_path / "trace.yaml"
    path.write_text("checkpoint_every: 50\nevents:\n  - {at_h: 0.5, recover: region:X}\n  - {at_s: 60, fail: [m0, m3]}\n")
    trace = load_trace(path, c)
    assert trace.checkpoint_every == 50
    assert [(e.time_s, e.kind, e.machines) for e in trace.events] == [(60.0, FAIL, (0, 3)), (1800.0, RECOVER, (0, 1))]
    bad = {
        "events: 3\n": "must be a list",
        "events:\n  - {at_h: 1, fail: m9}\n": "row 1: field 'fail': unknown machine 'm9'",
        "events:\n  - {at_h: -1, fail: m0}\n": "finite time >= 0",
        "events:\n  - {at_h: 1}\n": "exactly one of",
        "checkpoint_every: 0\nevents: []\n": "checkpoint_every",
        "events: [\n": "not valid YAML",
        "- 1\n": "mapping with an 'events' list",
    }
    for text, message in bad.items():
        path.write_text(text)
        with pytest.raises(HulkInputError, match=message.replace("(", r"\(")):
            load_trace(path, c)
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HulkInputError, match="UTF-8"):
        load_trace(path, c)


def test_compare_methods_on_one_trace() -> None:
    c, w, old, _ = three_region()
    inst = Instance(c, chain_workload([1e9, 2e9, 3e9], data_parallel=2), "three-region")
    t0 = cost.iteration_time(c, w, old)
    trace = Trace((TraceEvent(5 * t0, FAIL, (0, 1), "region:X"), TraceEvent(30 * t0, RECOVER, (0, 1), "region:X")))
    results = compare_methods(inst, old, trace, 200, {"repair": None, "search": None}, budget=300)
    assert [r.method for r in results] == ["repair", "search"]
    assert all(r.finished and math.isfinite(r.wall_s) for r in results)
    assert results[1].cost_evals >= 300
