"""Discrete-event simulation of one training iteration: the ground truth for :mod:`hulk_env.cost`.

The simulator replays the pipeline schedule task by task, with per-machine compute queues and
per-directed-link transfer queues, then the data-parallel ring all-reduces, and returns the
iteration time with the timeline of every task (for Gantt charts). It shares every convention of
the analytic model; only the schedule is replayed instead of summarised.

Semantics (``machine[D, L]`` placement, ``m`` micro-batches, SI units):

====================  ===========================================================================
Compute tasks         ``F(r, j, l)``: forward of micro-batch ``j`` of replica ``r`` through layer
                      ``l`` on ``machine[r, l]``, ``f_l / F_m`` seconds; ``B(r, j, l)`` backward,
                      ``(2 f_l + g_l) / F_m`` (``g_l``: forward FLOPs activation recomputation
                      reruns). A machine runs one task at a time (replicas and layers on
                      one machine share its FLOP/s by queueing); a task is never preempted.
Dependencies          ``F(r, j, v)`` needs ``F(r, j, u)`` for every edge ``u -> v``; the backward
                      of a sink needs the forward of every sink of the micro-batch (the loss,
                      no transfer); ``B(r, j, u)`` needs ``B(r, j, v)`` for every successor.
Transfers             a cross-machine edge ``u -> v`` sends ``activation_bytes[u]`` from
                      ``a = machine[r, u]`` to ``b = machine[r, v]`` after ``F(r, j, u)``, and
                      the gradient (same bytes) from ``b`` to ``a`` after ``B(r, j, v)``; one
                      transfer per edge, as in the analytic model. Each directed link is a FIFO
                      queue: a transfer occupies it for ``bytes / bandwidth_bps[a, b]`` and
                      arrives ``latency_s[a, b]`` after its transmission ends (latency delays,
                      it does not occupy). Same-machine edges are free and instantaneous.
Schedule ``gpipe``    forward priority: a free machine starts a ready forward before any ready
                      backward (work-conserving: a backward runs when no forward is ready).
Schedule ``1f1b``     one forward, one backward: per machine and replica at most
                      ``k_r = min(m, S_r)`` micro-batches in flight (a forward started there,
                      its backward there not finished), ``S_r`` = distinct machines of replica
                      ``r`` (its pipeline depth). This ``k_r`` is exactly the stash count of the
                      memory model (:func:`hulk_env.cost.stash_micro_batches`), so a simulated
                      schedule never stashes more than the memory check allowed. Micro-batches
                      are admitted on a machine in order ``0, 1, ...``: the in-flight set stays
                      a window of consecutive micro-batches, which rules out deadlock. When
                      both an admissible forward and a backward are ready, a machine finishes
                      its current *unit* (the layers of one micro-batch, one kind, on this
                      machine) and otherwise switches kind; backward first when it has no
                      history. This is Megatron's 1F1B (warm-up forwards until the window is
                      full, then alternate, then drain) generalised to any placement. Plain
                      "backward priority" is not used: a bottleneck first stage with several
                      backwards queued would run them all before the next forward and leave
                      the rest of the pipeline idle for a whole round trip.
Ties                  within a kind: replica, then micro-batch, then layer (ascending for
                      forwards, descending for backwards). Events at the same instant are all
                      applied before any free machine chooses its next task.
Data parallel         for each layer the distinct machines of ``machine[:, l]`` in replica order
                      (first occurrence kept) form a ring; layers with identical rings share one
                      all-reduce of ``G = sum params_l * grad_bytes_per_param``. A ring of ``k``
                      machines runs ``2 (k - 1)`` steps; in each step member ``i`` sends ``G / k``
                      bytes to member ``i + 1`` (mod ``k``) over the directed link, queued on it
                      like any transfer; member ``i`` starts step ``s + 1`` once step ``s``'s
                      chunk from member ``i - 1`` has arrived. A ring starts when every member
                      machine has finished all its compute (simplest correct rule, so no
                      gradient is reduced before it exists) and its earlier rings; a machine in
                      several rings runs them one after the other, rings ordered by their first
                      layer. A member is free for its next ring once its last send has left and
                      its last chunk has arrived.
MoE all-to-all        a layer with routed experts (``Workload.moe``) held by ``G > 1`` distinct
                      machines across the replicas exchanges tokens inside that group after
                      each of its compute tasks, forward and backward: for each of the layer's
                      ``c`` MoE blocks in turn, ``V / (c G)`` bytes go from the task's machine
                      ``a`` to every other member ``b`` (dispatch, queued on ``a -> b``), and
                      once they have arrived the same bytes come back over ``b -> a``
                      (combine); the task's outputs leave only after the last combine of the
                      last round has arrived. ``V`` is ``moe.a2a_bytes`` (tokens x ``top_k`` x
                      capacity factor x width x bytes). The machine stays busy until then (a
                      blocking collective: no other task starts on it meanwhile). The
                      group's routed-expert parameters are not in any ring (each expert lives on
                      one member; the replicas there share it).
====================  ===========================================================================

``pipeline_s`` is when the last compute task ends, ``iteration_time_s`` when the last all-reduce
chunk arrives (or ``pipeline_s`` without data parallelism), ``dp_sync_s`` their difference.

Plan settings (the analytic formulas are :mod:`hulk_env.parallelism`'s, which this
module does not import: it replays them on its own). ``tensor_parallel = t >= 1``: a machine of
``g`` GPUs runs ``d = g / gcd(t, g)`` groups of ``gcd(t, g)`` GPUs; a task lasts as long as its
busiest group's share of the micro-batch (``ceil(b / d)`` sequences at ``1 / d`` of the
machine's FLOP/s) plus the tensor-parallel all-reduce of that share's bytes, replayed as a ring
of ``gcd(t, g)`` GPUs over the machine's intra-node link (``2 (t - 1)`` steps of a ``1 / t``
chunk). After its last compute task a machine reduces its gradients among its groups (a ring of
``d`` GPUs, ``2 (d - 1)`` steps over its held gradient shard) before its data-parallel rings.
``zero = 3``: each ring runs ``(k - 1)`` reduce-scatter steps and ``2 m (k - 1)`` all-gather
steps (parameters gathered for every micro-batch's forward and backward). ``sync = diloco``:
the rings carry ``outer_bits / 8`` bytes per parameter and are replayed alone (all machines free
at 0), every ``inner_steps`` iterations; the result is the inner step plus that exchange divided
by ``inner_steps`` (streaming: only what exceeds ``inner_steps`` inner steps).
"""

