"""``hulk/Placement-v1``: the placement env whose mask never leads to a dead end, at any size."""

from __future__ import annotations

import copy
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from hulk_env.env.observation_v1 import (
    DEFAULT_NEIGHBOURS,
    MAX_MACHINES,
    MAX_SLOTS,
    StaticPartsV1,
    build_static_v1,
    observation_space_v1,
)
from hulk_env.env.placement_env import PlacementEnv
from hulk_env.env.state import observation
from hulk_env.env.state_v1 import (
    EpisodeStateV1,
    adopt_witness_v1,
    apply_v1,
    clone_state_v1,
    fallback_machine_v1,
    new_state_v1,
    update_mask_v1,
)
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.validation import limits

ENV_ID_V1 = "hulk/Placement-v1"


class Snapshot(NamedTuple):
    """An episode at one step (:meth:`PlacementEnvV1.snapshot`): its state and the reward's."""

    state: EpisodeStateV1
    reward_fn: Any


class PlacementEnvV1(PlacementEnv):
    """Place a model's layers on a geo-distributed cluster; every allowed action can be completed.

    The same task, order of decisions, rewards, episode end, info and arguments as
    :class:`hulk_env.env.PlacementEnv` (``hulk/Placement-v0``), with three changes: the mask,
    the observation, and the fallback for invalid actions.

    ## Action mask: feasibility-preserving

    ``action_masks()`` (also ``obs["action_mask"]``, ``info["action_mask"]``) allows a machine
    only if, with the current slot placed there, **every remaining slot can still be placed
    within memory** (the cost model's rule, 1F1B stash included). The env keeps a *witness
    completion* (:class:`hulk_env.completion.Witness`): a complete, memory-feasible placement
    that agrees with every slot placed so far, started from the naive placement. A machine is
    allowed when a repair of the witness (stay, swap, exchange with a later layer, relabel with
    another machine's remaining slots, or a re-plan of everything after the slot;
    :mod:`hulk_env.completion`) puts the slot there and still fits; taking it makes the repaired placement the new witness. The
    witness's own machine for the slot is always allowed, so **an episode never reaches a dead
    end** (v0's could, on memory-tight instances). Every placement an episode completes fits.

    The mask may hide a machine after which a completion exists that its repairs do not build.
    Measured exhaustively on the 20 instances of ``tiny-v0`` (every state the mask lets an
    episode reach): it hides 3 of 9,181 truly completable actions (0.03%; mean 0.4% per
    instance, worst 4.3%), and allows none without a completion
    (:func:`hulk_env.completion.mask_conservativeness`).

    **Invalid actions**: ``invalid_action="fallback"`` places the layer on the machine of its
    first predecessor in the replica if that one is allowed, else on the witness's machine;
    ``"penalty"`` is as in v0.

    ## Observation space

    A flat ``Dict`` of float32 ``Box``es, padded to ``max_machines`` (``M``), ``max_layers``
    (``N`` slots), ``max_edges`` (``E``) and ``num_neighbours`` (``K``). **No ``[M, M]``
    array**: each machine lists ``K`` neighbours with the features of the link to each.
    Fresh arrays every step; values in about [0, 1.5]; indices as floats, ``-1`` for none.

    | key | shape | meaning |
    |---|---|---|
    | ``machine_mask`` | (M,) | 1 for real machines |
    | ``machine_features`` | (M, 15) | ``MACHINE_FEATURES_V1``: v0's 9 columns, then ``slack`` (memory the witness completion leaves free / memory), ``witness`` (1 on the witness's machine for this slot), ``pred_latency``, ``pred_bandwidth`` (link from the machine of the current layer's first predecessor in its replica to this machine; 0, 0 without one), ``ring_latency``, ``ring_bandwidth`` (link from the machine of the same layer in the previous replica; 0, 0 in replica 0) |
    | ``neighbours`` | (M, K) | machine index of neighbour ``j`` of machine ``i``: its ``K/2`` nearest machines by latency, then the nearest machine of each nearest other region, then more of the nearest; ``-1`` padding |
    | ``neighbour_links`` | (M, K, 2) | ``LINK_FEATURES`` (latency, bandwidth; v0's scaling) of the link ``i -> neighbours[i, j]``, 0 at padding |
    | ``neighbour_mask`` | (M, K) | 1 for real neighbour entries |
    | ``layer_mask``, ``layer_features`` (N, 10), ``layer_machine`` (N,), ``edges`` (E, 2), ``edge_mask`` (E,), ``cursor`` (1,), ``globals`` (13,), ``action_mask`` (M,) | | as in v0 |

    Memory columns read the witness: ``free_memory`` is ``1 -`` the bytes of the placed slots,
    each replica at the stash count it has in the witness completion, over the machine's memory
    (v0: the open replica at the stash count of its machines so far); ``globals["stash"]`` is the
    open replica's stash count in the witness over the micro-batches.

    Size: ``M (15 + 4 K + 2) + 12 N + 3 E + 14`` floats
    (:func:`hulk_env.env.observation_v1.observation_floats`): 81 floats per machine at
    ``K = 16``, whatever ``M`` (v0: ``2 M + 11``). 2,048 machines x GPT-3 1.3B (26 slots):
    166,289 floats (665 KB; v0 would need 8.4 million).

    ## Snapshots

    ``snapshot()`` copies the episode (placement, witness, working arrays, the reward's state;
    about 1% of a step's time on 512 machines); ``restore(snapshot)`` returns to it and gives
    its observation, and the same actions then give the same observations, rewards and infos.
    A snapshot stays valid after it is restored. Wrappers' own state is not included.

    ## Limits

    ``max_machines`` up to 4,096 and ``max_layers`` (slots) up to 16,384: the project's input
    limits ``MAX_MACHINES`` and ``MAX_SLOTS`` (:mod:`hulk_env.validation.limits`, with their
    reasons), so every instance a loader accepts can be padded; beyond them construction raises
    :class:`hulk_env.errors.HulkInputError` citing the limit. Work per step is ``O(M + K)`` (the
    witness's vector tests) plus ``O(D L)`` when a replica starts; one neighbour table of
    ``O(M K)`` and one ``O(M^2 log)`` sort per new instance.

    ## Arguments

    Those of :class:`hulk_env.env.PlacementEnv`, plus ``num_neighbours`` (keyword-only, default 16): ``K``.

    ## Version history

    * v0: first version.
    * v1: feasibility-preserving mask from a witness completion (no dead ends; measured hidden
      share on ``tiny-v0`` 1.3%); sparse observation (``neighbours``, ``neighbour_links``,
      ``neighbour_mask`` replace the dense ``links``); six machine columns (``slack``,
      ``witness``, predecessor and ring links); fallback to the witness's machine; documented
      size limits.
    * v1, revised before any release (hulk-env 0.1): the mask gained the re-plan repair
      (hidden share on ``tiny-v0`` 1.3% -> 0.03%; a heuristic's moves are no longer refused on
      multi-replica and memory-tight instances). The mask only grew: an episode of actions the
      first v1 allowed runs as before (same repairs, same witness); others are new. Padding
      limits are the project's input limits (``max_layers`` up to 16,384 slots, was 4,096);
      ``num_neighbours`` is keyword-only. Observations, rewards and infos are unchanged.
    * v1, later: ``snapshot()`` and ``restore(snapshot)`` (return to a step of the episode).
      Episodes are unchanged.
    * v1, plan settings: ``globals`` gained v0's 8 plan-setting columns (0 at the default settings).
    * v1, later: ``adopt_witness(placement)`` (a known feasible completion becomes the witness).
      Episodes that do not call it are unchanged.
    """

    def __init__(self, *args: Any, num_neighbours: int = DEFAULT_NEIGHBOURS, **kwargs: Any) -> None:
        if int(num_neighbours) != num_neighbours or num_neighbours < 1:
            raise HulkInputError(f"num_neighbours must be a positive integer, got {num_neighbours!r}", field="num_neighbours")
        self.num_neighbours = int(num_neighbours)
        super().__init__(*args, **kwargs)
        for label, value, limit, name in (
            ("max_machines", self.max_machines, MAX_MACHINES, "MAX_MACHINES"),
            ("max_layers", self.max_layers, MAX_SLOTS, "MAX_SLOTS"),
        ):
            if value > limit:
                raise HulkInputError(
                    f"{label}={value} is above Placement-v1's limit of {limit:,} ({limits.cite(name)}); place "
                    "smaller instances (fewer machines, or a coarser model: layers_per_block)",
                    field=label,
                )

    def snapshot(self) -> Snapshot:
        """The episode as it is now, to come back to with :meth:`restore` (a copy: stepping on
        does not change it). For search over placements (try a move, undo it) and speculative
        rollouts; wrappers' own state is not included."""
        if self._state is None:
            raise RuntimeError("call reset() before snapshot()")
        return Snapshot(clone_state_v1(self._state), copy.copy(self.reward_fn))

    def restore(self, snapshot: Snapshot) -> dict[str, np.ndarray]:
        """Return to a :meth:`snapshot` of this env (it stays valid: restore it again at will)
        and give that step's observation; the next ``step`` continues from there."""
        if not isinstance(snapshot, Snapshot):
            raise HulkInputError(f"restore() takes a snapshot() of this env, got {type(snapshot).__name__}")
        self._state = clone_state_v1(snapshot.state)
        self.reward_fn = copy.copy(snapshot.reward_fn)
        return self._observation()

    def adopt_witness(self, placement: Any) -> dict[str, np.ndarray] | None:
        """Take ``placement`` (``[D, L]``, complete) as the witness completion when it agrees with
        every slot placed so far and fits in memory: its machine for each remaining slot is then
        allowed (the witness's own always is), where the repairs of the current witness might not
        reach it. Gives the observation with the mask and the witness's columns brought up to
        date, or ``None`` (nothing changed) when it disagrees or does not fit. For a caller that
        knows a good completion, e.g. the stage DP's plan an agent is shown
        (:class:`agents.decision.plan.PlanHint`). The mask stays sound: every allowed machine
        can still be completed."""
        if self._state is None or self._state.ended:
            raise RuntimeError("adopt_witness() needs an episode in progress: call reset()")
        if not adopt_witness_v1(self._state, np.asarray(placement, dtype=np.int64)):
            return None
        return self._observation()

    def _observation_space(self) -> spaces.Dict:
        return observation_space_v1(self.max_machines, self.max_layers, self.max_edges, self.num_neighbours)

    def _build_static(self, instance: Instance) -> StaticPartsV1:
        return build_static_v1(instance, self.max_machines, self.max_layers, self.max_edges, self.num_neighbours)

    def _new_state(self, static: StaticPartsV1) -> EpisodeStateV1:
        return new_state_v1(static, self.max_machines)

    _update_mask = staticmethod(update_mask_v1)
    _apply = staticmethod(apply_v1)
    _fallback_machine = staticmethod(fallback_machine_v1)

    def _next_mask(self, s: EpisodeStateV1, info: dict[str, Any]) -> None:
        # v0's without its dead-end branch: the witness's machine is always allowed. (The body of
        # update_mask_v1, inlined: a call less on every step.)
        s.witness.allowed(out=s.real_mask)

    def _observation(self) -> dict[str, np.ndarray]:
        s = self._state
        v1 = s.v1
        obs = observation(s)
        obs["neighbours"] = v1.neighbours.copy()
        obs["neighbour_links"] = v1.neighbour_links.copy()
        obs["neighbour_mask"] = v1.neighbour_mask.copy()
        return obs
