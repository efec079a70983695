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
model's iteration time exactly. It grows with both ``P`` and ``B``, so Alpa's trick applies:
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
chains, where ``K = L``.

Memory: 1F1B stashes ``min(m, depth)`` micro-batches, so the DP first assumes the deepest
prefix's stash for every prefix (safe), then re-solves up to ``_MAX_RETRIES`` times for prefixes
shorter than any that fit, with their own smaller stash.
"""

from __future__ import annotations

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
    chain = np.asarray(chain, dtype=np.int64)
    free = np.asarray(free_bytes, dtype=np.float64) * (1 + MEMORY_SLACK)
    layers = _layers(instance, reverse)
    out: list[Split] = []
    seen: list[np.ndarray] = []
    roomy = [chain[free[chain] >= floor] for floor in memory_floors(instance, share, len(chain))]
    # The memory-filtered chains first, so that a chain that is one of them is never marked
    # skips_slow because it is also another's chain without its slow machines.
    variants = [(kept, False) for kept in roomy] + [(without_slow(instance, kept), True) for kept in roomy]
    for kept, skips in variants:
        if any(np.array_equal(kept, other) for other in seen):
            continue
        seen.append(kept)
        found = _split_filtered(instance, layers, kept, free, share, max_stages, num_thresholds)
        out += [s._replace(skips_slow=skips) for s in found]
    if reverse:
        out = [s._replace(machines=s.machines[::-1].copy(), stage_of_layer=s.num_stages - 1 - s.stage_of_layer[::-1]) for s in out]
    return sorted(out, key=lambda s: s.num_stages)


def _split_filtered(
    instance: Instance,
    layers: _Layers,
    chain: np.ndarray,
    free: np.ndarray,
    share: int,
    max_stages: int | None,
    num_thresholds: int,
) -> list[Split]:
    k_max = min(len(chain), instance.num_layers, max_stages or len(chain))
    if k_max < 1:
        return []
    chain = chain[:k_max]
    free = free[chain]
    # Conservative first: the most stash any prefix needs (1F1B stashes min(m, depth)).
    deepest = stash_count(instance, k_max)
    found = _solve(_band(instance, layers, chain, free, share, deepest), instance, num_thresholds)
    # A shallower 1F1B pipeline stashes less, so prefixes shorter than any found may still fit
    # with their own stash. Retry from the deepest such prefix down (a solve for J also gives
    # every shorter prefix, with J's stash, which is enough for them), a few times at most.
    upper = min(found) if found else k_max + 1
    retries = 0
    for j in range(upper - 1, 0, -1):
        s = stash_count(instance, j)
        room = free[:j].sum() >= share * layers.need(s).sum()
        if j in found or s >= deepest or not room or retries == _MAX_RETRIES:
            continue
        retries += 1
        # the first j machines' stage times as on the whole chain (stage j - 1 keeps its link)
        band = _band(instance, layers, chain, free, share, s, stages=j)
        for count, split in _solve(band, instance, num_thresholds).items():
            found.setdefault(count, split)
    return [Split(chain[:j], stage, est) for j, (stage, est) in sorted(found.items())]


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


def _band(
    instance: Instance,
    layers: _Layers,
    chain: np.ndarray,
    free: np.ndarray,
    share: int,
    stash: int,
    stages: int | None = None,
) -> _Band:
    """The :class:`_Band` of the first ``stages`` machines of ``chain`` (default all; their
    links as on the whole chain) with ``stash`` micro-batches stashed per layer; ``free``:
    ``[K]`` bytes free on the chain's machines.

    Per stage, with ``share`` replicas on the chain: ``t_max = max(share * t_c, t_x)`` and
    ``t_sum = t_c + t_l`` (see the module docstring); memory ``share * need(k..i-1) <= free``.
    """
    c = instance.cluster
    n = instance.num_layers
    k_len = len(chain) if stages is None else stages
    need = np.concatenate([[0.0], np.cumsum(layers.need(stash))])
    fits = share * (need[None, :] - need[:, None]) <= free[:k_len].max()  # [k, i] on the roomiest
    k_fit, i_fit = np.nonzero(np.triu(fits, 1))
    width = max(1, int((i_fit - k_fit).max()) if len(k_fit) else 1)
    ends = np.arange(n + 1)[:, None]
    first = _window_index(n + 1, width) - width  # [i, o] -> k
    valid = first >= 0
    k = np.where(valid, first, 0)
    prefix = np.concatenate([[0.0], np.cumsum(layers.train_flops)])
    compute = (prefix[ends] - prefix[k])[None] / c.flops[chain[:k_len]][:, None, None]  # [K, i, o]
    ok = valid[None] & (share * (need[ends] - need[k])[None] <= free[:k_len, None, None])
    cut = layers.cut
    occupancy = np.full((k_len, n + 1), np.inf)
    latency = np.full((k_len, n + 1), np.inf)
    occupancy[:, n] = 0.0
    latency[:, n] = 0.0
    linked = min(k_len, len(chain) - 1)  # stages with a next machine
    if linked > 0:
        a, b = chain[:linked], chain[1 : linked + 1]
        fwd_bw, bwd_bw = c.bandwidth_bps[a, b], c.bandwidth_bps[b, a]
        occupancy[:linked, :n] = share * cut[None, :n] / np.minimum(fwd_bw, bwd_bw)[:, None]
        latency[:linked, :n] = (
            2.0 * c.latency_s[a, b][:, None]
            + cut[None, :n] / fwd_bw[:, None]
            + cut[None, :n] / bwd_bw[:, None]
        )
    span_max = np.where(ok, np.maximum(share * compute, occupancy[:, :, None]), np.inf)
    span_sum = np.where(np.isfinite(span_max), compute + latency[:, :, None], np.inf)
    return _Band(width, span_max, span_sum)


def _thresholds(band: _Band, count: int) -> np.ndarray:
    """Bottleneck thresholds: each stage count's optimal bottleneck, quantiles, and ``inf``."""
    span_max, width = band.span_max, band.width
    k_len, n1, _ = span_max.shape
    # best[width + i]: the least bottleneck of the stages so far up to layer i (inf before 0)
    best = np.full(width + n1, np.inf)
    best[width] = 0.0
    window = _window_index(n1, width)
    optimal = np.empty(k_len)
    for j in range(k_len):  # min-max DP: the least bottleneck of j + 1 stages up to each layer
        best[width:] = np.maximum(best[window], span_max[j]).min(axis=1)
        optimal[j] = best[-1]
    optimal = np.unique(optimal[np.isfinite(optimal)])
    if len(optimal) > count // 2:
        optimal = optimal[np.round(np.linspace(0, len(optimal) - 1, count // 2)).astype(int)]
    finite = span_max[np.isfinite(span_max)]
    low = optimal.min() if len(optimal) else 0.0
    finite = finite[finite >= low]
    quantiles = np.quantile(finite, np.linspace(0, 1, count - len(optimal))) if len(finite) else []
    return np.unique(np.concatenate([optimal, quantiles, [np.inf]]))


def _window_index(n1: int, width: int) -> np.ndarray:
    """``[L + 1, width]``: where entry ``[i, o]``'s first layer ``k = i - width + o`` sits in an
    array padded with ``width`` entries in front."""
    return np.arange(n1)[:, None] + np.arange(width)[None, :]


def _solve(band: _Band, instance: Instance, count: int) -> dict[int, tuple[np.ndarray, float]]:
    """``J -> (stage_of_layer, estimate)``: the best split for every feasible ``J`` in ``1..K``."""
    k_len, n1, width = band.span_max.shape
    n = n1 - 1
    thr = _thresholds(band, count)
    t_len = len(thr)
    limits = thr[:, None, None]
    # Padded with `width` entries in front (k < 0): the best sum of t_sum over the first i
    # layers, and the max t_max along that best path.
    total = np.full((t_len, width + n1), np.inf)
    total[:, width] = 0.0
    bottleneck = np.zeros((t_len, width + n1))
    window = _window_index(n1, width)
    rows = np.arange(t_len)[:, None]
    ends = np.arange(n1)[None, :]
    picks: list[tuple[np.ndarray, int]] = []  # per stage: the chosen o of every (T, i > j), w
    first_s = np.empty((k_len, t_len))  # P and B of the whole model on j + 1 stages
    bottleneck_s = np.empty((k_len, t_len))
    for j in range(k_len):
        # Every stage holds a layer, so stage j ends at i >= j + 1 and starts at k >= j: only
        # the last w = min(width, n - j) entries of the band of those i can be reached.
        w = min(width, n - j)
        lo = width - w
        # [T, i - j - 1, w]: each span's t_sum where its t_max is within each threshold, plus the
        # best sum up to its first layer
        span_max = band.span_max[j, j + 1 :, lo:]
        cand = np.where(span_max <= limits, band.span_sum[j, j + 1 :, lo:], np.inf)
        cand += total[:, window[j + 1 :, lo:]]
        best = cand.argmin(axis=2)  # least o: least k among ties
        i = ends[:, : n - j]
        first = j + 1 + i + lo + best  # the first layer k of the chosen span, padded (+ width)
        stage_max = span_max[i, best]
        total[:, : width + j + 1] = np.inf
        total[:, width + j + 1 :] = cand[rows, i, best]
        bottleneck[:, width + j + 1 :] = np.maximum(bottleneck[rows, first], stage_max)
        picks.append((best, w))
        first_s[j], bottleneck_s[j] = total[:, -1], bottleneck[:, -1]
    # One pipeline-time call for every stage count and threshold.
    reached = np.isfinite(first_s).ravel()
    stash = np.repeat([stash_count(instance, j + 1) for j in range(k_len)], t_len)[:, None]
    pipeline = pipeline_time_s(
        instance.workload,
        np.where(reached, first_s.ravel(), 0.0)[:, None],  # avoid 0 * inf when m = 1
        np.where(reached, bottleneck_s.ravel(), 0.0),
        stash,
    )
    estimate = np.where(reached, pipeline, np.inf).reshape(k_len, t_len)
    out: dict[int, tuple[np.ndarray, float]] = {}
    for j in range(k_len):
        t = int(np.argmin(estimate[j]))
        if np.isfinite(estimate[j, t]):
            out[j + 1] = (_backtrack(picks[: j + 1], t, n), float(estimate[j, t]))
    return out


def _backtrack(picks: list[tuple[np.ndarray, int]], t: int, n: int) -> np.ndarray:
    """``[L]`` the stage of each layer on the path that reaches layer ``n`` after the last pick."""
    stage = np.empty(n, dtype=np.int64)
    i = n
    for j in range(len(picks) - 1, -1, -1):
        best, w = picks[j]
        k = i - w + int(best[t, i - j - 1])  # entry i of stage j sits at i - j - 1
        stage[k:i] = j
        i = k
    return stage
