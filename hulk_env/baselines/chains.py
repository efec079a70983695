"""From ordered machine lists (chains) to candidate placements, with the stage DP.

Used by ``latency-chain-dp`` and ``partition``. Every chain is split both ways round (the model's
first layer on the chain's first machine, and on the last machine of the prefix: see
``reverse`` in :func:`~hulk_env.baselines.stage_dp.split_chain`). With ``D`` replicas a chain
yields three kinds of candidates, and the cost model picks among them (data-parallel sync is not
in the DP):

- *shared*: every replica on the same chain prefix (no gradient traffic, shared FLOP/s);
- *blocks*: the chain cut into ``G`` consecutive blocks, replica group ``g`` split over block
  ``g`` (replicas on disjoint, nearby machines);
- *interleaved*: replica group ``g`` on machines ``g, g + G, g + 2G, ...`` of the chain (the
  machines of one stage across groups are neighbours, so the gradient rings are short).
  ``G`` is every divisor of ``D`` above 1 (:func:`group_counts`): ``D`` groups of one replica,
  and, e.g. with 4 replicas, 2 groups of 2 replicas sharing a chain (the fastest machines serve
  two replicas, the gradient rings have half the members). The groups are split each for its
  own machines, and also all cut where one of them cuts (:func:`aligned_candidates`: every
  layer's ring on one stage's machines). Groups of more than one replica are also *crossed*
  (:func:`crossed_rows`): after each layer where every group changes machine, a group's
  replicas go on over different groups' machines, so that boundary's activations spread over
  ``G x G`` links instead of ``G`` (each WAN link carries one replica's instead of ``D / G``);
  same machines, same layers on each, same gradient rings.
- *mirrored*, only where none of those fits (memory-tight instances: whole replicas fit neither
  on one prefix nor on fixed shares of the chain): replica 0 split over the chain, each other
  replica's stage on the nearest machine to replica 0's stage with room left.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hulk_env.baselines.common import NeighbourOrder, dedupe_placements
from hulk_env.baselines.stage_dp import (
    MEMORY_SLACK,
    Split,
    memory_floors,
    split_chain,
    split_chains,
)
from hulk_env.feasibility import layer_memory_bytes, stash_count
from hulk_env.instance import Instance

Candidate = tuple[float, np.ndarray]  # (DP estimate in seconds, placement [D, L])


def rank_candidates(candidates: list[Candidate]) -> list[np.ndarray]:
    """Distinct candidate placements in the order a budget should evaluate them.

    Best DP estimate first, but *shared* candidates (every replica on the same machines) and
    *split* ones (replicas on different machines) take turns: the DP's estimate leaves out
    data-parallel sync, so it ranks split layouts, which pay it over the network, ahead of shared
    ones, whose stages share FLOP/s and look slower. On the 512-machine, 4-replica 175B-class
    instances of ``unseen-v0`` the fastest candidate is a shared one ranked behind 20,000 split
    ones by the estimate alone. With one replica every candidate is shared: the plain ranking.
    """
    order = np.argsort([est for est, _ in candidates], kind="stable")
    ranked = dedupe_placements([candidates[i][1] for i in order])
    is_shared = [bool((p == p[0]).all()) for p in ranked]
    shared = [p for p, yes in zip(ranked, is_shared, strict=True) if yes]
    split = [p for p, yes in zip(ranked, is_shared, strict=True) if not yes]
    turns = [p for pair in zip(shared, split, strict=False) for p in pair]
    return turns + shared[len(split) :] + split[len(shared) :]


def chain_candidates(
    instance: Instance,
    chain: np.ndarray,
    orientations: tuple[bool, ...] = (False, True),
    order: NeighbourOrder | None = None,
) -> list[Candidate]:
    """Candidate placements from one chain (all prefix lengths, all replica layouts).

    ``orientations``: the ``reverse`` values of the splits (default both; ``(False,)`` keeps
    the candidates with the model's first layer on the chain's first machine, at half the DP).
    ``order``: the instance's shared :class:`~hulk_env.baselines.common.NeighbourOrder`, used
    by the *mirrored* candidates (built for an orientation only when no other layout fits).
    """
    return chains_candidates(instance, [chain], orientations, order)[0]


def chains_candidates(
    instance: Instance,
    chains: list[np.ndarray],
    orientations: tuple[bool, ...] = (False, True),
    order: NeighbourOrder | None = None,
) -> list[list[Candidate]]:
    """:func:`chain_candidates` of every chain, the same candidates, with the stage DPs of all
    the chains' layouts solved together (:func:`~hulk_env.baselines.stage_dp.split_chains`)."""
    d = instance.data_parallel
    chains = [np.asarray(chain, dtype=np.int64) for chain in chains]
    out: list[list[Candidate]] = [[] for _ in chains]
    for reverse in orientations:
        # Every layout's chains, split in one call: per chain, the whole chain shared by all
        # replicas, then per group count its blocks and its interleaved chains.
        layouts = [_layouts(chain, d) for chain in chains]
        parts = [(part, share) for per_chain in layouts for group, share in per_chain for part in group]
        splits = iter(split_chains(instance, [p for p, _ in parts], instance.cluster.memory_bytes, [s for _, s in parts], reverse=reverse))
        for c, per_chain in enumerate(layouts):
            found = [(split.estimate_s, np.tile(split.row, (d, 1))) for split in next(splits)]
            for group, share in per_chain[1:]:
                found += replica_chain_candidates(instance, group, reverse, share, [next(splits) for _ in group])
            # Mirrors only where no whole-replica layout fits (also on chains shorter than D:
            # replicas may share a machine's leftover memory): built everywhere they cost ~20%
            # of a plan's time and, on the validation instances, won only where nothing else fitted.
            if d > 1 and not found:
                found = mirrored_candidates(instance, chains[c], reverse, order)
            out[c] += found
    return out


