"""The latency-cost model of one training iteration (analytic, vectorised).

A placement is an integer array ``machine[D, L]``: the machine of layer ``l`` of data-parallel
replica ``r``. A batch of placements is ``[N, D, L]``. Every function here is pure and works on a
batch; the single-placement calls are the batch calls with ``N = 1``.

Notation (SI units): ``F_m`` machine FLOP/s, ``f_l`` forward FLOPs of layer ``l`` per
micro-batch, ``a_u`` activation bytes of layer ``u``'s output, ``alpha_ab`` one-way latency (s)
and ``beta_ab`` bandwidth (bytes/s) of the directed link ``a -> b``, ``m`` micro-batches per
iteration, ``D`` replicas.

Pipeline (per micro-batch):

- compute on machine ``m``: ``C_m = sum_{(r,l) on m} (3 f_l + g_l) / F_m`` seconds (backward =
  2 x forward plus ``g_l``, the forward FLOPs activation recomputation reruns,
  ``Workload.recompute_flops``; replicas and layers sharing a machine share its FLOP/s);
- occupancy of the directed link ``a -> b``:
  ``X_ab = sum_{r, u->v: mach(u)=a, mach(v)=b} a_u / beta_ab`` (activations, forward)
  ``+ sum_{r, u->v: mach(u)=b, mach(v)=a} a_u / beta_ab`` (their gradients, backward).
  Latency delays a transfer but does not occupy the link; each direction is its own resource;
- first-micro-batch latency ``P``: longest path through the placed DAG, forward then backward,
  node weight ``f_l / F_m`` forward and ``(2 f_l + g_l) / F_m`` backward, cross-machine edge weight
  ``alpha_ab + a_u / beta_ab`` in each direction; the backward starts at every sink once the
  forward of all sinks is done (the loss); maximum over replicas;
- steady-state bottleneck ``B = max(max_m C_m, max_ab X_ab)``;
- pipeline time ``T_pp = max(max(P, B) + (m - 1) B, max_r [(q_r + 1) P_r + rem_r B])`` with
  ``(q_r, rem_r) = divmod(m - 1, k_r)`` and ``k_r`` the micro-batches replica ``r`` may have in
  flight (its stash count, below). The first term is the textbook ``P + (m - 1) B`` (Alpa's
  ``sum t_s + (m - 1) max t_s`` for a chain), with ``max(P, B)`` because replicas sharing a
  machine can make ``P < B`` and the bottleneck must still do ``m`` slots of work. The second
  is the 1F1B window: with only ``k_r < m`` micro-batches in flight, micro-batch ``k_r`` waits
  for micro-batch 0's whole round trip. Both refinements come from the schedule simulator
  (:mod:`hulk_env.simulate`), the ground truth this model is measured against. Under plan
  settings (below) also ``T_pp = max(T_pp, max_x (h_x + m C_x + t_x))``
  (:func:`machine_bound_s`): machine ``x``
  runs its ``m C_x`` seconds one task at a time, not before ``h_x`` (the earliest forward start
  of its slots, the longest path to it) and followed by at least ``t_x`` (the shortest
  backward path from its slots back to their first layers). A lower bound of every schedule
  (Graham 1969's list-scheduling argument), it binds where replicas share a pipeline: the
  textbook fills the pipeline with one replica's ``P`` while the bottleneck works through
  ``D m`` slots (the planner's plans on few machines: 15% under the simulator before it).
  For one replica on a chain of stages ``h_x + C_x + t_x <= P``, so it changes nothing there.
  With default settings it is left out, so the one-device model's figures (and the shipped
  search references computed with them) stay bit-identical; it would bind there too.

Data-parallel gradient sync (the rings and their bytes: :mod:`hulk_env.traffic`): for each layer
``l`` the distinct machines of ``machine[:, l]`` in replica order (first occurrence kept) form a
ring of ``k`` machines; layers with the same ring share one all-reduce of
``G = sum_l params_l * grad_bytes_per_param`` bytes. Ring all-reduce time
``2 (k - 1) alpha_mean + 2 (k - 1) / k * G / beta_min`` over the ring's links
``(s_0 -> s_1, ..., s_{k-1} -> s_0)``: the bandwidth term is set by the slowest link, which
carries ``2 (k - 1) / k * G`` bytes; the latency term is the chain of ``2 (k - 1)`` dependent
hops that walks around the ring, so it pays the ring's mean latency per hop, not the worst.
Rings run in order of their first layer, each once all its machines are free (a machine does
its rings one after the other); ``T_dp`` is when the last ring ends (at least
``max_m sum_{rings containing m} ring time``); ``k = 1`` costs nothing.

``T_iter = T_pp + T_dp``, reported as an additive breakdown:
``compute_s = m max_m C_m`` (the busiest machine's compute), ``pipeline_comm_s = m (B - max_m
C_m)`` (extra when a link is the bottleneck), ``bubble_s = T_pp - m B`` (pipeline fill and
drain, and 1F1B window stalls), ``dp_sync_s = T_dp``; they add up to ``iteration_time_s``.

Agreement with the simulator (``hulk bench cost``; 500 seeded placements over the built-in
clusters and models, both schedules, ``D`` in {1, 2, 4}): median relative error about 0.5%, p95
about 14%. Known gaps: GPipe placements whose bottleneck link is used early in the forward and
late in the backward pass overlap work in between that ``P + (m - 1) B`` counts twice (the model
over-estimates, up to ~25%); the T5 fan-out (one encoder output sent to every decoder layer)
under 1F1B queues more than the model sees (under-estimates, up to ~40%).

Memory on machine ``m``: ``sum_{(r,l) on m} state_bytes_per_param * params_l + k_r stash_l``
with ``k_r = m`` stashed micro-batches for GPipe and ``k_r = min(m, S_r)`` for 1F1B, ``S_r`` the
number of distinct machines of replica ``r`` (its pipeline depth: the first stage's peak, an
upper bound for the later stages). Feasible when every machine's use is ``<= memory_bytes``.

Plan settings (tensor parallel inside machines, ZeRO, DiLoCo): with any of them set,
the per-machine seconds per micro-batch, the first-micro-batch latency's node weights, the
data-parallel sync and the memory take their formulas from :mod:`hulk_env.parallelism`; with
the defaults every figure above is unchanged.

Mixture-of-experts layers (:mod:`hulk_env.moe`, where the formulas live): their all-to-all
within each layer's expert-parallel group adds to ``X_ab`` like pipeline edges, and to ``P`` and
to ``C_m`` (a blocking collective: the machine waits) as the wait of each MoE slot's forward and
backward (:func:`moe_wait_s`: the round trip plus its queueing behind other transfers where a
machine serves several replicas); routed-expert parameters leave the rings and
are held once per machine of the group, ``ceil(E / G)`` experts each. Where an MoE placement
is a set of disjoint pipelines with a machine bottleneck, ``T_pp`` takes the busy-bottleneck
fill of :func:`stage_pipeline_s` when it is shorter than the textbook term. Without an
all-to-all (dense models, ``D = 1``, one machine per group) every figure is as above, bit for
bit (``tests/test_moe.py`` checks dense figures against main's).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from hulk_env import moe, parallelism
from hulk_env.cluster import Cluster
from hulk_env.traffic import Rings, dp_rings, ring_link_bytes
from hulk_env.workload import Workload

BACKWARD_FLOPS_FACTOR = 2.0  # backward = 2 x forward FLOPs (weights and input gradients)
TRAIN_FLOPS_FACTOR = 1.0 + BACKWARD_FLOPS_FACTOR
# Batches are evaluated in chunks so the [N, D, L, L] ring comparison stays small in memory.
_CHUNK = 4096

BOTTLENECK_MACHINE = 0
BOTTLENECK_LINK = 1


class IterationCost(NamedTuple):
    """Breakdown of one iteration; scalars/``[M]`` arrays for one placement, ``[N, ...]`` for a batch.

    Attributes:
        iteration_time_s: ``T_iter = T_pp + T_dp``.
        pipeline_s: ``T_pp``.
        dp_sync_s: ``T_dp``.
        first_micro_batch_s: ``P``, forward + backward latency of one micro-batch.
        bottleneck_s: ``B``, seconds per micro-batch of the busiest resource.
        bottleneck_kind: ``BOTTLENECK_MACHINE`` (0) or ``BOTTLENECK_LINK`` (1).
        bottleneck_index: the machine index, or ``a * M + b`` for the link ``a -> b``.
        compute_s: ``m * max_m C_m``.
        pipeline_comm_s: ``m * (B - max_m C_m)``.
        bubble_s: ``max(P, B) - B``.
        compute_s_per_mb: ``[M]`` per-machine compute per micro-batch ``C_m``.
        link_s_per_mb: ``[M, M]`` per-directed-link occupancy per micro-batch ``X_ab``.
        memory_bytes: ``[M]`` memory used per machine.
        memory_feasible: every machine within its memory.
    """

    iteration_time_s: np.ndarray | float
    pipeline_s: np.ndarray | float
    dp_sync_s: np.ndarray | float
    first_micro_batch_s: np.ndarray | float
    bottleneck_s: np.ndarray | float
    bottleneck_kind: np.ndarray | int
    bottleneck_index: np.ndarray | int
    compute_s: np.ndarray | float
    pipeline_comm_s: np.ndarray | float
    bubble_s: np.ndarray | float
    compute_s_per_mb: np.ndarray
    link_s_per_mb: np.ndarray
    memory_bytes: np.ndarray
    memory_feasible: np.ndarray | bool

    def to_dict(self) -> dict:
        """JSON-ready scalars of a single-placement breakdown (no per-machine arrays)."""
        keys = (
            "iteration_time_s", "pipeline_s", "dp_sync_s", "first_micro_batch_s", "bottleneck_s",
            "compute_s", "pipeline_comm_s", "bubble_s",
        )
        out: dict = {k: float(getattr(self, k)) for k in keys}
        out["bottleneck_kind"] = "link" if int(self.bottleneck_kind) == BOTTLENECK_LINK else "machine"
        m = len(np.atleast_1d(self.compute_s_per_mb))
        idx = int(self.bottleneck_index)
        out["bottleneck"] = [idx // m, idx % m] if out["bottleneck_kind"] == "link" else idx
        out["memory_feasible"] = bool(self.memory_feasible)
        return out


class BatchTimes(NamedTuple):
    """The fast path's result: what a search needs, nothing more.

    Attributes:
        iteration_time_s: ``[N]`` iteration times (memory not considered).
        memory_feasible: ``[N]`` whether each placement fits in memory.
    """

    iteration_time_s: np.ndarray
    memory_feasible: np.ndarray

    def penalised(self) -> np.ndarray:
        """Iteration times with ``inf`` for placements that do not fit in memory."""
        return np.where(self.memory_feasible, self.iteration_time_s, np.inf)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------
def backward_flops(workload: Workload) -> np.ndarray:
    """``[L]`` backward FLOPs per micro-batch of each layer: ``2 f_l + g_l`` (the gradients and
    the forward that activation recomputation reruns, ``Workload.recompute_flops``)."""
    return BACKWARD_FLOPS_FACTOR * workload.flops + workload.recompute_flops


def train_flops(workload: Workload) -> np.ndarray:
    """``[L]`` training FLOPs per micro-batch of each layer, ``3 f_l + g_l``: what the model
    charges a machine for a slot (``C_m``). Everything that estimates compute seconds of a
    layer (the env's load features, re-placement, the stage DP) uses this one rule."""
    return TRAIN_FLOPS_FACTOR * workload.flops + workload.recompute_flops


def validate_placement(
    placement: np.ndarray, cluster: Cluster, workload: Workload, *, batch: bool = False
) -> np.ndarray:
    """Return ``placement`` as int64 ``[N, D, L]``; raise ``ValueError`` if it is malformed.

    Args:
        placement: ``[D, L]`` (or ``[N, D, L]`` when ``batch``) machine indices.
        cluster: gives the number of machines ``M``.
        workload: gives ``D`` and ``L``.
        batch: whether a leading batch axis is expected.
    """
    arr = np.asarray(placement)
    d, n_layers, m = workload.data_parallel, workload.num_layers, cluster.num_machines
    expected = ("N", d, n_layers) if batch else (d, n_layers)
    if arr.ndim != len(expected) or arr.shape[-2:] != (d, n_layers):
        raise ValueError(
            f"placement has shape {arr.shape}, expected {expected} "
            f"(data_parallel={d}, layers={n_layers})"
        )
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"placement must hold integer machine indices, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= m):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"placement refers to machine {int(bad)}; valid indices are 0..{m - 1}")
    arr = arr.astype(np.int64, copy=False)
    return arr if batch else arr[None]


class EvalCounter:
    """Placements the cost model evaluated inside a :func:`count_evals` block (``evals``)."""

    __slots__ = ("evals",)

    def __init__(self) -> None:
        self.evals = 0


_COUNTERS: list[EvalCounter] = []


@contextmanager
def count_evals() -> Iterator[EvalCounter]:
    """Count every placement :func:`evaluate`, :func:`evaluate_batch`, :func:`evaluate_one`, :func:`iteration_time` and
    :func:`iteration_times` evaluate inside the block, whoever calls them (a method's own calls,
    the env's, a lookahead's): honest ``cost_evals``. Blocks may nest; each counts its own."""
    counter = EvalCounter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


def _count(placements: int) -> None:
    for counter in _COUNTERS:
        counter.evals += placements


def evaluate(cluster: Cluster, workload: Workload, placement: np.ndarray, dense_links: bool = True) -> IterationCost:
    """Full breakdown of one placement ``[D, L]`` (scalars and per-machine arrays; see
    :func:`evaluate_batch` for ``dense_links``)."""
    batch = evaluate_batch(cluster, workload, validate_placement(placement, cluster, workload), dense_links)
    first = (getattr(batch, k)[0] for k in IterationCost._fields)
    return IterationCost(*(v.item() if np.ndim(v) == 0 else v for v in first))


def evaluate_batch(
    cluster: Cluster, workload: Workload, placements: np.ndarray, dense_links: bool = True
) -> IterationCost:
    """Full breakdown of a batch ``[N, D, L]``; fields gain a leading ``N`` axis.

    ``link_s_per_mb`` is ``[N, M, M]``: for large batches prefer :func:`iteration_times`. With
    ``dense_links=False`` it is left empty (``[N, 0, 0]``) and the link bottleneck is found
    without it (same values and link index), for callers that do not need every link (the env
    on thousands of machines).
    """
    mach = validate_placement(placements, cluster, workload, batch=True)
    _count(len(mach))
    n, m = len(mach), cluster.num_machines
    if dense_links:
        links = link_occupancy_s(cluster, workload, mach)
        flat_links = links.reshape(n, m * m)
        max_link, link_index = flat_links.max(axis=1), flat_links.argmax(axis=1)
    else:
        links = np.zeros((n, 0, 0))
        max_link, link_index = _link_bottleneck(cluster, workload, mach)
    wait = moe_wait_s(cluster, workload, mach, max_link)  # None for dense models
    compute = machine_compute_s(cluster, workload, mach, wait)
    max_compute = compute.max(axis=1)
    bottleneck = np.maximum(max_compute, max_link)
    kind = np.where(max_link > max_compute, BOTTLENECK_LINK, BOTTLENECK_MACHINE)
    index = np.where(kind == BOTTLENECK_LINK, link_index, compute.argmax(axis=1))
    plan = parallelism.plan_active(workload)
    stages = moe_stages(cluster, mach, compute, bottleneck, wait)
    paths = latency_paths_s(cluster, workload, mach, slots=plan or stages.any(), wait=wait)
    first = paths.first_s
    stash = stash_micro_batches(workload, mach)
    busy = stage_pipeline_s(cluster, workload, mach, compute, paths, wait, stash, stages) if stages.any() else None
    pipeline = pipeline_time_s(workload, first, bottleneck, stash, busy)
    if plan:  # the per-machine bound of plan settings (module docstring)
        pipeline = np.maximum(pipeline, machine_bound_s(workload, compute, mach, paths))
    dp = dp_sync_s(cluster, workload, mach, pipeline_s=pipeline)
    mem = memory_use_bytes(cluster, workload, mach)
    nmb = workload.num_micro_batches
    return IterationCost(
        iteration_time_s=pipeline + dp,
        pipeline_s=pipeline,
        dp_sync_s=dp,
        first_micro_batch_s=first.max(axis=1),
        bottleneck_s=bottleneck,
        bottleneck_kind=kind,
        bottleneck_index=index,
        compute_s=nmb * max_compute,
        pipeline_comm_s=nmb * (bottleneck - max_compute),
        bubble_s=pipeline - nmb * bottleneck,
        compute_s_per_mb=compute,
        link_s_per_mb=links,
        memory_bytes=mem,
        memory_feasible=np.all(mem <= cluster.memory_bytes, axis=1),
    )


def evaluate_one(cluster: Cluster, workload: Workload, placement: np.ndarray) -> IterationCost:
    """:func:`evaluate_batch` of one validated int ``[D, L]`` placement with ``dense_links=True``,
    field by field bit-identical (the same operations in the same order, in Python floats: the
    env's episode end, where ~60 numpy calls on one-placement arrays cost 2.5x these loops).

    Scalars are Python numbers; ``compute_s_per_mb`` and ``memory_bytes`` are ``[M]`` arrays;
    ``link_s_per_mb`` is left empty (``[0, 0]``): the bottleneck link is found without it.
    """
    if workload.moe is not None or parallelism.plan_active(workload):  # the batch path, counted once there
        full = evaluate_batch(cluster, workload, placement[None], dense_links=False)
        first = (getattr(full, k)[0] for k in IterationCost._fields)
        return IterationCost(*(v.item() if np.ndim(v) == 0 else v for v in first))._replace(
            link_s_per_mb=np.zeros((0, 0))
        )
    _count(1)
    m, nmb = cluster.num_machines, workload.num_micro_batches
    rows = placement.tolist()
    # C_m: per-slot training FLOPs summed per machine in slot order (np.bincount's order)
    slot_flops = train_flops(workload).tolist()
    total = [0.0] * m
    for row in rows:
        for layer, a in enumerate(row):
            total[a] += slot_flops[layer]
    compute = np.array(total) / cluster.flops
    max_compute = float(compute.max())
    # X_ab: every forward transfer, then every backward one (link_occupancy_s's order)
    bw, act = cluster.bandwidth_bps.item, workload.activation_bytes.tolist()
    edges = workload.edges.tolist()
    links: dict[int, float] = {}
    get = links.get
    for row in rows:
        for u, v in edges:
            a, b = row[u], row[v]
            key = a * m + b
            links[key] = get(key, 0.0) + act[u] / bw(a, b)
    for row in rows:
        for u, v in edges:
            a, b = row[v], row[u]
            key = a * m + b
            links[key] = get(key, 0.0) + act[u] / bw(a, b)
    max_link = max(links.values(), default=0.0)
    # the dense matrix's argmax: the lowest link index holding the maximum (all zero: link 0)
    link_index = min(k for k, x in links.items() if x == max_link) if max_link > 0.0 else 0
    bottleneck = max(max_compute, max_link)
    is_link = max_link > max_compute
    first = _first_micro_batch_one(cluster, workload, placement)
    stash = [nmb if workload.schedule == "gpipe" else min(nmb, len(set(row))) for row in rows]
    first_max = max(first)
    pipeline = max(first_max, bottleneck) + (nmb - 1) * bottleneck
    for first_r, k in zip(first, stash, strict=True):
        q, rem = divmod(nmb - 1, k)
        pipeline = max(pipeline, (q + 1) * first_r + rem * bottleneck if k < nmb else 0.0)
    dp = 0.0 if len(rows) == 1 else float(dp_sync_s(cluster, workload, placement[None])[0])
    state = (workload.state_bytes_per_param * workload.params).tolist()
    stash_bytes = workload.stash_bytes.tolist()
    used = [0.0] * m
    for row, k in zip(rows, stash, strict=True):
        for layer, a in enumerate(row):
            used[a] += state[layer] + k * stash_bytes[layer]
    memory = np.array(used)
    return IterationCost(
        iteration_time_s=pipeline + dp,
        pipeline_s=pipeline,
        dp_sync_s=dp,
        first_micro_batch_s=first_max,
        bottleneck_s=bottleneck,
        bottleneck_kind=BOTTLENECK_LINK if is_link else BOTTLENECK_MACHINE,
        bottleneck_index=link_index if is_link else int(compute.argmax()),
        compute_s=nmb * max_compute,
        pipeline_comm_s=nmb * (bottleneck - max_compute),
        bubble_s=pipeline - nmb * bottleneck,
        compute_s_per_mb=compute,
        link_s_per_mb=np.zeros((0, 0)),
        memory_bytes=memory,
        memory_feasible=bool(np.all(memory <= cluster.memory_bytes)),
    )


def iteration_time(cluster: Cluster, workload: Workload, placement: np.ndarray) -> float:
    """Iteration time in seconds of one placement ``[D, L]`` (memory not considered)."""
    mach = validate_placement(placement, cluster, workload)
    _count(1)
    return float(_iteration_times(cluster, workload, mach)[0])


def iteration_times(cluster: Cluster, workload: Workload, placements: np.ndarray) -> BatchTimes:
    """Iteration times and memory feasibility of a batch ``[N, D, L]``: the search fast path.

    Same numbers as :func:`evaluate_batch` without the ``[N, M, M]`` link matrix: the link
    bottleneck is found by sorting each placement's transfers by link.
    """
    mach = validate_placement(placements, cluster, workload, batch=True)
    _count(len(mach))
    times = np.empty(len(mach))
    feasible = np.empty(len(mach), dtype=bool)
    for start in range(0, len(mach), _CHUNK):
        chunk = mach[start : start + _CHUNK]
        times[start : start + _CHUNK] = _iteration_times(cluster, workload, chunk)
        mem = memory_use_bytes(cluster, workload, chunk)
        feasible[start : start + _CHUNK] = np.all(mem <= cluster.memory_bytes, axis=1)
    return BatchTimes(times, feasible)


# --------------------------------------------------------------------------------------------
# Terms of the model (each over a batch [N, D, L] of validated placements)
# --------------------------------------------------------------------------------------------
def machine_compute_s(
    cluster: Cluster, workload: Workload, mach: np.ndarray, wait: np.ndarray | None = None
) -> np.ndarray:
    """``[N, M]`` compute seconds per micro-batch on each machine, ``C_m`` (plus the all-to-all
    waits of its MoE slots, forward and backward: :mod:`hulk_env.moe`; ``wait`` is
    :func:`moe_wait_s`'s, computed when not given)."""
    n, d, n_layers = mach.shape
    m = cluster.num_machines
    slots = (np.arange(n)[:, None, None] * m + mach).ravel()
    if workload.moe is not None and wait is None:
        wait = moe_wait_s(cluster, workload, mach)
    if parallelism.intra_active(workload):  # per-GPU groups and tensor-parallel all-reduces
        seconds = parallelism.layer_seconds(cluster, workload).train_s[mach, np.arange(n_layers)]
        if workload.moe is not None:  # the machine waits for its all-to-alls here too
            seconds = seconds + 2.0 * wait
        return np.bincount(slots, weights=seconds.ravel(), minlength=n * m).reshape(n, m)
    flops = np.broadcast_to(train_flops(workload), (n, d, n_layers))
    total = np.bincount(slots, weights=flops.ravel(), minlength=n * m).reshape(n, m)
    if workload.moe is not None:  # a machine waits for its all-to-alls (both passes)
        both = 2.0 * wait
        return total / cluster.flops + np.bincount(slots, weights=both.ravel(), minlength=n * m).reshape(n, m)
    return total / cluster.flops


def moe_wait_s(
    cluster: Cluster, workload: Workload, mach: np.ndarray, max_link_s: np.ndarray | None = None
) -> np.ndarray | None:
    """``[N, D, L]`` seconds each MoE slot waits for its all-to-all per pass (``None`` for a
    dense model): the round trips of :func:`hulk_env.moe.a2a_latency_s` with their queueing at
    the uncontended cycle, ``T = max(max_m C_m, max_ab X_ab)`` computed with the uncontended
    waits (one step, not a fixed point: the queueing term is a mean, not a bound).
    ``max_link_s`` (``[N]``, ``max_ab X_ab``) is computed when not given."""
    if workload.moe is None:
        return None

    def cycle(alone: np.ndarray) -> np.ndarray:
        links = _max_link_occupancy_s(cluster, workload, mach) if max_link_s is None else max_link_s
        return np.maximum(machine_compute_s(cluster, workload, mach, alone).max(axis=1), links)

    return moe.a2a_contended_s(cluster, workload, mach, cycle)


def _edge_transfer_s(
    cluster: Cluster, workload: Workload, mach: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per replica and DAG edge: source machine, destination machine, seconds on the wire.

    Returns three ``[N, D, E]`` arrays; same-machine edges take 0 s (diagonal bandwidth is inf).
    """
    src = mach[:, :, workload.edges[:, 0]]
    dst = mach[:, :, workload.edges[:, 1]]
    act = workload.activation_bytes[workload.edges[:, 0]]
    return src, dst, act / cluster.bandwidth_bps[src, dst]


def link_occupancy_s(cluster: Cluster, workload: Workload, mach: np.ndarray) -> np.ndarray:
    """``[N, M, M]`` seconds per micro-batch each directed link is busy, ``X_ab``."""
    n = len(mach)
    m = cluster.num_machines
    if len(workload.edges) == 0:
        return np.zeros((n, m, m))
    src, dst, fwd = _edge_transfer_s(cluster, workload, mach)
    bwd = workload.activation_bytes[workload.edges[:, 0]] / cluster.bandwidth_bps[dst, src]
    if workload.moe is not None:  # the all-to-all, as edges of each MoE slot to its group
        a2a_src, a2a_dst, sent = moe.a2a_transfers(workload, mach)
        bw = cluster.bandwidth_bps
        src, dst = np.concatenate([src.reshape(n, -1), a2a_src], 1), np.concatenate([dst.reshape(n, -1), a2a_dst], 1)
        fwd = np.concatenate([fwd.reshape(n, -1), sent / bw[a2a_src, a2a_dst]], 1)
        bwd = np.concatenate([bwd.reshape(n, -1), sent / bw[a2a_dst, a2a_src]], 1)
    base = np.arange(n)[:, None, None] * (m * m)
    slots = np.concatenate([(base + src * m + dst).ravel(), (base + dst * m + src).ravel()])
    weights = np.concatenate([fwd.ravel(), bwd.ravel()])
    return np.bincount(slots, weights=weights, minlength=n * m * m).reshape(n, m, m)


def _pair_occupancy_s(cluster: Cluster, workload: Workload, mach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per placement, the unordered machine pairs of its transfers (sorted keys ``min * M + max``)
    and, at each key's last transfer, ``max(X_ab, X_ba)``: ``[N, D E]`` each, no ``[N, M, M]``.

    Both directions of a machine pair carry the same bytes (activations one way, their gradients
    the other), so ``X_ab = S_{ab} / beta_ab`` with ``S`` the bytes over the unordered pair, and
    ``max(X_ab, X_ba) = S_{ab} / min(beta_ab, beta_ba)``. Transfers are sorted by pair id and
    summed per pair with a running sum that restarts at each new pair (a pair's earlier
    positions hold partial sums, never more than its total).
    """
    n = len(mach)
    m = cluster.num_machines
    src, dst = mach[:, :, workload.edges[:, 0]], mach[:, :, workload.edges[:, 1]]
    keys = (np.minimum(src, dst) * m + np.maximum(src, dst)).reshape(n, -1).astype(np.int32)
    sent = np.broadcast_to(workload.activation_bytes[workload.edges[:, 0]], src.shape).reshape(n, -1)
    if workload.moe is not None:  # the all-to-all: same bytes both ways, like an edge
        a2a_src, a2a_dst, a2a_sent = moe.a2a_transfers(workload, mach)
        a2a_keys = (np.minimum(a2a_src, a2a_dst) * m + np.maximum(a2a_src, a2a_dst)).astype(np.int32)
        keys, sent = np.concatenate([keys, a2a_keys], 1), np.concatenate([sent, a2a_sent], 1)
    order = np.argsort(keys, axis=1)  # int32 keys: numpy's SIMD quicksort
    keys = np.take_along_axis(keys, order, axis=1)
    sent = np.take_along_axis(sent, order, axis=1)
    csum = np.cumsum(sent, axis=1)
    starts = np.ones(keys.shape, dtype=bool)
    starts[:, 1:] = keys[:, 1:] != keys[:, :-1]
    pos = np.where(starts, np.arange(keys.shape[1]), 0)
    np.maximum.accumulate(pos, axis=1, out=pos)
    pair_bytes = csum - np.take_along_axis(csum - sent, pos, axis=1)
    return keys, pair_bytes / cluster.pair_bandwidth_bps.ravel()[keys]


def _max_link_occupancy_s(cluster: Cluster, workload: Workload, mach: np.ndarray) -> np.ndarray:
    """``[N]`` ``max_ab X_ab`` without the dense ``[N, M, M]`` matrix (:func:`_pair_occupancy_s`)."""
    if len(workload.edges) == 0:
        return np.zeros(len(mach))
    return _pair_occupancy_s(cluster, workload, mach)[1].max(axis=1)


def _link_bottleneck(cluster: Cluster, workload: Workload, mach: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[N]`` ``max_ab X_ab`` and its link ``a * M + b``, as the dense matrix's ``max`` and
    ``argmax`` would give them (the pair's slower direction; the lowest index on ties), without
    building it."""
    n = len(mach)
    if len(workload.edges) == 0:
        return np.zeros(n), np.zeros(n, dtype=np.int64)
    m = cluster.num_machines
    keys, occupancy = _pair_occupancy_s(cluster, workload, mach)
    low, high = np.divmod(keys.astype(np.int64), m)
    bw = cluster.bandwidth_bps
    directed = np.where(bw[low, high] <= bw[high, low], low * m + high, high * m + low)
    top = occupancy.max(axis=1)
    index = np.where(occupancy == top[:, None], directed, np.iinfo(np.int64).max).min(axis=1)
    return top, index


def first_micro_batch_s(cluster: Cluster, workload: Workload, mach: np.ndarray) -> np.ndarray:
    """``[N, D]`` forward + backward latency ``P_r`` of one micro-batch of each replica."""
    return latency_paths_s(cluster, workload, mach, slots=False).first_s


class LatencyPaths(NamedTuple):
    """One micro-batch's longest paths through the placed DAG (no queueing), per slot.

    Attributes:
        first_s: ``[N, D]`` ``P_r``, forward + backward latency of one micro-batch.
        head_s: ``[N, D, L]`` earliest start of the slot's forward (the longest path to it).
        tail_s: ``[N, D, L]`` what must follow the end of the slot's backward: the longest
            backward path from it to the replica's first layers, transfers included.
    """

    first_s: np.ndarray
    head_s: np.ndarray
    tail_s: np.ndarray


def latency_paths_s(
    cluster: Cluster, workload: Workload, mach: np.ndarray, slots: bool = True, wait: np.ndarray | None = None
) -> LatencyPaths:
    """``P_r`` and every slot's head and tail (:class:`LatencyPaths`; with ``slots=False``
    ``P_r`` only, heads and tails left zero), node weights ``f_l / F_m`` forward and
    ``(2 f_l + g_l) / F_m`` backward (plus tensor-parallel all-reduces and MoE waits), edge
    weights ``alpha_ab + a_u / beta_ab`` (``wait``: :func:`moe_wait_s`'s, computed when not
    given)."""
    if wait is None:
        wait = moe_wait_s(cluster, workload, mach)
    if len(mach) == 1 and not parallelism.intra_active(workload):
        # One placement (the env's episode end): Python floats beat the ~6 numpy calls per
        # edge on [1, D] arrays, 12x on a 26-layer chain; same operations in the same order.
        first, head, tail = _latency_paths_one(cluster, workload, mach[0], wait, slots)
        return LatencyPaths(np.array([first]), np.array([head]), np.array([tail]))
    lat, bw, act = cluster.latency_s, cluster.bandwidth_bps, workload.activation_bytes
    if parallelism.intra_active(workload):  # node weights with tensor-parallel all-reduces
        table, layers = parallelism.layer_seconds(cluster, workload), np.arange(workload.num_layers)
        fwd_s, back_s = table.forward_s[mach, layers], table.backward_s[mach, layers]
    else:
        fwd_s = workload.flops / cluster.flops[mach]  # [N, D, L]
        back_s = backward_flops(workload) / cluster.flops[mach]
    if wait is not None:  # each MoE slot waits for its all-to-all in both passes
        fwd_s, back_s = fwd_s + wait, back_s + wait
    n_layers = workload.num_layers
    n, d = mach.shape[:2]
    head = np.zeros((n, d, n_layers))
    finish = [np.empty(0)] * n_layers
    for v in range(n_layers):
        ready = 0.0
        for u in workload.predecessors[v]:
            a, b = mach[:, :, u], mach[:, :, v]
            ready = np.maximum(ready, finish[u] + lat[a, b] + act[u] / bw[a, b])
        head[:, :, v] = ready
        finish[v] = ready + fwd_s[:, :, v]
    sinks = [v for v in range(n_layers) if not workload.successors[v]]
    loss = np.max([finish[v] for v in sinks], axis=0)
    back = [np.empty(0)] * n_layers
    for u in reversed(range(n_layers)):
        ready = loss if not workload.successors[u] else 0.0
        for v in workload.successors[u]:
            a, b = mach[:, :, u], mach[:, :, v]
            ready = np.maximum(ready, back[v] + lat[b, a] + act[u] / bw[b, a])
        back[u] = ready + back_s[:, :, u]
    tail = np.zeros((n, d, n_layers))
    for u in range(n_layers if slots else 0):
        for p in workload.predecessors[u]:
            a, b = mach[:, :, u], mach[:, :, p]
            tail[:, :, u] = np.maximum(tail[:, :, u], tail[:, :, p] + back_s[:, :, p] + lat[a, b] + act[p] / bw[a, b])
    return LatencyPaths(np.max(back, axis=0), head, tail)


def machine_bound_s(workload: Workload, compute_s: np.ndarray, mach: np.ndarray, paths: LatencyPaths) -> np.ndarray:
    """``[N]`` ``max_x (min head_x + m C_x + min tail_x)``: no schedule ends sooner.

    Machine ``x`` runs one task at a time, ``m C_x`` seconds of them in all; its first task
    cannot start before the earliest head of its slots and its last (a backward) leaves at
    least the shortest tail of its slots to do. The textbook ``P + (m - 1) B`` treats the
    replicas of a machine as one micro-batch of ``C_x`` seconds whose fill is one replica's
    ``P``; when replicas share a pipeline (the planner's plans on few machines) the fill and
    drain of the bottleneck machine are those of a single replica slot while it works
    through ``D m`` of them, which this bound sees (the list-scheduling lower bound,
    Graham 1969; the simulator's schedule can only be longer). For one replica on a chain of
    stages it never exceeds ``P + (m - 1) B`` (``head + C_x + tail <= P``), so it changes
    nothing there.
    """
    n, m = compute_s.shape
    keys = (np.arange(n)[:, None, None] * m + mach).ravel()
    head = np.full(n * m, np.inf)
    tail = np.full(n * m, np.inf)
    np.minimum.at(head, keys, paths.head_s.ravel())
    np.minimum.at(tail, keys, paths.tail_s.ravel())
    used = np.isfinite(head)
    bound = np.where(used, head + workload.num_micro_batches * compute_s.ravel() + tail, 0.0)
    return bound.reshape(n, m).max(axis=1)


def moe_stages(
    cluster: Cluster, mach: np.ndarray, compute_s: np.ndarray, bottleneck_s: np.ndarray, wait: np.ndarray | None
) -> np.ndarray:
    """``[N]`` placements :func:`stage_pipeline_s` applies to: disjoint pipelines (every machine
    holds one contiguous run of one replica's layers), a machine the bottleneck, some slot
    waiting for an all-to-all (all False for dense models: ``wait`` is ``None``)."""
    n = len(mach)
    if wait is None:
        return np.zeros(n, dtype=bool)
    applies = wait.reshape(n, -1).any(axis=1) & (compute_s.max(axis=1) >= bottleneck_s)
    if not applies.any():
        return applies
    srt = np.sort(mach, axis=2)
    depth = 1 + np.count_nonzero(srt[:, :, 1:] != srt[:, :, :-1], axis=2)
    runs = 1 + np.count_nonzero(mach[:, :, 1:] != mach[:, :, :-1], axis=2)
    one = moe.serves_one_replica(mach, cluster.num_machines).all(axis=1)
    return applies & one & np.all(runs == depth, axis=1)


def stage_pipeline_s(
    cluster: Cluster,
    workload: Workload,
    mach: np.ndarray,
    compute_s: np.ndarray,
    paths: LatencyPaths,
    wait: np.ndarray,
    stash: np.ndarray,
    applies: np.ndarray,
) -> np.ndarray:
    """``[N]`` ``max_x [h_x + m C_x + t_x + max(0, R_x - (k_r - 1) f_x)]`` where ``applies``
    (:func:`moe_stages`: MoE placements that are disjoint pipelines, a machine the bottleneck);
    ``inf`` elsewhere (the textbook term stays).

    Stage ``x`` of replica ``r`` starts at ``h_x`` (the longest path to it), does ``m C_x``
    seconds of work and leaves ``t_x`` (the backward path from it to the replica's first layer)
    after its last backward; micro-batch 0's backward reaches it ``R_x = P_r - h_x - C_x - t_x``
    (its downstream round trip) after its forward, a wait the forwards of the next ``k_r - 1``
    micro-batches fill (``k_r``: the 1F1B window or ``m``; ``f_x``: its forward seconds, waits
    included). The textbook ``P + (m - 1) B`` charges the whole ``R_x`` of the bottleneck as
    idle; with the all-to-all waits in them a stage's forwards are long enough to cover it (the
    simulator's MoE pipelines: their bottleneck works without a gap from ``h_x`` on, and the
    textbook was 16-20% over). Dense models keep the textbook (its figures are the shipped
    references'), as do MoE placements without an all-to-all.
    """
    n, d, n_layers = mach.shape
    m, nmb = cluster.num_machines, workload.num_micro_batches
    if parallelism.intra_active(workload):
        forward = parallelism.layer_seconds(cluster, workload).forward_s[mach, np.arange(n_layers)] + wait
    else:
        forward = workload.flops / cluster.flops[mach] + wait
    keys = (np.arange(n)[:, None, None] * m + mach).ravel()
    head, tail = np.full(n * m, np.inf), np.full(n * m, np.inf)
    np.minimum.at(head, keys, paths.head_s.ravel())
    np.minimum.at(tail, keys, paths.tail_s.ravel())
    replica = np.zeros(n * m, dtype=np.int64)  # the one replica of each used machine
    np.maximum.at(replica, keys, np.broadcast_to(np.arange(d)[None, :, None], mach.shape).ravel())
    replica = replica.reshape(n, m)
    fwd = np.bincount(keys, weights=forward.ravel(), minlength=n * m).reshape(n, m)
    head, tail = head.reshape(n, m), tail.reshape(n, m)
    rows = np.arange(n)[:, None]
    round_trip = paths.first_s[rows, replica] - head - compute_s - tail
    window = np.minimum(stash[rows, replica], nmb)
    stall = np.maximum(round_trip - (window - 1) * fwd, 0.0)
    per_machine = np.where(np.isfinite(head), head + nmb * compute_s + tail + stall, -np.inf)
    return np.where(applies, per_machine.max(axis=1), np.inf)


def pipeline_time_s(
    workload: Workload,
    first_s: np.ndarray,
    bottleneck_s: np.ndarray,
    stash: np.ndarray,
    stages_s: np.ndarray | None = None,
) -> np.ndarray:
    """``[N]`` pipeline time ``T_pp`` from ``P_r`` ``[N, D]``, ``B`` ``[N]`` and stash counts ``k_r``.

    ``T_pp = max(max(P, B) + (m - 1) B, max_r [(q_r + 1) P_r + rem_r B])`` with
    ``(q_r, rem_r) = divmod(m - 1, k_r)``: the second term is the 1F1B window. With only ``k_r``
    micro-batches in flight, micro-batch ``k_r`` cannot start before the first one's backward
    has come back, so every ``k_r`` micro-batches pay a whole round trip ``P_r``. It binds only
    where ``k_r < m`` (never for GPipe). ``stages_s`` (``[N]``, :func:`stage_pipeline_s`, ``inf``
    where it does not apply) replaces the textbook term where it is shorter.
    """
    nmb = workload.num_micro_batches
    first = first_s.max(axis=1)
    textbook = np.maximum(first, bottleneck_s) + (nmb - 1) * bottleneck_s
    if stages_s is not None:
        textbook = np.minimum(textbook, stages_s)
    q, rem = np.divmod(nmb - 1, stash)
    window = np.where(stash < nmb, (q + 1) * first_s + rem * bottleneck_s[:, None], 0.0)
    return np.maximum(textbook, window.max(axis=1))


def _first_micro_batch_one(
    cluster: Cluster, workload: Workload, mach: np.ndarray, wait: np.ndarray | None = None
) -> list[float]:
    """``P_r`` per replica of one placement ``[D, L]``: :func:`first_micro_batch_s` in floats
    (``wait``: ``[1, D, L]`` all-to-all seconds of MoE slots, added to both passes)."""
    return _latency_paths_one(cluster, workload, mach, wait, slots=False)[0]


def _latency_paths_one(
    cluster: Cluster, workload: Workload, mach: np.ndarray, wait: np.ndarray | None = None, slots: bool = True
) -> tuple[list[float], list[list[float]], list[list[float]]]:
    """:func:`latency_paths_s` of one placement ``[D, L]`` in floats: ``P_r`` per replica and
    per replica the heads and tails of its slots."""
    lat, bw = cluster.latency_s.item, cluster.bandwidth_bps.item
    act, flops, speed = workload.activation_bytes.tolist(), workload.flops.tolist(), cluster.flops.tolist()
    back_flops = backward_flops(workload).tolist()
    preds, succs, n_layers = workload.predecessors, workload.successors, workload.num_layers
    sinks = [v for v in range(n_layers) if not succs[v]]
    per_replica, heads, tails = [], [], []
    for r, row in enumerate(mach.tolist()):
        fwd = [flops[v] / speed[row[v]] for v in range(n_layers)]
        bwd = [back_flops[u] / speed[row[u]] for u in range(n_layers)]
        if wait is not None:
            extra = wait[0, r].tolist()
            fwd = [x + y for x, y in zip(fwd, extra, strict=True)]
            bwd = [x + y for x, y in zip(bwd, extra, strict=True)]
        finish = [0.0] * n_layers
        head = [0.0] * n_layers
        for v in range(n_layers):
            ready = 0.0
            for u in preds[v]:
                a, b = row[u], row[v]
                ready = max(ready, finish[u] + lat(a, b) + act[u] / bw(a, b))
            head[v] = ready
            finish[v] = ready + fwd[v]
        loss = max(finish[v] for v in sinks)
        back = [0.0] * n_layers
        for u in reversed(range(n_layers)):
            ready = loss if not succs[u] else 0.0
            for v in succs[u]:
                a, b = row[u], row[v]
                ready = max(ready, back[v] + lat(b, a) + act[u] / bw(b, a))
            back[u] = ready + bwd[u]
        tail = [0.0] * n_layers
        for u in range(n_layers if slots else 0):
            for p in preds[u]:
                a, b = row[u], row[p]
                tail[u] = max(tail[u], tail[p] + bwd[p] + lat(a, b) + act[p] / bw(a, b))
        per_replica.append(max(back))
        heads.append(head)
        tails.append(tail)
    return per_replica, heads, tails


def ring_allreduce_s(cluster: Cluster, rings: Rings) -> np.ndarray:
    """``[N, L]`` all-reduce seconds of each leader's ring (0 elsewhere and for ``k = 1``).

    ``2 (k - 1) alpha_mean + 2 (k - 1) / k * G / beta_min`` over the links
    ``s_i -> s_{i+1 mod k}`` of the ring (see the module docstring for why the mean latency).
    """
    members, k = rings.members, rings.size
    d = members.shape[1]
    pos = np.arange(d)[None, :, None]
    valid = pos < k[:, None]
    ring = np.where(valid, members, 0)
    nxt = np.take_along_axis(ring, np.where(pos + 1 < k[:, None], pos + 1, 0), axis=1)
    alpha = np.where(valid, cluster.latency_s[ring, nxt], 0.0).sum(axis=1) / np.maximum(k, 1)
    beta = np.where(valid & (ring != nxt), cluster.bandwidth_bps[ring, nxt], np.inf).min(axis=1)
    busy = 2.0 * (k - 1) * alpha + ring_link_bytes(rings.group_bytes, k) / beta
    return np.where((k > 1) & rings.leader, busy, 0.0)


def dp_sync_s(
    cluster: Cluster, workload: Workload, mach: np.ndarray, pipeline_s: np.ndarray | None = None
) -> np.ndarray:
    """``[N]`` data-parallel sync time ``T_dp``.

    Rings run in order of their first layer; each starts once all its machines are free (a
    machine does its rings one after the other) and ``T_dp`` is when the last one ends. This is
    at least ``max_m`` of the sum of a machine's ring times: rings that share machines pairwise
    can serialise end to end in a chain.

    With plan settings (:mod:`hulk_env.parallelism`): each machine first all-reduces among its
    GPU groups; ZeRO-3 lengthens the rings; DiLoCo runs them every ``inner_steps`` steps with
    pseudo-gradients of ``outer_bits`` (``pipeline_s``, ``[N]``, the inner step's pipeline, is
    what streaming overlaps with; computed when not given).
    """
    n, d, n_layers = mach.shape
    plan = parallelism.plan_active(workload)
    if d == 1 and not plan:
        return np.zeros(n)
    out = np.empty(n)
    for start in range(0, n, _CHUNK):
        chunk = mach[start : start + _CHUNK]
        if plan:
            out[start : start + _CHUNK] = _plan_sync_s(cluster, workload, chunk, pipeline_s, start)
            continue
        ring_s = ring_allreduce_s(cluster, dp_rings(workload, chunk))
        free_at = np.zeros((len(chunk), cluster.num_machines))
        for layer in np.flatnonzero(ring_s.any(axis=0)):
            members = chunk[:, :, layer]  # a repeated machine is harmless here
            busy_until = np.take_along_axis(free_at, members, axis=1)
            end = busy_until.max(axis=1) + ring_s[:, layer]
            active = (ring_s[:, layer] > 0)[:, None]
            np.put_along_axis(free_at, members, np.where(active, end[:, None], busy_until), axis=1)
        out[start : start + _CHUNK] = free_at.max(axis=1)
    return out


def _rings_end_s(cluster: Cluster, workload: Workload, chunk: np.ndarray, free_at: np.ndarray, factor: float) -> np.ndarray:
    """``[N]`` when the last data-parallel ring ends, machines free from ``free_at`` (``[N, M]``,
    updated), ring times times ``factor``, ring bytes times the plan's bytes factor."""
    rings = dp_rings(workload, chunk)
    rings = rings._replace(group_bytes=rings.group_bytes * parallelism.ring_bytes_factor(workload))
    ring_s = ring_allreduce_s(cluster, rings) * factor
    for layer in np.flatnonzero(ring_s.any(axis=0)):
        members = chunk[:, :, layer]
        busy_until = np.take_along_axis(free_at, members, axis=1)
        end = busy_until.max(axis=1) + ring_s[:, layer]
        active = (ring_s[:, layer] > 0)[:, None]
        np.put_along_axis(free_at, members, np.where(active, end[:, None], busy_until), axis=1)
    return free_at.max(axis=1)


def _plan_sync_s(
    cluster: Cluster, workload: Workload, chunk: np.ndarray, pipeline_s: np.ndarray | None, start: int
) -> np.ndarray:
    """``T_dp`` of a chunk under plan settings (:mod:`hulk_env.parallelism`): intra-machine
    sync, then the rings (every step), or the amortised DiLoCo outer exchange."""
    intra = parallelism.intra_sync_s(cluster, workload, chunk)
    if workload.sync != "diloco":
        return _rings_end_s(cluster, workload, chunk, intra.copy(), parallelism.ring_time_factor(workload))
    inner_sync = intra.max(axis=1)
    outer = _rings_end_s(cluster, workload, chunk, np.zeros_like(intra), 1.0)
    if pipeline_s is None:
        pipe = _iteration_times(cluster, workload.with_training(sync="every-step"), chunk, pipeline_only=True)
    else:
        pipe = np.asarray(pipeline_s)[start : start + len(chunk)]
    return inner_sync + parallelism.amortised_outer_s(workload, outer, pipe + inner_sync)


def stash_micro_batches(workload: Workload, mach: np.ndarray) -> np.ndarray:
    """``[N, D]`` micro-batches of activations each replica stashes (GPipe: all; 1F1B: depth)."""
    n, d, _ = mach.shape
    if workload.schedule == "gpipe":
        return np.full((n, d), workload.num_micro_batches)
    srt = np.sort(mach, axis=2)
    depth = 1 + np.count_nonzero(srt[:, :, 1:] != srt[:, :, :-1], axis=2)
    return np.minimum(workload.num_micro_batches, depth)


def memory_use_bytes(
    cluster: Cluster, workload: Workload, mach: np.ndarray, placed: np.ndarray | None = None
) -> np.ndarray:
    """``[N, M]`` bytes used on each machine: model state plus stashed activations.

    ``placed`` (``[N, D, L]`` bool, optional) counts only those slots (see
    :func:`placed_memory_bytes`).
    """
    n, d, n_layers = mach.shape
    m = cluster.num_machines
    stash = stash_micro_batches(workload, mach)[:, :, None] * workload.stash_bytes
    if parallelism.plan_active(workload):  # sharded state, stash of the busiest GPU group
        share = parallelism.group_share(cluster, workload)[mach]
        need = parallelism.slot_state_bytes(cluster, workload)[mach, np.arange(n_layers)] + stash * share
    else:
        need = workload.state_bytes_per_param * moe.dense_params(workload) + stash  # [N, D, L]
    if placed is not None:
        need = need * placed
    slots = (np.arange(n)[:, None, None] * m + mach).ravel()
    used = np.bincount(slots, weights=need.ravel(), minlength=n * m).reshape(n, m)
    if workload.moe is not None:  # the routed experts, once per machine of each group
        used = used + moe.expert_memory_bytes(workload, mach, m, placed)
    return used


def placed_memory_bytes(cluster: Cluster, workload: Workload, placement: np.ndarray) -> np.ndarray:
    """``[M]`` bytes used by a partial placement ``[D, L]`` (``-1`` for unplaced slots).

    :func:`memory_use_bytes` over the placed slots, each replica stashing for the machines it
    holds so far (what the env's action mask tracks); a complete placement gives the same.
    """
    p = np.asarray(placement, dtype=np.int64).reshape(workload.data_parallel, workload.num_layers)
    placed = p >= 0
    # Unplaced slots borrow a machine of their own replica (its depth stays) and weigh nothing.
    filled = np.where(placed, p, np.maximum(p.max(axis=1, keepdims=True), 0))
    return memory_use_bytes(cluster, workload, filled[None], placed[None])[0]


def _iteration_times(
    cluster: Cluster, workload: Workload, mach: np.ndarray, pipeline_only: bool = False
) -> np.ndarray:
    """``[N]`` iteration times of validated placements (no dense link matrix); ``T_pp`` alone
    with ``pipeline_only``."""
    max_link = _max_link_occupancy_s(cluster, workload, mach)
    wait = moe_wait_s(cluster, workload, mach, max_link)  # None for dense models
    compute = machine_compute_s(cluster, workload, mach, wait)
    bottleneck = np.maximum(compute.max(axis=1), max_link)
    plan = parallelism.plan_active(workload)
    stages = moe_stages(cluster, mach, compute, bottleneck, wait)
    paths = latency_paths_s(cluster, workload, mach, slots=plan or stages.any(), wait=wait)
    stash = stash_micro_batches(workload, mach)
    busy = stage_pipeline_s(cluster, workload, mach, compute, paths, wait, stash, stages) if stages.any() else None
    pipeline = pipeline_time_s(workload, paths.first_s, bottleneck, stash, busy)
    if plan:
        pipeline = np.maximum(pipeline, machine_bound_s(workload, compute, mach, paths))
    if pipeline_only:
        return pipeline
    return pipeline + dp_sync_s(cluster, workload, mach, pipeline_s=pipeline)
