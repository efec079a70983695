"""Cost-model signals for the agent: stay-completion shaping and a one-step lookahead feature.

Both read a partial placement the way a pipeline is built: the open replica's remaining layers
*stay* on its last machine (a stage is a run of consecutive layers on one machine), and only the
replicas opened so far count (the workload evaluated with ``D' = r + 1`` replicas). The
potential of a state is the log speed-up of that completion over the reference::

    Phi(s) = max(log(T_ref / T(stay_completion(s))), MIN_REWARD),   Phi(s_0) = 0

Replicas not opened yet are left out rather than filled in from the (naive) reference
placement, which depends on the machines' listed order: this way both signals, like the rest of
the observation, are unchanged when the machines are relabelled.

* :class:`StayLookahead` is a ``gymnasium.Wrapper`` around a ``reward="terminal"``
  :class:`hulk_env.env.PlacementEnv` that

  - shapes the reward (Ng et al. 1999): ``r' = r + Phi(s') - Phi(s)`` with ``Phi = 0`` at the
    end, so with ``gamma = 1`` the episode return is exactly the env's terminal return (the log
    speed-up over naive); only its timing changes;
  - with ``lookahead=True`` adds the observation key ``lookahead`` ``[max_machines, 2]``; for
    every valid machine ``a``, with ``T_a`` the time of the stay completion after placing the
    current slot on ``a``:

    - column 0, *gain*: ``log(T_best / T_a)``, ``T_best`` the smallest of them: 0 for the best
      machine, negative for the others (clipped at ``-LOOKAHEAD_CLIP``). Up to a per-state
      constant this is the shaped reward each action would get; the constant (which would
      involve the naive reference, and so the machines' order) is left out so that the
      observation stays equivariant;
    - column 1, *fits*: 1 if that stay completion fits in memory (the cost model's memory
      rule), else 0 -- the one-step view of a memory dead end ahead.

    Masked and padded machines read ``(0, 0)``. One batched cost-model call per step (``M``
    placements, ~0.4 ms for 47 machines x 26 layers).

Cost evaluations: the lookahead evaluates one placement per valid machine per step and the
shaping one per step; the cost model counts them all (:func:`hulk_env.cost.count_evals`), so a
method that runs its rollout inside ``count_evals()`` reports them in ``cost_evals``, and
:mod:`hulk_env.evaluation.runner` does so for every method it runs.

Why not the env's ``dense`` reward: it completes with the naive placement (every remaining
layer on the naive machines), which pays the agent for moving back to the naive machine; on the
default instance that steers PPO towards the naive placement, 7x slower than the best. The
stay completion values "start on a fast machine" and "switch machine here" by what they are
worth; the lookahead shows those values to the policy before it acts, so it learns *when* a
switch pays instead of first having to stumble on one.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hulk_env import cost
from hulk_env.baselines.common import NeighbourOrder, nearest_neighbour_chain
from hulk_env.errors import HulkInputError
from hulk_env.rewards import log_speedup_reward

LOOKAHEAD_KEY = "lookahead"
LOOKAHEAD_CLIP = 3.0  # log time ratios: 3 = 20x slower than the best candidate
COMPLETIONS = ("stay", "pipeline", "split")  # StayLookahead's completion rules (see the module doc)
# ... and the shaping's: also "witness", the env's own memory-feasible completion (with a plan
# shown, the plan itself), which has no per-candidate form and so serves the shaping only.
SHAPING_COMPLETIONS = (*COMPLETIONS, "witness")
SPLIT_STAGES = 4  # the split completion tries 2 .. SPLIT_STAGES stages from the candidate
BISECTION_STEPS = 10  # the split's bottleneck search: to 2^-10 of a layer's time on the slowest stage


def lookahead_space(max_machines: int) -> spaces.Box:
    """The ``lookahead`` observation's space: ``[M, 2]`` (gain in [-clip, 0], fits in {0, 1})."""
    low = np.tile(np.array([-LOOKAHEAD_CLIP, 0.0], dtype=np.float32), (max_machines, 1))
    high = np.tile(np.array([0.0, 1.0], dtype=np.float32), (max_machines, 1))
    return spaces.Box(low, high, (max_machines, 2), np.float32)


def stay_completion(placement: np.ndarray, t: int) -> np.ndarray:
    """``[r', L]``: the replicas opened so far of a partial placement (``t`` slots placed,
    replica-major, ``-1`` unplaced), the open one completed by keeping its remaining layers on
    its last machine. ``r'`` is the open replica + 1, or the number of complete replicas when
    the open one has no layer yet."""
    n_layers = placement.shape[1]
    r, layer = divmod(t, n_layers)
    if layer == 0:
        return placement[:r].copy()
    full = placement[: r + 1].copy()
    full[r, layer:] = placement[r, layer - 1]
    return full


