"""Memory feasibility and padding: the rules env, generators, baselines and evaluation share.

Memory (the cost model's rule, :func:`hulk_env.cost.memory_use_bytes`): a layer needs its model
state (``state_bytes_per_param x params``) plus ``k`` stashed micro-batches of activations,
``k = m`` (all micro-batches) for GPipe and ``k = min(m, S)`` for 1F1B, ``S`` the pipeline
depth (distinct machines) of its replica. With ZeRO the state is the sharded one
of :func:`hulk_env.parallelism.state_lower_bytes` (a lower bound over machines); the env's masks
use each machine's own rates under plan settings (:func:`plan_slot_memory`). The functions here give those needs per layer and per
model, and a one-line explanation when a model cannot fit.

Diagnosis (:func:`diagnose_memory`, behind :func:`capacity_reason`): for each pipeline depth
``S`` it checks three necessary conditions with ``k(S)`` micro-batches stashed per layer: the
largest layer fits the largest machine, one replica fits the ``S`` largest machines together, and
all ``D`` replicas fit the cluster. When no depth passes, the message names the condition that
binds and its figures (which layer and machine, how many stashed micro-batches), and lists the
changes that would pass: fewer micro-batches in flight, recomputation, a smaller micro-batch,
smaller blocks, fewer replicas, the 1F1B schedule, each checked by the same bounds.

Padding: an observation (the env's, a policy's) is padded to ``max_machines`` machines,
``max_layers`` (replica, layer) slots and ``max_edges`` layer-graph edges of all replicas;
:class:`Padding` says whether an instance fits and, when not, what to change.

Mixture-of-experts layers (:mod:`hulk_env.moe`): a slot holds at least its dense state and the
busiest member's share of the experts with the largest expert-parallel group (``G = D``), and
all replicas together hold each expert once, so the bounds stay necessary conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from hulk_env import moe
from hulk_env.cluster import Cluster
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.parallelism import group_share, plan_active, slot_state_bytes, state_lower_bytes
from hulk_env.units import GB
from hulk_env.workload import RECOMPUTE_MODES, Workload, apply_overrides

# The env's witness (hulk_env.completion) keeps every machine within (1 - MEMORY_RTOL) of its
# memory, so that rounding in another summation order (cost.memory_use_bytes) cannot turn an
# allowed placement into an infeasible one; 1e-9 of 80 GB is 80 bytes.
MEMORY_RTOL = 1e-9


def _workload(problem: Instance | Workload) -> Workload:
    return problem.workload if isinstance(problem, Instance) else problem


def stash_count(problem: Instance | Workload, num_stages: int) -> int:
    """Micro-batches a replica with ``num_stages`` machines stashes (GPipe: all of them)."""
    w = _workload(problem)
    return w.num_micro_batches if w.schedule == "gpipe" else min(w.num_micro_batches, num_stages)


def layer_memory_bytes(problem: Instance | Workload, stash_micro_batches: int) -> np.ndarray:
    """``[L]`` bytes each layer of one replica needs with ``stash_micro_batches`` stashed."""
    w = _workload(problem)
    return state_lower_bytes(w) + stash_micro_batches * w.stash_bytes


class SlotMemory(NamedTuple):
    """Per-machine memory rates of a slot under plan settings (the cost model's rule,
    :func:`hulk_env.cost.memory_use_bytes`): slot ``(r, l)`` on machine ``m`` needs
    ``state_bytes[m, l] + k_r stash_bytes[m, l]``.

    Attributes:
        state_bytes: ``[M, L]`` model state, :func:`hulk_env.parallelism.slot_state_bytes`
            (``t_m d_m`` ranks: every data-parallel group inside the machine holds a copy), plus
            the routed experts' bound (see :func:`plan_slot_memory`).
        stash_bytes: ``[M, L]`` stash per micro-batch, ``stash_l s_m`` (the busiest group's share,
            :func:`hulk_env.parallelism.group_share`).
    """

    state_bytes: np.ndarray
    stash_bytes: np.ndarray


def plan_slot_memory(cluster: Cluster, workload: Workload, experts: str) -> SlotMemory | None:
    """The per-machine slot rates of :class:`SlotMemory`, or ``None`` without plan settings
    (then every machine holds a slot alike: :func:`layer_memory_bytes`).

    ``experts`` bounds the routed experts of MoE layers (the cost model holds them once per
    machine of a group, :func:`hulk_env.moe.expert_memory_bytes`): ``"upper"`` counts all of a
    layer's experts on every slot (what a slot can add at most: v0's mask), ``"lower"`` the
    busiest member's share with the largest group ``G = D`` (the witness's rates, as
    :func:`hulk_env.parallelism.state_lower_bytes` without plan settings).
    """
    if not plan_active(workload):
        return None
    state = slot_state_bytes(cluster, workload)
    if workload.moe is not None:
        expert = workload.state_bytes_per_param * workload.moe.expert_params
        if experts == "lower":
            expert = expert * moe.expert_share(workload.moe.num_experts, np.full(workload.num_layers, workload.data_parallel))
        state = state + expert[None, :]
    stash = group_share(cluster, workload)[:, None] * np.asarray(workload.stash_bytes, dtype=np.float64)[None, :]
    return SlotMemory(state, stash)


def model_memory_bytes(problem: Instance | Workload, num_stages: int) -> float:
    """Bytes all ``D`` replicas need when each one's pipeline has ``num_stages`` machines."""
    w = _workload(problem)
    need = w.data_parallel * float(layer_memory_bytes(w, stash_count(w, num_stages)).sum())
    return need - moe.shared_expert_bytes(w) if w.moe is not None else need


