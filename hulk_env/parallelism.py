"""Plan settings inside and across machines: tensor parallel, ZeRO, DiLoCo.

The cost model (:mod:`hulk_env.cost`) calls these at the four agreed points (machine seconds
per micro-batch, first-micro-batch latency, data-parallel sync, memory); with the default
settings (``tensor_parallel=0, zero=0, sync="every-step"``) none of them is called and every
figure stays the estimate of a machine as one device. The simulator (:mod:`hulk_env.simulate`)
implements the same semantics on its own (task durations, chunked rings), not through this
module, so ``hulk bench settings`` compares two implementations.

Notation: machine ``m`` has ``g_m`` GPUs of ``F_m`` FLOP/s together and one GPU's intra-node
bandwidth ``beta_m`` (bytes/s per direction, NVLink or PCIe:
:attr:`hulk_env.cluster.Cluster.intra_node_bandwidth_bps`); ``b`` sequences per micro-batch;
``D`` data-parallel replicas; ``Psi_l`` parameters of layer ``l``; ``q`` =
``grad_bytes_per_param`` (fp16 weights and gradients: 2), ``K = state_bytes_per_param - 2 q``
optimizer bytes per parameter (12 for mixed-precision Adam).

**Inside a machine** (``tensor_parallel = t >= 1``). A stage on machine ``m`` runs with the
tensor-parallel degree ``t_m = gcd(t, g_m)`` and ``d_m = g_m / t_m`` data-parallel groups
inside the machine; each group takes ``ceil(b / d_m)`` of the micro-batch's ``b`` sequences, so
the slowest group computes ``s_m = ceil(b / d_m) d_m / b`` times the even share (``b < d_m``
leaves GPUs idle). Megatron-LM's tensor parallelism (Shoeybi et al. 2019; Narayanan et al.
2021, arXiv 2104.04473, section 2.3) all-reduces a transformer block's activations twice in the
forward pass and twice in the backward pass (with sequence parallelism, Korthikanti et al. 2022,
a reduce-scatter + all-gather of the same volume); a ring all-reduce of ``X`` bytes over ``t``
GPUs takes ``2 (t - 1) / t X / beta_m`` (Patarasuk & Yuan 2009). ``Workload.tp_allreduce_bytes``
holds each layer's all-reduced bytes per pass and micro-batch (``A_l``), so per pass

    ``TP_{m,l} = 2 (t_m - 1) / t_m * A_l ceil(b / d_m) / b / beta_m``

on the critical path (Megatron's all-reduces block the next GEMM), and a layer's seconds per
micro-batch on ``m`` are ``f_l s_m / F_m + TP_{m,l}`` forward and
``(2 f_l + g_l) s_m / F_m + TP_{m,l}`` backward. ``t = 0`` keeps the estimate before plan
settings: ``s_m = 1``, ``TP = 0`` (the GPUs of a machine split every micro-batch for free).
The ``d_m`` groups all-reduce their gradients inside the machine once per iteration, each
tensor-parallel rank its ``1 / t_m`` shard: ``2 (d_m - 1) / d_m * q sum_l Psi_l / t_m /
beta_m`` over the layers the machine holds, before the machine joins its data-parallel rings
(hierarchical all-reduce: intra-node, then across machines).

**ZeRO** (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 5.1 and Figure 1). A slot's data-parallel group has ``N = D d_m``
ranks (``N = d_m`` under DiLoCo: its workers share nothing between outer steps), each holding ``Psi = Psi_l / t_m`` parameters; model-state bytes per rank:
stage 0 ``(2q + K) Psi``; 1 ``2 q Psi + K Psi / N``; 2 ``q Psi + (q + K) Psi / N``;
3 ``(2q + K) Psi / N``. A machine holds ``t_m d_m`` ranks of the slot. Communication (section
7): stages 1-2 reduce-scatter the gradients and all-gather the updated parameters, ``2 Psi``,
the same volume and ring steps as the all-reduce they replace; stage 3 all-gathers the
parameters again before each micro-batch's forward and backward, ``(2 m + 1) Psi`` per iteration
with ``m`` micro-batches (``3 Psi`` for one, the paper's 1.5x), so its rings take ``(2 m + 1) /
2`` times as long. Activations: with sequence parallelism every activation is split over the
``t_m`` ranks, so a machine stashes ``s_m`` times the micro-batch's activations (rounding only).

**DiLoCo** (``sync = "diloco"``; Douillard et al. 2023, arXiv 2311.08105; streaming: Douillard
et al. 2025, arXiv 2501.18512). Each data-parallel replica trains alone for ``H =
inner_steps`` steps, then the replicas all-reduce pseudo-gradients of ``outer_bits / 8`` bytes
per parameter over the same rings. An inner step pays the intra-machine sync, and the outer
exchange ``T_out`` (the rings' schedule, from all machines free) amortised: ``T_out / H``; with
streaming it overlaps the next ``H`` inner steps and only what exceeds them counts,
``max(0, T_out - H T_inner) / H``. This estimates *time* per inner step, not loss: whether
``H`` inner steps with quantised outer updates reach the loss of every-step training is a
question of the published runs, not of this model.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hulk_env.cluster import Cluster
from hulk_env.workload import Workload


def plan_active(workload: Workload) -> bool:
    """Whether any plan setting differs from the default (else the cost model's old path)."""
    return workload.tensor_parallel > 0 or workload.zero > 0 or workload.sync != "every-step"


def intra_active(workload: Workload) -> bool:
    """Whether machines are modelled GPU by GPU (``tensor_parallel >= 1``)."""
    return workload.tensor_parallel > 0


def tp_degrees(cluster: Cluster, workload: Workload) -> np.ndarray:
    """``[M]`` tensor-parallel degree per machine ``t_m = gcd(t, g_m)`` (1 when ``t = 0``)."""
    return np.gcd(max(workload.tensor_parallel, 1), cluster.num_gpus)


def inner_replicas(cluster: Cluster, workload: Workload) -> np.ndarray:
    """``[M]`` data-parallel groups inside each machine ``d_m = g_m / t_m`` (1 when ``t = 0``)."""
    if not intra_active(workload):
        return np.ones(cluster.num_machines, dtype=np.int64)
    return cluster.num_gpus // tp_degrees(cluster, workload)


def group_share(cluster: Cluster, workload: Workload) -> np.ndarray:
    """``[M]`` ``s_m = ceil(b / d_m) d_m / b``: the busiest group's share over the even one."""
    d = inner_replicas(cluster, workload)
    b = workload.micro_batch_size
    return np.ceil(b / d) * d / b


def tp_allreduce_s(cluster: Cluster, workload: Workload) -> np.ndarray:
    """``[M, L]`` tensor-parallel all-reduce seconds per micro-batch and pass, ``TP_{m,l}``."""
    t = tp_degrees(cluster, workload).astype(np.float64)
    d = inner_replicas(cluster, workload)
    b = workload.micro_batch_size
    per_group = np.ceil(b / d) / b  # share of the micro-batch one tensor-parallel group carries
    scale = 2.0 * (t - 1.0) / t * per_group / cluster.intra_node_bandwidth_bps
    return scale[:, None] * workload.tp_allreduce_bytes[None, :]


class LayerSeconds(NamedTuple):
    """Seconds per micro-batch of each layer on each machine, ``[M, L]`` each."""

    forward_s: np.ndarray
    backward_s: np.ndarray

    @property
    def train_s(self) -> np.ndarray:
        return self.forward_s + self.backward_s


def layer_seconds(cluster: Cluster, workload: Workload) -> LayerSeconds:
    """Forward and backward seconds per micro-batch of layer ``l`` on machine ``m`` (module
    docstring): ``f_l s_m / F_m + TP`` and ``(2 f_l + g_l) s_m / F_m + TP``."""
    speed = (cluster.flops / group_share(cluster, workload))[:, None]
    comm = tp_allreduce_s(cluster, workload)
    backward = 2.0 * workload.flops + workload.recompute_flops
    return LayerSeconds(workload.flops[None, :] / speed + comm, backward[None, :] / speed + comm)


def rank_state_bytes(workload: Workload, params: np.ndarray, ranks: np.ndarray | float) -> np.ndarray:
    """Model-state bytes of one data-parallel rank holding ``params`` parameters in a group of
    ``ranks`` (Rajbhandari et al. 2020, section 5.1; module docstring)."""
    q = workload.grad_bytes_per_param
    opt = max(workload.state_bytes_per_param - 2.0 * q, 0.0)
    full = workload.state_bytes_per_param
    z = workload.zero
    if z == 0:
        return full * params
    if z == 1:
        return 2.0 * q * params + opt * params / ranks
    if z == 2:
        return q * params + (q + opt) * params / ranks
    return full * params / ranks


def slot_state_bytes(cluster: Cluster, workload: Workload) -> np.ndarray:
    """``[M, L]`` model-state bytes a machine holds for one slot of layer ``l``: ``t_m d_m``
    ranks of ``Psi_l / t_m`` parameters in a ZeRO group of :func:`zero_ranks` ranks. Routed experts of
    MoE layers are left out: :mod:`hulk_env.moe` holds them (sharded over their expert-parallel
    group, not by ZeRO)."""
    from hulk_env.moe import dense_params

    d = inner_replicas(cluster, workload).astype(np.float64)[:, None]
    t = tp_degrees(cluster, workload).astype(np.float64)[:, None]
    per_rank = rank_state_bytes(workload, dense_params(workload)[None, :] / t, zero_ranks(workload, d))
    return t * d * per_rank


def zero_ranks(workload: Workload, inner: np.ndarray | float) -> np.ndarray | float:
    """Ranks a ZeRO group shards over: ``D d_m`` with every-step sync; ``d_m`` under DiLoCo,
    whose replicas exchange nothing between outer steps, so each worker holds its own full
    optimizer, gradient and parameter state (Douillard et al. 2023: every worker is a complete
    replica; ZeRO shards only inside it)."""
    return inner if workload.sync == "diloco" else workload.data_parallel * inner


def state_lower_bytes(workload: Workload) -> np.ndarray:
    """``[L]`` a lower bound of a slot's model state on any machine (``d_m = 1``: ZeRO over the
    ``D`` replicas only; more groups inside a machine never hold less), for the memory bounds
    of :mod:`hulk_env.feasibility`. Exactly ``state_bytes_per_param x params`` at ZeRO 0."""
    from hulk_env.moe import slot_state_params

    if workload.zero == 0:
        return workload.state_bytes_per_param * slot_state_params(workload)
    return rank_state_bytes(workload, slot_state_params(workload), zero_ranks(workload, 1.0))


def ring_time_factor(workload: Workload) -> float:
    """How much longer a data-parallel ring takes than the plain all-reduce: ZeRO-3's extra
    all-gathers, ``(2 m + 1) / 2`` (module docstring); 1 otherwise."""
    if workload.zero == 3 and workload.sync == "every-step":
        return (2.0 * workload.num_micro_batches + 1.0) / 2.0
    return 1.0


def ring_bytes_factor(workload: Workload) -> float:
    """Bytes of a ring over the gradient bytes: DiLoCo's ``outer_bits / 8 / q``; 1 otherwise."""
    if workload.sync == "diloco" and workload.grad_bytes_per_param > 0:
        return workload.outer_bits / 8.0 / workload.grad_bytes_per_param
    return 1.0


def ring_traffic_factor(workload: Workload) -> float:
    """Bytes a data-parallel ring sends per (inner) step over the plain all-reduce's: ZeRO-3's
    ``(2 m + 1) / 2``, DiLoCo's ``outer_bits / 8 / q / H``."""
    factor = ring_time_factor(workload) * ring_bytes_factor(workload)
    return factor / workload.inner_steps if workload.sync == "diloco" else factor


def intra_sync_s(cluster: Cluster, workload: Workload, mach: np.ndarray) -> np.ndarray:
    """``[N, M]`` seconds each machine spends all-reducing gradients among its ``d_m`` groups,
    once per (inner) step: ``2 (d_m - 1) / d_m * q sum_l Psi_l / t_m / beta_m`` over the slots
    it holds, times ZeRO-3's factor."""
    n = len(mach)
    m = cluster.num_machines
    if not intra_active(workload):
        return np.zeros((n, m))
    d = inner_replicas(cluster, workload).astype(np.float64)
    t = tp_degrees(cluster, workload).astype(np.float64)
    grad = np.broadcast_to(workload.params * workload.grad_bytes_per_param, mach.shape)
    slots = (np.arange(n)[:, None, None] * m + mach).ravel()
    held = np.bincount(slots, weights=grad.ravel(), minlength=n * m).reshape(n, m)
    per_step = 2.0 * (d - 1.0) / d * held / t / cluster.intra_node_bandwidth_bps
    zero3 = (2.0 * workload.num_micro_batches + 1.0) / 2.0 if workload.zero == 3 else 1.0
    return per_step * zero3


def amortised_outer_s(workload: Workload, outer_s: np.ndarray, inner_s: np.ndarray) -> np.ndarray:
    """DiLoCo's outer exchange per inner step: ``T_out / H``, or with streaming
    ``max(0, T_out - H T_inner) / H`` (module docstring)."""
    h = float(workload.inner_steps)
    if workload.streaming:
        return np.maximum(outer_s - h * inner_s, 0.0) / h
    return outer_s / h


def settings_of(workload: Workload) -> dict:
    """The plan settings as a JSON-ready dict (what ``hulk place`` prints beside a placement)."""
    out = {
        "tensor_parallel": workload.tensor_parallel,
        "zero": workload.zero,
        "sync": workload.sync,
        "micro_batch_size": workload.micro_batch_size,
        "num_micro_batches": workload.num_micro_batches,
    }
    if workload.sync == "diloco":
        out |= {"inner_steps": workload.inner_steps, "outer_bits": workload.outer_bits, "streaming": workload.streaming}
    return out


PLAN_INFO_KEYS = (
    "tensor_parallel", "zero", "sync", "micro_batch_size", "num_micro_batches", "inner_steps", "outer_bits", "streaming",
)


def plan_info(workload: Workload) -> dict:
    """Every plan setting under fixed keys (:data:`PLAN_INFO_KEYS`), one type per key whatever
    the settings (the env's ``info["plan_settings"]``: Gymnasium's vector envs stack infos key
    by key across instances; :func:`settings_of` drops the DiLoCo keys under every-step sync)."""
    return {
        "tensor_parallel": int(workload.tensor_parallel),
        "zero": int(workload.zero),
        "sync": str(workload.sync),
        "micro_batch_size": int(workload.micro_batch_size),
        "num_micro_batches": int(workload.num_micro_batches),
        "inner_steps": int(workload.inner_steps),
        "outer_bits": int(workload.outer_bits),
        "streaming": bool(workload.streaming),
    }