def pipeline_options(placement: np.ndarray, t: int, machines: np.ndarray) -> np.ndarray:
    """``[K, P, D, L]``: for each machine in ``machines``, slot ``t`` (replica ``r``, layer
    ``l``) placed there and the whole placement completed as a data-parallel pipeline:

    * option 0 (*stay*): the rest of replica ``r`` stays on the machine;
    * option 1 (*ring*, only for ``r > 0`` and ``l < L - 1``): the rest of replica ``r`` follows
      replica ``r - 1``'s machines for the same layers;
    * every later replica copies replica ``r`` (replicas sharing machines pay no gradient sync
      over the network: the layout the stage DP's ``latency-chain-dp`` builds wherever memory
      allows, Narayanan et al. 2021's "PipeDream-2BW"-style replicated pipelines).

    Like the stay completion, a function of the placed slots and the candidate only (no machine
    order enters), so the lookahead stays equivariant under relabelling.
    """
    n_layers = placement.shape[1]
    r, layer = divmod(t, n_layers)
    stay = np.repeat(placement[None], len(machines), axis=0)
    stay[:, r, layer:] = machines[:, None]
    options = [stay]
    if r > 0 and layer + 1 < n_layers:
        ring = stay.copy()
        ring[:, r, layer + 1 :] = placement[r - 1, layer + 1 :]
        options.append(ring)
    out = np.stack(options, axis=1)
    out[:, :, r + 1 :] = out[:, :, r : r + 1]
    return out


def candidate_completions(placement: np.ndarray, t: int, machines: np.ndarray) -> np.ndarray:
    """``[K, r + 1, L]``: for each machine in ``machines``, slot ``t`` (replica ``r``) placed
    there and the rest of its replica staying there (:func:`stay_completion` after the step)."""
    n_layers = placement.shape[1]
    r, layer = divmod(t, n_layers)
    out = np.repeat(placement[None, : r + 1], len(machines), axis=0)
    out[:, r, layer:] = machines[:, None]
    return out