def min_memory_bytes(problem: Instance | Workload) -> float:
    """A lower bound on what any placement needs: model state plus one stashed micro-batch per
    layer, all replicas (1F1B stashes one per pipeline stage and GPipe all, so more)."""
    w = _workload(problem)
    need = w.data_parallel * float(layer_memory_bytes(w, 1).sum())
    return need - moe.shared_expert_bytes(w) if w.moe is not None else need


def memory_tightness(instance: Instance) -> float:
    """Memory the model needs (all replicas, stash of the deepest pipeline) / the cluster's."""
    deepest = min(instance.num_machines, instance.num_layers)
    return model_memory_bytes(instance, deepest) / float(instance.cluster.memory_bytes.sum())


class DepthCheck(NamedTuple):
    """The memory bounds of replicas spread over ``stages`` machines each.

    Attributes:
        stages: pipeline depth ``S`` (distinct machines per replica).
        stashed: micro-batches each layer stashes at that depth, ``k(S)``.
        layer: index of the layer with the largest need.
        layer_need_bytes: that layer's model state + ``stashed`` micro-batches of its stash.
        largest_machine_bytes: memory of the largest machine.
        replica_need_bytes: one replica, every layer.
        deepest_bytes: memory of the ``S`` largest machines together.
        total_need_bytes: all ``D`` replicas.
        cluster_bytes: memory of the whole cluster.
    """

    stages: int
    stashed: int
    layer: int
    layer_need_bytes: float
    largest_machine_bytes: float
    replica_need_bytes: float
    deepest_bytes: float
    total_need_bytes: float
    cluster_bytes: float

    @property
    def layer_fits(self) -> bool:
        return self.layer_need_bytes <= self.largest_machine_bytes

    @property
    def replica_fits(self) -> bool:
        return self.replica_need_bytes <= self.deepest_bytes

    @property
    def total_fits(self) -> bool:
        return self.total_need_bytes <= self.cluster_bytes

    @property
    def fits(self) -> bool:
        return self.layer_fits and self.replica_fits and self.total_fits


def depth_checks(instance: Instance) -> list[DepthCheck]:
    """The bounds at every pipeline depth that can differ: ``S = 1 .. min(m, S_max)`` and
    ``S_max = min(M, L)`` (beyond ``m`` the stash count stops growing and more machines only
    help)."""
    w, c = instance.workload, instance.cluster
    deepest = min(c.num_machines, w.num_layers)
    memory = np.sort(c.memory_bytes)[::-1]
    top = np.cumsum(memory)
    state = state_lower_bytes(w)
    shared = moe.shared_expert_bytes(w)  # experts stored once however many replicas (MoE)
    stages = sorted({*range(1, min(w.num_micro_batches, deepest) + 1), deepest})
    checks = []
    for depth in stages:
        k = stash_count(w, depth)
        need = state + k * w.stash_bytes
        layer = int(np.argmax(need))
        replica = float(need.sum())
        checks.append(DepthCheck(
            depth, k, layer, float(need[layer]), float(memory[0]), replica, float(top[depth - 1]),
            w.data_parallel * replica - shared, float(top[-1]),
        ))  # fmt: skip
    return checks


