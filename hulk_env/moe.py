"""Mixture-of-experts layers: their per-layer data and every cost formula of expert parallelism.

A workload's MoE data (:class:`MoELayers`, ``Workload.moe``; ``None`` for a dense model, which
leaves every figure of :mod:`hulk_env.cost`, :mod:`hulk_env.simulate` and
:mod:`hulk_env.feasibility` bit-identical) are per-layer arrays: the parameters of the routed
experts (``expert_params``, part of ``Workload.params``), the experts and their ``top_k``, the
bytes one replica's micro-batch dispatches per MoE exchange (``a2a_bytes``) and how many MoE
exchanges a layer runs (``a2a_count``: 1 per MoE block, more after coarsening).

Expert parallelism (DeepSpeed-MoE, Rajbhandari et al. 2022, arXiv 2201.05596, Sec. 5: expert
parallelism inside the data-parallel group; GShard, Lepikhin et al. 2020, arXiv 2006.16668,
Sec. 2.2 and 3): the *expert-parallel group* of layer ``l`` is the ``G`` distinct machines of
``machine[:, l]`` (the machines holding that layer across the ``D`` replicas). Its ``E``
experts are sharded over them, ``ceil(E / G)`` on the busiest machine (the rule for memory), and
the replicas on one machine share its experts, so expert gradients never cross a machine: expert
parameters leave the data-parallel rings (:func:`dense_params`). ``G = 1`` means no all-to-all.

All-to-all volume (Switch Transformer, Fedus et al. 2021, arXiv 2101.03961, Sec. 2.1 and
Fig. 3; GShard's dispatch/combine ``einsum``s): a replica's micro-batch of ``b s`` tokens sends
``top_k`` copies of each token's ``h``-wide activation to its experts, padded to the expert
capacity: ``V = capacity_factor x top_k x b s h p`` bytes (``p`` bytes per value). With uniform
routing a token's expert lives on each group member with probability ``1 / G``, so
``(G - 1) / G`` of the volume leaves the machine: ``V / G`` to each other member (dispatch), and
the expert outputs come back the same way (combine). The backward pass moves the gradients of
both, the same bytes in the opposite order. Per micro-batch and replica slot of layer ``l`` on
machine ``a``, each other member ``b`` of its group therefore gets ``2 V / G`` bytes over
``a -> b`` and sends ``2 V / G`` over ``b -> a`` (forward + backward): the link occupancy
``X_ab`` of :mod:`hulk_env.cost` counts them like pipeline edges (:func:`a2a_transfers`).

Latency: a slot's forward (and its backward) waits for its exchange, and so does its machine: the
all-to-all is a blocking collective (as NCCL's all-to-all in DeepSpeed-MoE and Megatron-LM, where
the next kernel waits for it), so a machine's seconds per micro-batch ``C_m`` add each MoE slot's
wait in both passes (:func:`a2a_latency_s`). Dispatches to the members
run side by side on different links, each combine after its dispatch, so one exchange takes
``max_b [alpha_ab + alpha_ba + (V / G) (1 / beta_ab + 1 / beta_ba)]`` (:func:`a2a_latency_s`);
``a2a_count`` exchanges of ``V / a2a_count`` each add ``a2a_count`` round-trip latencies. Where
one of the two machines serves several replicas, each dispatch and combine also waits the mean
residual transmission of the other transfers on its link (:func:`a2a_queue_s`).

Simplification (stated, not hidden): the expert FLOPs of a slot are charged to the machine of the
slot. With uniform routing a group member computes ``1 / G`` of every slot's expert tokens, which
is the same load whenever each member holds the same number of slots of the layer (every
balanced placement, and any ``D = 1`` one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from hulk_env.errors import HulkInputError

# hulk_env.workload.model imports this module (the MoE data of a Workload), so the types are
# named, not imported: a Workload and a hulk_env.cluster.Cluster.
Workload = Any
Cluster = Any

MOE_FIELDS = ("expert_params", "num_experts", "top_k", "a2a_bytes", "a2a_count")


class MoELayers(NamedTuple):
    """Per-layer mixture-of-experts data of a workload (``[L]`` float arrays each; 0 on dense
    layers).

    Attributes:
        expert_params: parameters of the routed experts (included in ``Workload.params``).
        num_experts: routed experts ``E`` of the layer.
        top_k: experts each token is routed to.
        a2a_bytes: bytes one replica's micro-batch dispatches over all its MoE exchanges,
            ``capacity_factor x top_k x b s h p`` per MoE block.
        a2a_count: MoE exchanges (MoE blocks) in the layer.
    """

    expert_params: np.ndarray
    num_experts: np.ndarray
    top_k: np.ndarray
    a2a_bytes: np.ndarray
    a2a_count: np.ndarray


def check_moe_layers(moe: MoELayers | dict | None, n_layers: int, source: str) -> MoELayers | None:
    """Validate MoE data (a :class:`MoELayers` or a dict of its fields) for ``n_layers`` layers.

    Raises:
        HulkInputError: a wrong shape, a negative or non-finite value, ``top_k > num_experts``,
            or ``expert_params`` on a layer without experts.
    """
    if moe is None:
        return None
    given = moe._asdict() if isinstance(moe, MoELayers) else dict(moe)
    unknown = sorted(set(given) - set(MOE_FIELDS))
    if unknown:
        raise HulkInputError(f"unknown MoE field(s) {unknown}; known: {', '.join(MOE_FIELDS)}", source=source)
    arrays = []
    for label in MOE_FIELDS:
        arr = np.array(given.get(label, np.zeros(n_layers)), dtype=np.float64, copy=True)
        if arr.shape != (n_layers,):
            raise HulkInputError(f"has shape {arr.shape}, expected ({n_layers},)", source=source, field=label)
        bad = ~np.isfinite(arr) | (arr < 0)
        if bad.any():
            raise HulkInputError(
                f"layer {int(np.argmax(bad))} has {arr[bad][0]!r}; must be finite and >= 0",
                source=source,
                field=label,
            )
        arr.setflags(write=False)
        arrays.append(arr)
    out = MoELayers(*arrays)
    if np.any(out.top_k > out.num_experts):
        raise HulkInputError("top_k exceeds num_experts on some layer", source=source, field="top_k")
    if np.any((out.expert_params > 0) & (out.num_experts < 1)):
        raise HulkInputError("a layer holds expert_params but no experts", source=source, field="num_experts")
    return out


def coarsen_moe_layers(moe: MoELayers | None, block: np.ndarray, n_blocks: int) -> MoELayers | None:
    """The MoE data of layers merged into blocks (``block[l]``: the block of layer ``l``):
    expert parameters, bytes and exchanges add up; experts and ``top_k`` take the block's
    largest (a block's MoE layers share them in every model we build)."""
    if moe is None:
        return None
    top_e, top_k = np.zeros(n_blocks), np.zeros(n_blocks)
    np.maximum.at(top_e, block, moe.num_experts)
    np.maximum.at(top_k, block, moe.top_k)
    return MoELayers(
        np.bincount(block, moe.expert_params, n_blocks),
        top_e,
        top_k,
        np.bincount(block, moe.a2a_bytes, n_blocks),
        np.bincount(block, moe.a2a_count, n_blocks),
    )


# -- parameters -------------------------------------------------------------------------------
def active_params(workload: Workload) -> np.ndarray:
    """``[L]`` parameters a token uses: the dense part plus ``top_k / E`` of the routed experts
    (the published "active" or "activated" parameters of Mixtral, DeepSeek-MoE, Qwen-MoE)."""
    moe = workload.moe
    if moe is None:
        return workload.params
    share = np.divide(moe.top_k, moe.num_experts, out=np.zeros_like(moe.top_k), where=moe.num_experts > 0)
    return workload.params - moe.expert_params * (1.0 - share)


def dense_params(workload: Workload) -> np.ndarray:
    """``[L]`` parameters whose gradients the data-parallel rings all-reduce: all but the routed
    experts (each expert lives on one machine of its group; replicas there share it)."""
    return workload.params if workload.moe is None else workload.params - workload.moe.expert_params


def expert_share(num_experts: np.ndarray, group_size: np.ndarray) -> np.ndarray:
    """Share of a layer's experts on the busiest member of a group of ``G`` machines,
    ``ceil(E / G) / E`` (1 for ``G = 1``; 0 where ``E = 0``)."""
    e = np.asarray(num_experts, dtype=np.float64)
    g = np.maximum(np.asarray(group_size, dtype=np.float64), 1.0)
    return np.divide(np.ceil(e / g), e, out=np.zeros(np.broadcast(e, g).shape), where=e > 0)


# -- groups over a batch of placements [N, D, L] ----------------------------------------------
def _first_occurrence(mach: np.ndarray) -> np.ndarray:
    """``[N, D, L]`` True where replica ``r`` is the first to put layer ``l`` on its machine."""
    first = np.ones(mach.shape, dtype=bool)
    for r in range(1, mach.shape[1]):
        first[:, r] = np.all(mach[:, r : r + 1] != mach[:, :r], axis=1)
    return first


def group_size(mach: np.ndarray) -> np.ndarray:
    """``[N, L]`` machines of each layer's expert-parallel group (distinct machines of its
    column), ``G``."""
    return _first_occurrence(mach).sum(axis=1)


def moe_layer_indices(workload: Workload) -> np.ndarray:
    """Layers that hold experts."""
    return np.flatnonzero(workload.moe.num_experts > 0) if workload.moe is not None else np.zeros(0, dtype=np.int64)


def a2a_transfers(workload: Workload, mach: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The all-to-all traffic of placements ``[N, D, L]`` as pipeline-edge-like transfers.

    Returns ``src, dst, bytes`` (``[N, K]`` each): for every MoE layer, replica slot (on machine
    ``a``) and other member ``b`` of the layer's group, ``2 V / G`` bytes per micro-batch go
    ``a -> b`` and the same bytes ``b -> a`` (the module docstring), like an edge's activation
    and gradient. Entries outside a group carry 0 bytes on ``a -> a``.
    """
    n, d, _ = mach.shape
    layers = moe_layer_indices(workload)
    if d == 1 or len(layers) == 0:
        empty = np.zeros((n, 0), dtype=np.int64)
        return empty, empty, np.zeros((n, 0))
    sub = mach[:, :, layers]  # [N, D, K]
    first = _first_occurrence(sub)
    size = first.sum(axis=1)  # [N, K]
    src = np.broadcast_to(sub[:, :, None, :], (n, d, d, len(layers)))  # slot r
    dst = np.broadcast_to(sub[:, None, :, :], (n, d, d, len(layers)))  # member r'
    member = first[:, None, :, :] & (src != dst)
    per = 2.0 * workload.moe.a2a_bytes[layers] / size  # [N, K]
    sent = np.where(member, per[:, None, None, :], 0.0)
    dst = np.where(member, dst, src)
    return src.reshape(n, -1), dst.reshape(n, -1), sent.reshape(n, -1)


def a2a_latency_s(
    cluster: Cluster, workload: Workload, mach: np.ndarray, cycle_s: np.ndarray | None = None
) -> np.ndarray:
    """``[N, D, L]`` seconds a slot's forward (and, again, its backward) waits for its MoE
    exchanges: ``max_b [c (alpha_ab + alpha_ba) + (V / G) (1 / beta_ab + 1 / beta_ba) + q_ab]``
    over the other members ``b`` of its group, with ``c = a2a_count`` (0 outside MoE layers and
    for ``G = 1``). The latency and bandwidth terms are maximised together per member.

    ``q_ab`` is the queueing of :func:`a2a_queue_s` at the cycle ``cycle_s`` (``[N]`` seconds
    per micro-batch); without ``cycle_s`` the round trips are the uncontended ones."""
    if cycle_s is None:
        return a2a_contended_s(cluster, workload, mach, None)
    return a2a_contended_s(cluster, workload, mach, lambda _alone: cycle_s)


def a2a_contended_s(
    cluster: Cluster,
    workload: Workload,
    mach: np.ndarray,
    cycle_of: Callable[[np.ndarray], np.ndarray] | None,
) -> np.ndarray:
    """:func:`a2a_latency_s` with the queueing at the cycle ``cycle_of(uncontended waits)``
    (``[N]`` seconds; the uncontended waits without ``cycle_of``): one pass over the round trips
    for :func:`hulk_env.cost.moe_wait_s`, whose cycle needs the uncontended waits."""
    n, d, n_layers = mach.shape
    out = np.zeros((n, d, n_layers))
    layers = moe_layer_indices(workload)
    if d == 1 or len(layers) == 0:
        return out
    sub = mach[:, :, layers]
    first = _first_occurrence(sub)
    size = first.sum(axis=1)
    a = sub[:, :, None, :]
    b = sub[:, None, :, :]
    lat, bw = cluster.latency_s, cluster.bandwidth_bps
    moe = workload.moe
    wire = (moe.a2a_bytes[layers] / size)[:, None, None, :] * (1.0 / bw[a, b] + 1.0 / bw[b, a])
    round_trip = moe.a2a_count[layers] * (lat[a, b] + lat[b, a]) + wire
    member = first[:, None, :, :] & (a != b)
    out[:, :, layers] = np.where(member, round_trip, 0.0).max(axis=2)
    if cycle_of is None or not out.any():
        return out
    queue = a2a_queue_s(cluster, workload, mach, cycle_of(out))
    out[:, :, layers] = np.where(member, round_trip + queue, 0.0).max(axis=2)
    return out


def serves_one_replica(mach: np.ndarray, n_machines: int) -> np.ndarray:
    """``[N, M]`` True where a machine holds slots of a single replica (and where it holds none)."""
    n, d, _ = mach.shape
    keys = (np.arange(n)[:, None, None] * n_machines + mach).ravel()
    replica = np.broadcast_to(np.arange(d)[None, :, None], mach.shape).ravel()
    low, high = np.full(n * n_machines, d), np.full(n * n_machines, -1)
    np.minimum.at(low, keys, replica)
    np.maximum.at(high, keys, replica)
    return ((low == high) | (high < 0)).reshape(n, n_machines)


def a2a_queue_s(cluster: Cluster, workload: Workload, mach: np.ndarray, cycle_s: np.ndarray) -> np.ndarray:
    """``[N, D, D, K]`` seconds the exchange of slot ``r`` (on ``a``) with the member at
    replica ``r'`` (on ``b``) queues behind other transfers, per pass, for the ``K`` MoE layers
    (entries outside a group are 0).

    Queueing (the mean residual transmission a random arrival finds: Kleinrock, *Queueing
    Systems* vol. 1, 1975, Sec. 5.2, the Pollaczek-Khinchine numerator ``lambda E[S^2] / 2``):
    each of the ``c`` dispatches on ``a -> b`` finds the link busy with the other transfers on it
    (pipeline edges both ways, the combines ``a`` sends back for ``b``'s exchanges) and waits on
    average ``sum_i s_i^2 / (2 T)`` over those transfers of ``s_i`` seconds each per cycle of
    ``T = cycle_s`` seconds (the uncontended bottleneck's seconds per micro-batch); each
    combine on ``b -> a`` likewise (edges, ``b``'s own dispatches). A machine's own exchanges
    never queue behind each other (it waits for each one), so they are left out; at most one
    exchange of each other machine is in flight, so no queue builds beyond the residual (no
    ``1 / (1 - rho)`` factor).

    Exchanges between two machines that each serve a single replica do not queue: such
    machines run their replica's layers in order, the replicas the same work in the same
    order, so the members of a group reach each exchange together, the dispatches go out before
    the combines come back, and no other exchange of theirs is in flight (the simulator's
    pipelines: exchanges there last 1.00-1.09x their uncontended round trip; scattered
    placements, where machines interleave several replicas' slots: 1.12-1.44x).
    """
    n, d, _ = mach.shape
    m = cluster.num_machines
    layers = moe_layer_indices(workload)
    sub = mach[:, :, layers]  # [N, D, K]
    first = _first_occurrence(sub)
    a = np.broadcast_to(sub[:, :, None, :], (n, d, d, len(layers)))  # initiator (slot r)
    b = np.broadcast_to(sub[:, None, :, :], (n, d, d, len(layers)))  # member (replica r')
    one = serves_one_replica(mach, m)
    rows = np.arange(n)[:, None, None, None]
    queues = first[:, None, :, :] & (a != b) & ~(one[rows, a] & one[rows, b])
    out = np.zeros(a.shape)
    some = queues.reshape(n, -1).any(axis=1)
    if not some.any():
        return out
    if not some.all():  # only the placements where some exchange queues
        out[some] = a2a_queue_s(cluster, workload, mach[some], cycle_s[some])
        return out
    bw = cluster.bandwidth_bps
    moe = workload.moe
    rounds = np.maximum(np.round(moe.a2a_count[layers]), 1.0)
    chunk = moe.a2a_bytes[layers] / rounds / first.sum(axis=1)  # [N, K] bytes per round and member
    # Squared seconds per cycle of each exchange's transfers: every round, both passes.
    times = 2.0 * rounds * (first[:, None, :, :] & (a != b))
    dispatch_sq = (times * (chunk[:, None, None, :] / bw[a, b]) ** 2).reshape(n, -1)  # on a -> b
    combine_sq = (times * (chunk[:, None, None, :] / bw[b, a]) ** 2).reshape(n, -1)  # on b -> a
    src, dst = mach[:, :, workload.edges[:, 0]], mach[:, :, workload.edges[:, 1]]
    act = workload.activation_bytes[workload.edges[:, 0]]
    edge_keys = np.concatenate([(src * m + dst).reshape(n, -1), (dst * m + src).reshape(n, -1)], axis=1)
    edge_sq = np.concatenate([((act / bw[src, dst]) ** 2).reshape(n, -1), ((act / bw[dst, src]) ** 2).reshape(n, -1)], axis=1)
    ab, ba = (a * m + b).reshape(n, -1), (b * m + a).reshape(n, -1)
    # Per link: edges (class 0), combines (1: an exchange's "ba" link, sent by its member),
    # dispatches (2: its "ab" link).
    sums = _keyed_sums(
        np.concatenate([edge_keys, ba, ab], axis=1),
        np.concatenate([edge_sq, combine_sq, dispatch_sq], axis=1),
        np.repeat(np.arange(3), [edge_keys.shape[1], ba.shape[1], ab.shape[1]]),
        np.concatenate([ab, ba], axis=1),
    )  # [N, 2 D D K, 3]
    edges, combines, dispatches = sums[:, :, 0], sums[:, :, 1], sums[:, :, 2]
    k = ab.shape[1]
    # a -> b: edges and the combines a sends for b's exchanges (those whose "ba" link is a -> b);
    # b -> a: edges and b's dispatches (those whose "ab" link is b -> a).
    on_ab = edges[:, :k] + combines[:, :k]
    on_ba = edges[:, k:] + dispatches[:, k:]
    cycle = np.where(cycle_s > 0, cycle_s, np.inf)[:, None, None, None]  # no work: no queue
    queue = rounds * (on_ab + on_ba).reshape(a.shape) / (2.0 * cycle)
    return np.where(queues, queue, 0.0)


_DENSE_TABLE = 1 << 21  # entries of a dense per-link table (16 MiB); beyond, keys are sorted


def _keyed_sums(keys: np.ndarray, weights: np.ndarray, classes: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``[N, Q, C]``: per row and ``query`` key, the sum of ``weights`` over the entries of each
    class with that key (0 where none). ``keys``, ``weights``: ``[N, K]``; keys are small
    non-negative ints (links ``a M + b``); ``classes``: ``[K]`` ints ``0 .. C - 1``. Dense
    tables of every key over a few rows at a time where they are small (tens of machines),
    else the keys sorted (thousands)."""
    n, n_classes = len(keys), int(classes.max()) + 1
    span = int(max(keys.max(initial=0), query.max(initial=0))) + 1
    per_rows = _DENSE_TABLE // (span * n_classes)
    if per_rows >= 1:
        out = np.empty((*query.shape, n_classes))
        cls = np.broadcast_to(classes, (min(n, per_rows), keys.shape[1]))
        for start in range(0, n, per_rows):
            k, q = keys[start : start + per_rows], query[start : start + per_rows]
            rows = np.arange(len(k), dtype=np.int64)[:, None] * span
            table = np.bincount(
                ((rows + k) * n_classes + cls[: len(k)]).ravel(),
                weights=weights[start : start + per_rows].ravel(),
                minlength=len(k) * span * n_classes,
            ).reshape(-1, n_classes)
            out[start : start + per_rows] = table[(rows + q).ravel()].reshape(*q.shape, n_classes)
        return out
    rows = np.arange(n, dtype=np.int64)[:, None] * span
    unique, inverse = np.unique((rows + keys).ravel(), return_inverse=True)
    slots = inverse.ravel() * n_classes + np.broadcast_to(classes, keys.shape).ravel()
    sums = np.bincount(slots, weights=weights.ravel(), minlength=len(unique) * n_classes).reshape(-1, n_classes)
    wanted = (rows + query).ravel()
    pos = np.minimum(np.searchsorted(unique, wanted), len(unique) - 1)
    found = (unique[pos] == wanted)[:, None]
    return np.where(found, sums[pos], 0.0).reshape(*query.shape, n_classes)


def expert_memory_bytes(
    workload: Workload, mach: np.ndarray, n_machines: int, placed: np.ndarray | None = None
) -> np.ndarray:
    """``[N, M]`` model-state bytes of the routed experts each machine holds: per MoE layer
    and member of its group (placed slots only, when ``placed`` is given),
    ``state_bytes_per_param x expert_params x ceil(E / G) / E``, once per machine however many
    replicas of the layer it holds."""
    n, d, _ = mach.shape
    out = np.zeros((n, n_machines))
    layers = moe_layer_indices(workload)
    if len(layers) == 0:
        return out
    sub = mach[:, :, layers]
    if placed is not None:  # unplaced slots: a machine no placed slot of the layer uses
        sub = np.where(placed[:, :, layers], sub, -1 - np.arange(d)[None, :, None])
    first = _first_occurrence(sub) & (sub >= 0)
    size = first.sum(axis=1)
    moe = workload.moe
    state = workload.state_bytes_per_param * moe.expert_params[layers] * expert_share(moe.num_experts[layers], size)
    weights = np.where(first, state[:, None, :], 0.0)
    slots = (np.arange(n)[:, None, None] * n_machines + np.maximum(sub, 0)).ravel()
    return np.bincount(slots, weights=weights.ravel(), minlength=n * n_machines).reshape(n, n_machines)


# -- bounds for feasibility (no placement) -----------------------------------------------------
def slot_state_params(workload: Workload) -> np.ndarray:
    """``[L]`` parameters one replica slot holds at least: the dense part plus the busiest
    member's share of the experts with the largest group possible (``G <= D``)."""
    if workload.moe is None:
        return workload.params
    moe = workload.moe
    share = expert_share(moe.num_experts, np.full(workload.num_layers, workload.data_parallel))
    return workload.params - moe.expert_params + moe.expert_params * share


def replicated_state_params(workload: Workload) -> float:
    """Parameters all ``D`` replicas hold at least: ``D`` dense copies, every expert once
    (``G ceil(E / G) >= E``)."""
    if workload.moe is None:
        return workload.data_parallel * float(workload.params.sum())
    expert = float(workload.moe.expert_params.sum())
    return workload.data_parallel * (float(workload.params.sum()) - expert) + expert


def shared_expert_bytes(workload: Workload) -> float:
    """What :func:`replicated_state_params` saves on ``D`` copies of the slot bound, in state
    bytes: ``D x sum(slot_state_params) - replicated`` (0 for dense models)."""
    if workload.moe is None:
        return 0.0
    slot = float(slot_state_params(workload).sum())
    return workload.state_bytes_per_param * (workload.data_parallel * slot - replicated_state_params(workload))


# -- what ``hulk show model`` prints ------------------------------------------------------------
class LayerA2A(NamedTuple):
    """All-to-all bytes of one MoE layer per micro-batch and replica, in an expert-parallel
    group of ``group`` machines: what leaves the machine in the forward pass (dispatch +
    combine) and in the backward pass (the same)."""

    layer: str
    dispatched_bytes: float
    forward_bytes: float
    backward_bytes: float


def a2a_per_layer(workload: Workload, group: int) -> list[LayerA2A]:
    """Per MoE layer, the bytes one replica's micro-batch sends off its machine per pass in a
    group of ``group`` machines: ``2 V (G - 1) / G`` (dispatch + combine)."""
    out = []
    for layer in moe_layer_indices(workload):
        v = float(workload.moe.a2a_bytes[layer])
        leaving = 2.0 * v * (group - 1) / max(group, 1)
        out.append(LayerA2A(workload.layer_names[layer], v, leaving, leaving))
    return out


def moe_summary(workload: Workload) -> dict:
    """The MoE keys of ``Workload.summary()`` (none for a dense model)."""
    if workload.moe is None:
        return {}
    layers = moe_layer_indices(workload)
    return {
        "active_params": float(active_params(workload).sum()),
        "expert_params": float(workload.moe.expert_params.sum()),
        "moe_layers": int(workload.moe.a2a_count.sum()),
        "num_experts": int(workload.moe.num_experts.max()) if len(layers) else 0,
        "top_k": int(workload.moe.top_k.max()) if len(layers) else 0,
        "a2a_bytes_per_micro_batch": float(workload.moe.a2a_bytes.sum()),
    }