from __future__ import annotations

import heapq
import math
from typing import NamedTuple

import numpy as np

from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.workload import Workload

BACKWARD_FLOPS_FACTOR = 2.0  # backward = 2 x forward FLOPs, as in hulk_env.cost


class Task(NamedTuple):
    """One interval of the timeline.

    Attributes:
        kind: ``"forward"``, ``"backward"``, ``"transfer"`` or ``"allreduce"``.
        resource: ``"machine 3"`` for compute, ``"link 3->5"`` for transfers and all-reduce
            chunks (the directed link they occupy).
        replica: the replica ``r``; for an all-reduce chunk, the sender's position in its ring.
        micro_batch: the micro-batch ``j``; for an all-reduce chunk, the step ``0 .. 2(k-1)-1``.
        layer: the layer computed; for a transfer, the layer ``u`` whose output (forward) or
            output gradient (backward) moves; for an all-reduce chunk, the ring id (the first
            layer of the ring's group).
        start_s: start of the computation or of the transmission, seconds.
        end_s: end of the computation or of the transmission (the link is free again).
        arrival_s: when a transfer or chunk reaches the receiver (``end_s`` + latency);
            ``end_s`` for compute.
        detail: a short label, e.g. ``"F 3->4"`` (activation of edge 3->4), ``"B 4->3"`` (its
            gradient), ``"ring 0 step 2/6"``; empty for compute.
    """

    kind: str
    resource: str
    replica: int
    micro_batch: int
    layer: int
    start_s: float
    end_s: float
    arrival_s: float
    detail: str = ""


class SimResult(NamedTuple):
    """The outcome of one simulated iteration.

    Attributes:
        iteration_time_s: end of the last task, seconds.
        pipeline_s: end of the last compute task (forward/backward), seconds.
        dp_sync_s: ``iteration_time_s - pipeline_s``: data-parallel sync after the pipeline.
        tasks: the timeline (compute tasks, transfers, all-reduce chunks) in start order;
            empty when ``simulate(..., record=False)``.
    """

    iteration_time_s: float
    pipeline_s: float
    dp_sync_s: float
    tasks: list[Task]


class Ring(NamedTuple):
    """One data-parallel all-reduce group.

    Attributes:
        first_layer: the lowest layer of the group; also the ring id.
        machines: the ring's members in replica order (first occurrence kept).
        layers: the layers whose gradients it reduces.
        grad_bytes: ``G``, bytes all-reduced.
    """

    first_layer: int
    machines: tuple[int, ...]
    layers: tuple[int, ...]
    grad_bytes: float


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------
def simulate(
    cluster: Cluster, workload: Workload, placement: np.ndarray, *, record: bool = True
) -> SimResult:
    """Simulate one training iteration of ``workload`` placed on ``cluster``.

    Args:
        cluster: machines and links.
        workload: layer DAG and training settings (``num_micro_batches``, ``data_parallel``,
            ``schedule``).
        placement: ``[D, L]`` integer machine index of each layer of each replica.
        record: keep the timeline in :attr:`SimResult.tasks` (switch off for speed when only
            the times are needed).

    Returns:
        The iteration time, its pipeline and data-parallel parts, and the timeline.

    Raises:
        HulkInputError: (a ``ValueError``) if ``placement`` has the wrong shape, is not integer,
            or names a machine outside ``0 .. M-1``.
    """
    mach = check_placement(cluster, workload, placement)
    tasks: list[Task] | None = [] if record else None
    finish, link_free = _simulate_pipeline(cluster, workload, mach, tasks)
    pipeline_s = max(finish.values())
    if workload.tensor_parallel == 0 and workload.zero == 0 and workload.sync == "every-step":
        end_s = _simulate_allreduce(cluster, allreduce_rings(workload, mach), finish, link_free, tasks)
    else:
        end_s = _simulate_plan_sync(cluster, workload, mach, finish, link_free, tasks)
    iteration_s = max(pipeline_s, end_s)
    if tasks is not None:
        tasks.sort(key=lambda t: (t.start_s, t.end_s))
    return SimResult(iteration_s, pipeline_s, iteration_s - pipeline_s, tasks or [])


