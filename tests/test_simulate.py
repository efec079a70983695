"""The discrete-event simulator: hand-computed timelines, bounds, resource and dependency checks,
and the analytic model's error against it."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hulk_env.cluster import Cluster, Machine
from hulk_env.errors import HulkInputError
from hulk_env.simulate import (
    PLACEMENT_STYLES,
    SimResult,
    allreduce_rings,
    analytic_vs_simulated,
    random_placement,
    simulate,
    validation_cases,
)
from hulk_env.workload import Workload

EPS = 1e-9


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------
def make_cluster(flops, latency_s=0.25, bandwidth_bps=2.0) -> Cluster:
    """Machines of the given FLOP/s; uniform links unless matrices are given."""
    n = len(flops)
    machines = [Machine(f"m{i}", "x", "custom", 1, float(f), 1e12) for i, f in enumerate(flops)]
    lat = np.broadcast_to(np.asarray(latency_s, dtype=float), (n, n)).copy()
    np.fill_diagonal(lat, 0.0)
    bw = np.broadcast_to(np.asarray(bandwidth_bps, dtype=float), (n, n)).copy()
    return Cluster(machines, lat, bw)


def make_workload(
    flops,
    activation_bytes=None,
    params=None,
    edges=None,
    *,
    m: int = 1,
    d: int = 1,
    schedule: str = "gpipe",
) -> Workload:
    """A layer graph (a chain unless ``edges`` are given) with its training settings."""
    n = len(flops)
    return Workload(
        name="w",
        layer_names=tuple(f"l{i}" for i in range(n)),
        flops=flops,
        params=params if params is not None else [0.0] * n,
        activation_bytes=activation_bytes if activation_bytes is not None else [1.0] * n,
        stash_bytes=[0.0] * n,
        edges=edges if edges is not None else [(i, i + 1) for i in range(n - 1)],
        num_micro_batches=m,
        data_parallel=d,
        schedule=schedule,
        grad_bytes_per_param=2.0,
    )


def random_instance(seed: int) -> tuple[Cluster, Workload, np.ndarray]:
    """A small random instance: DAG (fan-out, fan-in, several sinks), D replicas, placement."""
    rng = np.random.default_rng(seed)
    n_machines = int(rng.integers(1, 6))
    n_layers = int(rng.integers(1, 8))
    lat = rng.uniform(0.0, 0.3, (n_machines, n_machines))
    lat = (lat + lat.T) / 2
    cluster = make_cluster(
        rng.uniform(0.5, 3.0, n_machines),
        latency_s=lat,
        bandwidth_bps=rng.uniform(0.5, 4.0, (n_machines, n_machines)),
    )
    edges = {(v - 1, v) for v in range(1, n_layers)}  # connected backbone
    for _ in range(int(rng.integers(0, n_layers + 1))):
        u, v = sorted(rng.choice(n_layers, 2, replace=False)) if n_layers > 1 else (0, 0)
        if u < v:
            edges.add((int(u), int(v)))
    if n_layers > 2 and rng.random() < 0.3:  # an extra sink hanging off an inner layer
        edges.discard((n_layers - 2, n_layers - 1))
        edges.add((int(rng.integers(0, n_layers - 2)), n_layers - 1))
    workload = make_workload(
        rng.uniform(0.0, 2.0, n_layers) * (rng.random(n_layers) > 0.1),  # some zero-FLOP layers
        activation_bytes=rng.uniform(0.0, 3.0, n_layers),
        params=rng.uniform(0.0, 5.0, n_layers),
        edges=sorted(edges) if n_layers > 1 else [],
        m=int(rng.integers(1, 6)),
        d=int(rng.integers(1, 4)),
        schedule=("gpipe", "1f1b")[int(rng.integers(2))],
    )
    placement = rng.integers(0, n_machines, (workload.data_parallel, n_layers))
    return cluster, workload, placement


# --------------------------------------------------------------------------------------------
# Hand-computed cases (every number below is worked out in the comments)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_one_machine_is_m_times_three_forward(schedule):
    # Forwards 0.5 + 1 + 1.5 = 3 s, backwards 6 s: 9 s per micro-batch, 4 micro-batches.
    cluster = make_cluster([4.0])
    workload = make_workload([2.0, 4.0, 6.0], m=4, schedule=schedule)
    result = simulate(cluster, workload, np.zeros((1, 3), dtype=int))
    assert result.iteration_time_s == 36.0
    assert result.pipeline_s == 36.0
    assert result.dp_sync_s == 0.0
    assert {t.kind for t in result.tasks} == {"forward", "backward"}


def test_two_machine_chain_gpipe_by_hand():
    # Layer 0 on machine 0, layer 1 on machine 1; forward 1 s, backward 2 s each; the link moves
    # 1 byte at 2 B/s (0.5 s) and arrives 0.25 s later.
    # M0: F0 [0,1] F1 [1,2] F2 [2,3]; activations arrive at 1.75, 2.75, 3.75.
    # M1: F0 [1.75,2.75]; forward priority: F1 [2.75,3.75], F2 [3.75,4.75];
    #     B0 [4.75,6.75] B1 [6.75,8.75] B2 [8.75,10.75]; gradients arrive 7.5, 9.5, 11.5.
    # M0: B0 [7.5,9.5] B1 [9.5,11.5] B2 [11.5,13.5].
    cluster = make_cluster([1.0, 1.0])
    workload = make_workload([1.0, 1.0], m=3, schedule="gpipe")
    result = simulate(cluster, workload, np.array([[0, 1]]))
    assert result.iteration_time_s == 13.5
    backward_m0 = [
        (t.start_s, t.end_s) for t in result.tasks if t.kind == "backward" and t.layer == 0
    ]
    assert backward_m0 == [(7.5, 9.5), (9.5, 11.5), (11.5, 13.5)]
    forward_m1 = [t.start_s for t in result.tasks if t.kind == "forward" and t.layer == 1]
    assert forward_m1 == [1.75, 2.75, 3.75]
    transfers = [t for t in result.tasks if t.kind == "transfer"]
    assert len(transfers) == 6
    assert transfers[0].resource == "link 0->1" and transfers[0].detail == "F 0->1"
    assert (transfers[0].start_s, transfers[0].end_s, transfers[0].arrival_s) == (1.0, 1.5, 1.75)


def test_two_machine_chain_1f1b_by_hand():
    # Same chain, 1F1B: 2 machines, so at most k = min(3, 2) = 2 micro-batches in flight.
    # M0: F0 [0,1] F1 [1,2], then F2 must wait (window full).
    # M1: F0 [1.75,2.75]; at 2.75 both F1 and B0 are ready, last unit was a forward: B0
    #     [2.75,4.75], F1 [4.75,5.75], B1 [5.75,7.75]; gradients arrive 5.5 and 8.5.
    # M0: B0 [5.5,7.5] frees the window: F2 [7.5,8.5], B1 [8.5,10.5]; F2's activation arrives 9.25.
    # M1: F2 [9.25,10.25] B2 [10.25,12.25]; gradient arrives 13.0. M0: B2 [13,15].
    cluster = make_cluster([1.0, 1.0])
    workload = make_workload([1.0, 1.0], m=3, schedule="1f1b")
    result = simulate(cluster, workload, np.array([[0, 1]]))
    assert result.iteration_time_s == 15.0
    m0 = [(t.kind[0], t.micro_batch, t.start_s) for t in result.tasks if t.resource == "machine 0"]
    assert m0 == [
        ("f", 0, 0.0), ("f", 1, 1.0), ("b", 0, 5.5), ("f", 2, 7.5), ("b", 1, 8.5), ("b", 2, 13.0)
    ]  # fmt: skip
    m1 = [(t.kind[0], t.micro_batch, t.start_s) for t in result.tasks if t.resource == "machine 1"]
    assert m1 == [
        ("f", 0, 1.75), ("b", 0, 2.75), ("f", 1, 4.75), ("b", 1, 5.75), ("f", 2, 9.25), ("b", 2, 10.25)
    ]  # fmt: skip


def test_data_parallel_ring_by_hand():
    # Two replicas, each whole on its own machine (1 and 2 FLOP/s): compute ends at 12 s and 6 s.
    # One ring (0, 1) for both layers: G = (100 + 300) params x 2 bytes = 800 B, chunks of 400 B
    # take 2 s at 200 B/s. Step 0 [12,14] arrives 14.25; step 1 [14.25,16.25] arrives 16.5.
    cluster = make_cluster([1.0, 2.0], latency_s=0.25, bandwidth_bps=200.0)
    workload = make_workload([1.0, 1.0], params=[100.0, 300.0], m=2, d=2)
    result = simulate(cluster, workload, np.array([[0, 0], [1, 1]]))
    assert result.pipeline_s == 12.0
    assert result.iteration_time_s == 16.5
    assert result.dp_sync_s == 4.5
    chunks = [
        (t.resource, t.micro_batch, t.start_s, t.arrival_s)
        for t in result.tasks
        if t.kind == "allreduce"
    ]
    assert sorted(chunks) == [
        ("link 0->1", 0, 12.0, 14.25), ("link 0->1", 1, 14.25, 16.5),
        ("link 1->0", 0, 12.0, 14.25), ("link 1->0", 1, 14.25, 16.5),
    ]  # fmt: skip


def test_rings_sharing_a_machine_run_one_after_the_other():
    # Replica 0: layer 0 on machine 0, layer 1 on machine 1 (0-byte activations, latency 0.25);
    # replica 1 whole on machine 2. m = 1, every layer 1 s forward, 2 s backward.
    # r0: F0 [0,1], F1 [1.25,2.25], B1 [2.25,4.25], B0 [4.5,6.5]; r1 ends at 6.
    # Ring (0, 2) of layer 0: G = 200 B, chunks 0.5 s: starts at 6.5, ends 8.0.
    # Ring (1, 2) of layer 1: G = 600 B, chunks 1.5 s: waits for machine 2 (8.0), ends 11.5.
    cluster = make_cluster([1.0, 1.0, 1.0], latency_s=0.25, bandwidth_bps=200.0)
    workload = make_workload(
        [1.0, 1.0], activation_bytes=[0.0, 0.0], params=[100.0, 300.0], m=1, d=2
    )
    placement = np.array([[0, 1], [2, 2]])
    assert [r.machines for r in allreduce_rings(workload, placement)] == [(0, 2), (1, 2)]
    result = simulate(cluster, workload, placement)
    assert result.pipeline_s == 6.5
    assert result.iteration_time_s == 11.5
    first_chunk_of_ring_1 = min(
        t.start_s for t in result.tasks if t.kind == "allreduce" and t.layer == 1
    )
    assert first_chunk_of_ring_1 == 8.0


def test_shared_link_is_fifo_and_latency_does_not_occupy():
    # Two edges leave layer 0 for layers 1 and 2 on machine 1: two transfers of 1 B at 1 B/s on
    # one link. The second waits for the first (starts at 1, not 0) but not for its latency.
    cluster = make_cluster([1.0, 1.0], latency_s=5.0, bandwidth_bps=1.0)
    workload = make_workload([0.0, 0.0, 0.0], edges=[(0, 1), (0, 2)], m=1)
    result = simulate(cluster, workload, np.array([[0, 1, 1]]))
    fwd = [(t.start_s, t.end_s, t.arrival_s) for t in result.tasks if t.detail.startswith("F")]
    assert fwd == [(0.0, 1.0, 6.0), (1.0, 2.0, 7.0)]


# --------------------------------------------------------------------------------------------
# Properties on random small instances
# --------------------------------------------------------------------------------------------
def critical_path_s(cluster: Cluster, workload: Workload, placement: np.ndarray) -> float:
    """Forward + backward longest path of one micro-batch, latency + bytes/bw per cross edge."""
    lat, bw, act = cluster.latency_s, cluster.bandwidth_bps, workload.activation_bytes
    n = workload.num_layers
    best = 0.0
    for row in placement:
        dur = workload.flops / cluster.flops[row]

        def hop(u: int, v: int, back: bool = False, row=row) -> float:
            a, b = (row[v], row[u]) if back else (row[u], row[v])  # gradients flow v -> u
            return 0.0 if a == b else lat[a, b] + act[u] / bw[a, b]

        fin = np.zeros(n)
        for v in range(n):
            fin[v] = (
                max([fin[u] + hop(u, v) for u in workload.predecessors[v]], default=0.0) + dur[v]
            )
        loss = max(fin[v] for v in range(n) if not workload.successors[v])
        back = np.zeros(n)
        for u in reversed(range(n)):
            ready = [back[v] + hop(u, v, True) for v in workload.successors[u]] or [loss]
            back[u] = max(ready) + 2 * dur[u]
        best = max(best, back.max())
    return best


def busiest_resource_s(cluster: Cluster, workload: Workload, placement: np.ndarray) -> float:
    """Seconds per micro-batch of the busiest machine or directed link."""
    busy: dict = defaultdict(float)
    for row in placement:
        for layer, x in enumerate(row):
            busy[x] += 3 * workload.flops[layer] / cluster.flops[x]
        for u, v in workload.edges:
            a, b = row[u], row[v]
            if a != b:
                busy[(a, b)] += workload.activation_bytes[u] / cluster.bandwidth_bps[a, b]
                busy[(b, a)] += workload.activation_bytes[u] / cluster.bandwidth_bps[b, a]
    return max(busy.values())


def check_timeline(cluster: Cluster, workload: Workload, placement: np.ndarray, result: SimResult):
    """Every task respects its resource, its dependencies and (1F1B) the in-flight limit."""
    d, n = placement.shape
    m = workload.num_micro_batches
    comp = {}
    trans = {}
    for t in result.tasks:
        assert t.end_s >= t.start_s >= 0.0 and t.arrival_s >= t.end_s
        if t.kind in ("forward", "backward"):
            key = (t.kind, t.replica, t.micro_batch, t.layer)
            assert key not in comp
            assert t.resource == f"machine {placement[t.replica, t.layer]}"
            comp[key] = t
        elif t.kind == "transfer":
            trans[(t.detail, t.replica, t.micro_batch)] = t
    assert len(comp) == 2 * d * m * n
    # One task at a time on every machine and every directed link.
    by_resource = defaultdict(list)
    for t in result.tasks:
        by_resource[t.resource].append((t.start_s, t.end_s))
    for intervals in by_resource.values():
        intervals.sort()
        for (_, end), (start, _) in zip(intervals, intervals[1:], strict=False):
            assert start >= end - EPS
    # Dependencies, with the transfer in between for cross-machine edges.
    sinks = [v for v in range(n) if not workload.successors[v]]
    n_cross = 0
    for r in range(d):
        for j in range(m):
            loss = max(comp[("forward", r, j, s)].end_s for s in sinks)
            for s in sinks:
                assert comp[("backward", r, j, s)].start_s >= loss - EPS
            for u, v in workload.edges:
                fu, fv = comp[("forward", r, j, u)], comp[("forward", r, j, v)]
                bu, bv = comp[("backward", r, j, u)], comp[("backward", r, j, v)]
                a, b = placement[r, u], placement[r, v]
                if a == b:
                    assert fv.start_s >= fu.end_s - EPS and bu.start_s >= bv.end_s - EPS
                    continue
                n_cross += 1
                wire_f = workload.activation_bytes[u] / cluster.bandwidth_bps[a, b]
                wire_b = workload.activation_bytes[u] / cluster.bandwidth_bps[b, a]
                tf = trans[(f"F {u}->{v}", r, j)]
                tb = trans[(f"B {v}->{u}", r, j)]
                assert tf.resource == f"link {a}->{b}" and tb.resource == f"link {b}->{a}"
                assert tf.start_s >= fu.end_s - EPS and fv.start_s >= tf.arrival_s - EPS
                assert tb.start_s >= bv.end_s - EPS and bu.start_s >= tb.arrival_s - EPS
                assert tf.end_s - tf.start_s == pytest.approx(wire_f, abs=EPS)
                assert tb.end_s - tb.start_s == pytest.approx(wire_b, abs=EPS)
                assert tf.arrival_s - tf.end_s == pytest.approx(cluster.latency_s[a, b], abs=EPS)
    assert len(trans) == 2 * n_cross
    # 1F1B: at most k_r = min(m, S_r) micro-batches in flight per machine and replica.
    if workload.schedule == "1f1b":
        for r in range(d):
            k = min(m, len(set(placement[r].tolist())))
            for x in set(placement[r].tolist()):
                layers = [layer for layer in range(n) if placement[r, layer] == x]
                spans = [
                    (
                        min(comp[("forward", r, j, layer)].start_s for layer in layers),
                        max(comp[("backward", r, j, layer)].end_s for layer in layers),
                    )
                    for j in range(m)
                ]
                for start, _ in spans:  # count spans open just after each start
                    assert sum(s <= start < e for s, e in spans) <= k
    # All-reduce chunks only once both ends have finished their compute.
    compute_end = defaultdict(float)
    for t in comp.values():
        compute_end[t.resource] = max(compute_end[t.resource], t.end_s)
    for t in result.tasks:
        if t.kind == "allreduce":
            a, b = t.resource.removeprefix("link ").split("->")
            assert t.start_s >= compute_end[f"machine {a}"] - EPS
            assert t.start_s >= compute_end[f"machine {b}"] - EPS
    assert result.pipeline_s == pytest.approx(max((t.end_s for t in comp.values()), default=0.0))
    assert result.iteration_time_s == pytest.approx(
        max(t.arrival_s for t in result.tasks) if result.tasks else 0.0
    )


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.integers(0, 2**31 - 1))
def test_random_instances_respect_resources_dependencies_and_bounds(seed):
    cluster, workload, placement = random_instance(seed)
    result = simulate(cluster, workload, placement)
    check_timeline(cluster, workload, placement, result)
    m = workload.num_micro_batches
    tol = 1e-9 * max(1.0, result.iteration_time_s)
    assert result.pipeline_s >= critical_path_s(cluster, workload, placement) - tol
    assert result.pipeline_s >= m * busiest_resource_s(cluster, workload, placement) - tol
    assert result.iteration_time_s == pytest.approx(result.pipeline_s + result.dp_sync_s)
    assert result.dp_sync_s >= 0.0


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.integers(0, 2**31 - 1))
def test_deterministic_and_record_flag_does_not_change_times(seed):
    cluster, workload, placement = random_instance(seed)
    first = simulate(cluster, workload, placement)
    again = simulate(cluster, workload, placement.copy())
    quiet = simulate(cluster, workload, placement, record=False)
    assert first == again
    assert quiet.tasks == []
    assert quiet[:3] == first[:3]


def test_everything_on_one_machine_has_no_communication():
    cluster, workload, _ = random_instance(7)
    placement = np.zeros((workload.data_parallel, workload.num_layers), dtype=int)
    result = simulate(cluster, workload, placement)
    assert not [t for t in result.tasks if t.kind in ("transfer", "allreduce")]
    work = workload.data_parallel * workload.num_micro_batches * 3 * workload.flops.sum()
    assert result.iteration_time_s == pytest.approx(work / cluster.flops[0])


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (np.zeros((2, 3), dtype=int), "shape"),
        (np.zeros(3, dtype=int), "shape"),
        (np.array([[0, 2, 0]]), "machine 2"),
        (np.array([[0, -1, 0]]), "machine -1"),
        (np.array([[0.0, 0.5, 1.0]]), "integer"),
    ],
)
def test_bad_placements_raise_a_clear_value_error(placement, message):
    cluster = make_cluster([1.0, 1.0])
    workload = make_workload([1.0, 1.0, 1.0])
    with pytest.raises(HulkInputError, match=message) as info:
        simulate(cluster, workload, placement)
    assert isinstance(info.value, ValueError)


def test_integer_valued_float_placement_is_accepted():
    cluster = make_cluster([1.0, 1.0])
    workload = make_workload([1.0, 1.0, 1.0])
    as_int = simulate(cluster, workload, np.array([[0, 1, 1]]))
    as_float = simulate(cluster, workload, np.array([[0.0, 1.0, 1.0]]))
    assert as_int == as_float


# --------------------------------------------------------------------------------------------
# The analytic model against the simulator: median and worst relative error on random instances
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def comparison():
    return analytic_vs_simulated(validation_cases(500, seed=0))


def test_validation_set_covers_schedules_replicas_styles_and_models():
    cases = validation_cases(500, seed=0)
    assert len(cases) == 500
    assert {c.workload.schedule for c in cases} == {"gpipe", "1f1b"}
    assert {c.workload.data_parallel for c in cases} == {1, 2, 4}
    assert {c.style for c in cases} == set(PLACEMENT_STYLES)
    assert len({c.workload.name for c in cases}) >= 6
    assert len({c.cluster.name for c in cases}) == 3
    again = validation_cases(500, seed=0)
    assert all(np.array_equal(a.placement, b.placement) for a, b in zip(cases, again, strict=True))


def test_random_placement_styles_are_valid():
    rng = np.random.default_rng(0)
    workload = make_workload([1.0] * 12, d=4)
    for style in PLACEMENT_STYLES:
        for _ in range(20):
            placement = random_placement(rng, 10, workload, style)
            assert placement.shape == (4, 12) and placement.min() >= 0 and placement.max() < 10
    contiguous = random_placement(np.random.default_rng(1), 10, workload, "pipeline")
    for row in contiguous:  # each machine holds one run of consecutive layers
        runs = [x for i, x in enumerate(row) if i == 0 or row[i - 1] != x]
        assert len(runs) == len(set(runs))


def test_analytic_model_error_is_finite_and_reported(comparison):
    assert np.all(np.isfinite(comparison.rel_error))
    assert np.all(comparison.simulated_s > 0) and np.all(comparison.analytic_s > 0)
    summary = comparison.summary()
    assert summary["cases"] == 500
    assert set(summary["by_style"]) == set(PLACEMENT_STYLES)
    print(
        f"analytic vs simulated on 500 placements: median {comparison.median_rel_err:.4f}, "
        f"p95 {comparison.p95_rel_err:.4f}"
    )


def test_analytic_model_meets_issue_target(comparison):
    assert comparison.median_rel_err <= 0.05
    assert comparison.p95_rel_err <= 0.15
