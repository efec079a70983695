"""``partition``: spectral clustering of machines by latency, then the stage DP.

Machines are clustered into ``k = 2 .. min(8, M)`` groups by normalised spectral clustering
(Ng, Jordan & Weiss 2001) of the similarity ``exp(-(alpha_ab / sigma)^2)``, ``sigma`` the median
off-diagonal latency, with a seeded k-means on the row-normalised eigenvectors. Inside a group the
latency is low by construction, so a group's machines are ordered fastest first; groups follow one
another by nearest centroid latency from a start group. Each such chain (every ``k``, every start
group) is split by the stage DP (:mod:`~hulk_env.baselines.chains`); with ``D`` replicas, ``D``
groups can also host one replica each. The cost model picks the best candidate.
"""

from __future__ import annotations

import numpy as np

from hulk_env.baselines.base import PlacementResult
from hulk_env.baselines.chain_dp import evaluate_ranked
from hulk_env.baselines.chains import Candidate, chain_candidates, replica_chain_candidates
from hulk_env.instance import Instance

NAME = "partition"
MAX_GROUPS = 8
KMEANS_RESTARTS = 8
KMEANS_ITERATIONS = 50


def spectral_groups(latency_s: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """``[M]`` group label ``0..k-1`` of each machine (labels ordered by first machine)."""
    m = len(latency_s)
    if k >= m:
        return np.arange(m)
    off = latency_s[~np.eye(m, dtype=bool)]
    sigma = float(np.median(off)) if np.median(off) > 0 else 1e-3
    affinity = np.exp(-((latency_s / sigma) ** 2))
    np.fill_diagonal(affinity, 0.0)
    degree = affinity.sum(axis=1)
    inv_sqrt = 1.0 / np.sqrt(np.maximum(degree, 1e-300))
    normalised = inv_sqrt[:, None] * affinity * inv_sqrt[None, :]
    # The top-k eigenvectors of D^-1/2 W D^-1/2 = the bottom-k of the normalised Laplacian.
    _, vectors = np.linalg.eigh(normalised)
    embed = vectors[:, -k:]
    embed = embed / np.maximum(np.linalg.norm(embed, axis=1, keepdims=True), 1e-12)
    labels = kmeans(embed, k, rng)
    _, first = np.unique(labels, return_index=True)
    relabel = np.empty(labels.max() + 1, dtype=np.int64)
    relabel[labels[np.sort(first)]] = np.arange(len(first))
    return relabel[labels]


def kmeans(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Labels of the best of ``KMEANS_RESTARTS`` k-means++ runs (lowest inertia)."""
    best_labels, best_inertia = None, np.inf
    for _ in range(KMEANS_RESTARTS):
        centres = _kmeans_pp(points, k, rng)
        for _ in range(KMEANS_ITERATIONS):
            dist = ((points[:, None, :] - centres[None]) ** 2).sum(axis=2)
            labels = dist.argmin(axis=1)
            moved = np.array(
                [
                    points[labels == g].mean(axis=0) if np.any(labels == g) else centres[g]
                    for g in range(k)
                ]
            )
            if np.allclose(moved, centres):
                break
            centres = moved
        inertia = float(((points - centres[labels]) ** 2).sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels, inertia
    return best_labels


def _kmeans_pp(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        d2 = np.min([((points - c) ** 2).sum(axis=1) for c in centres], axis=0)
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(points), 1 / len(points))
        centres.append(points[rng.choice(len(points), p=p)])
    return np.array(centres)


def group_chains(
    instance: Instance, labels: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per group its machines fastest first; and per start group the chain through all groups.

    Groups follow each other by nearest mean latency to the group just added.
    """
    c = instance.cluster
    groups = []
    for g in range(labels.max() + 1):
        members = np.flatnonzero(labels == g)
        groups.append(members[np.lexsort((members, -c.flops[members]))])
    k = len(groups)
    between = np.array([[c.latency_s[np.ix_(a, b)].mean() for b in groups] for a in groups])
    chains = []
    for start in range(k):
        order, left = [start], [g for g in range(k) if g != start]
        while left:
            nxt = min(left, key=lambda g: (between[order[-1], g], g))
            order.append(nxt)
            left.remove(nxt)
        chains.append(np.concatenate([groups[g] for g in order]))
    return groups, chains


def partition(instance: Instance, seed: int = 0, budget: int | None = None) -> PlacementResult:
    """Best DP split over chains of latency clusters.

    Args:
        instance: the cluster and workload.
        seed: seeds the k-means initialisation.
        budget: the most candidates evaluated with the cost model (default: all of them).
    """
    rng = np.random.default_rng(seed)
    m, d = instance.num_machines, instance.data_parallel
    candidates: list[Candidate] = []
    for k in range(2, min(MAX_GROUPS, m) + 1):
        labels = spectral_groups(instance.cluster.latency_s, k, rng)
        groups, chains = group_chains(instance, labels)
        for chain in chains:
            candidates += chain_candidates(instance, chain)
        if d > 1 and len(groups) >= d:
            # One replica per group: the D groups nearest each other (the start of each chain).
            for chain in chains:
                firsts = _groups_in_order(chain, groups)[:d]
                candidates += replica_chain_candidates(instance, firsts)
                candidates += replica_chain_candidates(instance, firsts, reverse=True)
    if m == 1:
        candidates += chain_candidates(instance, np.arange(1))
    return evaluate_ranked(instance, candidates, budget, NAME)


def _groups_in_order(chain: np.ndarray, groups: list[np.ndarray]) -> list[np.ndarray]:
    """The groups in the order they appear along ``chain``."""
    position = {int(mach): i for i, mach in enumerate(chain)}
    return sorted(groups, key=lambda g: position[int(g[0])])