def check_placement(cluster: Cluster, workload: Workload, placement: np.ndarray) -> np.ndarray:
    """Return ``placement`` as an int64 ``[D, L]`` array, or raise a clear ``ValueError``.

    Integer-valued floats are accepted; anything else that is not an integer index is not.
    """
    arr = np.asarray(placement)
    d, n_layers, m = workload.data_parallel, workload.num_layers, cluster.num_machines
    if arr.shape != (d, n_layers):
        raise HulkInputError(
            f"placement has shape {arr.shape}, expected ({d}, {n_layers}) "
            f"(data_parallel={d}, layers={n_layers})",
            field="placement",
        )
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise HulkInputError(
                f"placement must hold integer machine indices, got dtype {arr.dtype}",
                field="placement",
            )
    if arr.min() < 0 or arr.max() >= m:
        bad = int(arr.min() if arr.min() < 0 else arr.max())
        raise HulkInputError(
            f"placement refers to machine {bad}; valid indices are 0..{m - 1}", field="placement"
        )
    return arr.astype(np.int64)


def stash_limits(workload: Workload, mach: np.ndarray) -> list[int]:
    """Micro-batches each replica may have in flight per machine under 1F1B: ``min(m, S_r)``.

    ``S_r`` is the number of distinct machines of replica ``r``; this equals the memory model's
    1F1B stash count. GPipe has no limit (``m``).
    """
    m = workload.num_micro_batches
    if workload.schedule == "gpipe":
        return [m] * mach.shape[0]
    return [min(m, len(set(row.tolist()))) for row in mach]


def allreduce_rings(workload: Workload, mach: np.ndarray) -> list[Ring]:
    """The data-parallel all-reduce groups of a placement, ordered by first layer.

    Rings of a single machine (nothing to reduce) are left out.
    """
    per_param = workload.outer_bits / 8.0 if workload.sync == "diloco" else workload.grad_bytes_per_param
    params = workload.params if workload.moe is None else workload.params - workload.moe.expert_params
    grad = params * per_param
    groups: dict[tuple[int, ...], list[int]] = {}
    for layer, column in enumerate(mach.T.tolist()):
        ring = tuple(dict.fromkeys(column))
        groups.setdefault(ring, []).append(layer)
    return [
        Ring(layers[0], ring, tuple(layers), float(grad[layers].sum()))
        for ring, layers in groups.items()
        if len(ring) > 1
    ]