class MemoryDiagnosis(NamedTuple):
    """Why an instance cannot fit in memory, and what would make it fit.

    Attributes:
        binding: ``"layer"`` (a layer outgrows the largest machine even with one micro-batch
            stashed), ``"total"`` (the replicas outgrow the cluster even so), ``"stash"``
            (the micro-batches stashed per layer bind: deep pipelines stash too many, shallow
            ones have too few machines), or ``"none"`` (some depth passes every bound).
        message: one line with the figures.
        fixes: changes that pass the bounds, as options (``"--micro-batches 3"``).
    """

    binding: str
    message: str
    fixes: tuple[str, ...]


def passes_bounds(instance: Instance) -> bool:
    """Whether some pipeline depth passes every bound of :func:`depth_checks`."""
    return any(check.fits for check in depth_checks(instance))


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / GB:,.1f} GB"


def _binding(instance: Instance, checks: list[DepthCheck]) -> tuple[str, str]:
    """The binding bound of an instance no depth fits, and its sentence."""
    w, c = instance.workload, instance.cluster
    largest, cluster_bytes = checks[0].largest_machine_bytes, checks[0].cluster_bytes
    state = state_lower_bytes(w)
    need_one = state + w.stash_bytes
    big = int(np.argmax(need_one))
    machine = c.machines[int(np.argmax(c.memory_bytes))].name
    if need_one[big] > largest:
        return "layer", (
            f"layer '{w.layer_names[big]}' needs at least {_gb(need_one[big])} ({_gb(state[big])} model "
            f"state + {_gb(w.stash_bytes[big])} for one stashed micro-batch), more than the "
            f"{_gb(largest)} of the largest machine '{machine}'"
        )
    floor = w.data_parallel * float(need_one.sum()) - moe.shared_expert_bytes(w)
    if floor > cluster_bytes:
        return "total", (
            f"{w.data_parallel} replica(s) need at least {_gb(floor)} (model state "
            f"{_gb(w.data_parallel * float(state.sum()) - moe.shared_expert_bytes(w))} + one "
            "stashed micro-batch per layer), "
            f"more than the cluster's {_gb(cluster_bytes)}"
        )
    schedule = (
        f"GPipe stashes all {w.num_micro_batches} micro-batches"
        if w.schedule == "gpipe"
        else f"1F1B stashes min({w.num_micro_batches}, S) micro-batches per layer on an S-stage pipeline"
    )
    # Deep pipelines stash more per layer; shallow ones have fewer machines for a replica.
    deep = next((ch for ch in checks if not (ch.layer_fits and ch.total_fits)), checks[-1])
    if not deep.layer_fits:
        parts = [
            f"from S={deep.stages} stages on, layer '{w.layer_names[deep.layer]}' needs "
            f"{_gb(state[deep.layer])} state + {deep.stashed} x {_gb(w.stash_bytes[deep.layer])} "
            f"stash = {_gb(deep.layer_need_bytes)}, more than the {_gb(largest)} of the largest "
            f"machine '{machine}'"
        ]
    elif not deep.total_fits:
        parts = [
            f"from S={deep.stages} stages on, {w.data_parallel} replica(s) with {deep.stashed} "
            f"stashed micro-batches need {_gb(deep.total_need_bytes)}, more than the cluster's "
            f"{_gb(cluster_bytes)}"
        ]
    else:
        parts = []
    shallow = [ch for ch in checks if ch.stages < deep.stages or not parts]
    if shallow:
        ch = shallow[-1]
        parts.append(
            f"with S<={ch.stages} stages the {ch.stages} largest machines hold "
            f"{_gb(ch.deepest_bytes)}, less than the {_gb(ch.replica_need_bytes)} a replica needs "
            f"with {ch.stashed} stashed"
        )
    return "stash", f"the stash binds: {schedule}; " + "; ".join(parts)