class NearestWalks:
    """Nearest-neighbour walks over one instance's machines
    (:func:`hulk_env.baselines.common.nearest_neighbour_chain`), one per start, kept: the
    lookahead's nearest-first re-plan asks for the same few starts at every step."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.layer_work = cost.train_flops(instance.workload)  # [L], what split_options balances
        self._order = NeighbourOrder(instance)
        self._walks: dict[int, np.ndarray] = {}
        self._matrix: np.ndarray | None = None

    def __call__(self, start: int) -> np.ndarray:
        walk = self._walks.get(start)
        if walk is None:
            walk = self._walks[start] = nearest_neighbour_chain(self.instance, start, order=self._order)
        return walk

    def matrix(self) -> np.ndarray:
        """``[M, M]``: row ``a`` is the walk from ``a`` (``a`` first)."""
        if self._matrix is None:
            self._matrix = np.stack([self(a) for a in range(self.instance.cluster.num_machines)])
        return self._matrix


def _fill(ext_work: np.ndarray, rate: np.ndarray, limit_s: np.ndarray, min_first: int) -> np.ndarray:
    """``[K, S]`` layers consumed after each stage by the greedy fill: each stage in turn takes
    as many of the next layers as it runs within ``limit_s`` at ``rate`` (FLOP/s), the first
    at least ``min_first``; a stage of rate 0 (past its row's stage count) takes nothing.
    ``ext_work``: cumulative work with a leading 0."""
    ends = np.empty(rate.shape, dtype=np.int64)
    pos = np.zeros(len(rate), dtype=np.int64)
    for j in range(rate.shape[1]):
        end = np.searchsorted(ext_work, ext_work[pos] + limit_s * rate[:, j], side="right") - 1
        pos = ends[:, j] = np.where(rate[:, j] > 0, np.maximum(end, min_first) if j == 0 else end, pos)
    return ends


def _balanced_rows(firsts: np.ndarray, nexts: np.ndarray, ok_next: np.ndarray, flops: np.ndarray,
                   cum_work: np.ndarray, min_first: int) -> tuple[np.ndarray, np.ndarray]:
    """``([K, S - 1, n] machines, [K, S - 1] valid)``: the ``n`` layers of ``cum_work``
    (cumulative work, the current stage's first layer first) cut into at most ``s = 2 .. S``
    stages on ``firsts[k]`` then ``nexts[k, :s - 1]``, in that order, so that the slowest stage
    (work / FLOP/s) is as fast as a contiguous cut makes it (to 2^-:data:`BISECTION_STEPS` of
    one layer's time); the first stage keeps at least ``min_first`` layers. A middle machine
    may get no layer (a slow one whose every layer would be the bottleneck); a row whose last
    machine gets none is the shorter row again and is not valid.

    Why the bottleneck and not each stage's FLOP/s share of the work: the share's cuts fall
    inside layers, and rounding them gave a slow first machine (an A10 before three H100s) a
    layer too many, the stage that then set the pipeline's pace. The search is the classic
    bisection for the linear partition problem with a fixed machine order: the greedy fill
    under a limit uses every layer iff the limit is at least the best bottleneck, which lies
    between the perfect balance and it plus one layer on the slowest machine."""
    k, extra = nexts.shape
    n = len(cum_work)
    machines = np.concatenate((firsts[:, None], nexts), axis=1)  # [K, S]
    counts = np.arange(2, extra + 2)
    # one row per (candidate, stage count); a stage past the row's count has rate 0
    live = np.arange(extra + 1)[None, :] < counts[:, None]  # [S - 1, S]
    rate = np.where(live[None], flops[machines][:, None, :], 0.0).reshape(k * extra, extra + 1)
    ext = np.concatenate(([0.0], cum_work))
    slowest = np.where(rate > 0, rate, np.inf).min(axis=1)
    lo = cum_work[-1] / rate.sum(axis=1)  # perfect balance: no cut is faster
    hi = lo + np.diff(ext).max() / slowest  # the greedy fill overshoots it by at most a layer
    hi = np.where(_fill(ext, rate, hi, min_first)[:, -1] >= n, hi, cum_work[-1] / slowest)  # float safety
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        done = _fill(ext, rate, mid, min_first)[:, -1] >= n
        hi = np.where(done, mid, hi)
        lo = np.where(done, lo, mid)
    ends = _fill(ext, rate, hi, min_first)  # [K (S - 1), S]
    stage = (np.arange(n)[None, :, None] >= ends[:, None, :]).sum(axis=2).reshape(k, extra, n)
    rows = np.take_along_axis(machines[:, None, :], np.minimum(stage, extra), axis=2)
    last = ends.reshape(k, extra, extra + 1)[:, np.arange(extra), counts - 2]  # layers before the last stage
    valid = (last < n) & np.logical_and.accumulate(ok_next, axis=1)  # row s - 2 needs nexts[:, :s - 1]
    return rows, valid


def split_options(placement: np.ndarray, t: int, machines: np.ndarray, walks: NearestWalks,
                  flops: np.ndarray, layer_work: np.ndarray, stages: int = SPLIT_STAGES) -> tuple[np.ndarray, np.ndarray]:
    """``([K, stages - 1, D, L], [K, stages - 1] valid)``: for each machine in ``machines``, slot
    ``t`` (replica ``r``, layer ``l``) placed there and the rest of replica ``r`` cut into a
    balanced pipeline over the candidate (with the layers it already holds when it is the
    predecessor's machine) and the next ``s - 1 = 1 .. stages - 1`` machines of its
    nearest-neighbour walk that the replica does not use yet, cut so that the slowest stage
    (``layer_work`` / FLOP/s) is as fast as it can be (:func:`_balanced_rows`); later replicas
    copy replica ``r``.

    Why: the stay and ring completions compare *switch now* with *never switch*, so the greedy
    switches as soon as a switch pays at all -- a stage of 2 layers where the best is 13 -- and
    at the first slot cannot see which machine has a fast neighbour for the next stage. The
    balanced cut is the one-step lookahead of a better base heuristic (Bertsekas' rollout
    algorithm: a one-step lookahead improves on the policy that completes it).
    """
    n_layers = placement.shape[1]
    r, layer = divmod(t, n_layers)
    stages = min(stages, len(flops))  # no more stages than machines
    if stages < 2:
        return np.empty((len(machines), 0, *placement.shape), dtype=np.int64), np.zeros((len(machines), 0), dtype=bool)
    row = placement[r, :layer]
    used = np.zeros(len(flops), dtype=bool)
    used[row] = True
    walk = walks.matrix()[machines]  # [K, M]
    excluded = used[walk] | (walk == machines[:, None])
    pick = np.argsort(excluded, axis=1, kind="stable")[:, : stages - 1]
    nexts = np.take_along_axis(walk, pick, axis=1)
    ok_next = ~np.take_along_axis(excluded, pick, axis=1)
    out = np.repeat(placement[None, None], len(machines), axis=0).repeat(stages - 1, axis=1)
    pred = int(row[-1]) if layer else -1
    run = int(np.argmax(row[::-1] != pred)) if (row != pred).any() else layer
    is_pred = machines == pred
    valid = np.zeros((len(machines), stages - 1), dtype=bool)
    for group, first in ((~is_pred, layer), (is_pred, layer - run)):
        if not group.any():
            continue
        rows, ok = _balanced_rows(machines[group], nexts[group], ok_next[group], flops, np.cumsum(layer_work[first:]), layer - first + 1)
        out[group, :, r, first:] = rows
        valid[group] = ok
    out[:, :, r + 1 :] = out[:, :, r : r + 1]
    return out, valid


def pipeline_times(state: Any, t: int, machines: np.ndarray, walks: NearestWalks | None = None,
                   split: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``([K] seconds, [K] fits)``: for each machine, the fastest :func:`pipeline_options`
    completion after slot ``t`` goes there that fits in memory; where none fits, the faster of
    the witness's two re-plans from that machine (:func:`hulk_env.completion.replan`: the open
    replica fills the machine as far as memory allows, then its other machines, then new ones
    roomiest first -- or, with ``walks``, nearest first), which fit by construction; where
    neither finds one, the fastest option's time and ``fits = False``. ``split`` (the ``split``
    completion rule, needs ``walks``): the :func:`split_options` count as options too.

    Why the re-plan: a completion that does not fit has a time the cost model computes as if
    memory were unbounded, and on a memory-tight instance *every* stay completion overflows
    (a LLaMA-65B replica on one machine): ranking machines by those times sends the greedy
    back and forth between the two fastest machines until the mask stops it (measured:
    +151% over ``latency-chain-dp`` untrained, unmoved by 2,048 PPO steps).

    Why both re-plans: roomiest first needs the fewest machines but scatters stages over
    regions; on ``hulk bench learn``'s memory-tight instance (12 machines in 4 cities x
    LLaMA-65B) it rated ``latency-chain-dp``'s first machine 1.70x slower than it is, so PPO
    never tried that start. Nearest first finds chain-dp's layout from there.

    ``state``: the env's episode (``placement``, ``static.instance``, and for the re-plan a
    ``witness``, as :class:`hulk_env.env.PlacementEnvV1` keeps); ``walks``: the instance's
    :class:`NearestWalks` (``None``: roomiest first only). One batched cost-model call, plus
    one for the re-plans when there are any.
    """
    from hulk_env.completion import replan

    inst = state.static.instance
    batch = pipeline_options(state.placement, t, machines)
    k, p = batch.shape[:2]
    times = cost.iteration_times(inst.cluster, inst.workload, batch.reshape(k * p, *batch.shape[2:]))
    seconds = times.iteration_time_s.reshape(k, p)
    ok = np.asarray(times.memory_feasible).reshape(k, p)
    best = np.where(ok, seconds, np.inf).min(axis=1)
    fits = ok.any(axis=1)
    witness = getattr(state, "witness", None)
    missing = np.flatnonzero(~fits)
    if split and walks is not None:
        options, valid = split_options(state.placement, t, machines, walks, inst.cluster.flops, walks.layer_work)
        rows, cols = np.nonzero(valid)
        if len(rows):
            timed = cost.iteration_times(inst.cluster, inst.workload, options[rows, cols])
            good = np.asarray(timed.memory_feasible, dtype=bool)
            np.minimum.at(best, rows[good], timed.iteration_time_s[good])
            fits[rows[good]] = True
    if len(missing) and witness is not None:
        static = witness.static
        placed_before = static.replicas_bytes(state.placement, t // static.num_layers)
        plans, rows = [], []
        orders = (None,) if walks is None else (None, walks)  # roomiest first, then nearest first
        for i in missing.tolist():
            for near in orders:
                plan = replan(static, state.placement, t, int(machines[i]), placed_before, near=near)
                if plan is not None:
                    plans.append(plan)
                    rows.append(i)
        if plans:
            planned = cost.iteration_times(inst.cluster, inst.workload, np.stack(plans))
            good = np.asarray(planned.memory_feasible, dtype=bool)
            idx = np.asarray(rows)[good]
            np.minimum.at(best, idx, planned.iteration_time_s[good])
            fits[idx] = True
    return np.where(np.isfinite(best), best, seconds.min(axis=1)), fits


class StayLookahead(gym.Wrapper):
    """Stay-completion shaping and (optionally) the lookahead observation; see the module doc.

    Args:
        env: a :class:`hulk_env.env.PlacementEnv` (``reward="terminal"`` when ``shape``).
        shape: add the stay-completion shaping to the env's reward.
        lookahead: add the ``lookahead`` observation key.
    """

    def __init__(self, env: gym.Env, shape: bool = True, lookahead: bool = True, completion: str = "stay") -> None:
        super().__init__(env)
        if completion not in SHAPING_COMPLETIONS:
            raise HulkInputError(f"unknown lookahead completion '{completion}'; choose one of {', '.join(SHAPING_COMPLETIONS)}", field="env.completion")
        if lookahead and completion not in COMPLETIONS:
            raise HulkInputError(f"the '{completion}' completion shapes the reward only: no lookahead with it", field="env.completion")
        self.shape = shape
        self.lookahead = lookahead
        self.completion = completion
        self.potential = 0.0
        # (id(workload), replicas) -> (workload, prefix workload); holding the workload keeps
        # its id from being reused by another instance's while it is cached.
        self._prefix: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._gains = np.zeros(env.unwrapped.max_machines)
        self._walks: NearestWalks | None = None
        if lookahead:
            m = env.unwrapped.max_machines
            space = dict(env.observation_space.spaces)
            space[LOOKAHEAD_KEY] = lookahead_space(m)
            self.observation_space = spaces.Dict(space)

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        self.potential = 0.0
        return self._observe(obs, ended=False), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        ended = terminated or truncated
        new = 0.0 if ended else self._potential()
        shaped = float(reward) + (new - self.potential if self.shape else 0.0)
        self.potential = new
        return self._observe(obs, ended), shaped, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        return self.env.unwrapped.action_masks()

    # ---- internals -----------------------------------------------------------------------
    def _workload(self, workload: Any, replicas: int) -> Any:
        """The workload with ``replicas`` data-parallel replicas (cached)."""
        if replicas == workload.data_parallel:
            return workload
        key = (id(workload), replicas)
        entry = self._prefix.get(key)
        if entry is None or entry[0] is not workload:
            if len(self._prefix) > 64:
                self._prefix.clear()
            entry = self._prefix[key] = (workload, workload.with_training(data_parallel=replicas))
        return entry[1]

    def _nearest_walks(self, instance: Any) -> NearestWalks:
        """The episode instance's :class:`NearestWalks` (a new instance gets new ones)."""
        if self._walks is None or self._walks.instance is not instance:
            self._walks = NearestWalks(instance)
        return self._walks

    def _potential(self) -> float:
        s = self.env.unwrapped.state
        static = s.static
        inst = static.instance
        if self.completion == "witness":
            # The env's witness: the placed slots, then a memory-feasible rest (the plan shown to
            # the policy once adopted), so following the plan earns 0 and leaving it earns what
            # the leaving changed. One cost-model evaluation per step.
            if s.t == 0:
                return 0.0
            time_s = cost.iteration_time(inst.cluster, inst.workload, s.witness.placement)
            return log_speedup_reward(time_s, static.reference_time_s)
        if self.completion in ("pipeline", "split"):
            if s.t == 0:
                return 0.0
            last = int(s.placement.reshape(-1)[s.t - 1])
            time_s = pipeline_times(s, s.t - 1, np.array([last]), self._nearest_walks(inst), self.completion == "split")[0][0]
            return log_speedup_reward(time_s, static.reference_time_s)
        full = stay_completion(s.placement, s.t)
        if len(full) == 0:
            return 0.0
        time_s = cost.iteration_time(inst.cluster, self._workload(inst.workload, len(full)), full)
        return log_speedup_reward(time_s, static.reference_time_s)

    def _observe(self, obs: dict[str, np.ndarray], ended: bool) -> dict[str, np.ndarray]:
        if not self.lookahead:
            return obs
        gains = np.zeros((self.env.unwrapped.max_machines, 2), dtype=np.float32)
        if not ended:
            s = self.env.unwrapped.state
            static = s.static
            inst = static.instance
            valid = np.flatnonzero(s.mask[: static.num_machines])
            if len(valid) and self.completion in ("pipeline", "split"):
                t, fits = pipeline_times(s, s.t, valid, self._nearest_walks(inst), self.completion == "split")
                gains[valid, 0] = np.maximum(np.log(t.min() / t), -LOOKAHEAD_CLIP)
                gains[valid, 1] = fits
            elif len(valid):
                batch = candidate_completions(s.placement, s.t, valid)
                workload = self._workload(inst.workload, batch.shape[1])
                times = cost.iteration_times(inst.cluster, workload, batch)
                t = times.iteration_time_s
                gains[valid, 0] = np.maximum(np.log(t.min() / t), -LOOKAHEAD_CLIP)
                gains[valid, 1] = times.memory_feasible
        obs[LOOKAHEAD_KEY] = gains
        return obs
