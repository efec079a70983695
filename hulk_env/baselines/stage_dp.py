"""The pipeline stage DP: the optimal contiguous split of the layers over a chain of machines.

PipeDream / Alpa style (Narayanan et al. 2019; Zheng et al. 2022, "Alpa", Sec. 5.2), extended
to heterogeneous FLOP/s, per-link bandwidth and latency, and per-machine memory. Layers are taken
in topological order (for a DAG such as an encoder-decoder this is the chain order used; edges
that skip stages are charged to the next stage boundary, a documented approximation: the cost
model judges every candidate exactly afterwards).

A split of layers ``0..L-1`` over the chain prefix ``c_0 .. c_{J-1}`` puts stage ``j`` (layers
``k..i-1``) on machine ``c_j``. Per stage, with ``share`` replicas on the same chain:

- compute ``t_c = share * 3 * sum(f_l) / F_{c_j}`` (forward + backward per micro-batch);
- boundary to ``c_{j+1}`` (not after the last stage) with ``X_i`` the bytes of DAG edges crossing
  the cut before layer ``i``: link occupancy ``t_x = share * X_i / min(beta_ab, beta_ba)``
  (each direction its own resource) and latency ``t_l = 2 alpha_ab + X_i / beta_ab + X_i / beta_ba``
  (forward and backward on the critical path);
- ``t_max = max(t_c, t_x)`` (steady state), ``t_sum = t_c / share + t_l`` (first micro-batch);
- memory ``share * sum(state * params_l + stash * stash_l) <= free_{c_j}``.

The estimate of a split is the cost model's pipeline time of a chain
(:func:`hulk_env.cost.pipeline_time_s`: ``max(P, B) + (m - 1) B``, or the 1F1B window term when
larger) with ``P = sum t_sum`` and ``B = max t_max``; for one replica on a chain it is the cost
model's iteration time exactly. With ``share > 1`` replicas on the chain and plan settings the
cost model may add its machine bound (:func:`hulk_env.cost.machine_bound_s`: a stage's ``m t_c`` between its
prefix's head and tail), which this estimate leaves out; the cost model judges every candidate. It grows with both ``P`` and ``B``, so Alpa's trick applies:
for each bottleneck threshold ``t`` a DP minimises ``sum t_sum`` subject to every
``t_max <= t``, and the best threshold wins. The thresholds form a grid of ``num_thresholds``
values: the optimal bottleneck of up to half that many stage counts (from a min-max DP), quantiles
of the stage times, and ``inf``. With every stage count's optimal bottleneck on the grid the
result is the exact optimum (tested against brute force on small chains); on long chains some
counts fall between grid points (on geo-v0, a grid of 24 found the same placements as 16; on
hard-v0, at most 1.7% better).

Cost: a stage holds at most ``width`` consecutive layers (the most that fit on the roomiest
machine), so the DP runs over that band of spans (:class:`_Band`): ``O(K T L width)`` with ``T``
thresholds, instead of ``O(K T L^2)`` -- same splits and estimates, bit for bit, as the full
table (checked on the validation suites); a few layers wide on memory-tight models over long
chains, where ``K = L``. The DPs of many chains (:func:`split_chains`) run side by side, bands of
similar width and depth stacked (:func:`_solve_many`), with strided views instead of gathers: on
the validation decisions 0.90x the time of one chain at a time, the same splits.

Memory: 1F1B stashes ``min(m, depth)`` micro-batches, so the DP first assumes the deepest
prefix's stash for every prefix (safe), then re-solves up to ``_MAX_RETRIES`` times for prefixes
shorter than any that fit, with their own smaller stash.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from hulk_env.cost import pipeline_time_s, train_flops
from hulk_env.feasibility import stash_count
from hulk_env.instance import Instance
from hulk_env.workload import Workload

# Relative slack on memory so that summation order (prefix sums here, bincount in cost.py)
# never admits a split the cost model rejects; candidates are re-checked by the cost model anyway.
MEMORY_SLACK = 1e-9
_MAX_RETRIES = 4  # re-solves with a shallower pipeline's smaller stash, per chain
# A stage DP gives every machine of a chain prefix a stage, so a slow GPU between fast ones (a
# GTX 1080 beside V100s: 7x fewer FLOP/s) either takes a stage or ends the prefix. The DP runs
# again on the chain without machines below this fraction of its fastest (see split_chain).
# Chosen on validation instances (val-v0 and 12 more validation-city cases), latency-chain-dp's
# time against its time before the filter (geometric mean): 0.5 gave 0.953, 0.25 0.973-0.975
# (two variants), the mirrored replica candidates alone 0.973.
SLOW_FRACTION = 0.5


class Split(NamedTuple):
    """A contiguous split of the layers over a chain prefix.

    Attributes:
        machines: ``[J]`` the machines of the stages, in pipeline order.
        stage_of_layer: ``[L]`` stage index ``0..J-1`` of each layer (non-decreasing).
        estimate_s: the DP's pipeline-time estimate for one replica (no data-parallel sync).
        skips_slow: from the chain without its slow machines (:func:`without_slow`).
    """

    machines: np.ndarray
    stage_of_layer: np.ndarray
    estimate_s: float
    skips_slow: bool = False  # split over the chain without its slow machines (without_slow)

    @property
    def num_stages(self) -> int:
        return len(self.machines)

    @property
    def row(self) -> np.ndarray:
        """``[L]`` the machine of each layer."""
        return self.machines[self.stage_of_layer]


def cut_bytes(workload: Workload) -> np.ndarray:
    """``[L + 1]`` activation bytes of DAG edges crossing the cut before layer ``i``.

    Edge ``u -> v`` crosses cut ``i`` (layers ``< i`` | ``>= i``) iff ``u < i <= v``.
    """
    n = workload.num_layers
    diff = np.zeros(n + 2)
    if len(workload.edges):
        u, v = workload.edges[:, 0], workload.edges[:, 1]
        act = workload.activation_bytes[u]
        np.add.at(diff, u + 1, act)
        np.add.at(diff, v + 1, -act)
    return np.cumsum(diff)[: n + 1]


class _Layers(NamedTuple):
    """What the DP needs of the layers, in the order they are split (maybe reversed)."""

    train_flops: np.ndarray  # [L] forward + backward FLOPs per micro-batch
    cut: np.ndarray  # [L + 1] bytes crossing the cut before each layer
    state_bytes: np.ndarray  # [L] model state
    stash_bytes: np.ndarray  # [L] activations stashed per micro-batch

    def need(self, stash: int) -> np.ndarray:
        """``[L]`` bytes per layer with ``stash`` micro-batches stashed."""
        return self.state_bytes + stash * self.stash_bytes


def _layers(instance: Instance, reverse: bool) -> _Layers:
    w = instance.workload
    view = _Layers(
        train_flops(w),  # recomputation reruns forwards
        cut_bytes(w),
        w.state_bytes_per_param * w.params,
        w.stash_bytes.copy(),
    )
    return _Layers(*(a[::-1].copy() for a in view)) if reverse else view


def memory_floors(instance: Instance, share: int, chain_length: int) -> tuple[float, float]:
    """The two memory filters of :func:`split_chain`: the smallest and the median layer's need
    (``share`` replicas, the stash of a pipeline as deep as the chain allows)."""
    deepest = min(chain_length, instance.num_layers)
    need = share * _layers(instance, False).need(stash_count(instance, deepest))
    return float(need.min()), float(np.median(need))


def without_slow(instance: Instance, chain: np.ndarray, fraction: float = SLOW_FRACTION) -> np.ndarray:
    """The chain without the machines that have less than ``fraction`` of its fastest machine's
    FLOP/s; its first machine (the caller's start) is always kept.

    Relative to the fastest rather than to the start (tried): 0.953 against 0.956 of the former
    method's time on the validation instances (geometric mean)."""
    if len(chain) < 2:
        return chain
    flops = instance.cluster.flops[chain]
    keep = flops >= fraction * flops.max()
    keep[0] = True
    return chain[keep]


def split_chain(
    instance: Instance,
    chain: np.ndarray,
    free_bytes: np.ndarray,
    share: int = 1,
    max_stages: int | None = None,
    num_thresholds: int = 16,
    reverse: bool = False,
) -> list[Split]:
    """The best split over every prefix of the chain that fits in memory.

    A stage DP gives every machine of the prefix at least one layer, so machines too small for
    a layer would block it: the DP runs on the chain without the machines that cannot hold the
    smallest layer, and again without those that cannot hold the median layer (when that drops
    more). For the same reason a slow machine takes a stage wherever the chain passes it, so each
    of those chains is also split without its machines below :data:`SLOW_FRACTION` of its
    fastest's FLOP/s (:func:`without_slow`). Every result is returned.

    Args:
        instance: the cluster and workload.
        chain: machine indices in pipeline order.
        free_bytes: ``[M]`` memory still free on every machine of the cluster.
        share: replicas that will run on this same chain (compute, traffic and memory scale).
        max_stages: the longest prefix to consider (default: ``min(len(chain), L)``).
        num_thresholds: size of the bottleneck-threshold grid.
        reverse: split the model from its last layer: the chain's first machine gets the
            *last* layers (the prefix's pipeline runs the chain backwards). Which end of a chain
            holds the embedding and which the head matters when their memory differs.

    Returns:
        :class:`Split` s in increasing stage count (one per count and filtered chain), always
        with machines in pipeline order.
    """
    return split_chains(instance, [chain], free_bytes, [share], max_stages, num_thresholds, reverse)[0]


def split_chains(
    instance: Instance,
    chains: Sequence[np.ndarray],
    free_bytes: np.ndarray,
    shares: Sequence[int],
    max_stages: int | None = None,
    num_thresholds: int = 16,
    reverse: bool = False,
) -> list[list[Split]]:
    """:func:`split_chain` of every chain (``shares[c]`` replicas on ``chains[c]``), the same
    splits, with the DPs of all of them solved side by side (:func:`_solve_many`): a plan of a
    4-replica instance splits ~13 chains, ~40-120 DPs with their filtered chains and retries."""
    free = np.asarray(free_bytes, dtype=np.float64) * (1 + MEMORY_SLACK)
    layers = _layers(instance, reverse)
    jobs: list[_Job] = []
    for c, (chain, share) in enumerate(zip(chains, shares, strict=True)):
        for kept, skips in _variants(instance, np.asarray(chain, dtype=np.int64), free, share):
            k_max = min(len(kept), instance.num_layers, max_stages or len(kept))
            if k_max >= 1:
                jobs.append(_Job(c, kept[:k_max], skips, int(share), free[kept[:k_max]]))
    # Conservative first: the most stash any prefix needs (1F1B stashes min(m, depth)).
    specs = [_Spec(job.chain, job.free, job.share, stash_count(instance, len(job.chain)), len(job.chain)) for job in jobs]
    found = _solve_many(instance, layers, specs, num_thresholds)
    # A shallower 1F1B pipeline stashes less, so prefixes shorter than any found may still fit
    # with their own stash. Retry from the deepest such prefix down (a solve for J also gives
    # every shorter prefix, with J's stash, which is enough for them), a few times at most; each
    # round's retries of all jobs are solved together.
    # next_j[b]: the longest prefix job b may retry next (0: done), from below the shortest found
    next_j = [min(solved, default=len(job.chain) + 1) - 1 for job, solved in zip(jobs, found, strict=True)]
    for _ in range(_MAX_RETRIES):
        retry = []
        for b, job in enumerate(jobs):
            j = _next_retry(instance, layers, job, found[b], next_j[b])
            next_j[b] = j - 1 if j is not None else 0
            if j is not None:
                retry.append((b, j))
        if not retry:
            break
        # the first j machines' stage times as on the whole chain (stage j - 1 keeps its link)
        specs = [_Spec(jobs[b].chain, jobs[b].free, jobs[b].share, stash_count(instance, j), j) for b, j in retry]
        for (b, _), solved in zip(retry, _solve_many(instance, layers, specs, num_thresholds), strict=True):
            for count, split in solved.items():
                found[b].setdefault(count, split)
    out: list[list[Split]] = [[] for _ in chains]
    for job, solved in zip(jobs, found, strict=True):
        out[job.request] += [Split(job.chain[:j], stage, est, job.skips_slow) for j, (stage, est) in sorted(solved.items())]
    if reverse:
        out = [[_reversed(s) for s in splits] for splits in out]
    return [sorted(splits, key=lambda s: s.num_stages) for splits in out]


class _Job(NamedTuple):
    """One chain's DP: a filtered chain of one request of :func:`split_chains`."""

    request: int  # index of the requested chain
    chain: np.ndarray  # [K] the filtered chain, at most L machines
    skips_slow: bool
    share: int
    free: np.ndarray  # [K] bytes free on its machines (with the slack)


def _variants(instance: Instance, chain: np.ndarray, free: np.ndarray, share: int) -> list[tuple[np.ndarray, bool]]:
    """The distinct filtered chains of :func:`split_chain` and whether each skips slow machines."""
    roomy = [chain[free[chain] >= floor] for floor in memory_floors(instance, share, len(chain))]
    # The memory-filtered chains first, so that a chain that is one of them is never marked
    # skips_slow because it is also another's chain without its slow machines.
    out: list[tuple[np.ndarray, bool]] = []
    for kept, skips in [(kept, False) for kept in roomy] + [(without_slow(instance, kept), True) for kept in roomy]:
        if not any(np.array_equal(kept, other) for other, _ in out):
            out.append((kept, skips))
    return out


def _next_retry(instance: Instance, layers: _Layers, job: _Job, found: dict, below: int) -> int | None:
    """The deepest prefix of at most ``below`` machines, none found yet, that may fit with its
    own stash, smaller than the deepest prefix's; ``None`` if there is none."""
    deepest = stash_count(instance, len(job.chain))
    for j in range(below, 0, -1):
        s = stash_count(instance, j)
        if j not in found and s < deepest and job.free[:j].sum() >= job.share * layers.need(s).sum():
            return j
    return None


def _reversed(split: Split) -> Split:
    """A split of the reversed layers as a split of the layers: machines in pipeline order."""
    return split._replace(machines=split.machines[::-1].copy(), stage_of_layer=split.num_stages - 1 - split.stage_of_layer[::-1])


class _Band(NamedTuple):
    """The stage times of every span that fits in memory, in band form.

    A machine holds at most ``width`` consecutive layers (memory), so only spans ``k..i-1`` with
    ``i - width <= k < i`` can be stages: entry ``[j, i, o]`` is the span ending before layer
    ``i`` that starts at ``k = i - width + o`` on stage ``j``'s machine, ``inf`` where it does
    not fit, ``k < 0``, or the stage ends before ``L`` without a next machine. On memory-tight
    models over long chains the band is a few layers wide (4 of 49 on 512 x GPT-3 175B x 4
    instances), so the DP costs ``O(K T L width)`` instead of ``O(K T L^2)``; with every span
    fitting it is the full table. Same values, same ties (least ``k`` first) as the full table.
    """

    width: int
    span_max: np.ndarray  # [K, L + 1, width] t_max of the span, inf where it cannot be a stage
    span_sum: np.ndarray  # [K, L + 1, width] t_sum of the span, inf where t_max is


class _Spec(NamedTuple):
    """One DP: the first ``stages`` machines of ``chain`` (their links as on the whole chain),
    ``share`` replicas on them, ``stash`` micro-batches stashed per layer."""

    chain: np.ndarray  # [C] machines in pipeline order
    free: np.ndarray  # [C] bytes free on them (with the slack)
    share: int
    stash: int
    stages: int


def _need_prefix(layers: _Layers, stash: int) -> np.ndarray:
    """``[L + 1]`` bytes of layers ``0..i-1`` with ``stash`` micro-batches stashed."""
    return np.concatenate([[0.0], np.cumsum(layers.need(stash))])


def _width(layers: _Layers, spec: _Spec) -> int:
    """The most consecutive layers the roomiest of the spec's machines holds (at least 1)."""
    need = _need_prefix(layers, spec.stash)
    fits = spec.share * (need[None, :] - need[:, None]) <= spec.free[: spec.stages].max()  # [k, i]
    k_fit, i_fit = np.nonzero(np.triu(fits, 1))
    return max(1, int((i_fit - k_fit).max()) if len(k_fit) else 1)


def _bands(instance: Instance, layers: _Layers, specs: list[_Spec], width: int) -> _Band:
    """The :class:`_Band` s of the specs, stacked: ``[B, K, L + 1, width]`` with ``K`` the most
    stages of any, ``width`` at least each spec's :func:`_width` (wider entries are spans that
    fit on none of its machines, and stages past a spec's own are none: ``inf``).

    Per stage, with ``share`` replicas on the chain: ``t_max = max(share * t_c, t_x)`` and
    ``t_sum = t_c + t_l`` (see the module docstring); memory ``share * need(k..i-1) <= free``.
    """
    c = instance.cluster
    n = instance.num_layers
    k_len = max(spec.stages for spec in specs)
    ends = np.arange(n + 1)[:, None]
    first = _window_index(n + 1, width) - width  # [i, o] -> k
    valid = first >= 0
    k = np.where(valid, first, 0)
    share = np.array([spec.share for spec in specs])[:, None, None, None]
    # per spec and stage: the machine, its free bytes, its next machine; padding: machine 0
    machine = np.zeros((len(specs), k_len), dtype=np.int64)
    following = np.zeros((len(specs), k_len), dtype=np.int64)
    free = np.zeros((len(specs), k_len))
    stage_ok = np.zeros((len(specs), k_len), dtype=bool)
    linked = np.zeros((len(specs), k_len), dtype=bool)  # stages with a next machine
    for b, spec in enumerate(specs):
        machine[b, : spec.stages] = spec.chain[: spec.stages]
        free[b, : spec.stages] = spec.free[: spec.stages]
        stage_ok[b, : spec.stages] = True
        links = min(spec.stages, len(spec.chain) - 1)
        following[b, :links] = spec.chain[1 : links + 1]
        linked[b, :links] = True
    need = np.stack([_need_prefix(layers, spec.stash) for spec in specs])  # [B, L + 1]
    prefix = np.concatenate([[0.0], np.cumsum(layers.train_flops)])
    compute = (prefix[ends] - prefix[k])[None, None] / c.flops[machine][:, :, None, None]  # [B, K, i, o]
    span_need = (need[:, ends] - need[:, k])[:, None]  # [B, 1, i, o]
    ok = valid & stage_ok[:, :, None, None] & (share * span_need <= free[:, :, None, None])
    cut = layers.cut
    # links of stages without a next machine (a machine to itself, or padding) are masked out
    fwd_bw = np.where(linked, c.bandwidth_bps[machine, following], 1.0)
    bwd_bw = np.where(linked, c.bandwidth_bps[following, machine], 1.0)
    occupancy = np.full((len(specs), k_len, n + 1), np.inf)
    latency = np.full((len(specs), k_len, n + 1), np.inf)
    occupancy[:, :, :n] = np.where(linked[:, :, None], share[:, :, 0] * cut[None, None, :n] / np.minimum(fwd_bw, bwd_bw)[:, :, None], np.inf)
    latency[:, :, :n] = np.where(
        linked[:, :, None],
        2.0 * c.latency_s[machine, following][:, :, None] + cut[None, None, :n] / fwd_bw[:, :, None] + cut[None, None, :n] / bwd_bw[:, :, None],
        np.inf,
    )
    occupancy[:, :, n] = 0.0
    latency[:, :, n] = 0.0
    span_max = np.where(ok, np.maximum(share * compute, occupancy[:, :, :, None]), np.inf)
    span_sum = np.where(np.isfinite(span_max), compute + latency[:, :, :, None], np.inf)
    return _Band(width, span_max, span_sum)


# Batches of _solve_many: a band joins a batch while the padded batch costs at most this many
# times its bands' own DPs (stage count x band width) and a step's arrays (bands x thresholds x
# layers x width cells) stay within _BATCH_CELLS, a few tens of MB.
_BATCH_PADDING = 1.25
_BATCH_CELLS = 1 << 21


def _solve_many(instance: Instance, layers: _Layers, specs: list[_Spec], count: int) -> list[dict[int, tuple[np.ndarray, float]]]:
    """:func:`_solve` of every spec, specs of similar band width and depth solved side by side
    (their bands stacked: :func:`_bands`): a DP is ~30 numpy operations per stage, so one band
    at a time the interpreter, not the arithmetic, set its cost."""
    out: list[dict[int, tuple[np.ndarray, float]]] = [{} for _ in specs]
    widths = [_width(layers, spec) for spec in specs]
    n1 = instance.num_layers + 1
    batch: list[int] = []

    def flush() -> None:
        band = _bands(instance, layers, [specs[i] for i in batch], widths[batch[-1]])
        for index, solved in zip(batch, _solve(band, instance, count), strict=True):
            out[index] = solved
        batch.clear()

    for b in sorted(range(len(specs)), key=lambda b: (widths[b], specs[b].stages)):
        if batch:
            members = batch + [b]
            width, depth = widths[b], max(specs[i].stages for i in members)
            own = sum(widths[i] * specs[i].stages for i in members)
            cells = len(members) * max(count, depth) * n1 * width
            if len(members) * width * depth > _BATCH_PADDING * own or cells > _BATCH_CELLS:
                flush()
        batch.append(b)
    if batch:
        flush()
    return out


def _thresholds(stacked: _Band, count: int) -> np.ndarray:
    """``[B, T]`` bottleneck thresholds per band: each stage count's optimal bottleneck,
    quantiles, and ``inf`` (padded with ``inf`` to the longest grid: a repeated threshold
    repeats its DP, and the first of equal estimates wins)."""
    span_max, width = stacked.span_max, stacked.width
    n_b, k_len, n1, _ = span_max.shape
    # best[:, width + i]: the least bottleneck of the stages so far up to layer i (inf before 0)
    best = np.full((n_b, width + n1), np.inf)
    best[:, width] = 0.0
    windows = np.lib.stride_tricks.sliding_window_view(best, width, axis=1)[:, :n1]  # [B, i, o]: best[i + o]
    optimal = np.empty((n_b, k_len))
    for j in range(k_len):  # min-max DP: the least bottleneck of j + 1 stages up to each layer
        best[:, width:] = np.maximum(windows, span_max[:, j]).min(axis=2)
        optimal[:, j] = best[:, -1]
    ascending = np.sort(optimal, axis=1)
    distinct = np.isfinite(ascending)
    distinct[:, 1:] &= ascending[:, 1:] != ascending[:, :-1]
    grids = []
    for spans, row, keep in zip(span_max, ascending, distinct, strict=True):
        found = row[keep]  # the distinct finite optima, ascending
        if len(found) > count // 2:
            found = found[_spread(len(found), count // 2)]
        low = found[0] if len(found) else 0.0
        finite = spans[(spans >= low) & (spans < np.inf)]
        quantiles = _linear_quantiles(finite, _unit_grid(count - len(found))) if len(finite) else []
        grids.append(np.unique(np.concatenate([found, quantiles, [np.inf]])))
    grid = np.full((n_b, max(len(g) for g in grids)), np.inf)
    for b, g in enumerate(grids):
        grid[b, : len(g)] = g
    return grid


@lru_cache(maxsize=256)
def _spread(size: int, count: int) -> np.ndarray:
    """``count`` indices spread evenly over ``0..size-1`` (rounded ``linspace``; read-only)."""
    out = np.round(np.linspace(0, size - 1, count)).astype(int)
    out.flags.writeable = False
    return out


@lru_cache(maxsize=64)
def _unit_grid(count: int) -> np.ndarray:
    """``linspace(0, 1, count)`` (read-only)."""
    out = np.linspace(0, 1, count)
    out.flags.writeable = False
    return out


def _linear_quantiles(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.quantile(values, q)`` (its default, linear method: the same floats, its steps
    without its generic checks, which cost more than the arithmetic for the DP's small bands)."""
    n = len(values)
    virtual = (n - 1) * q
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = -1
    following[above] = -1
    previous = previous.astype(np.intp)
    following = following.astype(np.intp)
    part = np.partition(values, np.unique(np.concatenate(([0, -1], previous, following))))
    low, high = part[previous], part[following]
    gamma = virtual - previous
    diff = high - low
    out = low + diff * gamma
    np.subtract(high, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return out


def _window_index(n1: int, width: int) -> np.ndarray:
    """``[L + 1, width]``: where entry ``[i, o]``'s first layer ``k = i - width + o`` sits in an
    array padded with ``width`` entries in front."""
    return np.arange(n1)[:, None] + np.arange(width)[None, :]


def _solve(stacked: _Band, instance: Instance, count: int) -> list[dict[int, tuple[np.ndarray, float]]]:
    """Per band of ``stacked`` (:func:`_bands`), ``J -> (stage_of_layer, estimate)``: the best
    split for every feasible ``J`` in ``1..K``, the bands' DPs run side by side."""
    n_b, k_len, n1, width = stacked.span_max.shape
    n = n1 - 1
    thr = _thresholds(stacked, count)
    t_len = thr.shape[1]
    limits = thr[:, :, None, None]
    # Padded with `width` entries in front (k < 0): the best sum of t_sum over the first i
    # layers, and the max t_max along that best path.
    total = np.full((n_b, t_len, width + n1), np.inf)
    total[:, :, width] = 0.0
    bottleneck = np.zeros((n_b, t_len, width + n1))
    picks: list[tuple[np.ndarray, int]] = []  # per stage: the chosen o of every (B, T, i > j), w
    first_s = np.empty((n_b, k_len, t_len))  # P and B of the whole model on j + 1 stages
    bottleneck_s = np.empty((n_b, k_len, t_len))
    # Entry i's window of total, total[i : i + width] (its last w entries: the reachable
    # spans' first layers), as a strided view of total, which the loop updates in place.
    windows = np.lib.stride_tricks.sliding_window_view(total, width, axis=2)
    band_at = np.arange(n_b)[:, None, None]
    threshold_at = np.arange(t_len)[None, :, None]
    for j in range(k_len):
        # Every stage holds a layer, so stage j ends at i >= j + 1 and starts at k >= j: only
        # the last w = min(width, n - j) entries of the band of those i can be reached.
        w = min(width, n - j)
        lo = width - w
        ends = np.arange(n - j)  # entry i = j + 1 + ends
        # [B, T, i - j - 1, w]: each span's t_sum where its t_max is within each threshold, plus
        # the best sum up to its first layer
        span_max = stacked.span_max[:, j, j + 1 :, lo:]
        cand = np.where(span_max[:, None] <= limits, stacked.span_sum[:, None, j, j + 1 :, lo:], np.inf)
        cand += windows[:, :, j + 1 : n + 1, lo:]
        best = cand.argmin(axis=3)  # least o: least k among ties
        first = j + 1 + ends + lo + best  # the first layer k of the chosen span, padded (+ width)
        stage_max = span_max[band_at, ends, best]
        reach = cand[band_at, threshold_at, ends, best]
        total[:, :, : width + j + 1] = np.inf
        total[:, :, width + j + 1 :] = reach
        bottleneck[:, :, width + j + 1 :] = np.maximum(bottleneck[band_at, threshold_at, first], stage_max)
        picks.append((best, w))
        first_s[:, j], bottleneck_s[:, j] = total[:, :, -1], bottleneck[:, :, -1]
    # One pipeline-time call for every band, stage count and threshold.
    reached = np.isfinite(first_s).ravel()
    stash = np.tile(np.repeat([stash_count(instance, j + 1) for j in range(k_len)], t_len), n_b)[:, None]
    pipeline = pipeline_time_s(
        instance.workload,
        np.where(reached, first_s.ravel(), 0.0)[:, None],  # avoid 0 * inf when m = 1
        np.where(reached, bottleneck_s.ravel(), 0.0),
        stash,
    )
    estimate = np.where(reached, pipeline, np.inf).reshape(n_b, k_len, t_len)
    # Per band and feasible stage count, the threshold of the least estimate (the first on ties).
    band_of, count_of = np.nonzero(np.isfinite(estimate).any(axis=2))
    threshold_of = estimate[band_of, count_of].argmin(axis=1)
    stages = _backtrack(picks, band_of, threshold_of, count_of + 1, n)
    out: list[dict[int, tuple[np.ndarray, float]]] = [{} for _ in range(n_b)]
    for p, (b, j, t) in enumerate(zip(band_of.tolist(), count_of.tolist(), threshold_of.tolist(), strict=True)):
        out[b][j + 1] = (stages[p], float(estimate[b, j, t]))
    return out


def _backtrack(picks: list[tuple[np.ndarray, int]], band: np.ndarray, threshold: np.ndarray, count: np.ndarray, n: int) -> np.ndarray:
    """``[P, L]`` the stage of each layer on each path ``p``: band ``band[p]``'s best split into
    ``count[p]`` stages under threshold ``threshold[p]`` (all paths walked back together)."""
    first = np.full((len(band), len(picks) + 1), n)  # first layer of each stage, n past the last
    i = np.full(len(band), n)
    for j in range(len(picks) - 1, -1, -1):
        active = np.flatnonzero(count > j)
        best, w = picks[j]
        # entry i of stage j sits at i - j - 1
        i[active] = i[active] - w + best[band[active], threshold[active], i[active] - j - 1]
        first[active, j] = i[active]
    # a layer's stage: how many stages after the first begin at or before it
    marks = np.zeros((len(band), n + 1), dtype=np.int64)
    paths = np.repeat(np.arange(len(band)), len(picks))
    later = first[:, 1 : len(picks) + 1].ravel()
    np.add.at(marks, (paths, later), 1)
    return np.cumsum(marks, axis=1)[:, :n]