def _fewer(n: int) -> list[int]:
    """Smaller counts to try, mildest first: ``n - 1 .. n - 8``, then halving down to 1."""
    steps = {k for k in range(n - 1, max(0, n - 9), -1)} | {n >> i for i in range(1, n.bit_length())}
    return sorted((k for k in steps if 1 <= k < n), reverse=True)


def _variants(w: Workload) -> list[tuple[str, dict]]:
    """Changes to try, as (option, overrides), in the order they are suggested."""
    out: list[tuple[str, dict]] = []
    for m in _fewer(w.num_micro_batches):
        out.append((f"--micro-batches {m}", {"num_micro_batches": m}))
    if w.schedule == "gpipe":
        out.append(("--schedule 1f1b", {"schedule": "1f1b"}))
    modes = RECOMPUTE_MODES[RECOMPUTE_MODES.index(w.recompute) + 1 :]
    for mode in modes if w.config is not None else [m for m in modes if m == "full"]:
        out.append((f"--recompute {mode}", {"recompute": mode}))
    if w.config is not None:
        for b in _fewer(w.micro_batch_size):
            out.append((f"--micro-batch-size {b}", {"micro_batch_size": b}))
        for k in _fewer(w.config.layers_per_block):
            out.append((f"--layers-per-block {k}", {"layers_per_block": k}))
    for d in _fewer(w.data_parallel):
        out.append((f"--data-parallel {d}", {"data_parallel": d}))
    return out


def _changed(instance: Instance, change: dict) -> Instance | None:
    try:
        return replace(instance, workload=apply_overrides(instance.workload, **change))
    except HulkInputError:  # a setting this model cannot take
        return None


def memory_fixes(instance: Instance, fits=passes_bounds) -> tuple[str, ...]:
    """Changes of the training settings after which ``fits(instance)`` holds: for each kind of
    change the mildest (the most micro-batches, the largest micro-batch, ...) in the order of
    :func:`_variants`; when no single change does, the first pair of two kinds that does."""
    variants = _variants(instance.workload)
    fixes: dict[str, str] = {}
    for option, change in variants:
        kind = option.split()[0]
        if kind not in fixes:
            changed = _changed(instance, change)
            if changed is not None and fits(changed):
                fixes[kind] = option
    if fixes:
        return tuple(fixes.values())
    for i, (first, change) in enumerate(variants):
        for second, other in variants[i + 1 :]:
            if first.split()[0] != second.split()[0]:
                changed = _changed(instance, {**change, **other})
                if changed is not None and fits(changed):
                    return (f"{first} {second}",)
    return ()


ROOMY_FRACTION = 0.9  # below this share of the cluster's memory a placement has room to pack


def _roomy(instance: Instance) -> bool:
    return any(
        ch.fits and ch.total_need_bytes <= ROOMY_FRACTION * ch.cluster_bytes
        for ch in depth_checks(instance)
    )


def _state_alone(instance: Instance) -> str:
    """Where the model state by itself, at the finest blocks, outgrows the machines."""
    w, c = instance.workload, instance.cluster
    fine = _changed(instance, {"layers_per_block": 1}) if w.config is not None else None
    fw = fine.workload if fine is not None else w
    state = state_lower_bytes(fw)
    total = w.data_parallel * float(state.sum()) - moe.shared_expert_bytes(fw)
    if total > float(c.memory_bytes.sum()):
        return (
            f" (the model state alone is {_gb(total)} for {w.data_parallel} replica(s), the "
            f"cluster has {_gb(float(c.memory_bytes.sum()))})"
        )
    big = int(np.argmax(state))
    if state[big] > float(c.memory_bytes.max()):
        return (
            f" (the model state of layer '{fw.layer_names[big]}' alone is {_gb(state[big])}, the "
            f"largest machine has {_gb(float(c.memory_bytes.max()))})"
        )
    return ""


