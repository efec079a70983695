"""Re-placement episodes, many at once: the dynamics of ``hulk/Replace-v0`` and of the agent.

An episode starts from a problem's old placement with the failed machines removed and assigns
machines to (replica, layer) slots one decision at a time, replica by replica in topological
layer order:

- scope ``"all"``: every slot is decided again; a slot may stay where it was (its state is
  there: nothing moves) or move, so the agent may move others to make room or speed up;
- scope ``"displaced"``: only the slots whose machine failed; the others stay.

``K`` episodes of one problem run in lockstep (same slot at each step), so a policy can sample
many rollouts with one numpy operation per step; the Gymnasium env is ``K = 1``.

Memory is the cost model's rule, kept exact step by step as in the placement env: a slot needs
its model state plus ``k_r`` stashed micro-batches, ``k_r = min(m, depth_r)`` for 1F1B (``m``
for GPipe), ``depth_r`` the distinct machines of replica ``r`` so far. A machine new to the
replica raises ``k_r`` for all its machines, so it is allowed only if they all still fit. Since
memory only grows as slots are added, every completed episode is memory-feasible.

Per-candidate features (:data:`FEATURES`, ``[K, M, F]``) describe, for the current slot
``(r, l)`` and each machine, what placing it there would do; :mod:`hulk_env.replacement.agent`
scores them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hulk_env import cost
from hulk_env.feasibility import stash_count
from hulk_env.replacement.migration import CHECKPOINT
from hulk_env.replacement.problem import ReplacementProblem
from hulk_env.units import MS

SCOPES = ("all", "displaced")
# The mask keeps every machine within (1 - MEMORY_RTOL) of its memory, so that summation order
# can never turn a masked-feasible placement infeasible under cost.memory_use_bytes.
MEMORY_RTOL = 1e-9
_CLIP = 3.0
FEATURE_MAX = _CLIP  # every feature lies in [0, FEATURE_MAX]

FEATURES = (
    "same_as_prev",  # 1: the machine of the slot's predecessor layer (same replica): no new stage
    "stay_remaining",  # same_as_prev x share of the replica's layers still to place after this one
    "same_as_next",  # 1: the machine of its successor, when that one is already placed
    "holds_state",  # 1: the machine already holds this layer's state (any replica): no copy
    "old_slot",  # 1: the slot's own machine before the failure
    "copy_log",  # log1p(seconds to copy the layer's state there / T_old) / 5
    "latency_prev_log",  # log10(1 + latency from the predecessor's machine / 1 ms) / 3
    "latency_next_log",  # the same to the successor's machine (0 when unplaced)
    "comm_prev",  # activation + gradient seconds per iteration from the predecessor / T_old
    "comm_next",  # the same to the successor, when it is already placed
    "speed",  # FLOP/s / the fastest surviving machine's
    "load_after",  # compute s per micro-batch on the machine with the slot / the aimed bottleneck
    "overload",  # max(0, load_after - 1)
    "new_to_replica",  # 1: the machine holds no slot of this replica yet (a deeper pipeline)
    "revisit",  # 1: it holds earlier layers of this replica but not the predecessor (a pipeline loop)
    "other_replicas",  # 1: it holds slots of other replicas (they would share its FLOP/s)
    "same_as_peer",  # 1: the machine of this layer in replica 0 (replicas sharing machines)
    "dp_latency_log",  # mean log latency to this layer's machines in the other replicas
    "dp_sync",  # seconds to all-reduce this layer's gradients with them, over the slowest link / T_old
    "free_after",  # free memory fraction left on the machine after placing the slot
)
NUM_FEATURES = len(FEATURES)
_COLUMN = {name: i for i, name in enumerate(FEATURES)}


@dataclass(frozen=True, eq=False)
class EpisodeSpec:
    """What does not change during episodes of one problem.

    Attributes:
        problem: the re-placement problem.
        scope: ``"all"`` or ``"displaced"``.
        order: ``[S, 2]`` the (replica, layer) slots to decide, in order.
        fixed: ``[D, L]`` machines of the slots that are not decided (``-1`` for decided ones).
        capacity_bytes: ``[M]`` memory the mask lets each machine fill (0 for failed machines).
        state_bytes, stash_bytes: ``[L]`` per layer.
        train_s: ``[L, M]`` training seconds per micro-batch of a layer on a machine
            (:func:`hulk_env.cost.train_flops`: forward, backward, recomputation).
        copy_s: ``[L, M]`` seconds to copy the layer's state to the machine (0 where held).
        held: ``[L, M]`` the machine holds the layer's state.
        prev, next_: ``[L]`` first predecessor / successor of each layer (``-1``: none).
        comm_bytes: ``[L]`` activation bytes from ``prev[l]`` to ``l`` per micro-batch.
        old_time_s: ``T_old``, the old placement's iteration time (before the failure).
        old_bottleneck_s: the stage compute to aim at (s per micro-batch): the old placement's
            busiest machine's, or more when the failure took the fast machines away.
        reference_total_s: ``max(H, 1) x T_old``: the horizon total had nothing failed (the
            reward's reference; one iteration when ``H = 0``).
        max_flops: the fastest surviving machine's FLOP/s.
    """

    problem: ReplacementProblem
    scope: str
    order: np.ndarray
    fixed: np.ndarray
    capacity_bytes: np.ndarray
    state_bytes: np.ndarray
    stash_bytes: np.ndarray
    train_s: np.ndarray
    copy_s: np.ndarray
    held: np.ndarray
    prev: np.ndarray
    next_: np.ndarray
    comm_bytes: np.ndarray
    old_time_s: float
    old_bottleneck_s: float
    reference_total_s: float
    max_flops: float

    @property
    def num_steps(self) -> int:
        return len(self.order)


def episode_spec(problem: ReplacementProblem, scope: str = "all") -> EpisodeSpec:
    """The :class:`EpisodeSpec` of a problem."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope '{scope}'; choose from {', '.join(SCOPES)}")
    c, w = problem.instance.cluster, problem.instance.workload
    d, n_layers = problem.old.shape
    slots = np.array([(r, x) for r in range(d) for x in range(n_layers)], dtype=np.int64)
    if scope == "displaced":
        slots = slots[problem.displaced[slots[:, 0], slots[:, 1]]]
    fixed = problem.old.copy()
    fixed[slots[:, 0], slots[:, 1]] = -1
    src = problem.sources
    copy_s = _copy_seconds(problem)
    old = cost.evaluate(c, w, problem.old)
    prev = np.array([p[0] if p else -1 for p in w.predecessors], dtype=np.int64)
    nxt = np.array([s[0] if s else -1 for s in w.successors], dtype=np.int64)
    comm = np.where(prev >= 0, w.activation_bytes[np.maximum(prev, 0)], 0.0)
    t_old = float(old.iteration_time_s)
    return EpisodeSpec(
        problem=problem,
        scope=scope,
        order=slots,
        fixed=fixed,
        capacity_bytes=np.where(problem.failed, 0.0, c.memory_bytes * (1.0 - MEMORY_RTOL)),
        state_bytes=w.state_bytes_per_param * w.params,
        stash_bytes=np.asarray(w.stash_bytes, dtype=np.float64),
        train_s=cost.train_flops(w)[:, None] / c.flops[None, :],
        copy_s=copy_s,
        held=src.held,
        prev=prev,
        next_=nxt,
        comm_bytes=comm,
        old_time_s=t_old,
        old_bottleneck_s=_bottleneck_reference(problem, float(np.max(old.compute_s_per_mb))),
        reference_total_s=max(problem.horizon_iterations, 1) * t_old,
        max_flops=float(c.flops[~problem.failed].max()),
    )


