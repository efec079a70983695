"""Bytes on the wire in one training iteration: the one place these formulas live.

The cost model (:mod:`hulk_env.cost`) turns them into seconds, the pictures
(:mod:`hulk_env.render`) and the agent's metrics into line widths and WAN shares. The schedule
simulator (:mod:`hulk_env.simulate`) keeps an independent implementation on purpose: it is the
cross-check of the cost model.

* Pipeline: every cross-machine layer edge ``u -> v`` of every replica carries
  ``activation_bytes[u]`` forward and the same bytes of gradient backward, once per micro-batch.
* Data parallel: for each layer the distinct machines of ``machine[:, l]`` in replica order form
  a ring of ``k`` machines (:func:`dp_rings`); layers with the same ring share one all-reduce of
  ``G = sum_l params_l * grad_bytes_per_param`` bytes, and a ring all-reduce sends
  ``2 (k - 1) / k * G`` bytes over each of its ``k`` directed links
  ``s_0 -> s_1, ..., s_{k-1} -> s_0`` (:func:`ring_link_bytes`). Routed-expert parameters of
  mixture-of-experts layers are not all-reduced (:func:`hulk_env.moe.dense_params`).
* Mixture of experts: each MoE layer's all-to-all within its expert-parallel group
  (:func:`hulk_env.moe.a2a_transfers`), once per micro-batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from hulk_env.instance import Instance
from hulk_env.moe import a2a_transfers, dense_params
from hulk_env.workload import Workload


class Rings(NamedTuple):
    """The data-parallel ring of every layer of a batch of placements.

    Attributes:
        members: ``[N, D, L]`` the ring's distinct machines in replica order, packed to the
            front and padded with ``-1``; two layers share a ring iff their columns are equal.
        size: ``[N, L]`` machines in the ring, ``k``.
        leader: ``[N, L]`` True on the first layer of each distinct ring, where its
            all-reduce (of the gradients of every layer sharing it) is accounted.
        group_bytes: ``[N, L]`` gradient bytes all-reduced by the ring of layer ``l``.
    """

    members: np.ndarray
    size: np.ndarray
    leader: np.ndarray
    group_bytes: np.ndarray


def dp_rings(workload: Workload, mach: np.ndarray) -> Rings:
    """The ring of each layer of placements ``[N, D, L]``: distinct machines of ``mach[:, :, l]``
    in replica order."""
    n, d, n_layers = mach.shape
    first = np.ones(mach.shape, dtype=bool)
    for r in range(1, d):
        first[:, r] = np.all(mach[:, r : r + 1] != mach[:, :r], axis=1)
    order = np.argsort(~first, axis=1, kind="stable")  # members to the front, replica order kept
    members = np.where(
        np.take_along_axis(first, order, axis=1), np.take_along_axis(mach, order, axis=1), -1
    )
    same = np.all(members[:, :, :, None] == members[:, :, None, :], axis=1)  # [N, L, L]
    earlier = np.tril(np.ones((n_layers, n_layers), dtype=bool), -1)
    grad = dense_params(workload) * workload.grad_bytes_per_param  # routed experts stay put
    return Rings(
        members=members,
        size=first.sum(axis=1),
        leader=~np.any(same & earlier, axis=2),
        group_bytes=same @ grad,
    )


def ring_link_bytes(group_bytes: np.ndarray | float, size: np.ndarray | int) -> np.ndarray | float:
    """Bytes a ring all-reduce of ``group_bytes`` over ``size`` machines sends over each of its
    links: ``2 (k - 1) / k * G`` (0 for ``k = 1``)."""
    return 2.0 * (size - 1) / size * group_bytes


def link_traffic_bytes(instance: Instance, placement: np.ndarray) -> np.ndarray:
    """``[M, M]`` bytes sent from machine ``a`` to machine ``b`` in one training iteration.

    ``placement`` is ``[D, L]``; it may be partial (``-1`` for unplaced slots): an edge counts
    once both its layers are placed, the all-reduce once every slot is. The diagonal is zero.
    """
    c, w = instance.cluster, instance.workload
    mach = np.asarray(placement, dtype=np.int64).reshape(w.data_parallel, w.num_layers)
    out = np.zeros((c.num_machines, c.num_machines))
    edges = np.asarray(w.edges, dtype=np.int64).reshape(-1, 2)
    per_edge = w.num_micro_batches * np.asarray(w.activation_bytes, dtype=float)[edges[:, 0]]
    for row in mach:
        a, b = row[edges[:, 0]], row[edges[:, 1]]
        cross = (a != b) & (a >= 0) & (b >= 0)
        np.add.at(out, (a[cross], b[cross]), per_edge[cross])  # activations
        np.add.at(out, (b[cross], a[cross]), per_edge[cross])  # their gradients
    if w.moe is not None and np.all(mach >= 0):  # the MoE all-to-all, both ways
        src, dst, sent = a2a_transfers(w, mach[None])
        np.add.at(out, (src[0], dst[0]), w.num_micro_batches * sent[0])
        np.add.at(out, (dst[0], src[0]), w.num_micro_batches * sent[0])
    if w.data_parallel > 1 and np.all(mach >= 0):
        rings = dp_rings(w, mach[None])
        for layer in np.flatnonzero(rings.leader[0] & (rings.size[0] > 1)):
            k = int(rings.size[0, layer])
            members = rings.members[0, :k, layer]
            np.add.at(out, (members, np.roll(members, -1)), ring_link_bytes(float(rings.group_bytes[0, layer]), k))
    return out


class Traffic(NamedTuple):
    """Bytes one training iteration sends between machines, and the share between regions.

    Attributes:
        total_bytes: pipeline activations and their gradients (all micro-batches) plus the
            data-parallel ring all-reduce traffic, over machine boundaries.
        wan_bytes: the part between machines in different regions.
    """

    total_bytes: float
    wan_bytes: float

    @property
    def wan_share(self) -> float:
        """``wan_bytes / total_bytes`` (0 when nothing crosses a machine boundary)."""
        return self.wan_bytes / self.total_bytes if self.total_bytes > 0 else 0.0


def traffic(instance: Instance, placement: np.ndarray) -> Traffic:
    """Inter-machine and inter-region bytes of one iteration (:func:`link_traffic_bytes` summed)."""
    per_link = link_traffic_bytes(instance, placement)
    region = instance.cluster.region_index
    return Traffic(float(per_link.sum()), float(per_link[region[:, None] != region[None, :]].sum()))


def wan_share(instance: Instance, placement: np.ndarray) -> float:
    """Share of one iteration's inter-machine bytes that crosses regions (0 when none move)."""
    return traffic(instance, placement).wan_share


__all__ = ["Rings", "Traffic", "dp_rings", "link_traffic_bytes", "ring_link_bytes", "traffic", "wan_share"]