@lru_cache(maxsize=64)
def diagnose_memory(instance: Instance) -> MemoryDiagnosis:
    """The binding memory bound of ``instance`` and the changes that would pass it (cached per
    instance: methods that fail on one instance share it)."""
    w, c = instance.workload, instance.cluster
    checks = depth_checks(instance)
    passing = [ch for ch in checks if ch.fits]
    head = f"model '{w.name}' x {w.data_parallel} replica(s)"
    if passing:
        ch = min(passing, key=lambda x: x.total_need_bytes)
        fixes = () if _roomy(instance) else memory_fixes(instance, fits=_roomy)
        advice = f"; it leaves room with {' or '.join(fixes)}" if fixes else ""
        return MemoryDiagnosis("none", (
            f"{head} passes the memory bounds of cluster '{c.name}' with {ch.stages}-stage "
            f"pipelines ({_gb(ch.total_need_bytes)} of {_gb(ch.cluster_bytes)}, "
            f"{ch.total_need_bytes / ch.cluster_bytes:.0%}; largest layer {_gb(ch.layer_need_bytes)} "
            f"of {_gb(ch.largest_machine_bytes)}), but the layers must also pack onto the "
            f"machines{advice}"
        ), fixes)  # fmt: skip
    binding, why = _binding(instance, checks)
    fixes = memory_fixes(instance)
    advice = (
        f"it fits the bounds with {' or '.join(fixes)}"
        if fixes
        else "no change of micro-batches, recomputation, micro-batch size, blocks or replicas "
        f"(nor two of them) fits{_state_alone(instance)}: use more or larger machines"
    )
    return MemoryDiagnosis(
        binding, f"{head} does not fit cluster '{c.name}': {why}; {advice}", fixes
    )


def capacity_reason(instance: Instance) -> str:
    """A one-line explanation when the model cannot fit: the binding bound, its figures and
    what to change (:func:`diagnose_memory`)."""
    return diagnose_memory(instance).message


# ---- padding ---------------------------------------------------------------------------------


def instance_edges(instance: Instance) -> int:
    """Layer-graph edges of all replicas (``D * E``)."""
    return instance.data_parallel * len(instance.workload.edges)


@dataclass(frozen=True)
class Padding:
    """Observation padding: the largest instance an env (or a policy trained on it) takes.

    Attributes:
        max_machines: machines ``M``.
        max_layers: (replica, layer) slots ``D * L``.
        max_edges: layer-graph edges of all replicas ``D * E``.
    """

    max_machines: int
    max_layers: int
    max_edges: int

    @classmethod
    def of(cls, instances: Sequence[Instance]) -> Padding:
        """The smallest padding that fits every instance (at least one edge)."""
        return cls(
            max_machines=max(i.num_machines for i in instances),
            max_layers=max(i.data_parallel * i.num_layers for i in instances),
            max_edges=max(1, max(instance_edges(i) for i in instances)),
        )

    def at_least(self, other: Padding) -> Padding:
        """Element-wise maximum."""
        return Padding(
            max(self.max_machines, other.max_machines),
            max(self.max_layers, other.max_layers),
            max(self.max_edges, other.max_edges),
        )

    def check_fits(
        self,
        instance: Instance,
        holder: str = "the env's padding",
        fix: str = "make the env with {key}>={have}",
    ) -> None:
        """Raise :class:`HulkInputError` when ``instance`` is larger than the padding.

        Args:
            instance: the instance to place.
            holder: whose padding it is, for the message (``"the env's padding"``).
            fix: what to do, formatted with ``key`` (e.g. ``max_machines``) and ``have``.
        """
        sizes = (
            ("machines", instance.num_machines, self.max_machines, "max_machines"),
            ("replica x layer slots", instance.data_parallel * instance.num_layers, self.max_layers, "max_layers"),
            ("layer-graph edges (all replicas)", instance_edges(instance), self.max_edges, "max_edges"),
        )
        for what, have, limit, key in sizes:
            if have > limit:
                raise HulkInputError(
                    f"instance has {have} {what}, above {holder} {key}={limit}; {fix.format(key=key, have=have)}",
                    source=instance.instance_id,
                )


__all__ = [
    "DepthCheck",
    "MemoryDiagnosis",
    "Padding",
    "capacity_reason",
    "depth_checks",
    "diagnose_memory",
    "memory_fixes",
    "passes_bounds",
    "instance_edges",
    "layer_memory_bytes",
    "memory_tightness",
    "min_memory_bytes",
    "model_memory_bytes",
    "plan_slot_memory",
    "SlotMemory",
    "stash_count",
]