# --------------------------------------------------------------------------------------------
# The pipeline: event loop over compute tasks and link transfers
# --------------------------------------------------------------------------------------------
def _simulate_pipeline(
    cluster: Cluster, workload: Workload, mach: np.ndarray, tasks: list[Task] | None
) -> tuple[dict[int, float], dict[tuple[int, int], float]]:
    """Run the forward/backward schedule; return each machine's last compute end and link states.

    Task ids: ``((kind * D + r) * m + j) * L + layer`` with kind 0 = forward, 1 = backward.
    Heap events: ``(time, seq, code)`` with ``code = 2 * task`` (task finished) or
    ``2 * task + 1`` (one dependency of the task satisfied).
    """
    d, n_layers = mach.shape
    nmb = workload.num_micro_batches
    preds, succs = workload.predecessors, workload.successors
    sinks = [v for v in range(n_layers) if not succs[v]]
    lat = cluster.latency_s.tolist()
    bw = cluster.bandwidth_bps.tolist()
    act = workload.activation_bytes.tolist()
    speed = cluster.flops.tolist()
    flops = workload.flops.tolist()
    recompute = workload.recompute_flops.tolist()  # rerun in the backward (recomputation)
    rows = mach.tolist()
    is_1f1b = workload.schedule == "1f1b"

    # Machines actually used, renumbered 0..U-1 so per-machine state lives in short lists.
    used = sorted({x for row in rows for x in row})
    local = {x: i for i, x in enumerate(used)}
    n_used = len(used)
    loc_rows = [[local[x] for x in row] for row in rows]

    # Link state shared by every replica (and later by the all-reduce): FIFO, so only the time
    # the link becomes free matters.
    link_id: dict[tuple[int, int], int] = {}

    def link(a: int, b: int) -> int:
        return link_id.setdefault((a, b), len(link_id))

    # Per (r, layer): where its forward output / backward gradient goes.
    # Entry: (target layer, link index or -1, seconds on the wire, latency, a, b).
    fwd_out: list[list[tuple[int, int, float, float, int, int]]] = []
    bwd_out: list[list[tuple[int, int, float, float, int, int]]] = []
    for r in range(d):
        row = rows[r]
        for layer in range(n_layers):
            a = row[layer]
            fo = []
            for v in succs[layer]:
                b = row[v]
                if a == b:
                    fo.append((v, -1, 0.0, 0.0, a, b))
                else:
                    fo.append((v, link(a, b), act[layer] / bw[a][b], lat[a][b], a, b))
            fwd_out.append(fo)
            bo = []
            for u in preds[layer]:
                b = row[u]
                if a == b:
                    bo.append((u, -1, 0.0, 0.0, a, b))
                else:
                    bo.append((u, link(a, b), act[u] / bw[a][b], lat[a][b], a, b))
            bwd_out.append(bo)
    exchanges = _moe_exchanges(workload, rows, lat, bw, link)
    link_free = [0.0] * len(link_id)
    link_ends = {i: ab for ab, i in link_id.items()}

    # Per-task arrays, laid out by task id.
    per_mb = d * nmb * n_layers  # tasks of one kind
    n_tasks = 2 * per_mb
    task_mach: list[int] = []
    task_dur: list[float] = []
    deps: list[int] = []
    fdeps = [len(preds[layer]) for layer in range(n_layers)]
    n_sinks = len(sinks)
    bdeps = [len(succs[layer]) if succs[layer] else n_sinks for layer in range(n_layers)]
    groups = _gpu_groups(cluster, workload) if workload.tensor_parallel > 0 else None
    for kind in (0, 1):
        factor = 1.0 if kind == 0 else BACKWARD_FLOPS_FACTOR
        base_deps = fdeps if kind == 0 else bdeps
        for r in range(d):
            lrow = loc_rows[r]
            if groups is not None:
                durs = [
                    groups[rows[r][layer]].task_s(factor * flops[layer] + (recompute[layer] if kind else 0.0), layer)
                    for layer in range(n_layers)
                ]
            else:
                durs = [
                    (factor * flops[layer] + (recompute[layer] if kind else 0.0)) / speed[rows[r][layer]]
                    for layer in range(n_layers)
                ]
            for _ in range(nmb):
                task_mach.extend(lrow)
                task_dur.extend(durs)
                deps.extend(base_deps)

    # 1F1B admission state per (local machine, replica).
    limits = stash_limits(workload, mach)
    limited = is_1f1b  # GPipe has no in-flight limit
    next_admit = [0] * (n_used * d)
    done_mb = [0] * (n_used * d)
    layers_on = [0] * (n_used * d)
    for r in range(d):
        for x in loc_rows[r]:
            layers_on[x * d + r] += 1
    remaining_b = [
        layers_on[x * d + r] for x in range(n_used) for r in range(d) for _ in range(nmb)
    ]

    # Ready queues per machine, one per kind; keys order replica, micro-batch, then layer
    # (ascending for forwards, descending for backwards). Items: (key, task id).
    fready: list[list[tuple[int, int]]] = [[] for _ in range(n_used)]
    bready: list[list[tuple[int, int]]] = [[] for _ in range(n_used)]
    # The unit (kind, replica, micro-batch) of the last task each machine started: 1F1B
    # alternates units of the two kinds and finishes a unit before switching.
    # Unit ids: r * m + j for forwards, that plus D * m for backwards; -1 before the first task.
    units = d * nmb
    last_unit = [-1] * n_used
    busy = [False] * n_used
    finish = [0.0] * n_used
    events: list[tuple[float, int, int]] = []
    seq = 0
    completed = 0
    names = [f"machine {x}" for x in used]

    def pop_forward(x: int) -> tuple[int, int]:
        """Pop the best admissible ready forward on ``x``: ``(task, admission key or -1)``.

        The task is ``-1`` if none is admissible. A micro-batch's first forward on a machine
        needs admission (1F1B): the caller commits it with :func:`admit` if it runs the task.
        """
        queue = fready[x]
        if not limited:
            return (heapq.heappop(queue)[1] if queue else -1), -1
        skipped = []
        chosen, admit_key = -1, -1
        while queue:
            item = heapq.heappop(queue)
            tid = item[1]
            r, j = divmod(tid // n_layers, nmb)
            key = x * d + r
            admitted = next_admit[key]
            if j < admitted:
                chosen = tid
                break
            if j == admitted and admitted - done_mb[key] < limits[r]:
                chosen, admit_key = tid, key
                break
            skipped.append(item)
        for item in skipped:
            heapq.heappush(queue, item)
        return chosen, admit_key

    def start_next(x: int, now: float) -> None:
        """Start the task the schedule picks on free machine ``x``, if one is ready."""
        nonlocal seq
        bqueue = bready[x]
        fwd, admit_key = pop_forward(x)
        bwd = bqueue[0][1] if bqueue else -1
        if fwd >= 0 and bwd >= 0:
            if not is_1f1b:
                take_forward = True  # GPipe: forward priority
            else:
                # 1F1B: finish the current unit (a micro-batch's layers of one kind on this
                # machine), otherwise switch kind: one forward, one backward. Backward first
                # when the machine has no history.
                unit = last_unit[x]
                fwd_unit = fwd // n_layers
                bwd_unit = (bwd - per_mb) // n_layers + units
                if unit == fwd_unit:
                    take_forward = True
                elif unit == bwd_unit or unit < 0:
                    take_forward = False
                else:
                    take_forward = unit >= units  # the last unit was a backward
        else:
            take_forward = fwd >= 0
        if take_forward:
            chosen = fwd
            if admit_key >= 0:
                next_admit[admit_key] += 1
        else:
            if fwd >= 0:
                heapq.heappush(fready[x], (fwd, fwd))
            if bwd < 0:
                return
            chosen = heapq.heappop(bqueue)[1]
        end = now + task_dur[chosen]
        busy[x] = True
        seq += 1
        heapq.heappush(events, (end, seq, 2 * chosen))
        kind = 0 if chosen < per_mb else 1
        q, layer = divmod(chosen - kind * per_mb, n_layers)
        last_unit[x] = q + kind * units
        if tasks is not None:
            r, j = divmod(q, nmb)
            tasks.append(Task(("forward", "backward")[kind], names[x], r, j, layer, now, end, end))

    def satisfy(tid: int, dirty: list[int]) -> None:
        deps[tid] -= 1
        if deps[tid] == 0:
            x = task_mach[tid]
            if tid < per_mb:
                heapq.heappush(fready[x], (tid, tid))
            else:
                rest = tid - per_mb
                layer = rest % n_layers
                heapq.heappush(bready[x], (rest - 2 * layer, tid))
            dirty.append(x)

    def release(tid: int, now: float, dirty: list[int]) -> None:
        """Send the outputs of finished task ``tid`` (activations or gradients) on their way."""
        nonlocal seq
        if tid < per_mb:
            q, layer = divmod(tid, n_layers)
            r = q // nmb
            outs = fwd_out[r * n_layers + layer]
            target_base = tid - layer
            if not succs[layer]:
                for s in sinks:
                    satisfy(target_base + per_mb + s, dirty)
            label = "F"
        else:
            q, layer = divmod(tid - per_mb, n_layers)
            r = q // nmb
            outs = bwd_out[r * n_layers + layer]
            target_base = tid - layer
            label = "B"
        for target, li, wire_s, lat_s, a, b in outs:
            if li < 0:
                satisfy(target_base + target, dirty)
                continue
            start = link_free[li]
            if start < now:
                start = now
            end = start + wire_s
            link_free[li] = end
            arrive = end + lat_s
            seq += 1
            heapq.heappush(events, (arrive, seq, 2 * (target_base + target) + 1))
            if tasks is not None:
                j = (tid // n_layers) % nmb
                moved = layer if label == "F" else target
                tasks.append(
                    Task("transfer", f"link {a}->{b}", r, j, moved, start, end, arrive, f"{label} {layer}->{target}")
                )

    # MoE exchanges in flight: steps[i] = (task, round, member index or -1 for a combine's end).
    steps: list[tuple[int, int, int]] = []
    pending: dict[int, int] = {}

    def transmit(li: int, wire_s: float, lat_s: float, now: float, step: tuple[int, int, int], label: str) -> None:
        nonlocal seq
        start = max(link_free[li], now)
        end = start + wire_s
        link_free[li] = end
        steps.append(step)
        seq += 1
        heapq.heappush(events, (end + lat_s, seq, -len(steps)))
        if tasks is not None:
            tid = step[0]
            kind = 0 if tid < per_mb else 1
            q, layer = divmod(tid - kind * per_mb, n_layers)
            r, j = divmod(q, nmb)
            a, b = link_ends[li]
            tasks.append(Task("transfer", f"link {a}->{b}", r, j, layer, start, end, end + lat_s, label))

    def start_exchange(tid: int, plan: tuple, rnd: int, now: float) -> None:
        """Dispatch round ``rnd`` of task ``tid``'s tokens to every other member of its group."""
        members = plan[1]
        pending[tid] = len(members)
        kind = "F" if tid < per_mb else "B"
        for i, (_b, l_ab, w_ab, lat_ab, _l_ba, _w_ba, _lat_ba) in enumerate(members):
            transmit(l_ab, w_ab, lat_ab, now, (tid, rnd, i), f"{kind} a2a dispatch")

    def exchange_step(index: int, now: float, dirty: list[int]) -> None:
        """A dispatch arrived (send the combine back) or a combine arrived (count it)."""
        tid, rnd, member = steps[index]
        q = (tid if tid < per_mb else tid - per_mb) // n_layers
        layer = (tid if tid < per_mb else tid - per_mb) % n_layers
        plan = exchanges[(q // nmb, layer)]
        if member >= 0:
            _b, _l_ab, _w_ab, _lat_ab, l_ba, w_ba, lat_ba = plan[1][member]
            kind = "F" if tid < per_mb else "B"
            transmit(l_ba, w_ba, lat_ba, now, (tid, rnd, -1), f"{kind} a2a combine")
            return
        pending[tid] -= 1
        if pending[tid]:
            return
        if rnd + 1 < plan[0]:
            start_exchange(tid, plan, rnd + 1, now)
        else:
            x = task_mach[tid]
            busy[x] = False
            finish[x] = now
            dirty.append(x)
            release(tid, now, dirty)

    # Time zero: every forward of a source layer is ready.
    dirty0: list[int] = []
    for tid in range(per_mb):
        if deps[tid] == 0:
            deps[tid] = 1
            satisfy(tid, dirty0)
    for x in sorted(set(dirty0)):
        start_next(x, 0.0)

    while events:
        now = events[0][0]
        dirty: list[int] = []
        while events and events[0][0] == now:
            _, _, code = heapq.heappop(events)
            if code < 0:  # a step of an MoE exchange
                exchange_step(-code - 1, now, dirty)
                continue
            tid = code >> 1
            if code & 1:
                satisfy(tid, dirty)
                continue
            # Task `tid` finished at `now`.
            completed += 1
            x = task_mach[tid]
            layer = (tid if tid < per_mb else tid - per_mb) % n_layers
            r = (tid if tid < per_mb else tid - per_mb) // n_layers // nmb
            plan = exchanges.get((r, layer))
            if not plan:  # an MoE task keeps its machine until its exchange is over
                busy[x] = False
                finish[x] = now
                dirty.append(x)
            if tid >= per_mb:
                rest = tid - per_mb
                q, layer = divmod(rest, n_layers)
                r, j = divmod(q, nmb)
                key = (x * d + r) * nmb + j
                remaining_b[key] -= 1
                if remaining_b[key] == 0:
                    done_mb[x * d + r] += 1
            if plan:
                start_exchange(tid, plan, 0, now)
            else:
                release(tid, now, dirty)
        for x in dirty:
            if not busy[x]:
                start_next(x, now)

    if completed != n_tasks:  # pragma: no cover - the in-order admission rules this out
        raise RuntimeError(f"schedule deadlocked after {completed} of {n_tasks} tasks")
    by_machine = {used[i]: finish[i] for i in range(n_used)}
    links = {ab: link_free[i] for ab, i in link_id.items()}
    return by_machine, links


def _moe_exchanges(
    workload: Workload, rows: list[list[int]], lat: list[list[float]], bw: list[list[float]], link
) -> dict[tuple[int, int], tuple[int, list[tuple[int, int, float, float, int, float, float]]]]:
    """Per (replica, MoE layer) held by a group of ``G > 1`` machines: its rounds ``c`` and, per
    other member ``b``, ``(b, link a->b, dispatch s, latency, link b->a, combine s, latency)``
    for one round of ``V / (c G)`` bytes each way."""
    out: dict = {}
    if workload.moe is None:
        return out
    experts, volume, count = (workload.moe.num_experts.tolist(), workload.moe.a2a_bytes.tolist(),
                              workload.moe.a2a_count.tolist())  # fmt: skip
    for layer in range(workload.num_layers):
        if experts[layer] <= 0 or volume[layer] <= 0:
            continue
        group = list(dict.fromkeys(row[layer] for row in rows))
        if len(group) < 2:
            continue
        rounds = max(int(round(count[layer])), 1)
        chunk = volume[layer] / rounds / len(group)
        for r, row in enumerate(rows):
            a = row[layer]
            plan = [
                (b, link(a, b), chunk / bw[a][b], lat[a][b], link(b, a), chunk / bw[b][a], lat[b][a])
                for b in group
                if b != a
            ]
            out[(r, layer)] = (rounds, plan)
    return out


# --------------------------------------------------------------------------------------------
# Data parallel: ring all-reduces after the pipeline
# --------------------------------------------------------------------------------------------
def _simulate_allreduce(
    cluster: Cluster,
    rings: list[Ring],
    finish: dict[int, float],
    link_free: dict[tuple[int, int], float],
    tasks: list[Task] | None,
    gathers: int = 1,
) -> float:
    """Replay the ring all-reduces chunk by chunk; return when the last one ends (0 if none).

    Args:
        cluster: the links.
        rings: the all-reduce groups, in the order machines run them.
        finish: each machine's end of compute (a ring's members are free from then on).
        link_free: when each directed link is free again; updated in place.
        tasks: the timeline to append the chunks to, or ``None``.
        gathers: all-gather passes after the reduce-scatter (1: a plain all-reduce, ``2 (k -
            1)`` steps; ZeRO-3: ``2 m``, so ``(2 m + 1) (k - 1)`` steps).
    """
    lat = cluster.latency_s
    bw = cluster.bandwidth_bps
    avail = dict(finish)
    last = 0.0
    for ring in rings:
        members = ring.machines
        k = len(members)
        chunk = ring.grad_bytes / k
        hops = [(members[i], members[(i + 1) % k]) for i in range(k)]
        wire = [chunk / float(bw[a, b]) for a, b in hops]
        delay = [float(lat[a, b]) for a, b in hops]
        t0 = max(avail[x] for x in members)
        ready = [t0] * k  # when member i may send its next chunk
        sent = [t0] * k  # when member i's latest send left its link
        steps = (1 + gathers) * (k - 1)
        for step in range(steps):
            arrivals = [0.0] * k
            for i, (a, b) in enumerate(hops):
                start = max(ready[i], link_free.get((a, b), 0.0))
                end = start + wire[i]
                link_free[(a, b)] = end
                sent[i] = end
                arrivals[(i + 1) % k] = end + delay[i]
                if tasks is not None:
                    tasks.append(
                        Task(
                            "allreduce",
                            f"link {a}->{b}",
                            i,
                            step,
                            ring.first_layer,
                            start,
                            end,
                            end + delay[i],
                            f"ring {ring.first_layer} step {step}/{steps}",
                        )
                    )
            ready = arrivals
        for i, x in enumerate(members):
            avail[x] = max(sent[i], ready[i])
            last = max(last, avail[x])
    return last


class _GpuGroups(NamedTuple):
    """One machine seen GPU by GPU under a tensor-parallel plan (module docstring)."""

    group_flops: float  # FLOP/s of one group of tp GPUs
    share: float  # sequences of the micro-batch the busiest group computes / b
    tp: int
    groups: int
    link_bps: float
    tp_bytes: tuple[float, ...]  # per layer, all-reduced bytes of the whole micro-batch per pass

    def ring_s(self, nbytes: float, members: int) -> float:
        """A ring all-reduce of ``nbytes`` over ``members`` GPUs, step by step."""
        total = 0.0
        for _ in range(2 * (members - 1)):
            total += nbytes / members / self.link_bps
        return total

    def task_s(self, flops: float, layer: int) -> float:
        return flops * self.share / self.group_flops + self.ring_s(self.tp_bytes[layer] * self.share, self.tp)


def _gpu_groups(cluster: Cluster, workload: Workload) -> list[_GpuGroups]:
    b = workload.micro_batch_size
    out = []
    for x, mc in enumerate(cluster.machines):
        tp = math.gcd(workload.tensor_parallel, mc.num_gpus)
        groups = mc.num_gpus // tp
        share = math.ceil(b / groups) / b
        out.append(_GpuGroups(
            mc.flops / groups, share, tp, groups, float(cluster.intra_node_bandwidth_bps[x]),
            tuple(workload.tp_allreduce_bytes.tolist()),
        ))
    return out


def _simulate_plan_sync(
    cluster: Cluster,
    workload: Workload,
    mach: np.ndarray,
    finish: dict[int, float],
    link_free: dict[tuple[int, int], float],
    tasks: list[Task] | None,
) -> float:
    """End of the iteration under plan settings: intra-machine gradient rings, then the
    data-parallel rings (ZeRO-3's all-gathers included), or DiLoCo's amortised outer exchange."""
    zero3 = 2 * workload.num_micro_batches if workload.zero == 3 else 1
    ready = dict(finish)
    if workload.tensor_parallel > 0:
        groups = _gpu_groups(cluster, workload)
        held: dict[int, float] = {}
        for row in mach.tolist():
            for layer, x in enumerate(row):
                held[x] = held.get(x, 0.0) + float(workload.params[layer]) * workload.grad_bytes_per_param
        for x, grad in held.items():
            g = groups[x]
            ready[x] = finish[x] + g.ring_s(grad / g.tp, g.groups) * (1 + zero3) / 2
    inner_end = max(ready.values())
    rings = allreduce_rings(workload, mach)
    if workload.sync != "diloco":
        return max(inner_end, _simulate_allreduce(cluster, rings, ready, link_free, tasks, gathers=zero3))
    outer = _simulate_allreduce(cluster, rings, {x: 0.0 for x in finish}, {}, None)
    h = workload.inner_steps
    over = max(outer - h * inner_end, 0.0) if workload.streaming else outer
    return inner_end + over / h


# --------------------------------------------------------------------------------------------
# Validation of the analytic model against the simulator
# --------------------------------------------------------------------------------------------
PLACEMENT_STYLES = ("pipeline", "uneven", "perturbed", "scattered")
"""How :func:`random_placement` draws a placement:

- ``pipeline``: contiguous stages over a random chain of machines, the same cut points for
  every replica, replicas on disjoint machines when the cluster has enough (the common case);
- ``uneven``: contiguous stages, each replica with its own cut points, depth and machines
  (replicas may share machines);
- ``perturbed``: a ``pipeline`` placement with about 10% of the layers moved to another machine
  of their replica's chain (what a local search or a learning agent produces);
- ``scattered``: every layer on a random machine of a small random pool (2-6 machines).
"""
STYLE_WEIGHTS = (0.5, 0.2, 0.15, 0.15)
VALIDATION_CLUSTERS = ("paper-12city-47", "cloud-3region", "cloud-8region")
VALIDATION_MODELS = (
    "gpt3-350m",
    "gpt3-1.3b",
    "gpt3-2.7b",
    "gpt3-13b",
    "llama-7b",
    "bloom-176b",
    "t5-11b",
    "bert-large",
)
# Mixture-of-experts models for the same check (:func:`validation_cases` ``models=``).
MOE_VALIDATION_MODELS = ("mixtral-8x7b", "deepseek-moe-16b", "qwen1.5-moe-a2.7b")
MAX_PIPELINE_DEPTH = 8


class ValidationCase(NamedTuple):
    """One placement to evaluate with both models."""

    cluster: Cluster
    workload: Workload
    placement: np.ndarray
    style: str


class Comparison(NamedTuple):
    """Analytic vs simulated iteration times over a set of cases.

    Attributes:
        analytic_s: ``[N]`` :func:`hulk_env.cost.evaluate` iteration times.
        simulated_s: ``[N]`` :func:`simulate` iteration times.
        rel_error: ``[N]`` signed ``(analytic - simulated) / simulated``.
        median_rel_err: median of ``|rel_error|``.
        p95_rel_err: 95th percentile of ``|rel_error|``.
        styles: ``[N]`` placement style of each case.
        schedules: ``[N]`` schedule of each case.
    """

    analytic_s: np.ndarray
    simulated_s: np.ndarray
    rel_error: np.ndarray
    median_rel_err: float
    p95_rel_err: float
    styles: np.ndarray
    schedules: np.ndarray

    def summary(self) -> dict:
        """JSON-ready error statistics, overall and per style and schedule."""
        out: dict = {
            "cases": len(self.rel_error),
            "median_rel_err": self.median_rel_err,
            "p95_rel_err": self.p95_rel_err,
            "mean_signed_rel_err": float(self.rel_error.mean()),
        }
        for label, keys in (("by_style", self.styles), ("by_schedule", self.schedules)):
            groups = {}
            for key in dict.fromkeys(keys.tolist()):
                err = np.abs(self.rel_error[keys == key])
                groups[key] = {
                    "cases": len(err),
                    "median_rel_err": float(np.median(err)),
                    "p95_rel_err": float(np.percentile(err, 95)),
                }
            out[label] = groups
        return out


def random_placement(
    rng: np.random.Generator, num_machines: int, workload: Workload, style: str
) -> np.ndarray:
    """Draw a ``[D, L]`` placement of one of the :data:`PLACEMENT_STYLES` (memory ignored)."""
    d, n_layers = workload.data_parallel, workload.num_layers
    if style == "scattered":
        pool = rng.choice(
            num_machines, size=min(num_machines, int(rng.integers(2, 7))), replace=False
        )
        return rng.choice(pool, size=(d, n_layers)).astype(np.int64)
    if style not in PLACEMENT_STYLES:
        raise ValueError(f"unknown placement style {style!r}; choose one of {PLACEMENT_STYLES}")
    per_replica = max(1, num_machines // d)
    depth = int(rng.integers(1, min(MAX_PIPELINE_DEPTH, n_layers, per_replica) + 1))
    cuts = _random_cuts(rng, n_layers, depth)
    order = rng.permutation(num_machines)
    out = np.empty((d, n_layers), dtype=np.int64)
    for r in range(d):
        if style == "uneven":
            depth_r = int(rng.integers(1, min(MAX_PIPELINE_DEPTH, n_layers, num_machines) + 1))
            chain = rng.choice(num_machines, size=depth_r, replace=False)
            stage = _stage_of_layer(_random_cuts(rng, n_layers, depth_r), n_layers)
        else:
            chain = (
                order[r * depth : (r + 1) * depth]
                if depth * d <= num_machines
                else (rng.choice(num_machines, size=depth, replace=False))
            )
            stage = _stage_of_layer(cuts, n_layers)
        out[r] = chain[stage]
        if style == "perturbed" and len(chain) > 1:
            moved = rng.random(n_layers) < 0.1
            out[r, moved] = rng.choice(chain, size=int(moved.sum()))
    return out


def validation_cases(
    num_cases: int = 500, seed: int = 0, models_drawn: tuple[str, ...] = VALIDATION_MODELS
) -> list[ValidationCase]:
    """A seeded set of placements over built-in clusters and models (:mod:`hulk_env.cluster.builtin`,
    :mod:`hulk_env.workload.catalog`; ``models_drawn``: :data:`VALIDATION_MODELS`, or
    :data:`MOE_VALIDATION_MODELS` for the mixture-of-experts check).

    Both schedules (alternating), ``D`` drawn from ``{1, 2, 4}``, 8 micro-batches, styles drawn
    with :data:`STYLE_WEIGHTS`. Same seed, same cases.
    """
    from hulk_env.cluster import get_cluster  # the built-ins; only this helper needs them
    from hulk_env.workload import get_model

    rng = np.random.default_rng(seed)
    clusters = [get_cluster(name) for name in VALIDATION_CLUSTERS]
    models: dict[tuple[str, int, str], Workload] = {}
    cases = []
    for i in range(num_cases):
        cluster = clusters[int(rng.integers(len(clusters)))]
        name = models_drawn[int(rng.integers(len(models_drawn)))]
        d = int(rng.choice([1, 2, 4]))
        schedule = ("gpipe", "1f1b")[i % 2]
        key = (name, d, schedule)
        if key not in models:
            models[key] = get_model(
                name, data_parallel=d, schedule=schedule, num_micro_batches=8
            )
        style = PLACEMENT_STYLES[int(rng.choice(len(PLACEMENT_STYLES), p=STYLE_WEIGHTS))]
        placement = random_placement(rng, cluster.num_machines, models[key], style)
        cases.append(ValidationCase(cluster, models[key], placement, style))
    return cases


def analytic_vs_simulated(cases: list[ValidationCase]) -> Comparison:
    """Relative error of :func:`hulk_env.cost.evaluate` against :func:`simulate` on ``cases``."""
    from hulk_env.cost import evaluate  # cost.py documents its formulas against this module

    analytic = np.array(
        [float(evaluate(c.cluster, c.workload, c.placement).iteration_time_s) for c in cases]
    )
    simulated = np.array(
        [simulate(c.cluster, c.workload, c.placement, record=False).iteration_time_s for c in cases]
    )
    rel = (analytic - simulated) / simulated
    return Comparison(
        analytic_s=analytic,
        simulated_s=simulated,
        rel_error=rel,
        median_rel_err=float(np.median(np.abs(rel))),
        p95_rel_err=float(np.percentile(np.abs(rel), 95)),
        styles=np.array([c.style for c in cases]),
        schedules=np.array([c.workload.schedule for c in cases]),
    )


def _random_cuts(rng: np.random.Generator, n_layers: int, depth: int) -> np.ndarray:
    """``depth - 1`` sorted distinct cut points in ``1 .. L-1``."""
    if depth <= 1:
        return np.zeros(0, dtype=np.int64)
    return np.sort(rng.choice(np.arange(1, n_layers), size=depth - 1, replace=False))


def _stage_of_layer(cuts: np.ndarray, n_layers: int) -> np.ndarray:
    """``[L]`` stage index of each layer for contiguous stages split at ``cuts``."""
    return np.searchsorted(cuts, np.arange(n_layers), side="right")
