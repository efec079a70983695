"""Workloads: the layer graph of a model to train, and its training settings.

A :class:`Workload` is a DAG of layers in topological order (every edge ``u -> v`` has
``u < v``). Per layer, per micro-batch: forward ``flops``, ``params``, ``activation_bytes`` (the
output sent to each successor) and ``stash_bytes`` (activations kept for the backward pass).
Validated on construction: finite, non-negative, acyclic, weakly connected.

:class:`TrainingSettings` names the settings a copy may change; :class:`WorkloadOverrides` adds
``layers_per_block``. Every loader (:func:`hulk_env.workload.load_workload`, the model catalog,
workload files) takes them as keyword arguments, declared once here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypedDict, Unpack

import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.moe import MoELayers, check_moe_layers, coarsen_moe_layers, moe_summary
from hulk_env.validation.sizes import check_workload_limits

SCHEDULES = ("gpipe", "1f1b")
# Activation recomputation (Korthikanti et al. 2022): keep every activation, recompute the
# attention core in the backward pass, or keep only each layer's input and rerun its forward.
RECOMPUTE_MODES = ("none", "selective", "full")
# Plan settings (formulas in hulk_env.parallelism). tensor_parallel 0 = each machine
# one device (the estimate before the plan settings); ZeRO stages of Rajbhandari et al. 2020; sync of the
# data-parallel replicas every step, or DiLoCo's outer step every inner_steps (Douillard et al.).
ZERO_STAGES = (0, 1, 2, 3)
SYNC_MODES = ("every-step", "diloco")
OUTER_BITS = (32, 16, 8, 4)
MAX_INNER_STEPS = 1_000_000  # DiLoCo's H: published runs use 50-500
PLAN_KEYS = ("tensor_parallel", "zero", "sync", "inner_steps", "outer_bits", "streaming")
MAX_TENSOR_PARALLEL = 64  # a machine holds at most 16 GPUs (hardware.gpus.MAX_GPUS_PER_MACHINE)


class TrainingSettings(TypedDict, total=False):
    """How a workload is trained, as :meth:`Workload.with_training` changes it (None: keep)."""

    micro_batch_size: int | None
    num_micro_batches: int | None
    data_parallel: int | None
    schedule: str | None
    state_bytes_per_param: float | None
    grad_bytes_per_param: float | None
    tensor_parallel: int | None
    zero: int | None
    sync: str | None
    inner_steps: int | None
    outer_bits: int | None
    streaming: bool | None


class WorkloadOverrides(TrainingSettings, total=False):
    """Training settings plus what a loader applies while building: coarsening
    (``layers_per_block``), the sequence length (``seq_len``, transformers only) and activation
    recomputation (``recompute``, :data:`RECOMPUTE_MODES`)."""

    layers_per_block: int | None
    seq_len: int | None
    recompute: str | None


TRAINING_KEYS = tuple(WorkloadOverrides.__annotations__)


def training_overrides(**given: Unpack[WorkloadOverrides]) -> dict[str, Any]:
    """The settings that were given (not None), as a dict keyed by field name.

    Raises:
        TypeError: a keyword that is not a setting (as for any misspelt keyword argument).
    """
    return _given(given, TRAINING_KEYS)


def _given(settings: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return {k: v for k, v in settings.items() if v is not None}


@dataclass(frozen=True, eq=False)
class Workload:
    """A model's layer DAG plus how it is trained.

    Attributes:
        name: a label (``"gpt3-1.3b"``).
        layer_names: ``L`` names in topological order.
        flops: ``[L]`` forward FLOPs per micro-batch (backward costs 2x, see :mod:`hulk_env.cost`).
        params: ``[L]`` parameter counts.
        activation_bytes: ``[L]`` bytes of the layer's output sent to each successor, per
            micro-batch (its gradient of the same size flows back in the backward pass).
        stash_bytes: ``[L]`` activation bytes kept for backward, per micro-batch.
        edges: ``[E, 2]`` int64 DAG edges ``(u, v)`` with ``u < v``.
        recompute_flops: ``[L]`` forward FLOPs rerun in the backward pass per micro-batch
            (activation recomputation; default zeros): a layer's backward costs
            ``2 x flops + recompute_flops``.
        recompute: ``"none"``, ``"selective"`` or ``"full"``: which recomputation the stash and
            ``recompute_flops`` describe.
        config: the :class:`~hulk_env.workload.transformer.TransformerConfig` the graph was
            built from (``None`` for explicit layers): what lets a loader or a diagnosis
            rebuild it with other settings.
        micro_batch_size: sequences per micro-batch.
        num_micro_batches: micro-batches per iteration (per replica).
        data_parallel: replicas ``D`` of the pipeline.
        state_bytes_per_param: model-state bytes per parameter (16 = mixed-precision Adam:
            fp16 weight + grad, fp32 master weight + 2 moments).
        grad_bytes_per_param: bytes per parameter exchanged by the data-parallel all-reduce
            (2 = fp16 gradients).
        schedule: ``"gpipe"`` or ``"1f1b"``.
        tensor_parallel: Megatron tensor-parallel degree ``t`` inside each machine (on a
            machine of ``g`` GPUs, ``gcd(t, g)``; its other GPUs run sharded data parallel);
            0 (default) = each machine one device, the estimate before plan settings
            (:mod:`hulk_env.parallelism`).
        zero: ZeRO stage 0-3 of the data-parallel groups (Rajbhandari et al. 2020).
        sync: ``"every-step"`` (gradients all-reduced every iteration) or ``"diloco"`` (an
            outer exchange of pseudo-gradients every ``inner_steps`` iterations).
        inner_steps: DiLoCo's ``H``.
        outer_bits: bits per exchanged pseudo-gradient value under DiLoCo (32/16/8/4).
        streaming: DiLoCo's outer exchange overlapped with the next ``H`` inner steps.
        tp_allreduce_bytes: ``[L]`` bytes the tensor-parallel all-reduces of a layer carry per
            micro-batch in each direction (forward; the same again backward); default
            ``2 x activation_bytes`` (each explicit layer one transformer block: Megatron's two
            all-reduces of its output per pass).
        moe: mixture-of-experts data per layer (:class:`hulk_env.moe.MoELayers`, or a dict of
            its fields); ``None`` for a dense model.
    """

    name: str
    layer_names: tuple[str, ...]
    flops: np.ndarray
    params: np.ndarray
    activation_bytes: np.ndarray
    stash_bytes: np.ndarray
    edges: np.ndarray
    micro_batch_size: int = 1
    num_micro_batches: int = 8
    data_parallel: int = 1
    state_bytes_per_param: float = 16.0
    grad_bytes_per_param: float = 2.0
    schedule: str = "1f1b"
    recompute_flops: np.ndarray | None = None
    recompute: str = "none"
    config: Any = field(default=None, repr=False)
    tensor_parallel: int = 0
    zero: int = 0
    sync: str = "every-step"
    inner_steps: int = 100
    outer_bits: int = 32
    streaming: bool = False
    tp_allreduce_bytes: np.ndarray | None = None
    moe: MoELayers | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        names = tuple(self.layer_names)
        object.__setattr__(self, "layer_names", names)
        n = len(names)
        src = f"model '{self.name}'"
        if n < 1:
            raise HulkInputError("a model needs at least one layer", source=src)
        if len({x.casefold() for x in names}) != n:  # unique ignoring case, as machine names
            folded = [x.casefold() for x in names]
            dup = sorted({x for x, f in zip(names, folded, strict=True) if folded.count(f) > 1})
            raise HulkInputError(f"duplicate layer names {dup} (names are unique ignoring case)", source=src)
        if self.recompute_flops is None:
            object.__setattr__(self, "recompute_flops", np.zeros(n))
        if self.tp_allreduce_bytes is None:
            object.__setattr__(self, "tp_allreduce_bytes", 2.0 * np.asarray(self.activation_bytes, dtype=np.float64))
        for label in (
            "flops", "params", "activation_bytes", "stash_bytes", "recompute_flops", "tp_allreduce_bytes",
        ):
            arr = np.array(getattr(self, label), dtype=np.float64, copy=True)
            if arr.shape != (n,):
                raise HulkInputError(
                    f"has shape {arr.shape}, expected ({n},)", source=src, field=label
                )
            bad = ~np.isfinite(arr) | (arr < 0)
            if bad.any():
                i = int(np.argmax(bad))
                raise HulkInputError(
                    f"layer '{names[i]}' has {arr[i]!r}; must be finite and >= 0",
                    source=src,
                    field=label,
                )
            arr.setflags(write=False)
            object.__setattr__(self, label, arr)
        object.__setattr__(self, "moe", check_moe_layers(self.moe, n, src))
        if self.moe is not None and np.any(self.moe.expert_params > self.params):
            raise HulkInputError("expert_params exceed params on some layer", source=src, field="expert_params")
        edges = np.array(self.edges, dtype=np.int64, copy=True).reshape(-1, 2)
        if edges.size and (edges.min() < 0 or edges.max() >= n):
            raise HulkInputError(f"edge refers to a layer outside 0..{n - 1}", source=src, field="edges")
        if edges.size and np.any(edges[:, 0] >= edges[:, 1]):
            u, v = edges[np.argmax(edges[:, 0] >= edges[:, 1])]
            raise HulkInputError(
                f"edge {names[u]} -> {names[v]} goes backwards: layers must be in topological "
                "order (the graph must be acyclic)",
                source=src,
                field="edges",
            )
        edges = np.unique(edges, axis=0) if edges.size else edges
        edges.setflags(write=False)
        object.__setattr__(self, "edges", edges)
        if n > 1 and not _weakly_connected(n, edges):
            raise HulkInputError(
                "the layer graph is disconnected: every layer must be reachable from the input",
                source=src,
                field="edges",
            )
        for label in ("micro_batch_size", "num_micro_batches", "data_parallel"):
            value = getattr(self, label)
            if int(value) != value or int(value) < 1:
                raise HulkInputError(f"must be an integer >= 1, got {value!r}", source=src, field=label)
            object.__setattr__(self, label, int(value))
        for label in ("state_bytes_per_param", "grad_bytes_per_param"):
            value = float(getattr(self, label))
            if not np.isfinite(value) or value < 0:
                raise HulkInputError(f"must be finite and >= 0, got {value!r}", source=src, field=label)
            object.__setattr__(self, label, value)
        if self.schedule not in SCHEDULES:
            raise HulkInputError(
                f"unknown schedule {self.schedule!r}; choose one of {', '.join(SCHEDULES)}",
                source=src,
                field="schedule",
            )
        check_recompute(self.recompute, src)
        check_plan_settings(self, src)
        check_workload_limits(self, src)  # magnitudes: no cost-model product can overflow

    # -- derived --------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layer_names)

    @property
    def total_params(self) -> float:
        return float(self.params.sum())

    @property
    def total_flops(self) -> float:
        """Forward FLOPs of one micro-batch through the whole model."""
        return float(self.flops.sum())

    @cached_property
    def predecessors(self) -> tuple[tuple[int, ...], ...]:
        """For each layer, the layers whose output it reads."""
        return _adjacency(self.num_layers, self.edges[:, 1], self.edges[:, 0])

    @cached_property
    def successors(self) -> tuple[tuple[int, ...], ...]:
        """For each layer, the layers that read its output."""
        return _adjacency(self.num_layers, self.edges[:, 0], self.edges[:, 1])

    @property
    def is_chain(self) -> bool:
        n = self.num_layers
        return len(self.edges) == n - 1 and bool(np.all(self.edges[:, 1] - self.edges[:, 0] == 1))

    def memory_floor_bytes(self) -> float:
        """Memory one replica needs at least (model state + one micro-batch of stash)."""
        return float(self.state_bytes_per_param * self.params.sum() + self.stash_bytes.sum())

    def with_training(self, **changes: Unpack[TrainingSettings]) -> Workload:
        """A copy with other training settings (:class:`TrainingSettings`; None keeps one).

        Note: changing ``micro_batch_size`` here does *not* rescale per-layer FLOPs or bytes;
        rebuild the model with the transformer builder for that.
        """
        return replace(self, **_given(changes, tuple(TrainingSettings.__annotations__)))

    def coarsen(self, layers_per_block: int) -> Workload:
        """Merge runs of ``layers_per_block`` consecutive layers (topological order) into blocks.

        FLOPs, params and stash add up. A block's ``activation_bytes`` is the largest output of
        a member with an edge leaving the block (for a chain: its last layer's output). Edges
        inside a block disappear; edges between blocks are kept once.
        """
        k = int(layers_per_block)
        if k < 1:
            raise HulkInputError(f"layers_per_block must be >= 1, got {layers_per_block!r}")
        if k == 1:
            return self
        n = self.num_layers
        block = np.arange(n) // k
        nb = int(block[-1]) + 1
        leaving = np.zeros(n, dtype=bool)
        if len(self.edges):
            crosses = block[self.edges[:, 0]] != block[self.edges[:, 1]]
            leaving[self.edges[crosses, 0]] = True
        act = np.zeros(nb)
        np.maximum.at(act, block[leaving], self.activation_bytes[leaving])
        # A block with no leaving edge is the last one: keep its last member's output size.
        last = np.minimum((np.arange(nb) + 1) * k, n) - 1
        act = np.where(act > 0, act, self.activation_bytes[last])
        bedges = block[self.edges] if len(self.edges) else np.zeros((0, 2), dtype=np.int64)
        bedges = bedges[bedges[:, 0] != bedges[:, 1]]
        names = tuple(
            self.layer_names[b * k] if min((b + 1) * k, n) - b * k == 1
            else f"{self.layer_names[b * k]}..{self.layer_names[min((b + 1) * k, n) - 1]}"
            for b in range(nb)
        )
        return replace(
            self,
            layer_names=names,
            flops=np.bincount(block, self.flops, nb),
            params=np.bincount(block, self.params, nb),
            activation_bytes=act,
            stash_bytes=np.bincount(block, self.stash_bytes, nb),
            edges=bedges,
            recompute_flops=np.bincount(block, self.recompute_flops, nb),
            tp_allreduce_bytes=np.bincount(block, self.tp_allreduce_bytes, nb),
            moe=coarsen_moe_layers(self.moe, block, nb),
        )

    def summary(self) -> dict:
        """A JSON-ready summary (used by ``hulk show model --json``)."""
        return {
            "name": self.name,
            "layers": self.num_layers,
            "edges": int(len(self.edges)),
            "is_chain": self.is_chain,
            "params": self.total_params,
            "forward_flops_per_micro_batch": self.total_flops,
            "activation_bytes_max": float(self.activation_bytes.max()),
            "stash_bytes_per_micro_batch": float(self.stash_bytes.sum()),
            "recompute": self.recompute,
            "recompute_flops_per_micro_batch": float(self.recompute_flops.sum()),
            "model_state_bytes": float(self.state_bytes_per_param * self.params.sum()),
            "micro_batch_size": self.micro_batch_size,
            "num_micro_batches": self.num_micro_batches,
            "data_parallel": self.data_parallel,
            "schedule": self.schedule,
            **moe_summary(self),
        }


def check_plan_settings(workload: Workload, source: str) -> None:
    """Validate (and normalise to int/bool) the plan settings; one clear error each."""
    for label, low, high in (
        ("tensor_parallel", 0, MAX_TENSOR_PARALLEL), ("inner_steps", 1, MAX_INNER_STEPS),
    ):
        value = getattr(workload, label)
        if isinstance(value, bool) or int(value) != value or not low <= int(value) <= high:
            raise HulkInputError(f"must be an integer in {low}..{high}, got {value!r}", source=source, field=label)
        object.__setattr__(workload, label, int(value))
    for label, allowed in (("zero", ZERO_STAGES), ("outer_bits", OUTER_BITS), ("sync", SYNC_MODES)):
        value = getattr(workload, label)
        if isinstance(value, bool) or value not in allowed:
            choices = ", ".join(str(a) for a in allowed)
            raise HulkInputError(f"unknown {label} {value!r}; choose one of {choices}", source=source, field=label)
        if label != "sync":
            object.__setattr__(workload, label, int(value))
    if not isinstance(workload.streaming, bool | np.bool_):
        raise HulkInputError(f"must be true or false, got {workload.streaming!r}", source=source, field="streaming")
    object.__setattr__(workload, "streaming", bool(workload.streaming))


def check_recompute(mode: Any, source: str) -> None:
    """Raise :class:`HulkInputError` unless ``mode`` is one of :data:`RECOMPUTE_MODES`."""
    if mode not in RECOMPUTE_MODES:
        raise HulkInputError(
            f"unknown recompute {mode!r}; choose one of {', '.join(RECOMPUTE_MODES)}",
            source=source,
            field="recompute",
        )


def explicit_options(workload: Workload, options: dict[str, Any], source: str) -> Workload:
    """Apply the build options of :class:`WorkloadOverrides` to explicit layers.

    ``seq_len`` cannot apply (the numbers are of one length); ``recompute: full`` keeps each
    layer's input (:func:`with_full_recompute`), ``selective`` needs a transformer;
    ``layers_per_block`` coarsens.

    Raises:
        HulkInputError: ``seq_len`` or ``recompute: selective`` given, or an unknown mode.
    """
    if options.get("seq_len") is not None:
        raise HulkInputError(
            f"seq_len rebuilds a transformer; model '{workload.name}' is explicit layers holding "
            "the numbers of one sequence length (re-import it at the length you want)",
            source=source,
            field="seq_len",
        )
    mode = options.get("recompute") or "none"
    check_recompute(mode, source)
    if mode == "selective":
        raise HulkInputError(
            "selective recomputation needs a transformer (which part of the stash is the "
            "attention core); explicit layers take recompute none or full",
            source=source,
            field="recompute",
        )
    if mode == "full" and workload.recompute != "full":
        workload = with_full_recompute(workload)
    return workload.coarsen(options.get("layers_per_block") or 1)


def with_full_recompute(workload: Workload) -> Workload:
    """Full recomputation of a layer graph given as explicit layers.

    Each layer keeps only its input (the outputs of its predecessors, ``activation_bytes``) and
    reruns its forward in the backward pass, as Megatron-LM's full recomputation keeps each
    transformer layer's input; a layer without predecessors reads the model's input, whose
    size the graph does not hold, and keeps its stash and runs no recomputation.
    """
    if workload.recompute != "none":
        raise HulkInputError(
            f"model '{workload.name}' already describes recompute {workload.recompute!r}",
            field="recompute",
        )
    inputs = np.zeros(workload.num_layers)
    np.add.at(inputs, workload.edges[:, 1], workload.activation_bytes[workload.edges[:, 0]])
    has_input = np.zeros(workload.num_layers, dtype=bool)
    has_input[workload.edges[:, 1]] = True
    return replace(
        workload,
        stash_bytes=np.where(has_input, np.minimum(inputs, workload.stash_bytes), workload.stash_bytes),
        recompute_flops=np.where(has_input, workload.flops, 0.0),
        recompute="full",
    )


def _adjacency(n: int, ends: np.ndarray, others: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """For each of ``n`` layers, the ``others`` of the edges whose ``ends`` it is (edge order)."""
    lists: list[list[int]] = [[] for _ in range(n)]
    for end, other in zip(ends.tolist(), others.tolist(), strict=True):
        lists[end].append(other)
    return tuple(tuple(x) for x in lists)


def _weakly_connected(n: int, edges: np.ndarray) -> bool:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        parent[find(int(u))] = find(int(v))
    return len({find(i) for i in range(n)}) == 1