def _bottleneck_reference(problem: ReplacementProblem, old_bottleneck_s: float) -> float:
    """The per-micro-batch compute a stage should aim at: the old bottleneck, or, when the
    failure took speed away, all the work spread over as many of the fastest survivors as the
    old placement used."""
    c, w = problem.instance.cluster, problem.instance.workload
    used = len(np.unique(problem.old))
    fastest = np.sort(c.flops[~problem.failed])[::-1][:used].sum()
    work = cost.train_flops(w).sum() * w.data_parallel
    return max(old_bottleneck_s, work / fastest)


def _copy_seconds(problem: ReplacementProblem) -> np.ndarray:
    """``[L, M]`` seconds one copy of each layer's state takes to each machine, alone."""
    src = problem.sources
    c = problem.instance.cluster
    m = c.num_machines
    lat = src.link_latency_s[np.maximum(src.link, 0)]
    bw = src.link_bandwidth_bps[np.maximum(src.link, 0)]
    out = np.where(src.link >= 0, lat + src.state_bytes[:, None] / bw, 0.0)
    # A read from the checkpoint also waits for the store's egress.
    from_store = src.source == CHECKPOINT
    egress = src.stores.latency_s[None, :] + src.state_bytes[:, None] / src.store_egress_bps
    out = np.where(from_store, np.maximum(out, egress), out)
    return out.reshape(len(src.state_bytes), m)


