"""The env's observation: feature tables, spaces and the parts fixed for one instance.

Column names of the feature matrices are listed in order (agents index by these); every value is
scaled to about [0, 1.5] (see :class:`hulk_env.env.PlacementEnv` for the table of keys).
:func:`build_static` computes, once per instance, everything that does not change during an
episode: the reference placement and its time, per-layer memory and compute, and the padded
observation arrays at the episode start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from hulk_env import cost
from hulk_env.completion import MEMORY_RTOL  # the masks' memory margin (v0 and v1 alike)
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import capacity_reason, plan_slot_memory
from hulk_env.instance import Instance
from hulk_env.reference import naive_placement
from hulk_env.rewards import UNPLACED
from hulk_env.units import GB, TFLOPS
from hulk_env.workload import Workload

MACHINE_FEATURES = (
    "flops_log",  # clip((log10(FLOP/s) - 12) / 4, 0, 1.5): 1 TFLOP/s -> 0, 10 PFLOP/s -> 1
    "flops_rel",  # FLOP/s / largest FLOP/s of the instance
    "memory_log",  # clip((log10(bytes) - 9) / 3, 0, 1.5): 1 GB -> 0, 1 TB -> 1
    "memory_rel",  # memory / largest memory of the instance
    "free_memory",  # free / total memory, now
    "load",  # C / (C + C_bal): compute s per micro-batch so far (the cost model's C_m), C_bal = perfectly spread work
    "layers_held",  # (replica, layer) slots on the machine / D * L
    "in_replica",  # 1 if it holds a layer of the current replica
    "holds_predecessor",  # 1 if it holds a predecessor of the current layer (same replica)
)
LAYER_FEATURES = (
    "flops_log",  # clip(log10(1 + FLOPs / 1e9) / 5, 0, 1.5), forward per micro-batch
    "flops_rel",  # FLOPs / largest layer FLOPs
    "params_log",  # clip(log10(1 + params / 1e6) / 5, 0, 1.5)
    "memory_rel",  # clip((state bytes + 1 micro-batch of stash) / largest machine memory, 0, 1.5)
    "activation_log",  # clip(log10(1 + activation bytes / 1e6) / 4, 0, 1.5)
    "activation_rel",  # activation bytes / largest layer activation
    "replica",  # r / max(D - 1, 1)
    "depth",  # l / max(L - 1, 1), position in topological order
    "placed",  # 1 once placed
    "current",  # 1 for the (replica, layer) to place now
)
LINK_FEATURES = (
    "latency_log",  # clip(log10(1 + latency / 1 ms) / 3, 0, 1.5): 1 ms -> 0.1, 1 s -> 1
    "bandwidth_log",  # clip(log10(bytes/s / 1e6) / 4, 0, 1.5): 1 Gbps -> 0.52; own machine 1.5
)
GLOBAL_FEATURES = (
    "progress",  # decisions made / D * L
    "replica",  # current replica / max(D - 1, 1)
    "micro_batches_log",  # clip(log2(num_micro_batches) / 10, 0, 1.5)
    "is_1f1b",  # 1 for the 1F1B schedule, 0 for GPipe
    "stash",  # micro-batches the current replica stashes now / num_micro_batches
    # The plan settings (hulk_env.parallelism), fixed per instance; every one is 0 at the
    # defaults (no tensor parallel, ZeRO 0, every-step sync), so default instances observe
    # what they did before these columns existed (and older policies load: agents.network.saved_policy).
    "tensor_parallel_on",  # 1 when machines are modelled GPU by GPU (tensor_parallel >= 1)
    "tensor_parallel_log",  # clip(log2(tensor_parallel) / 4, 0, 1.5): t = 1 -> 0, 16 -> 1; 0 when off
    "micro_batch_log",  # clip(log2(micro_batch_size) / 4, 0, 1.5) with tensor parallel on (the groups split it), else 0
    "zero_stage",  # ZeRO stage / 3
    "diloco",  # 1 under DiLoCo sync
    "inner_steps_log",  # clip(log10(H) / 3, 0, 1.5) under DiLoCo (H = 1000 -> 1), else 0
    "outer_compression",  # log2(32 / outer_bits) / 3 under DiLoCo: 32 bits -> 0, 4 bits -> 1; else 0
    "streaming",  # 1 under streaming DiLoCo
)
MACHINE_INDEX = {name: i for i, name in enumerate(MACHINE_FEATURES)}
LAYER_INDEX = {name: i for i, name in enumerate(LAYER_FEATURES)}
GLOBAL_INDEX = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
CLIP = 1.5  # upper bound of the log-scaled features
MACHINE_HIGH = np.array([CLIP, 1, CLIP, 1, 1, 1, 1, 1, 1], dtype=np.float32)
LAYER_HIGH = np.array([CLIP, 1, CLIP, CLIP, CLIP, 1, 1, 1, 1, 1], dtype=np.float32)
GLOBAL_HIGH = np.array([1, 1, CLIP, 1, 1, 1, CLIP, CLIP, 1, 1, CLIP, 1, 1], dtype=np.float32)


def box(low: float | np.ndarray, high: float | np.ndarray, shape: tuple[int, ...]) -> spaces.Box:
    """A float32 ``Box`` of ``shape`` with bounds broadcast from ``low`` and ``high``."""
    lo = np.broadcast_to(np.asarray(low, dtype=np.float32), shape).copy()
    hi = np.broadcast_to(np.asarray(high, dtype=np.float32), shape).copy()
    return spaces.Box(lo, hi, shape, np.float32)


def slot_spaces(max_machines: int, max_layers: int, max_edges: int) -> dict[str, spaces.Box]:
    """The keys v0 and v1 observe alike after their machine keys: slots, edges, cursor,
    globals and the action mask."""
    m, n, e = max_machines, max_layers, max_edges
    return {
        "layer_mask": box(0, 1, (n,)),
        "layer_features": box(0, LAYER_HIGH, (n, len(LAYER_FEATURES))),
        "layer_machine": box(-1, m - 1, (n,)),
        "edges": box(0, max(n - 1, 0), (e, 2)),
        "edge_mask": box(0, 1, (e,)),
        "cursor": box(0, n, (1,)),
        "globals": box(0, GLOBAL_HIGH, (len(GLOBAL_FEATURES),)),
        "action_mask": box(0, 1, (m,)),
    }


def observation_space(max_machines: int, max_layers: int, max_edges: int) -> spaces.Dict:
    """The observation space for the given padding (see :class:`hulk_env.env.PlacementEnv`)."""
    m = max_machines
    return spaces.Dict(
        {
            "machine_mask": box(0, 1, (m,)),
            "machine_features": box(0, MACHINE_HIGH, (m, len(MACHINE_FEATURES))),
            "links": box(0, CLIP, (m, m, len(LINK_FEATURES))),
            **slot_spaces(max_machines, max_layers, max_edges),
        }
    )


@dataclass(frozen=True, eq=False)
class StaticParts:
    """What does not change during an episode on one instance (computed once per instance).

    Attributes:
        instance: the instance.
        num_machines, num_layers, data_parallel, num_micro_batches: its sizes ``M, L, D, m``.
        gpipe: the schedule is GPipe (stash count fixed at ``m``).
        reference_placement: ``[D, L]`` the naive placement.
        reference_time_s: its iteration time ``T_ref`` (:func:`placement_cost`).
        memory_bytes: ``[M]`` machine memory.
        capacity_bytes: ``[M]`` memory the mask lets each machine fill (``(1 - MEMORY_RTOL) x``).
        state_bytes: per layer, model-state bytes (``state_bytes_per_param x params``).
        stash_bytes: per layer, stashed bytes per micro-batch.
        plan_state_bytes, plan_stash_bytes: ``[L, M]`` under plan settings, the same per
            machine (:func:`hulk_env.feasibility.plan_slot_memory`, the cost model's rule: the
            mask uses them instead of ``state_bytes``, ``stash_bytes``); ``None`` without.
        train_s: ``[L, M]`` training seconds of a layer on a machine per micro-batch
            (:func:`hulk_env.cost.train_flops`: forward, backward, recomputation).
        predecessors: per layer, its predecessors.
        balanced_s: ``C_bal``, compute s per micro-batch per machine if work were spread
            perfectly by FLOP/s (scale of the ``load`` feature).
        machine_features, links, layer_features, edges, edge_mask, machine_mask, layer_mask,
        layer_machine, globals_: padded observation arrays at the episode start.
    """

    instance: Instance
    num_machines: int
    num_layers: int
    data_parallel: int
    num_micro_batches: int
    gpipe: bool
    reference_placement: np.ndarray
    reference_time_s: float
    memory_bytes: np.ndarray
    capacity_bytes: np.ndarray
    state_bytes: tuple[float, ...]
    stash_bytes: tuple[float, ...]
    train_s: np.ndarray
    predecessors: tuple[tuple[int, ...], ...]
    balanced_s: float
    machine_features: np.ndarray
    links: np.ndarray
    layer_features: np.ndarray
    edges: np.ndarray
    edge_mask: np.ndarray
    machine_mask: np.ndarray
    layer_mask: np.ndarray
    layer_machine: np.ndarray
    globals_: np.ndarray
    plan_state_bytes: np.ndarray | None = None
    plan_stash_bytes: np.ndarray | None = None


DENSE_LINKS_MAX = 256  # above this many machines the episode-end breakdown skips the [M, M] links


def placement_cost(instance: Instance, placement: np.ndarray) -> cost.IterationCost:
    """The breakdown of one ``[D, L]`` placement as the env reports it (reference and episode end
    alike, so they agree to the last bit): :func:`hulk_env.cost.evaluate_one` (Python floats,
    the dense-link numbers) up to ``DENSE_LINKS_MAX`` machines, beyond them
    :func:`hulk_env.cost.evaluate_batch` without the ``[M, M]`` link matrix (about 5 ms at
    2,048 machines with it)."""
    c, w = instance.cluster, instance.workload
    if c.num_machines <= DENSE_LINKS_MAX:
        return cost.evaluate_one(c, w, placement)
    batch = cost.evaluate_batch(c, w, placement[None], dense_links=False)
    return cost.IterationCost(*(field[0] for field in batch))


def build_static(
    instance: Instance, max_machines: int, max_layers: int, max_edges: int, dense_links: bool = True
) -> StaticParts:
    """Reference placement and padded static observation parts of one instance.

    ``dense_links=False`` leaves ``links`` empty (``[0, 0, 2]``): Placement-v1 observes sparse
    neighbour lists instead of the ``[M, M, 2]`` matrix.

    Raises:
        HulkInputError: the naive placement (the reward's reference) does not fit in memory.
    """
    c, w = instance.cluster, instance.workload
    m, d, n_layers = c.num_machines, w.data_parallel, w.num_layers
    reference = naive_placement(instance)
    if reference is None:
        raise HulkInputError(
            f"the env needs the naive placement as its reference, and it does not fit: {capacity_reason(instance)}",
            source=instance.instance_id,
        )
    ref_time = float(placement_cost(instance, reference).iteration_time_s)
    flops, mem = c.flops, c.memory_bytes
    train_flops = cost.train_flops(w)  # the cost model's C_m per slot, recomputation included
    balanced = d * float(train_flops.sum()) / float(flops.sum())
    arrays = (
        _machine_features(instance, max_machines),
        _links(instance, max_machines) if dense_links else np.zeros((0, 0, len(LINK_FEATURES)), dtype=np.float32),
        _layer_features(instance, max_layers),
        *_edges(instance, max_edges),
        _mask(m, max_machines),
        _mask(d * n_layers, max_layers),
        np.full(max_layers, float(UNPLACED), dtype=np.float32),
        _globals(instance),
    )
    for arr in arrays:
        arr.setflags(write=False)
    mf, links, lf, edges, edge_mask, machine_mask, layer_mask, layer_machine, globals_ = arrays
    return StaticParts(
        instance=instance,
        num_machines=m,
        num_layers=n_layers,
        data_parallel=d,
        num_micro_batches=w.num_micro_batches,
        gpipe=w.schedule == "gpipe",
        memory_bytes=mem,
        reference_placement=reference,
        reference_time_s=ref_time,
        capacity_bytes=mem * (1.0 - MEMORY_RTOL),
        state_bytes=tuple(float(x) for x in w.state_bytes_per_param * w.params),
        stash_bytes=tuple(float(x) for x in w.stash_bytes),
        train_s=train_flops[:, None] / flops[None, :],
        predecessors=w.predecessors,
        balanced_s=balanced if balanced > 0 else 1.0,
        machine_features=mf,
        links=links,
        layer_features=lf,
        edges=edges,
        edge_mask=edge_mask,
        machine_mask=machine_mask,
        layer_mask=layer_mask,
        layer_machine=layer_machine,
        globals_=globals_,
        **_plan_rates(instance),
    )


def _plan_rates(instance: Instance) -> dict[str, np.ndarray | None]:
    """The mask's per-machine slot rates ``[L, M]`` under plan settings (rows: one layer's
    machines, what a step reads), ``None`` without."""
    rates = plan_slot_memory(instance.cluster, instance.workload, experts="upper")
    if rates is None:
        return {}
    state, stash = (np.ascontiguousarray(x.T) for x in rates)
    for arr in (state, stash):
        arr.setflags(write=False)
    return {"plan_state_bytes": state, "plan_stash_bytes": stash}


def _machine_features(instance: Instance, max_machines: int) -> np.ndarray:
    c = instance.cluster
    m, flops, mem = c.num_machines, c.flops, c.memory_bytes
    mf = np.zeros((max_machines, len(MACHINE_FEATURES)), dtype=np.float32)
    mf[:m, MACHINE_INDEX["flops_log"]] = np.clip((np.log10(flops) - np.log10(TFLOPS)) / 4.0, 0, CLIP)
    mf[:m, MACHINE_INDEX["flops_rel"]] = flops / flops.max()
    mf[:m, MACHINE_INDEX["memory_log"]] = np.clip((np.log10(mem) - np.log10(GB)) / 3.0, 0, CLIP)
    mf[:m, MACHINE_INDEX["memory_rel"]] = mem / mem.max()
    mf[:m, MACHINE_INDEX["free_memory"]] = 1.0
    return mf


def latency_feature(latency_s: np.ndarray) -> np.ndarray:
    """``LINK_FEATURES[0]``: ``clip(log10(1 + latency / 1 ms) / 3, 0, 1.5)``."""
    return np.clip(np.log10(1.0 + np.asarray(latency_s) / 1e-3) / 3.0, 0, CLIP)


def bandwidth_feature(bandwidth_bps: np.ndarray) -> np.ndarray:
    """``LINK_FEATURES[1]``: ``clip(log10(bytes/s / 1e6) / 4, 0, 1.5)`` (1.5 for a machine to itself)."""
    with np.errstate(divide="ignore"):
        return np.clip(np.log10(np.asarray(bandwidth_bps) / 1e6) / 4.0, 0, CLIP)


def _links(instance: Instance, max_machines: int) -> np.ndarray:
    c = instance.cluster
    m = c.num_machines
    links = np.zeros((max_machines, max_machines, len(LINK_FEATURES)), dtype=np.float32)
    links[:m, :m, 0] = latency_feature(c.latency_s)
    links[:m, :m, 1] = bandwidth_feature(c.bandwidth_bps)
    return links


def _layer_features(instance: Instance, max_layers: int) -> np.ndarray:
    w = instance.workload
    d, n_layers = w.data_parallel, w.num_layers
    col = LAYER_INDEX
    layer = np.zeros((n_layers, len(LAYER_FEATURES)), dtype=np.float64)
    layer[:, col["flops_log"]] = np.log10(1.0 + w.flops / 1e9) / 5.0
    layer[:, col["flops_rel"]] = w.flops / w.flops.max() if w.flops.max() > 0 else 0.0
    layer[:, col["params_log"]] = np.log10(1.0 + w.params / 1e6) / 5.0
    memory_max = instance.cluster.memory_bytes.max()
    layer[:, col["memory_rel"]] = (w.state_bytes_per_param * w.params + w.stash_bytes) / memory_max
    layer[:, col["activation_log"]] = np.log10(1.0 + w.activation_bytes / 1e6) / 4.0
    act_max = w.activation_bytes.max()
    layer[:, col["activation_rel"]] = w.activation_bytes / act_max if act_max > 0 else 0.0
    layer[:, col["depth"]] = np.arange(n_layers) / max(n_layers - 1, 1)
    lf = np.zeros((max_layers, len(LAYER_FEATURES)), dtype=np.float32)
    for r in range(d):
        rows = lf[r * n_layers : (r + 1) * n_layers]
        rows[:] = np.minimum(layer, LAYER_HIGH)
        rows[:, col["replica"]] = r / max(d - 1, 1)
    lf[0, col["current"]] = 1.0
    return lf


def _edges(instance: Instance, max_edges: int) -> tuple[np.ndarray, np.ndarray]:
    w = instance.workload
    e = len(w.edges)
    edges = np.zeros((max_edges, 2), dtype=np.float32)
    edge_mask = np.zeros(max_edges, dtype=np.float32)
    for r in range(w.data_parallel):
        edges[r * e : (r + 1) * e] = w.edges + r * w.num_layers
    edge_mask[: w.data_parallel * e] = 1.0
    return edges, edge_mask


def _mask(real: int, padded: int) -> np.ndarray:
    mask = np.zeros(padded, dtype=np.float32)
    mask[:real] = 1.0
    return mask


def _globals(instance: Instance) -> np.ndarray:
    w = instance.workload
    gpipe = w.schedule == "gpipe"
    g = np.zeros(len(GLOBAL_FEATURES), dtype=np.float32)
    g[GLOBAL_INDEX["micro_batches_log"]] = min(math.log2(w.num_micro_batches) / 10.0, CLIP)
    g[GLOBAL_INDEX["is_1f1b"]] = 0.0 if gpipe else 1.0
    g[GLOBAL_INDEX["stash"]] = 1.0 if gpipe else 0.0
    for name, value in plan_features(w).items():
        g[GLOBAL_INDEX[name]] = value
    return g


def plan_features(workload: Workload) -> dict[str, float]:
    """The plan-setting columns of ``globals`` (:data:`GLOBAL_FEATURES`' comments), all 0 at
    the default settings. Settings without effect under the others stay 0: the micro-batch
    size matters to the plan only through the tensor-parallel groups' split
    (:func:`hulk_env.parallelism.group_share`; without tensor parallel it only scales the layer
    features, observed already), ``H``, bits and streaming only under DiLoCo."""
    w = workload
    tp_on = w.tensor_parallel >= 1
    diloco = w.sync == "diloco"
    return {
        "tensor_parallel_on": float(tp_on),
        "tensor_parallel_log": min(math.log2(w.tensor_parallel) / 4.0, CLIP) if tp_on else 0.0,
        "micro_batch_log": min(math.log2(w.micro_batch_size) / 4.0, CLIP) if tp_on else 0.0,
        "zero_stage": w.zero / 3.0,
        "diloco": float(diloco),
        "inner_steps_log": min(math.log10(w.inner_steps) / 3.0, CLIP) if diloco else 0.0,
        "outer_compression": math.log2(32 / w.outer_bits) / 3.0 if diloco else 0.0,
        "streaming": float(diloco and w.streaming),
    }