def _layouts(chain: np.ndarray, data_parallel: int) -> list[tuple[list[np.ndarray], int]]:
    """The chains of :func:`chain_candidates`' layouts, each with its replicas per chain: the
    whole chain (all replicas), then per group count ``G`` its ``G`` blocks and its ``G``
    interleaved chains (``D / G`` replicas each)."""
    out: list[tuple[list[np.ndarray], int]] = [([chain], data_parallel)]
    for groups in group_counts(data_parallel):
        if len(chain) >= groups:
            size = len(chain) // groups
            blocks = [chain[g * size : (g + 1) * size] for g in range(groups)]
            out += [(blocks, data_parallel // groups), ([chain[g::groups] for g in range(groups)], data_parallel // groups)]
    return out


def mirrored_candidates(
    instance: Instance, chain: np.ndarray, reverse: bool = False, order: NeighbourOrder | None = None
) -> list[Candidate]:
    """Replica 0 split over the chain by the stage DP (every stage count), each other replica a
    mirror of it: stage ``j`` on the nearest machine (:class:`~hulk_env.baselines.common.NeighbourOrder`
    of replica 0's stage-``j`` machine) that still has room, an unused one when there is.

    For memory-tight instances: *shared* needs ``D`` times a replica's memory on one prefix,
    *blocks* and *interleaved* give each replica a fixed ``1 / D`` of the chain. A mirror takes
    what each stage needs where there is room, and keeps the machines of one layer's gradient
    ring, and of one replica's pipeline links, near replica 0's (rings over a WAN dominate such
    placements). The cost model judges them.
    """
    order = order or NeighbourOrder(instance)
    out: list[Candidate] = []
    for split in split_chain(instance, chain, instance.cluster.memory_bytes, reverse=reverse):
        rows = mirror_split(instance, split, order)
        if rows is not None:
            out.append((split.estimate_s, rows))
    return out


def mirror_split(instance: Instance, split: Split, order: NeighbourOrder) -> np.ndarray | None:
    """``[D, L]``: replica 0 on ``split``, the others mirrored (see :func:`mirrored_candidates`);
    ``None`` when a stage finds no machine with room."""
    m = instance.num_machines
    depth = split.num_stages
    need = layer_memory_bytes(instance, stash_count(instance, depth))
    stage_bytes = np.bincount(split.stage_of_layer, weights=need, minlength=depth).tolist()
    # Python scalars: a stage's scan usually ends within a few machines of its row.
    free = (np.asarray(instance.cluster.memory_bytes, dtype=np.float64) - np.bincount(split.row, weights=need, minlength=m)).tolist()
    used = set(split.machines.tolist())
    nearest = [order.row(here).tolist() for here in split.machines.tolist()]  # per stage, all replicas
    rows = [split.row]
    for _ in range(1, instance.data_parallel):
        stages: list[int] = []  # one stage per machine, so the mirror's depth is the same
        for near, bytes_needed in zip(nearest, stage_bytes, strict=True):
            pick = _nearest_with_room(near, free, bytes_needed, used, stages)
            if pick is None:
                return None
            stages.append(pick)
            used.add(pick)
            free[pick] -= bytes_needed
        rows.append(np.asarray(stages, dtype=np.int64)[split.stage_of_layer])
    return np.stack(rows)


def _nearest_with_room(near: list[int], free: list[float], bytes_needed: float, used: set[int], taken: list[int]) -> int | None:
    """The first machine of ``near`` with room that no replica uses, else the first with room
    (not in ``taken``)."""
    fallback = None
    for k in near:
        if free[k] >= bytes_needed and k not in taken:
            if k not in used:
                return k
            if fallback is None:
                fallback = k
    return fallback


def chain_stop(instance: Instance) -> Callable[[], Callable[[int, int], bool]]:
    """A factory of ``stop`` functions for :func:`~hulk_env.baselines.common.nearest_neighbour_chain`:
    a chain is walked only as far as :func:`chain_candidates` can use it.

    The stage DP keeps at most ``L`` machines of a chain (one stage per machine), after dropping
    the machines too small for a layer (:func:`~hulk_env.baselines.stage_dp.split_chain`). A
    chain is therefore complete for every candidate once each residue class ``position mod D``
    (the interleaved replicas' chains) holds ``L`` machines that pass the strictest of those
    filters (``D`` replicas sharing, the median layer): *shared* and *interleaved* candidates
    are then exactly those of the full chain (a class mod a group count ``G`` dividing ``D`` is
    a union of those classes, and its filter is looser), and *blocks* cut that prefix into ``G``
    blocks.
    On clusters no larger than ``D x L`` machines (every benchmark suite) nothing changes.
    """
    d, n = instance.data_parallel, instance.num_layers
    strictest = memory_floors(instance, d, instance.num_machines)[1]
    big = instance.cluster.memory_bytes * (1 + MEMORY_SLACK) >= strictest

    def make() -> Callable[[int, int], bool]:
        counts = np.zeros(d, dtype=np.int64)

        def stop(position: int, machine: int) -> bool:
            if big[machine]:
                counts[position % d] += 1
            return bool(counts.min() >= n)

        return stop

    return make


def group_counts(data_parallel: int) -> list[int]:
    """The numbers of replica groups of the *blocks* and *interleaved* candidates, largest first:
    every divisor ``G > 1`` of ``D`` (``D / G`` replicas share each group's chain; ``G = 1`` is
    *shared*)."""
    return [g for g in range(data_parallel, 1, -1) if data_parallel % g == 0]


def replica_chain_candidates(
    instance: Instance, chains: list[np.ndarray], reverse: bool = False, share: int = 1, splits: list[list[Split]] | None = None
) -> list[Candidate]:
    """Replica group ``g`` split over ``chains[g]`` (the chains must not share machines), each
    group ``share`` replicas on the same machines (``len(chains) * share`` replicas in all).

    Candidates: every stage count feasible for all replicas (aligned stages, so the gradient
    rings line up), with each replica's own cuts and with all cut alike
    (:func:`aligned_candidates`), plus each replica at its own best stage count; once with the splits of the
    replicas' whole chains, once with the best of those and of the chains without their slow
    machines (the DP's estimate leaves out gradient sync, so the faster-looking split of a
    count is not always the faster layout: both are kept for the cost model). ``splits``: the
    chains' :func:`~hulk_env.baselines.stage_dp.split_chains` with ``share``, when the caller
    has them (solved together with other chains').
    """
    if splits is None:
        splits = split_chains(instance, chains, instance.cluster.memory_bytes, [share] * len(chains), reverse=reverse)
    out: list[Candidate] = []
    groups = [[[s for s in found if not s.skips_slow] for found in splits]]
    if any(s.skips_slow for found in splits for s in found):
        groups.append(splits)
    for allowed in groups:
        per_replica = [_best_per_count(found) for found in allowed]
        if any(not counts for counts in per_replica):
            continue
        common = set.intersection(*(set(counts) for counts in per_replica))
        for j in sorted(common):
            splits_j = [counts[j] for counts in per_replica]
            out += [_combine(splits_j), *aligned_candidates(instance, splits_j, share)]
        out.append(_combine([min(counts.values(), key=lambda s: s.estimate_s) for counts in per_replica]))
    placed = [(est, np.repeat(rows, share, axis=0)) for est, rows in out]
    if share == 1 or len(chains) == 1:
        return placed
    # crossed after plain: the DP's estimate cannot see the crossing (one replica's chain), so
    # on equal estimates a budget evaluates the plain layout first
    return placed + [(est, crossed) for est, rows in out if (crossed := crossed_rows(rows, share)) is not None]



def crossed_rows(rows: np.ndarray, share: int) -> np.ndarray | None:
    """``[G * share, L]`` from ``G`` group rows ``[G, L]`` (the machine of every layer, groups on
    disjoint machines): replica ``k`` of group ``g`` on group ``(g + k * q) mod G``'s machines in
    segment ``q``, the layers after the ``q``-th layer where every group's row changes machine;
    ``None`` when there is no such layer.

    Why: groups of replicas sharing a chain send every replica's activations over the same
    links, ``share`` times the traffic per link; where the chains cross a WAN that link is the
    pipeline's bottleneck. Crossed, each machine still holds ``share`` replicas of the same
    layers (memory and gradient rings unchanged) and each boundary's traffic spreads over every
    pair of the groups' machines. Seen first on validation (val-xl-v0/27, 16 x GPT-3 2.7B x 4:
    ``anneal`` 3.68 s against ``latency-chain-dp``'s 4.42 s, pipeline communication 0.15 s
    against 1.09 s on the same machines)."""
    groups, n = rows.shape
    common = (rows[:, 1:] != rows[:, :-1]).all(axis=0)
    if not common.any():
        return None
    segment = np.concatenate([[0], np.cumsum(common)])
    layers = np.arange(n)
    return np.stack([rows[(g + k * segment) % groups, layers] for g in range(groups) for k in range(share)])


def aligned_candidates(instance: Instance, splits: list[Split], share: int = 1) -> list[Candidate]:
    """Every replica on its own split's machines, all cut where one replica's split cuts: one
    candidate per distinct cut of ``splits`` (splits of one stage count over disjoint chains, one
    row per split; ``share`` replicas on each) that fits every split's machines.

    Why: the DP splits each replica for its own machines' speeds, so the replicas' cuts differ
    and a layer between two cuts has its gradient ring on machines of different stages -- across
    a WAN link when the stages are in different regions, where data-parallel sync (not in the
    DP's estimate) dominates. Aligned, stage ``j`` of every replica holds the same layers, and
    its ring stays on the replicas' stage-``j`` machines (neighbours on the chain). Estimate: the
    replicas' own splits' (a lower bound); the cost model judges.
    """
    depth = splits[0].num_stages
    need = layer_memory_bytes(instance, stash_count(instance, depth))
    room = instance.cluster.memory_bytes * (1 + MEMORY_SLACK)
    estimate = max(s.estimate_s for s in splits)
    cuts = dedupe_placements([s.stage_of_layer for s in splits])
    if len(cuts) < 2:  # already aligned: the combined candidate is this one
        return []
    out: list[Candidate] = []
    for stage_of_layer in cuts:
        stage_bytes = share * np.bincount(stage_of_layer, weights=need, minlength=depth)
        if all((stage_bytes <= room[s.machines]).all() for s in splits):
            out.append((estimate, np.stack([s.machines[stage_of_layer] for s in splits])))
    return out


def _best_per_count(splits: list[Split]) -> dict[int, Split]:
    best: dict[int, Split] = {}
    for s in splits:
        if s.num_stages not in best or s.estimate_s < best[s.num_stages].estimate_s:
            best[s.num_stages] = s
    return best


def _combine(splits: list[Split]) -> Candidate:
    return max(s.estimate_s for s in splits), np.stack([s.row for s in splits])


def first_use_order(row: np.ndarray) -> np.ndarray:
    """The machines of a placement row in the order its layers first use them (its chain)."""
    row = np.asarray(row, dtype=np.int64)
    _, first = np.unique(row, return_index=True)
    return row[np.sort(first)]


def recut_candidates(instance: Instance, placement: np.ndarray) -> list[Candidate]:
    """Candidates that keep a placement's machines and their pipeline order, with the layers
    re-cut by the stage DP (a placement's stage boundaries are its easiest thing to improve).

    The chain is the machines in the order the placement first uses them, replica after
    replica: :func:`chain_candidates` of it (every replica on a prefix, in blocks, interleaved),
    plus, when the replicas use disjoint machines, each replica re-split over its own chain
    (:func:`replica_chain_candidates`). The cost model judges them (the DP's estimates ignore
    data-parallel sync).
    """
    p = np.asarray(placement, dtype=np.int64).reshape(instance.data_parallel, instance.num_layers)
    chains = [first_use_order(row) for row in p]
    whole = first_use_order(np.concatenate(chains))
    out = chain_candidates(instance, whole, order=NeighbourOrder(instance, whole))  # mirrors stay on these machines
    disjoint = sum(len(c) for c in chains) == len(whole)
    if instance.data_parallel > 1 and disjoint:
        for reverse in (False, True):
            out += replica_chain_candidates(instance, chains, reverse)
    return out