@dataclass
class Episodes:
    """``K`` episodes of one problem in lockstep.

    Attributes:
        placement: ``[K, D, L]`` machine per slot, ``-1`` undecided.
        used_bytes: ``[K, M]`` memory in use (the cost model's rule for the slots so far).
        replica_stash: ``[K, D, M]`` stash bytes per micro-batch of each replica's slots per machine.
        in_replica: ``[K, D, M]`` the machine holds a slot of the replica.
        depth: ``[K, D]`` distinct machines per replica.
        load_s: ``[K, M]`` compute seconds per micro-batch placed on each machine.
        step: decisions made.
        dead: ``[K]`` an episode hit a slot no machine could take.
    """

    placement: np.ndarray
    used_bytes: np.ndarray
    replica_stash: np.ndarray
    in_replica: np.ndarray
    depth: np.ndarray
    load_s: np.ndarray
    step: int = 0
    dead: np.ndarray | None = None


def new_episodes(spec: EpisodeSpec, k: int) -> Episodes:
    """``k`` fresh episodes: the undecided slots empty, the fixed ones in place."""
    d, n_layers = spec.fixed.shape
    m = len(spec.capacity_bytes)
    ep = Episodes(
        placement=np.full((k, d, n_layers), -1, dtype=np.int64),
        used_bytes=np.zeros((k, m)),
        replica_stash=np.zeros((k, d, m)),
        in_replica=np.zeros((k, d, m), dtype=bool),
        depth=np.zeros((k, d), dtype=np.int64),
        load_s=np.zeros((k, m)),
        dead=np.zeros(k, dtype=bool),
    )
    for r, layer in zip(*np.nonzero(spec.fixed >= 0), strict=True):
        _add(spec, ep, int(r), int(layer), np.full(k, spec.fixed[r, layer]))
    return ep


def finished(spec: EpisodeSpec, ep: Episodes) -> bool:
    return ep.step >= spec.num_steps


def current_slot(spec: EpisodeSpec, ep: Episodes) -> tuple[int, int]:
    r, layer = spec.order[ep.step]
    return int(r), int(layer)


def _stash(spec: EpisodeSpec, depth: np.ndarray) -> np.ndarray:
    """Stash counts for replica depths (:func:`hulk_env.feasibility.stash_count`, vectorised)."""
    w = spec.problem.instance.workload
    if w.schedule == "gpipe":
        return np.full(depth.shape, stash_count(w, 1), dtype=np.int64)
    return np.minimum(w.num_micro_batches, depth)


def action_mask(spec: EpisodeSpec, ep: Episodes) -> np.ndarray:
    """``[K, M]`` machines the current slot may go to (exact memory rule, module docstring)."""
    r, layer = current_slot(spec, ep)
    k_now = _stash(spec, ep.depth[:, r])
    k_new = _stash(spec, ep.depth[:, r] + 1)
    used, cap = ep.used_bytes, spec.capacity_bytes[None, :]
    state, stash = spec.state_bytes[layer], spec.stash_bytes[layer]
    same = used + state + k_now[:, None] * stash <= cap
    grow = (k_new - k_now)[:, None] * ep.replica_stash[:, r]
    others_fit = np.all(used + grow <= cap, axis=1)
    new = others_fit[:, None] & (used + state + k_new[:, None] * stash <= cap)
    return np.where(ep.in_replica[:, r], same, new) & (spec.capacity_bytes > 0)[None, :]


def _add(spec: EpisodeSpec, ep: Episodes, r: int, layer: int, machines: np.ndarray) -> None:
    """Place slot ``(r, layer)`` on ``machines`` (``[K]``) and update the bookkeeping."""
    rows = np.arange(len(machines))
    new = ~ep.in_replica[rows, r, machines]
    k_now = _stash(spec, ep.depth[:, r])
    k_new = _stash(spec, ep.depth[:, r] + new)
    ep.used_bytes += (k_new - k_now)[:, None] * ep.replica_stash[:, r]
    ep.used_bytes[rows, machines] += spec.state_bytes[layer] + k_new * spec.stash_bytes[layer]
    ep.replica_stash[rows, r, machines] += spec.stash_bytes[layer]
    ep.in_replica[rows, r, machines] = True
    ep.depth[:, r] += new
    ep.load_s[rows, machines] += spec.train_s[layer, machines]
    ep.placement[rows, r, layer] = machines


def apply_actions(spec: EpisodeSpec, ep: Episodes, actions: np.ndarray) -> None:
    """Place the current slot on ``actions`` (``[K]``, valid machines) and move on."""
    r, layer = current_slot(spec, ep)
    _add(spec, ep, r, layer, np.asarray(actions, dtype=np.int64))
    ep.step += 1


