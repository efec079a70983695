"""Witness completions: keep every partial placement completable within memory.

The action mask of ``hulk/Placement-v1`` allows a machine for the next (replica, layer) slot only
if the *whole* placement can still be completed within memory afterwards, not just the layer at
hand. The proof is constructive: a :class:`Witness` holds one complete, memory-feasible placement
``W [D, L]`` that agrees with every slot placed so far (the *witness completion*). An action is
allowed when a cheap, deterministic repair of ``W`` puts the slot on that machine and stays
feasible; the repaired ``W`` becomes the new witness when the action is taken. ``W``'s own
machine for the slot needs no repair, so it is always allowed: an episode that starts from a
feasible witness (the naive placement) can never reach a dead end.

Memory follows the project's rule (:mod:`hulk_env.feasibility`, :func:`hulk_env.cost.memory_use_bytes`):
slot ``(r, l)`` needs ``state_l + k_r stash_l`` on its machine, with ``k_r`` the stash count of
replica ``r`` (:func:`hulk_env.feasibility.stash_count` of its pipeline depth, the number of
distinct machines it uses). A change of ``W`` that adds or removes a machine of the current
replica changes ``k_r`` and so every one of its machines' memory; the repairs account for that.
Under plan settings (:func:`hulk_env.parallelism.plan_active`) the rule is per machine: slot
``(r, l)`` on machine ``m`` needs ``state_{m,l} + k_r stash_{m,l}``, the state of the ``d_m``
data-parallel groups inside ``m`` (each holds a copy, ZeRO-sharded:
:func:`hulk_env.parallelism.slot_state_bytes`) and the busiest group's stash
(``stash_l s_m``, :func:`hulk_env.parallelism.group_share`); :class:`PlanWitness` keeps the
same repairs with every machine's own rates (:func:`hulk_env.feasibility.plan_slot_memory`),
and ``Witness(...)`` makes one when the instance has plan settings.

Repairs of ``W`` for slot ``t = (r, l)`` going to machine ``a`` (``w = W[r, l]``), tried in
this order (the first that fits is the one applied):

* **stay** ``a = w``: nothing changes (always feasible: the witness's own move);
* **swap**: ``W[r, l] = a``. The depth of replica ``r`` grows by one when ``a`` holds none of
  its layers and shrinks by one when ``l`` was ``w``'s only layer of it; with the new stash
  count every machine must still fit;
* **exchange** (``a`` holds a later layer ``f`` of the same replica, the last one): ``W[r, l] = a``
  and ``W[r, f] = w``. The replica keeps its machines (no stash change) and only ``a`` and
  ``w`` change, by ``need_l - need_f``: on a model of equal blocks this always fits, so the
  agent may take the witness's machines in any order;
* **relabel**: ``a`` and ``w`` trade everything ``W`` still has to place (all replicas, from
  slot ``t`` on); ``a`` keeps what is placed on it. Allowed when both fit and the open
  replica gains no machine (other replicas' depths are unchanged by a relabelling). This is
  what lets a replica take machines the witness kept for a later one;
* **re-plan** (:func:`replan`): everything after slot ``t`` is placed afresh on the memory the
  placed slots leave -- the open replica's rest on ``a``, its other machines, then the roomiest
  new ones; each later replica on the roomiest machines -- and the result is checked by the cost
  model's memory rule. It is what admits a heuristic's moves when ``W`` was built for a very
  different placement (a deeper first replica, another split of machines between replicas):
  a learner imitating ``latency-chain-dp`` would otherwise be refused a demonstrated move on
  about a third of memory-tight or multi-replica instances. Tried only for machines the cheap
  repairs refuse, that have room for the slot, at most ``REPLAN_CANDIDATES`` per step (the
  previous layer's machine, the same layer's machine in the previous replica and the
  ``REPLAN_NEAREST`` machines nearest to the previous layer's first, then the roomiest); every
  one for a replica's first slot.

Cost: each test is a handful of numpy operations on ``[M]`` vectors for all machines at once
(no ``[M, M]`` work). When every machine passed the last full test and its thresholds still
hold, only the machines the last step touched are tested again (``O(1)``: the common step on a
cluster with room). The relabel test runs only when some machine is still masked, the re-plan
only when one still is after it (``O(D L)`` numpy work per candidate); a relabel, a re-plan or
a new replica rebuilds the bookkeeping from the cost model's rule (``O(D L + M)``).

Sound by construction (every allowed action comes with a feasible completion), exact for the
slot itself, but conservative: the re-plan is one greedy construction, not a search over all
completions. :func:`mask_conservativeness` measures how much by exhaustive enumeration. On the
20 instances of ``tiny-v0`` (toy clusters whose memory binds often), over every state the mask
lets an episode reach (3,672), it hides 3 of the 9,181 truly completable actions (0.03%; per
instance: mean 0.4%, worst 4.3%, 17 instances with none hidden), and allows no action without a
completion. Before the re-plan repair it hid 84 of 6,575 (1.3%, worst 9.5%).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import MEMORY_RTOL, layer_memory_bytes, plan_slot_memory, stash_count
from hulk_env.instance import Instance

STAY, SWAP, EXCHANGE, RELABEL, REPLAN = 0, 1, 2, 3, 4  # how an allowed action repairs the witness
# Machines a step tests with a re-plan (the costly repair) when the cheap ones refuse them: the
# previous layer's machine, the same layer's machine in the previous replica and the machines
# nearest to the previous layer's first, then the roomiest. Bounds a step's cost on large,
# memory-tight clusters.
REPLAN_CANDIDATES = 24
REPLAN_NEAREST = 8  # of them, the machines nearest to the previous layer's (by latency)


@dataclass(frozen=True, eq=False)
class CompletionStatic:
    """What the witness needs of an instance (computed once per instance).

    Attributes:
        instance: the instance.
        num_machines, num_layers, data_parallel: ``M, L, D``.
        gpipe: the schedule is GPipe (stash count fixed, depth does not matter).
        capacity_bytes: ``[M]`` memory the witness may fill, ``(1 - MEMORY_RTOL) x memory``.
        state_bytes: ``[L]`` model-state bytes per layer (``layer_memory_bytes(w, 0)``).
        stash_bytes: ``[L]`` stash bytes per layer and micro-batch.
        stash_by_depth: stash count for a replica of depth ``0..M`` (``stash_count``).
        state_ml, stash_ml: ``[M, L]`` under plan settings, each machine's own rates
            (:func:`hulk_env.feasibility.plan_slot_memory`: slot ``(r, l)`` on ``m`` needs
            ``state_ml[m, l] + k_r stash_ml[m, l]``); ``state_bytes`` and ``stash_bytes`` are then
            their minima over machines (the re-plan's lower bounds only). ``None`` without plan
            settings (every machine alike).
    """

    instance: Instance
    num_machines: int
    num_layers: int
    data_parallel: int
    gpipe: bool
    capacity_bytes: np.ndarray
    state_bytes: np.ndarray
    stash_bytes: np.ndarray
    stash_by_depth: tuple[int, ...]
    state_ml: np.ndarray | None = None
    stash_ml: np.ndarray | None = None
    _prefix_workloads: dict = field(default_factory=dict, repr=False)
    _need_cumsums: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, instance: Instance) -> CompletionStatic:
        w = instance.workload
        rates = plan_slot_memory(instance.cluster, w, experts="lower")
        if rates is None:
            state = layer_memory_bytes(instance, 0)
            stash = layer_memory_bytes(instance, 1) - state
            per_machine = {}
        else:
            state, stash = rates.state_bytes.min(axis=0), rates.stash_bytes.min(axis=0)
            per_machine = {"state_ml": rates.state_bytes, "stash_ml": rates.stash_bytes}
            for arr in per_machine.values():
                arr.setflags(write=False)
        return cls(
            instance=instance,
            num_machines=instance.num_machines,
            num_layers=instance.num_layers,
            data_parallel=instance.data_parallel,
            gpipe=w.schedule == "gpipe",
            capacity_bytes=instance.cluster.memory_bytes * (1.0 - MEMORY_RTOL),
            state_bytes=state,
            stash_bytes=stash,
            stash_by_depth=tuple(stash_count(instance, d) for d in range(instance.num_machines + 2)),
            **per_machine,
        )

    @property
    def per_machine(self) -> bool:
        """Whether machines hold a slot at their own rates (plan settings)."""
        return self.state_ml is not None

    def slot_bytes(self, row: np.ndarray, k: int) -> np.ndarray:
        """``[len(row)]`` bytes of a replica's first ``len(row)`` layers on the machines of
        ``row`` at stash count ``k`` (per machine under plan settings)."""
        layers = np.arange(len(row))
        if self.state_ml is None:
            return self.state_bytes[layers] + k * self.stash_bytes[layers]
        return self.state_ml[row, layers] + k * self.stash_ml[row, layers]

    def rows_stash(self, row: np.ndarray) -> np.ndarray:
        """Stash bytes per micro-batch of a replica's first ``len(row)`` layers on ``row``."""
        if self.stash_ml is None:
            return self.stash_bytes[: len(row)]
        return self.stash_ml[row, np.arange(len(row))]

    def need_rows(self, k: int) -> list[list[float]]:
        """Per machine, the cumulative bytes of a replica's layers at stash count ``k`` on it
        (plan settings; cached: the re-plan's fills)."""
        out = self._need_cumsums.get(("rows", k))
        if out is None:
            out = self._need_cumsums[("rows", k)] = np.cumsum(self.state_ml + k * self.stash_ml, axis=1).tolist()
        return out

    def need_cumsum(self, k: int) -> list[float]:
        """Cumulative bytes of a replica's layers at stash count ``k`` (cached; re-plan fills)."""
        out = self._need_cumsums.get(k)
        if out is None:
            out = self._need_cumsums[k] = np.cumsum(self.state_bytes + k * self.stash_bytes).tolist()
        return out

    def fewest_machines(self, free_desc: np.ndarray) -> int:
        """A lower bound of the machines a whole replica needs, given the free bytes sorted
        roomiest first: the smallest ``d`` whose ``d`` roomiest machines hold its bytes at
        depth ``d``'s stash count (``len + 1`` when none does)."""
        most = min(len(free_desc), self.num_layers)
        d = np.arange(1, most + 1)
        k = np.asarray(self.stash_by_depth[1 : most + 1])
        need = float(self.state_bytes.sum()) + k * float(self.stash_bytes.sum())
        ok = np.flatnonzero(np.cumsum(free_desc[:most]) >= need)
        return int(d[ok[0]]) if len(ok) else most + 1

    def slack_bytes(self, placement: np.ndarray) -> np.ndarray:
        """``[M]`` capacity left by a full placement ``[D, L]`` (the cost model's memory rule)."""
        inst = self.instance
        used = cost.memory_use_bytes(inst.cluster, inst.workload, placement[None])[0]
        return self.capacity_bytes - used

    def replicas_bytes(self, placement: np.ndarray, replicas: int) -> np.ndarray:
        """``[M]`` memory the first ``replicas`` rows of ``placement`` use (the cost model's rule:
        each replica's stash depends on its own row only)."""
        if replicas == 0:
            return np.zeros(self.num_machines)
        inst = self.instance
        workload = self._prefix_workloads.get(replicas)
        if workload is None:
            workload = self._prefix_workloads[replicas] = inst.workload.with_training(data_parallel=replicas)
        return cost.memory_use_bytes(inst.cluster, workload, placement[None, :replicas])[0]


class Witness:
    """A memory-feasible completion of the placement so far, kept through an episode.

    Slots are placed replica-major, topological within a replica (slot ``t`` is replica
    ``t // L``, layer ``t % L``), as in :class:`hulk_env.env.PlacementEnv`. Call
    :meth:`allowed` for the current slot, then :meth:`commit` with an allowed machine.

    Args:
        static: the instance's :class:`CompletionStatic`.
        placement: ``[D, L]`` a complete placement that fits within ``capacity_bytes`` (the
            start of the episode: nothing is placed yet).

    Raises:
        HulkInputError: ``placement`` does not fit.

    Attributes:
        placement: ``[D, L]`` the witness ``W`` (slots before the cursor are the placed ones).
        slack: ``[M]`` capacity ``W`` leaves free on every machine.
        t: the current slot.
        row: the open replica's row of ``W`` as a list (its placed layers are the episode's).
        count: ``[M]`` layers of the open replica on every machine in ``W``.
        depth: machines of the open replica in ``W``; ``k`` its stash count.
        partner: ``[M]`` each machine's last layer of the open replica after the current one
            (its exchange partner), ``-1`` if none; ``partner_need`` its bytes at ``k``.
        touched: machines whose ``slack`` the last :meth:`commit` changed, when ``epoch`` did
            not change; ``epoch`` counts changes of the whole vector (for observers that keep a
            copy of ``slack`` up to date cheaply).
    """

    # copied as they are by clone(); every other attribute is an array or a list (copied)
    _SCALARS = frozenset({"static", "_state", "_stash", "_num_layers", "_gpipe", "_stash_by_depth", "t", "_step",
                          "depth", "k", "_max_partner_state", "_max_partner_stash", "_headroom_lb", "epoch", "touched", "_all_allowed",
                          "_plans_t"})

    def __new__(cls, static: CompletionStatic | None = None, placement: np.ndarray | None = None) -> Witness:
        # Plan settings: machines hold a slot at their own rates (PlanWitness's bookkeeping).
        # (No arguments: unpickling and copying, which restore the class they saved.)
        if cls is Witness and static is not None and static.per_machine:
            cls = PlanWitness
        return object.__new__(cls)

    def __init__(self, static: CompletionStatic, placement: np.ndarray) -> None:
        self.static = static
        self.placement = np.array(placement, dtype=np.int64, copy=True)
        if self.placement.shape != (static.data_parallel, static.num_layers):
            raise ValueError(
                f"witness shape {self.placement.shape} != (D, L) = {(static.data_parallel, static.num_layers)}"
            )
        self._state = static.state_bytes.tolist()
        self._stash = static.stash_bytes.tolist()
        self._buf = np.empty(static.num_machines)
        self._thr = np.empty(static.num_machines)
        self._num_layers, self._gpipe, self._stash_by_depth = static.num_layers, static.gpipe, static.stash_by_depth
        self.t = 0
        self.epoch = 0
        self.touched: tuple[int, ...] = ()
        self._plans: dict[int, np.ndarray] = {}  # machine -> re-planned W, for slot _plans_t
        self._plans_t = -1
        self._rebuild()
        if float(self.slack.min()) < 0:
            m = int(np.argmin(self.slack))
            raise HulkInputError(
                f"the starting witness does not fit: machine {m} is "
                f"{-float(self.slack[m]):,.0f} bytes over its memory (less a {MEMORY_RTOL:g} margin)",
                source=static.instance.instance_id,
            )

    def clone(self) -> Witness:
        """An independent copy (arrays and lists copied): cheaper than a new witness."""
        out = object.__new__(type(self))
        scalars = self._SCALARS
        out.__dict__.update({k: (v if k in scalars else v.copy()) for k, v in self.__dict__.items()})
        return out

    def own_machine(self) -> int:
        """The witness's machine for the current slot (always allowed)."""
        return self.row[self.t % self._num_layers]

    def adopt(self, placement: np.ndarray) -> bool:
        """Make ``placement`` the witness ``W`` if it keeps every placed slot and fits (the rule
        the starting witness is held to); else leave ``W`` as it was. Whether it was adopted.

        Why: a caller that knows a good completion (the stage DP's plan an agent is shown) makes
        its machines allowed -- the witness's own machine always is -- where the repairs of
        another witness would not reach them."""
        p = np.asarray(placement, dtype=np.int64)
        t = self.t
        if p.shape != self.placement.shape or t >= p.size or not np.array_equal(p.ravel()[:t], self.placement.ravel()[:t]):
            return False
        if np.array_equal(p, self.placement):
            return True
        old = self.placement
        self.placement = p.copy()
        self._rebuild()
        if float(self.slack.min()) < 0:
            self.placement = old
            self._rebuild()
            return False
        self._plans_t, self._plans = -1, {}
        return True

    def placed_bytes(self, machine: int) -> float:
        """Memory the placed slots use on ``machine``, each replica at its stash count in ``W``."""
        return self._placed_before[machine] + self._open_state[machine] + self.k * self._open_stash[machine]

    # ---- bookkeeping ---------------------------------------------------------------------------
    def _rebuild(self) -> None:
        """Everything derived from ``W`` and the cursor, from scratch (the cost model's rule)."""
        s = self.static
        m, n_layers = s.num_machines, s.num_layers
        r, layer = divmod(self.t, n_layers)
        self.slack = s.slack_bytes(self.placement)
        self.epoch += 1
        self._step: tuple = (-1,)
        self._dirty: list[int] = []  # machines whose own inputs changed since the last mask
        self._all_allowed: tuple | None = None  # thresholds under which every machine passed
        if r == s.data_parallel:
            return
        self._placed_before = s.replicas_bytes(self.placement, r).tolist()  # scalar reads: a list
        row = self.placement[r]
        self.row = row.tolist()
        # the open replica's placed layers per machine: state and stash bytes (lists: scalar use)
        self._open_state = np.bincount(row[:layer], weights=s.state_bytes[:layer], minlength=m).tolist()
        self._open_stash = np.bincount(row[:layer], weights=s.stash_bytes[:layer], minlength=m).tolist()
        count = np.bincount(row, minlength=m)
        self.count = count.tolist()
        self.outside = count == 0  # machines holding no layer of the open replica in W
        self.replica_stash = np.bincount(row, weights=s.stash_bytes, minlength=m)
        self.depth = int(np.count_nonzero(count))
        self.k = s.stash_by_depth[self.depth]
        self._headroom_lb = -np.inf  # lower bound of min(slack - replica_stash), -inf: unknown
        # Exchange partner of each machine: its last layer of the replica after the current one.
        last = np.full(m, -1, dtype=np.int64)
        np.maximum.at(last, row[layer + 1 :], np.arange(layer + 1, n_layers))
        self.partner = last.tolist()
        has = last >= 0
        safe = np.where(has, last, 0)
        self.partner_state = np.where(has, s.state_bytes[safe], 0.0).tolist()
        self.partner_stash = np.where(has, s.stash_bytes[safe], 0.0)
        self._bound_partners()
        self._refresh_partner_need()

    def _bound_partners(self) -> None:
        """Upper bounds of the partners' state and stash bytes (the exchange-credit test)."""
        self._max_partner_state = max(self.partner_state)
        self._max_partner_stash = float(self.partner_stash.max())

    def _refresh_partner_need(self) -> None:
        self.partner_need = np.multiply(self.partner_stash, self.k)
        self.partner_need += np.asarray(self.partner_state)

    def _set_partner(self, mach: int, layer: int) -> None:
        self._dirty.append(mach)
        state, stash = (self._state[layer], self._stash[layer]) if layer >= 0 else (0.0, 0.0)
        self.partner[mach] = layer
        self.partner_state[mach] = state
        self.partner_stash[mach] = stash
        self.partner_need[mach] = state + self.k * stash
        self._max_partner_state = max(self._max_partner_state, state)
        self._max_partner_stash = max(self._max_partner_stash, stash)

    # ---- the mask ------------------------------------------------------------------------------
    def allowed(self, out: np.ndarray | None = None) -> np.ndarray:
        """``[M]`` bool: machines the current slot may go to (writes into ``out`` if given)."""
        s = self.static
        mask = np.empty(s.num_machines, dtype=bool) if out is None else out
        layer = self.t % self._num_layers
        w = self.row[layer]
        state_l, stash_l = self._state[layer], self._stash[layer]
        k = self.k
        need_l = state_l + k * stash_l
        slack_w = float(self.slack[w])
        # slack + the partner's need is an exchange's room; exact for every machine at once only
        # when w can take any partner back (need_f - need_l <= slack_w), else checked one by one.
        credit = self._max_partner_state + k * self._max_partner_stash <= slack_w + need_l
        if self._gpipe or self.count[w] > 1:
            # swap: the replica keeps its depth unless the machine is new to it (one more stage)
            grow = 0 if self._gpipe else self._stash_by_depth[self.depth + 1] - k
            grow_ok = grow == 0 or self._grow_fits(w, state_l, stash_l, grow)
            need_out = need_l + grow * stash_l
            self._step = (self.t, w, need_l, k, need_l, need_out, grow_ok)
            key = (need_l, need_out, grow_ok, k, self.epoch) if credit else None
            dirty, self._dirty = self._dirty, []
            if key is not None and key == self._all_allowed and self._all_pass(dirty, need_l, need_out, grow_ok):
                # Every machine passed with these thresholds and only `dirty` changed since.
                mask.fill(True)
                return mask
            room = np.add(self.slack, self.partner_need, out=self._buf) if credit else self.slack
            if grow_ok and need_out == need_l:
                np.greater_equal(room, need_l, out=mask)
            else:
                thr = self._thr
                thr.fill(need_l)
                np.copyto(thr, need_out if grow_ok else _BIG, where=self.outside)
                np.greater_equal(room, thr, out=mask)
            if not credit:
                mask |= self._exchange_mask(need_l, slack_w)
            self._all_allowed = key if key is not None and np.count_nonzero(mask) == s.num_machines else None
        else:
            self._all_allowed = None
            self._dirty = []
            # swap with slot l w's only layer of the replica: onto a member the depth shrinks
            k_in = self._stash_by_depth[self.depth - 1]
            need_in = state_l + k_in * stash_l
            self._step = (self.t, w, need_l, k_in, need_in, need_l, True)
            thr = np.multiply(self.replica_stash, k_in - k, out=self._thr)
            thr += need_in
            np.copyto(thr, need_l, where=self.outside)
            np.greater_equal(self.slack, thr, out=mask)
            mask |= self._exchange_mask(need_l, slack_w)
        mask[w] = True
        if np.count_nonzero(mask) < s.num_machines:
            mask |= self._relabel_mask(w, layer)
            if np.count_nonzero(mask) < s.num_machines:
                self._replan_mask(mask, layer)
        return mask

    def _replan_mask(self, mask: np.ndarray, layer: int) -> None:
        """Allow masked machines for which :func:`replan` finds a completion (kept for commit)."""
        if self._plans_t == self.t:
            for a in self._plans:
                mask[a] = True
            return
        self._plans_t, self._plans = self.t, {}
        s = self.static
        placed_before = np.asarray(self._placed_before)
        # Necessary: the machine has room for the slot at the smallest stash count (depth 1).
        k1 = s.stash_by_depth[1]
        free = s.capacity_bytes - placed_before - np.asarray(self._open_state) - k1 * np.asarray(self._open_stash)
        need = self._state[layer] + k1 * self._stash[layer]
        cand = np.flatnonzero(~mask & (free >= need))
        if not len(cand):
            return
        open_state, open_stash = np.asarray(self._open_state), np.asarray(self._open_stash)
        # A replica's first slot may go anywhere (and happens D times an episode): no cap there.
        for a in self._replan_order(cand, free, layer)[: REPLAN_CANDIDATES if layer else None]:
            plan = replan(s, self.placement, self.t, a, placed_before, open_state, open_stash)
            if plan is not None:
                self._plans[a] = plan
                mask[a] = True

    def _replan_order(self, cand: np.ndarray, free: np.ndarray, layer: int) -> list[int]:
        """The re-plan's candidates in the order they are tried (class docstring)."""
        s = self.static
        order = cand[np.argsort(-free[cand], kind="stable")].tolist()
        # The previous layer's machine (stay in the stage) and the machine of this layer in the
        # previous replica (replicas sharing machines) first: the moves a pipeline makes most.
        prev = self.row[layer - 1] if layer else -1
        ring = int(self.placement[self.t // self._num_layers - 1, layer]) if self.t >= self._num_layers else -1
        first = [a for a in dict.fromkeys((prev, ring)) if a in order]
        near = prev if prev >= 0 else ring
        if near >= 0:  # then the machines nearest to it (where a pipeline's next stage goes)
            latency = s.instance.cluster.latency_s[near, cand]
            first += [a for a in cand[np.argsort(latency, kind="stable")][:REPLAN_NEAREST].tolist() if a not in first]
        rest = [a for a in order if a not in first]
        return first + rest

    def _relabel_mask(self, w: int, layer: int) -> np.ndarray:
        """Machines ``a`` whose future slots (all of ``W`` from the cursor on) may trade places
        with ``w``'s: ``a`` then holds what it holds now plus ``w``'s future, and ``w`` the reverse."""
        cap = self.static.capacity_bytes
        placed = np.asarray(self._placed_before) + np.asarray(self._open_state) + self.k * np.asarray(self._open_stash)
        free = cap - placed  # room if nothing more were placed
        future = free - self.slack
        ok = (free >= float(future[w])) & (future <= float(free[w]))
        if not self.static.gpipe and self._holds_placed(w, layer):
            ok &= ~self.outside  # a new machine would deepen the open replica
        return ok

    def _all_pass(self, machines: list[int], need_l: float, need_out: float, grow_ok: bool) -> bool:
        """Whether each of ``machines`` passes its own swap or exchange test (exchange credit
        granted)."""
        slack, count, partner_need = self.slack, self.count, self.partner_need
        for i in machines:
            slack_i = float(slack[i])
            if count[i]:
                if slack_i < need_l and slack_i + float(partner_need[i]) < need_l:
                    return False  # (a machine without partner has partner_need 0)
            elif not grow_ok or slack_i < need_out:
                return False
        return True

    def _holds_placed(self, w: int, layer: int) -> bool:
        """Whether ``w`` holds a placed layer of the open replica."""
        return w in self.row[:layer]

    def _exchange_mask(self, need_l: float, slack_w: float) -> np.ndarray:
        pn = self.partner_need
        return (self.slack + pn >= need_l) & (pn > 0) & (pn <= slack_w + need_l)

    def _grow_fits(self, w: int, state_l: float, stash_l: float, grow: int) -> bool:
        """Whether every machine of the replica fits ``grow`` more micro-batches of its stash
        when the current slot leaves ``w`` for a new machine."""
        # 1F1B grows by one micro-batch per stage; a lower bound of min(slack - replica_stash)
        # answers most calls without touching the vectors.
        if grow == 1 and self._headroom_lb >= 0:
            return True
        room = np.multiply(self.replica_stash, -grow, out=self._thr)
        room += self.slack
        if grow == 1:
            self._headroom_lb = float(room.min())
        room[w] += state_l + (self.k + grow) * stash_l
        return bool(room.min() >= 0)

    def _lower_headroom(self, mach: int) -> None:
        """``mach``'s slack or stash fell: keep ``_headroom_lb <= min(slack - replica_stash)``."""
        h = float(self.slack[mach]) - float(self.replica_stash[mach])
        if h < self._headroom_lb:
            self._headroom_lb = h

    # ---- taking an action ----------------------------------------------------------------------
    def repair(self, a: int) -> int:
        """How machine ``a`` repairs the witness (``STAY``, ``SWAP``, ``EXCHANGE``, ``RELABEL``),
        or -1 when it is not allowed."""
        if self._step[0] != self.t:
            self.allowed()
        _, w, need_l, k_in, need_in, need_out, grow_ok = self._step
        if a == w:
            return STAY
        return SWAP if self._swap_fits(a, k_in, need_in, need_out, grow_ok) else self._other_repair(a, w, need_l)

    def _swap_fits(self, a: int, k_in: int, need_in: float, need_out: float, grow_ok: bool) -> bool:
        if self.count[a]:
            return float(self.slack[a]) + (self.k - k_in) * float(self.replica_stash[a]) >= need_in
        return grow_ok and float(self.slack[a]) >= need_out

    def _other_repair(self, a: int, w: int, need_l: float) -> int:
        """``EXCHANGE`` or ``RELABEL`` for a machine a swap does not fit, or -1."""
        slack_a = float(self.slack[a])
        need_f = float(self.partner_need[a])
        if need_f > 0 and slack_a + need_f >= need_l and need_f <= float(self.slack[w]) + need_l:
            return EXCHANGE
        if self._relabel_mask(w, self.t % self._num_layers)[a]:
            return RELABEL
        if self._plans_t == self.t and a in self._plans:
            return REPLAN
        return -1

    def commit(self, a: int) -> None:
        """Place the current slot on ``a`` (an allowed machine), repair ``W``, move on.

        Raises:
            ValueError: ``a`` is not allowed.
        """
        t = self.t
        if self._step[0] != t:
            self.allowed()
        _, w, need_l, k_in, need_in, need_out, grow_ok = self._step
        r, layer = divmod(t, self._num_layers)
        state_l, stash_l = self._slot_rates(a, layer)
        if a == w:
            self.touched = ()
        elif self._swap_fits(a, k_in, need_in, need_out, grow_ok):
            self._swap(r, layer, w, a, state_l, stash_l)
        else:
            kind = self._other_repair(a, w, need_l)
            if kind < 0:
                raise ValueError(f"machine {a} is not allowed for slot {t}")
            self.touched = (w, a)
            self._dirty += self.touched
            if kind == RELABEL:
                future = self.placement.ravel()[t:]
                on_w = future == w
                future[future == a] = w
                future[on_w] = a
            if kind in (RELABEL, REPLAN):
                if kind == REPLAN:
                    self.placement = self._plans[a].copy()
                self.t = t + 1
                self._rebuild()
                return
            self._exchange(r, layer, w, a)
        self._open_state[a] += state_l
        self._open_stash[a] += stash_l
        self.t = t + 1
        layer += 1
        if layer == self._num_layers:
            if t + 1 < self.placement.size:
                self._rebuild()  # a new replica: fresh bookkeeping from the cost model's rule
        elif self.partner[mach := self.row[layer]] == layer:
            self._set_partner(mach, -1)  # the next slot is its machine's last layer: no partner

    def _slot_rates(self, mach: int, layer: int) -> tuple[float, float]:
        """``(state, stash per micro-batch)`` bytes of the current replica's slot ``layer`` on
        ``mach``: the layer's own, on any machine."""
        return self._state[layer], self._stash[layer]

    def _move_counts(self, w: int, a: int) -> None:
        """A slot leaves ``w`` for ``a``: machine counts, the replica's depth and its stash count
        ``k`` (every machine's slack follows a change of ``k``)."""
        self.touched = (w, a)
        self._dirty += self.touched
        count = self.count
        joins, leaves = not count[a], count[w] == 1
        count[a] += 1
        count[w] -= 1
        if joins:
            self.outside[a] = False
        if leaves:
            self.outside[w] = True
        if joins != leaves:
            self.depth += 1 if joins else -1
            k_old = self.k
            self.k = k = self._stash_by_depth[self.depth]
            if k != k_old:
                # Every machine of the replica holds (k - k_old) more micro-batches of its stash.
                grow = k - k_old
                self.slack -= grow * self.replica_stash
                self.partner_need += grow * self.partner_stash
                self.epoch += 1
                self._headroom_lb = -np.inf  # recomputed when next needed

    def _swap(self, r: int, layer: int, w: int, a: int, state_l: float, stash_l: float) -> None:
        self._move_counts(w, a)
        need = state_l + self.k * stash_l  # slot l leaves w and joins a
        slack, replica_stash = self.slack, self.replica_stash
        slack[w] += need
        replica_stash[w] -= stash_l
        slack_a = float(slack[a]) - need
        stash_a = float(replica_stash[a]) + stash_l
        slack[a] = slack_a
        replica_stash[a] = stash_a
        self.placement[r, layer] = a
        self.row[layer] = a
        if slack_a - stash_a < self._headroom_lb:
            self._headroom_lb = slack_a - stash_a

    def _exchange(self, r: int, layer: int, w: int, a: int) -> None:
        f = int(self.partner[a])
        delta = (self._state[layer] - self._state[f]) + self.k * (self._stash[layer] - self._stash[f])
        self.slack[a] -= delta
        self.slack[w] += delta
        d_stash = self._stash[layer] - self._stash[f]
        self.replica_stash[a] += d_stash
        self.replica_stash[w] -= d_stash
        self._trade_slots(r, layer, f, w, a)

    def _trade_slots(self, r: int, layer: int, f: int, w: int, a: int) -> None:
        """The exchange's placement and partners: slot ``layer`` goes to ``a``, slot ``f`` (``a``'s
        partner) to ``w``; the bytes are already moved."""
        self.placement[r, layer] = a
        self.placement[r, f] = w
        self.row[layer], self.row[f] = a, w
        self._lower_headroom(a)
        self._lower_headroom(w)
        # a's partner moves back to its previous later layer; w gains f as a later layer.
        later = np.flatnonzero(self.placement[r, layer + 1 :] == a)
        self._set_partner(a, layer + 1 + int(later[-1]) if len(later) else -1)
        if f > self.partner[w]:
            self._set_partner(w, f)
        self._bound_partners()


_BIG = 1e300  # "never": a threshold no slack reaches (inf would give 0 * inf = nan)


class PlanWitness(Witness):
    """The witness under plan settings: slot ``(r, l)`` on machine ``m`` needs
    ``state_ml[m, l] + k_r stash_ml[m, l]`` (:class:`CompletionStatic`; the cost model's rule:
    every data-parallel group inside a machine holds a copy of the slot's state, and the busiest
    group stashes its share), so a repair moving a slot from ``w`` to ``a`` frees ``w``'s need
    and costs ``a``'s. The same repairs in the same order as :class:`Witness`, with thresholds
    per machine; no all-machines shortcut (the per-step cost is a few ``[M]`` operations).
    :class:`Witness` makes one of these when its static parts are per machine.
    """

    _SCALARS = Witness._SCALARS | {"_rate_state", "_rate_stash"}

    def __init__(self, static: CompletionStatic, placement: np.ndarray) -> None:
        self._rate_state = static.state_ml.tolist()  # [M][L] scalar reads
        self._rate_stash = static.stash_ml.tolist()
        super().__init__(static, placement)

    def _rebuild(self) -> None:
        s = self.static
        m, n_layers = s.num_machines, s.num_layers
        r, layer = divmod(self.t, n_layers)
        self.slack = s.slack_bytes(self.placement)
        self.epoch += 1
        self._step = (-1,)
        self._dirty = []
        self._all_allowed = None
        if r == s.data_parallel:
            return
        self._placed_before = s.replicas_bytes(self.placement, r).tolist()
        row = self.placement[r]
        self.row = row.tolist()
        state, stash = s.slot_bytes(row, 0), s.rows_stash(row)  # each slot at its machine's rates
        self._open_state = np.bincount(row[:layer], weights=state[:layer], minlength=m).tolist()
        self._open_stash = np.bincount(row[:layer], weights=stash[:layer], minlength=m).tolist()
        count = np.bincount(row, minlength=m)
        self.count = count.tolist()
        self.outside = count == 0
        self.replica_stash = np.bincount(row, weights=stash, minlength=m)
        self.depth = int(np.count_nonzero(count))
        self.k = s.stash_by_depth[self.depth]
        self._headroom_lb = -np.inf
        last = np.full(m, -1, dtype=np.int64)
        np.maximum.at(last, row[layer + 1 :], np.arange(layer + 1, n_layers))
        self.partner = last.tolist()
        has = last >= 0
        safe = np.where(has, last, 0)
        machines = np.arange(m)
        self.partner_state = np.where(has, s.state_ml[machines, safe], 0.0).tolist()  # on its own machine
        self.partner_stash = np.where(has, s.stash_ml[machines, safe], 0.0)
        self._bound_partners()
        self._refresh_partner_need()

    def _set_partner(self, mach: int, layer: int) -> None:
        self._dirty.append(mach)
        if layer >= 0:
            state, stash = self._rate_state[mach][layer], self._rate_stash[mach][layer]
        else:
            state, stash = 0.0, 0.0
        self.partner[mach] = layer
        self.partner_state[mach] = state
        self.partner_stash[mach] = stash
        self.partner_need[mach] = state + self.k * stash
        self._max_partner_state = max(self._max_partner_state, state)
        self._max_partner_stash = max(self._max_partner_stash, stash)

    def _need_on(self, mach: int, layer: int) -> float:
        return self._rate_state[mach][layer] + self.k * self._rate_stash[mach][layer]

    def allowed(self, out: np.ndarray | None = None) -> np.ndarray:
        s = self.static
        mask = np.empty(s.num_machines, dtype=bool) if out is None else out
        layer = self.t % self._num_layers
        w = self.row[layer]
        state, stash = s.state_ml[:, layer], s.stash_ml[:, layer]  # [M]: the slot on every machine
        k = self.k
        need = state + k * stash
        self._dirty = []
        self._all_allowed = None
        if self._gpipe or self.count[w] > 1:
            grow = 0 if self._gpipe else self._stash_by_depth[self.depth + 1] - k
            grow_ok = grow == 0 or self._grow_fits(w, float(state[w]), float(stash[w]), grow)
            need_out = need + grow * stash if grow else need
            self._step = (self.t, w, need, k, need, need_out, grow_ok)
            thr = np.where(self.outside, need_out if grow_ok else _BIG, need)
        else:
            # w's only layer of the replica: onto a member the depth shrinks (k_in)
            k_in = self._stash_by_depth[self.depth - 1]
            need_in = state + k_in * stash
            self._step = (self.t, w, need, k_in, need_in, need, True)
            thr = np.where(self.outside, need, need_in + (k_in - k) * self.replica_stash)
        np.greater_equal(self.slack, thr, out=mask)
        mask |= self._exchange_mask_at(w, need)
        mask[w] = True
        if np.count_nonzero(mask) < s.num_machines:
            mask |= self._relabel_mask(w, layer)
            if np.count_nonzero(mask) < s.num_machines:
                self._replan_mask(mask, layer)
        return mask

    def _exchange_mask_at(self, w: int, need: np.ndarray) -> np.ndarray:
        """Machines ``a`` whose partner ``f`` may trade places with the slot: ``a`` fits the
        slot after ``f`` leaves it, ``w`` fits ``f`` after the slot leaves it."""
        s = self.static
        partner = np.asarray(self.partner)
        has = partner >= 0
        f = np.where(has, partner, 0)
        back = s.state_ml[w, f] + self.k * s.stash_ml[w, f]  # each partner's need on w
        room_w = float(self.slack[w]) + float(need[w])
        return (self.slack + self.partner_need >= need) & has & (back <= room_w)

    def _swap_fits(self, a: int, k_in: int, need_in, need_out, grow_ok: bool) -> bool:
        if self.count[a]:
            return float(self.slack[a]) + (self.k - k_in) * float(self.replica_stash[a]) >= float(need_in[a])
        return grow_ok and float(self.slack[a]) >= float(need_out[a])

    def _other_repair(self, a: int, w: int, need) -> int:
        f = self.partner[a]
        if f >= 0:
            slack_a = float(self.slack[a])
            if (slack_a + float(self.partner_need[a]) >= float(need[a])
                    and self._need_on(w, f) <= float(self.slack[w]) + float(need[w])):
                return EXCHANGE
        if self._relabel_mask(w, self.t % self._num_layers)[a]:
            return RELABEL
        if self._plans_t == self.t and a in self._plans:
            return REPLAN
        return -1

    def _relabel_mask(self, w: int, layer: int) -> np.ndarray:
        """Machines ``a`` that may trade their future slots with ``w``'s (as :class:`Witness`),
        each side's at its own rates: ``a`` takes ``w``'s future at ``a``'s, ``w`` every
        other machine's at ``w``'s."""
        s = self.static
        n_layers = self._num_layers
        cap = s.capacity_bytes
        placed = np.asarray(self._placed_before) + np.asarray(self._open_state) + self.k * np.asarray(self._open_stash)
        free = cap - placed
        future = self.placement.ravel()[self.t :]
        slots = np.arange(self.t, self.placement.size)
        layers = slots % n_layers
        # each future slot's stash count: its replica's depth in W (the open one's is k)
        depths = [self.depth] + [len(set(row)) for row in self.placement[self.t // n_layers + 1 :].tolist()]
        k_slot = np.asarray([self._stash_by_depth[d] for d in depths])[slots // n_layers - self.t // n_layers]
        mine = future == w
        on_a = s.state_ml[:, layers[mine]].sum(axis=1) + s.stash_ml[:, layers[mine]] @ k_slot[mine]  # [M]
        at_w = s.state_ml[w, layers] + k_slot * s.stash_ml[w, layers]
        theirs_on_w = np.bincount(future, weights=at_w, minlength=s.num_machines)  # [M]
        ok = (free >= on_a) & (theirs_on_w <= float(free[w]))
        if not s.gpipe and self._holds_placed(w, layer):
            ok &= ~self.outside  # a new machine would deepen the open replica
        return ok

    def _replan_mask(self, mask: np.ndarray, layer: int) -> None:
        if self._plans_t == self.t:
            for a in self._plans:
                mask[a] = True
            return
        self._plans_t, self._plans = self.t, {}
        s = self.static
        placed_before = np.asarray(self._placed_before)
        k1 = s.stash_by_depth[1]
        open_state, open_stash = np.asarray(self._open_state), np.asarray(self._open_stash)
        free = s.capacity_bytes - placed_before - open_state - k1 * open_stash
        need = s.state_ml[:, layer] + k1 * s.stash_ml[:, layer]
        cand = np.flatnonzero(~mask & (free >= need))
        if not len(cand):
            return
        for a in self._replan_order(cand, free, layer)[: REPLAN_CANDIDATES if layer else None]:
            plan = replan(s, self.placement, self.t, a, placed_before, open_state, open_stash)
            if plan is not None:
                self._plans[a] = plan
                mask[a] = True

    def _slot_rates(self, mach: int, layer: int) -> tuple[float, float]:
        return self._rate_state[mach][layer], self._rate_stash[mach][layer]

    def _swap(self, r: int, layer: int, w: int, a: int, state_l: float, stash_l: float) -> None:
        self._move_counts(w, a)  # state_l, stash_l are a's rates: w's differ (read below)
        stash_w, stash_a = self._rate_stash[w][layer], self._rate_stash[a][layer]
        slack, replica_stash = self.slack, self.replica_stash
        slack[w] += self._need_on(w, layer)  # slot l leaves w at its rates and joins a at a's
        replica_stash[w] -= stash_w
        slack_a = float(slack[a]) - self._need_on(a, layer)
        stash_a_total = float(replica_stash[a]) + stash_a
        slack[a] = slack_a
        replica_stash[a] = stash_a_total
        self.placement[r, layer] = a
        self.row[layer] = a
        if slack_a - stash_a_total < self._headroom_lb:
            self._headroom_lb = slack_a - stash_a_total

    def _exchange(self, r: int, layer: int, w: int, a: int) -> None:
        f = int(self.partner[a])
        rs, rh, k = self._rate_state, self._rate_stash, self.k
        d_stash_a = rh[a][layer] - rh[a][f]  # a: slot l in, f out
        d_stash_w = rh[w][layer] - rh[w][f]  # w: slot l out, f in
        self.slack[a] -= (rs[a][layer] - rs[a][f]) + k * d_stash_a
        self.slack[w] += (rs[w][layer] - rs[w][f]) + k * d_stash_w
        self.replica_stash[a] += d_stash_a
        self.replica_stash[w] -= d_stash_w
        self._trade_slots(r, layer, f, w, a)


# ---- the re-plan repair ------------------------------------------------------------------------


def _depth_bounds(start: int, most: int) -> list[int]:
    """Pipeline depths a re-plan tries as the bound of a replica's stash: ``start``, then
    doubling steps up to ``most`` (a deeper bound means more stash per layer, more room)."""
    out, step = [], 1
    d = max(1, start)
    while d < most:
        out.append(d)
        d, step = start + step, step * 2
    out.append(max(1, most))
    return out


def _fill(total: list[float] | None, start: int, order: np.ndarray, free: np.ndarray, members: int,
          max_depth: int, rows: list[list[float]] | None = None, skip_full: bool = False) -> np.ndarray | None:
    """Machines of layers ``start..`` when they fill ``order`` first-fit and contiguously (each
    machine takes as many of the next layers as fit in ``free``), using at most ``max_depth``
    distinct machines of which the first ``members`` of ``order`` are already counted; ``None``
    when they do not fit that way. ``total`` is the cumulative sum of every layer's need, or
    ``rows`` one such sum per machine (plan settings: each machine its own rates).
    ``skip_full``: ``order`` is not sorted by room (a nearest-first walk), so a new machine
    that takes nothing is passed over instead of ending the fill."""
    n = len(total) if rows is None else len(rows[0])
    out: list[int] = []  # a list: slice writes into an array cost more than the fill itself
    done, depth = start, members
    # Sorted by room, only the members and max_depth - members + 1 new machines can be visited.
    for i, mach in enumerate((order if skip_full else order[: max_depth + 1]).tolist()):
        if done == n:
            break
        if rows is not None:
            total = rows[mach]
        base = total[done - 1] if done else 0.0
        take = bisect_right(total, base + float(free[mach]), lo=done) - done
        if take <= 0:
            if i >= members and not skip_full:
                return None  # the rest of `order` is sorted by room: none of them fits either
            continue
        if i >= members:
            depth += 1
            if depth > max_depth:
                return None
        out += [mach] * take
        done += take
    return np.array(out, dtype=np.int64) if done == n else None


def replan(static: CompletionStatic, placement: np.ndarray, t: int, a: int, placed_before: np.ndarray,
           open_state: np.ndarray | None = None, open_stash: np.ndarray | None = None,
           near: Callable[[int], np.ndarray] | None = None) -> np.ndarray | None:
    """A complete placement that keeps slots ``< t`` of ``placement``, puts slot ``t`` on ``a``
    and re-places everything after it from scratch, or ``None`` when this construction finds
    none (a sound test: a returned placement fits by the cost model's rule, checked).

    The open replica's remaining layers fill ``a`` first, then the machines it already holds,
    then new machines, roomiest first; every later replica fills the roomiest machines. Each
    replica's stash count is bounded by a pipeline depth tried in growing steps: a fill that
    stays within the bound fits at its real (smaller or equal) stash count.

    ``near`` (optional) makes the new machines *nearest first* instead: ``near(m)`` is every
    machine in a walk from ``m`` (``m`` first; e.g. a nearest-neighbour chain). The open
    replica walks from ``a``, each later replica from the roomiest machine left. Roomiest
    first needs the fewest machines (what the mask's soundness test wants); nearest first keeps
    the stages in one region (what a fast pipeline wants: on 12 machines in 4 cities x LLaMA-65B
    the roomiest re-plan from ``latency-chain-dp``'s first machine crosses an ocean, 1.70x slower).

    Args:
        static: the instance's :class:`CompletionStatic`.
        placement: ``[D, L]`` with the placed slots (``< t``) in front.
        placed_before: ``[M]`` bytes the complete replicas before slot ``t``'s use.
        open_state, open_stash: ``[M]`` state and per-micro-batch stash bytes of the open
            replica's placed layers (computed from ``placement`` when not given).
        near: the walk that orders new machines (``None``: roomiest first).
    """
    s = static
    n_layers, d_par, m = s.num_layers, s.data_parallel, s.num_machines
    r, layer = divmod(t, n_layers)
    head = placement[r, : layer + 1].copy()
    head[layer] = a
    per_machine = s.per_machine
    if open_state is None or open_stash is None:
        if per_machine:
            open_state = np.bincount(head[:layer], weights=s.slot_bytes(head[:layer], 0), minlength=m)
            open_stash = np.bincount(head[:layer], weights=s.rows_stash(head[:layer]), minlength=m)
        else:
            open_state = np.bincount(head[:layer], weights=s.state_bytes[:layer], minlength=m)
            open_stash = np.bincount(head[:layer], weights=s.stash_bytes[:layer], minlength=m)
    member = np.zeros(m, dtype=bool)
    member[head] = True
    members = np.flatnonzero(member)
    out = np.array(placement, dtype=np.int64, copy=True)
    used = np.asarray(placed_before, dtype=np.float64)
    most = min(m, n_layers)
    # the open replica: a, its other machines, then new ones (each group roomiest first)
    placed_row = None
    base_free = s.capacity_bytes - used - open_state
    for depth in _depth_bounds(len(members), most):
        k = s.stash_by_depth[depth]
        free = base_free - k * open_stash
        if per_machine:
            free[a] -= s.state_ml[a, layer] + k * s.stash_ml[a, layer]
        else:
            need = s.state_bytes + k * s.stash_bytes
            free[a] -= need[layer]
        if free[members].min() < 0:
            break  # a deeper bound only adds stash to what is placed
        key = np.where(member, free + 2.0 * float(s.capacity_bytes.max()) + 1.0, free)
        key[a] = np.inf
        order = np.argsort(-key, kind="stable")
        if near is not None:  # a, the members by room, then the walk's new machines
            walk = near(a)
            order = np.concatenate((order[: len(members)], walk[~member[walk]]))
        tail = (_fill(None, layer + 1, order, free, len(members), depth, s.need_rows(k), near is not None) if per_machine
                else _fill(s.need_cumsum(k), layer + 1, order, free, len(members), depth, skip_full=near is not None))
        if tail is not None:
            placed_row = np.concatenate((head, tail))
            break
    if placed_row is None:
        return None
    out[r] = placed_row
    for rr in range(r, d_par):
        if rr > r:
            free_all = s.capacity_bytes - used
            order = np.argsort(-free_all, kind="stable")
            fewest = s.fewest_machines(free_all[order])
            if near is not None:
                order = near(int(order[0]))
            placed_row = None
            for depth in _depth_bounds(1, most):
                if depth < fewest:
                    continue  # the roomiest `depth` machines cannot hold it: the fill would fail
                k = s.stash_by_depth[depth]
                placed_row = (_fill(None, 0, order, free_all, 0, depth, s.need_rows(k), near is not None) if per_machine
                              else _fill(s.need_cumsum(k), 0, order, free_all, 0, depth, skip_full=near is not None))
                if placed_row is not None:
                    break
            if placed_row is None:
                return None
            out[rr] = placed_row
        if rr + 1 < d_par:
            k_real = s.stash_by_depth[int(np.count_nonzero(np.bincount(placed_row, minlength=m)))]
            weights = s.slot_bytes(placed_row, k_real) if per_machine else s.state_bytes + k_real * s.stash_bytes
            used = used + np.bincount(placed_row, weights=weights, minlength=m)
    return out if float(s.slack_bytes(out).min()) >= 0 else None


# ---- measuring the mask ------------------------------------------------------------------------


class Conservativeness(NamedTuple):
    """How many truly completable actions the mask hides, over every state it can reach.

    Attributes:
        states: (history, slot) pairs visited by following every allowed action.
        completable: actions over those states after which some feasible completion exists.
        allowed: actions the mask allows (all completable: the mask is sound).
        hidden: completable actions the mask hides.
        unsound: allowed actions with no feasible completion (0 unless the mask is wrong).
    """

    states: int
    completable: int
    allowed: int
    hidden: int
    unsound: int

    @property
    def hidden_share(self) -> float:
        """``hidden / completable`` (0 when nothing is completable)."""
        return self.hidden / self.completable if self.completable else 0.0

    def __add__(self, other: tuple) -> Conservativeness:  # type: ignore[override]
        return Conservativeness(*(a + b for a, b in zip(self, other, strict=True)))


def start_witness(instance: Instance) -> Witness:
    """A :class:`Witness` started from the instance's naive placement (the env's reference).

    Raises:
        HulkInputError: the naive placement does not fit (within the memory margin).
    """
    from hulk_env.reference import naive_placement

    placement = naive_placement(instance)
    if placement is None:
        from hulk_env.feasibility import capacity_reason

        raise HulkInputError(capacity_reason(instance), source=instance.instance_id)
    return Witness(CompletionStatic.of(instance), placement)


def mask_conservativeness(instance: Instance, max_placements: int = 1 << 16) -> Conservativeness:
    """Exhaustive measure of the witness mask on a small instance.

    Enumerates all ``M^(D L)`` placements, marks the memory-feasible ones (cost model's rule,
    with the witness's margin), and walks every path of allowed actions from the start (the
    mask depends on the witness, so on the history): at each state it compares the allowed
    machines with those after which some feasible placement extends the prefix.

    Raises:
        HulkInputError: more than ``max_placements`` placements.
    """
    from hulk_env.generators import enumerate_placements

    m, d, n = instance.num_machines, instance.data_parallel, instance.num_layers
    slots = d * n
    total = m**slots
    if total > max_placements:
        raise HulkInputError(f"{m}^{slots} placements is above the limit {max_placements}", source=instance.instance_id)
    every = enumerate_placements(np.arange(total), m, d, n)
    static = CompletionStatic.of(instance)
    used = cost.memory_use_bytes(instance.cluster, instance.workload, every)
    feasible = np.all(used <= static.capacity_bytes, axis=1)
    codes = np.flatnonzero(feasible)  # base-m numbers, slot 0 most significant
    # completable prefixes of every length: a prefix of length p is code // m^(slots - p)
    prefixes = [set((codes // m ** (slots - p)).tolist()) for p in range(slots + 1)]
    root = start_witness(instance)
    totals = [0, 0, 0, 0, 0]

    def walk(witness: Witness, prefix: int) -> None:
        t = witness.t
        mask = witness.allowed()
        ok = prefixes[t + 1]
        for a in range(m):
            completable = prefix * m + a in ok
            totals[1] += completable
            totals[2] += bool(mask[a])
            totals[3] += completable and not mask[a]
            totals[4] += bool(mask[a]) and not completable
        totals[0] += 1
        if t + 1 == slots:
            return
        for a in np.flatnonzero(mask):
            child = witness.clone()
            child.commit(int(a))
            walk(child, prefix * m + int(a))

    walk(root, 0)
    return Conservativeness(*totals)