def candidate_features(spec: EpisodeSpec, ep: Episodes) -> np.ndarray:
    """``[K, M, F]`` features (:data:`FEATURES`) of placing the current slot on each machine."""
    r, layer = current_slot(spec, ep)
    c = spec.problem.instance.cluster
    k, m = ep.used_bytes.shape
    machines = np.arange(m)
    out = np.zeros((k, m, NUM_FEATURES))
    col = _COLUMN
    w = spec.problem.instance.workload
    lat_log = np.log10(1.0 + c.latency_s / MS) / 3.0
    p, n = spec.prev[layer], spec.next_[layer]
    if p >= 0:
        pm = ep.placement[:, r, p]
        same_prev = machines[None, :] == pm[:, None]
        out[:, :, col["same_as_prev"]] = same_prev
        out[:, :, col["stay_remaining"]] = same_prev * (w.num_layers - 1 - layer) / max(w.num_layers - 1, 1)
        out[:, :, col["latency_prev_log"]] = lat_log[pm]
        per_iter = 2.0 * w.num_micro_batches * spec.comm_bytes[layer] / c.bandwidth_bps[pm]
        out[:, :, col["comm_prev"]] = np.minimum(per_iter / spec.old_time_s, _CLIP)
    if n >= 0:
        nm = ep.placement[:, r, n]
        placed = (nm >= 0)[:, None]
        out[:, :, col["same_as_next"]] = placed & (machines[None, :] == nm[:, None])
        out[:, :, col["latency_next_log"]] = np.where(placed, lat_log[np.maximum(nm, 0)], 0.0)
        per_iter = 2.0 * w.num_micro_batches * spec.comm_bytes[n] / c.bandwidth_bps[:, np.maximum(nm, 0)].T
        out[:, :, col["comm_next"]] = np.where(placed, np.minimum(per_iter / spec.old_time_s, _CLIP), 0.0)
    out[:, :, col["holds_state"]] = spec.held[layer][None, :]
    old_machine = spec.problem.old[r, layer]
    out[:, :, col["old_slot"]] = (machines == old_machine) & ~spec.problem.failed[old_machine]
    out[:, :, col["copy_log"]] = np.log1p(spec.copy_s[layer] / spec.old_time_s)[None, :] / 5.0
    out[:, :, col["speed"]] = (c.flops / spec.max_flops)[None, :]
    load_after = (ep.load_s + spec.train_s[layer][None, :]) / spec.old_bottleneck_s
    out[:, :, col["load_after"]] = np.minimum(load_after, _CLIP)
    out[:, :, col["overload"]] = np.minimum(np.maximum(load_after - 1.0, 0.0), _CLIP)
    out[:, :, col["new_to_replica"]] = ~ep.in_replica[:, r]
    out[:, :, col["revisit"]] = ep.in_replica[:, r] & (out[:, :, col["same_as_prev"]] == 0)
    if ep.in_replica.shape[1] > 1:
        out[:, :, col["other_replicas"]] = np.delete(ep.in_replica, r, axis=1).any(axis=1)
    if r > 0:
        out[:, :, col["same_as_peer"]] = machines[None, :] == ep.placement[:, 0, layer][:, None]
    peers = np.delete(ep.placement[:, :, layer], r, axis=1)  # [K, D-1]
    if peers.size:
        valid = peers >= 0
        lat = lat_log[np.maximum(peers, 0)]  # [K, D-1, M]
        count = valid.sum(axis=1)
        total = np.where(valid[:, :, None], lat, 0.0).sum(axis=1)
        out[:, :, col["dp_latency_log"]] = np.where(count[:, None] > 0, total / np.maximum(count, 1)[:, None], 0.0)
        grad = 2.0 * w.grad_bytes_per_param * w.params[layer]
        slowest = np.where(valid[:, :, None], c.pair_bandwidth_bps[np.maximum(peers, 0)], np.inf).min(axis=1)
        out[:, :, col["dp_sync"]] = np.minimum(grad / slowest / spec.old_time_s, _CLIP)
    cap = np.maximum(spec.capacity_bytes, 1.0)
    need = spec.state_bytes[layer] + _stash(spec, ep.depth[:, r] + 1)[:, None] * spec.stash_bytes[layer]
    out[:, :, col["free_after"]] = np.clip(1.0 - (ep.used_bytes + need) / cap[None, :], 0.0, 1.0)
    np.clip(out, 0.0, FEATURE_MAX, out=out)
    return out
