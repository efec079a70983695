"""The placement environment: one decision per (replica, layer), machines as actions."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hulk_env import cost
from hulk_env.baselines.base import capacity_reason
from hulk_env.baselines.naive import naive
from hulk_env.errors import HulkInputError
from hulk_env.generators import InstanceGenerator, instance_edges, make_generator
from hulk_env.instance import Instance
from hulk_env.rewards import (
    DEAD_END_REWARD,
    INVALID_ACTION_REWARD,
    UNPLACED,
    Transition,
    log_speedup_reward,
    make_reward,
)
from hulk_env.units import GB, TFLOPS

ENV_ID = "hulk/Placement-v0"

# Column names of the feature matrices, in order (the GNN extractor indexes by these).
MACHINE_FEATURES = (
    "flops_log",  # clip((log10(FLOP/s) - 12) / 4, 0, 1.5): 1 TFLOP/s -> 0, 10 PFLOP/s -> 1
    "flops_rel",  # FLOP/s / largest FLOP/s of the instance
    "memory_log",  # clip((log10(bytes) - 9) / 3, 0, 1.5): 1 GB -> 0, 1 TB -> 1
    "memory_rel",  # memory / largest memory of the instance
    "free_memory",  # free / total memory, now
    "load",  # C / (C + C_bal): compute s per micro-batch so far, C_bal = perfectly spread work
    "layers_held",  # (replica, layer) slots on the machine / D * L
    "in_replica",  # 1 if it holds a layer of the current replica
    "holds_predecessor",  # 1 if it holds a predecessor of the current layer (same replica)
)
LAYER_FEATURES = (
    "flops_log",  # clip(log10(1 + FLOPs / 1e9) / 5, 0, 1.5), forward per micro-batch
    "flops_rel",  # FLOPs / largest layer FLOPs
    "params_log",  # clip(log10(1 + params / 1e6) / 5, 0, 1.5)
    "memory_rel",  # clip((state bytes + 1 micro-batch of stash) / largest machine memory, 0, 1.5)
    "activation_log",  # clip(log10(1 + activation bytes / 1e6) / 4, 0, 1.5)
    "activation_rel",  # activation bytes / largest layer activation
    "replica",  # r / max(D - 1, 1)
    "depth",  # l / max(L - 1, 1), position in topological order
    "placed",  # 1 once placed
    "current",  # 1 for the (replica, layer) to place now
)
LINK_FEATURES = (
    "latency_log",  # clip(log10(1 + latency / 1 ms) / 3, 0, 1.5): 1 ms -> 0.1, 1 s -> 1
    "bandwidth_log",  # clip(log10(bytes/s / 1e6) / 4, 0, 1.5): 1 Gbps -> 0.52; own machine 1.5
)
GLOBAL_FEATURES = (
    "progress",  # decisions made / D * L
    "replica",  # current replica / max(D - 1, 1)
    "micro_batches_log",  # clip(log2(num_micro_batches) / 10, 0, 1.5)
    "is_1f1b",  # 1 for the 1F1B schedule, 0 for GPipe
    "stash",  # micro-batches the current replica stashes now / num_micro_batches
)
_MF = {name: i for i, name in enumerate(MACHINE_FEATURES)}
_LF = {name: i for i, name in enumerate(LAYER_FEATURES)}
_GF = {name: i for i, name in enumerate(GLOBAL_FEATURES)}
# Column indices the per-step code uses (plain ints: no dict lookups on the hot path).
_M_FREE, _M_LOAD, _M_HELD = _MF["free_memory"], _MF["load"], _MF["layers_held"]
_M_IN_REPLICA, _M_PRED = _MF["in_replica"], _MF["holds_predecessor"]
_L_PLACED, _L_CURRENT = _LF["placed"], _LF["current"]
_G_PROGRESS, _G_REPLICA, _G_STASH = _GF["progress"], _GF["replica"], _GF["stash"]
_CLIP = 1.5  # upper bound of the log-scaled features
_MACHINE_HIGH = np.array([_CLIP, 1, _CLIP, 1, 1, 1, 1, 1, 1], dtype=np.float32)
_LAYER_HIGH = np.array([_CLIP, 1, _CLIP, _CLIP, _CLIP, 1, 1, 1, 1, 1], dtype=np.float32)
_GLOBAL_HIGH = np.array([1, 1, _CLIP, 1, 1], dtype=np.float32)
# The mask keeps every machine at most (1 - MEMORY_RTOL) of its memory, so that rounding in a
# different summation order (cost.memory_use_bytes) can never turn a masked-feasible placement
# into an infeasible one; 1e-9 of 80 GB is 80 bytes.
MEMORY_RTOL = 1e-9
_STATIC_CACHE_SIZE = 32  # instances whose static observation parts are kept (suites cycle)

INVALID_ACTION_MODES = ("fallback", "penalty")


@dataclass(frozen=True, eq=False)
class StaticParts:
    """What does not change during an episode on one instance (computed once per instance).

    Attributes:
        instance: the instance.
        num_machines, num_layers, data_parallel, num_micro_batches: its sizes ``M, L, D, m``.
        gpipe: the schedule is GPipe (stash count fixed at ``m``).
        reference_placement: ``[D, L]`` the naive placement.
        reference_time_s: its iteration time ``T_ref`` (``cost.evaluate``).
        memory_bytes: ``[M]`` machine memory.
        capacity_bytes: ``[M]`` memory the mask lets each machine fill (``(1 - MEMORY_RTOL) x``).
        state_bytes: per layer, model-state bytes (``state_bytes_per_param x params``).
        stash_bytes: per layer, stashed bytes per micro-batch.
        train_s: ``[L, M]`` forward + backward seconds of a layer on a machine, per micro-batch.
        predecessors: per layer, its predecessors.
        balanced_s: ``C_bal``, compute s per micro-batch per machine if work were spread
            perfectly by FLOP/s (scale of the ``load`` feature).
        machine_features, links, layer_features, edges, edge_mask, machine_mask, layer_mask,
        layer_machine: padded observation arrays at the episode start.
    """

    instance: Instance
    num_machines: int
    num_layers: int
    data_parallel: int
    num_micro_batches: int
    gpipe: bool
    reference_placement: np.ndarray
    reference_time_s: float
    memory_bytes: np.ndarray
    capacity_bytes: np.ndarray
    state_bytes: tuple[float, ...]
    stash_bytes: tuple[float, ...]
    train_s: np.ndarray
    predecessors: tuple[tuple[int, ...], ...]
    balanced_s: float
    machine_features: np.ndarray
    links: np.ndarray
    layer_features: np.ndarray
    edges: np.ndarray
    edge_mask: np.ndarray
    machine_mask: np.ndarray
    layer_mask: np.ndarray
    layer_machine: np.ndarray


@dataclass
class EpisodeState:
    """The episode: placement so far, memory bookkeeping, working observation arrays.

    Attributes:
        static: the instance's static parts.
        placement: ``[D, L]`` machine per slot, ``-1`` unplaced.
        t: decisions made; the next slot is replica ``t // L``, layer ``t % L``.
        used_bytes: ``[M]`` memory in use with the current replica's current stash count.
        load_s: per machine, compute seconds per micro-batch placed on it.
        held: per machine, slots placed on it.
        in_replica: ``[M]`` machines holding a layer of the current replica.
        replica_stash_bytes: ``[M]`` stash bytes per micro-batch of the current replica's
            layers on each machine (what grows when the replica's stash count grows).
        depth: distinct machines of the current replica.
        stash_count: micro-batches the current replica stashes now (``min(m, depth)`` for
            1F1B, ``m`` for GPipe).
        mask: ``[max_machines]`` bool, valid machines for the next slot.
        invalid_actions: invalid actions so far.
        ended: the episode has ended (terminated or truncated).
        dead_end: it ended because no machine could take the next layer.
        machine_features, layer_features, layer_machine, globals_: working observation arrays.
        pred_rows: machines whose ``holds_predecessor`` feature is set.
    """

    static: StaticParts
    placement: np.ndarray
    t: int
    used_bytes: np.ndarray
    load_s: list[float]
    held: list[int]
    in_replica: np.ndarray
    replica_stash_bytes: np.ndarray
    depth: int
    stash_count: int
    mask: np.ndarray
    invalid_actions: int
    ended: bool
    dead_end: bool
    machine_features: np.ndarray
    layer_features: np.ndarray
    layer_machine: np.ndarray
    globals_: np.ndarray
    pred_rows: tuple[int, ...] = ()


class PlacementEnv(gym.Env):
    """Place a model's layers, replica by replica, on a regionally distributed GPU cluster.

    An episode places every (replica, layer) slot of one *instance* (a cluster and a
    workload, :class:`hulk_env.instance.Instance`) on a machine, one slot per step. When all
    ``D * L`` slots are placed, the analytic cost model (:mod:`hulk_env.cost`) gives the
    iteration time ``T_iter`` and the reward compares it with the naive placement's ``T_ref``.

    ## Order of decisions

    Replica-major, topological within a replica: slot ``t`` is replica ``t // L``, layer
    ``t % L``. Replica-major because the 1F1B memory rule depends on the *number of distinct
    machines of a replica*: with one replica open at a time, only the open replica's stash
    count can still grow, so the action mask is exact with O(M) work per step. The agent also
    sees each earlier replica's complete pipeline when it places the next one.

    ## Action space

    ``Discrete(max_machines)``: the machine for the current slot. ``action_masks()`` (the
    sb3-contrib convention; also ``obs["action_mask"]`` and ``info["action_mask"]``) marks the
    real machines that can take the layer: with it placed there, every machine stays within
    ``(1 - MEMORY_RTOL)`` of its memory under ``cost.memory_use_bytes``'s rule, including the
    1F1B rule: a machine new to the replica raises its stash count ``min(m, depth)``, which
    adds stash on all of the replica's machines, so it is valid only if they all still fit.
    Hence every completed placement is memory-feasible, and every memory-feasible placement
    can be reached through valid actions. Once the episode has ended the mask marks every real
    machine (no action is taken from a final observation; an all-zero mask would make masked
    samplers that still act on it divide by zero).

    **Invalid actions** (a masked-out or padding machine, or a value outside the space):
    ``invalid_action="fallback"`` (default) places the layer on the valid machine holding the
    layer's first predecessor in the same replica if that one is valid, else on the valid
    machine with the most free memory (lowest index on ties);
    ``invalid_action="penalty"`` places nothing, pays ``INVALID_ACTION_REWARD`` (-0.1) and
    stays on the same slot; after ``D * L`` invalid actions in one episode it is truncated.
    Either way ``info["invalid_action"]`` is True and ``info["applied_action"]`` says what was
    placed (-1 in penalty mode).

    ## Observation space

    A flat ``Dict`` of float32 ``Box``es, padded with zeros to ``max_machines`` (``M``),
    ``max_layers`` (``N``, slots: slot ``r * L + l`` is layer ``l`` of replica ``r``) and
    ``max_edges`` (``E``). Fresh arrays every step. All values are scaled to about [0, 1.5].

    | key | shape | range | meaning |
    |---|---|---|---|
    | ``machine_mask`` | (M,) | {0, 1} | 1 for real machines |
    | ``machine_features`` | (M, 9) | [0, 1.5] | columns ``MACHINE_FEATURES``: FLOP/s (log, relative), memory (log, relative), free memory fraction, compute load so far, share of slots held, in current replica, holds a predecessor of the current layer |
    | ``links`` | (M, M, 2) | [0, 1.5] | ``LINK_FEATURES``: one-way latency ``log10(1 + s/1ms)/3``, bandwidth ``log10(B/s / 1e6)/4`` (1.5 on the diagonal: same machine) |
    | ``layer_mask`` | (N,) | {0, 1} | 1 for real slots (``D * L``) |
    | ``layer_features`` | (N, 10) | [0, 1.5] | ``LAYER_FEATURES``: FLOPs (log, rel.), params (log), memory need / largest machine, activation bytes (log, rel.), replica, depth, placed, current |
    | ``layer_machine`` | (N,) | [-1, M-1] | machine index of each slot as a float, -1 unplaced or padding |
    | ``edges`` | (E, 2) | [0, N-1] | layer-graph edges ``(u, v)`` between slots, replica by replica (float indices) |
    | ``edge_mask`` | (E,) | {0, 1} | 1 for real edges |
    | ``cursor`` | (1,) | [0, N] | the current slot ``t`` (= decisions made; ``D * L`` at the end) |
    | ``globals`` | (5,) | [0, 1.5] | ``GLOBAL_FEATURES``: progress, current replica, log2 micro-batches / 10, is 1F1B, current stash count / micro-batches |
    | ``action_mask`` | (M,) | {0, 1} | valid machines for the current slot |

    ## Rewards (:mod:`hulk_env.rewards`)

    The episode's value is ``R = max(log(T_ref / T_iter), -5)`` (log speed-up over the naive
    placement, floored); a dead end scores ``DEAD_END_REWARD = -6``.
    ``reward="terminal"`` pays ``R`` on the last step, 0 before; ``reward="dense"`` pays the
    change of the potential ``Phi`` (the log speed-up of the partial placement completed by the
    naive one; ``Phi = 0`` at the start): its undiscounted return equals the terminal one.
    Penalty-mode invalid actions add -0.1 each to either.

    ## Episode end

    | event | terminated | truncated | reward (terminal) | info |
    |---|---|---|---|---|
    | all ``D * L`` slots placed | True | False | ``R`` | ``cost``, ``iteration_time_s``, ``reference_time_s``, ``speedup``, ``placement``, ``dead_end=False`` |
    | dead end: after a step, no machine can take the next layer | True | False | ``DEAD_END_REWARD`` | ``dead_end=True``, ``placement`` (``-1`` unplaced), ``reference_time_s`` |
    | ``D * L`` invalid actions (penalty mode) | False | True | -0.1 | ``placement``, ``reference_time_s`` |

    A dead end is a true terminal state (no action exists), so it is ``terminated``: value
    bootstrapping from it would be wrong. ``info["placement"]`` is a tuple of ``D`` tuples of
    ``L`` machine indices (``np.array`` of it is the ``[D, L]`` placement) and ``info["cost"]``
    is ``IterationCost.to_dict()`` with ``bottleneck`` as ``[machine]`` or ``[from, to]``: one
    type per key, so Gymnasium's vector envs can stack infos across different instances. Every step's info holds ``action_mask``,
    ``invalid_action`` and ``applied_action``; ``reset``'s info holds ``action_mask``,
    ``instance_id`` and ``reference_time_s``. Generated instances always admit the naive
    placement, so the first step is never a dead end.

    ## Arguments

    | argument | default | meaning |
    |---|---|---|
    | ``generator`` | ``None`` | ``"random"``, ``"toy"``, ``"fixed"`` or a generator object; ``None`` = ``"fixed"`` if ``cluster`` or ``model`` is given, else ``"random"`` |
    | ``cluster`` | ``None`` | fixed generator: a built-in cluster name, paper data directory or YAML/JSON file (``"default"`` when only ``model`` is given) |
    | ``model`` | ``None`` | fixed generator: a built-in model name or YAML/JSON file (``"default"`` when only ``cluster`` is given) |
    | ``generator_kwargs`` | ``None`` | plain keyword values for the generator (e.g. ``{"num_machines": [4, 8]}``, ``{"data_parallel": 4}`` for ``fixed``) |
    | ``max_machines`` | ``None`` | padding ``M``; ``None`` = the generator's largest instance |
    | ``max_layers`` | ``None`` | padding ``N`` of slots (``D * L``); ``None`` = the generator's largest |
    | ``max_edges`` | ``None`` | padding ``E``; ``None`` = the generator's largest |
    | ``reward`` | ``"terminal"`` | ``"terminal"`` or ``"dense"`` |
    | ``invalid_action`` | ``"fallback"`` | ``"fallback"`` or ``"penalty"`` |
    | ``render_mode`` | ``None`` | ``"ansi"`` (placement table) or ``"rgb_array"`` (map, HxWx3 uint8) |

    ``reset(options={"instance": inst})`` places a given instance (it must fit the padding and
    admit the naive placement). Instances come from ``self.np_random``: same seed, same episode.

    ## Version history

    * v0: first version.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(
        self,
        generator: str | InstanceGenerator | None = None,
        cluster: str | None = None,
        model: str | None = None,
        generator_kwargs: dict | None = None,
        max_machines: int | None = None,
        max_layers: int | None = None,
        max_edges: int | None = None,
        reward: str = "terminal",
        invalid_action: str = "fallback",
        render_mode: str | None = None,
    ) -> None:
        self.generator = _resolve_generator(generator, cluster, model, generator_kwargs)
        self.max_machines = _padding(max_machines, self.generator.max_machines, "max_machines")
        self.max_layers = _padding(max_layers, self.generator.max_slots, "max_layers")
        self.max_edges = _padding(max_edges, max(1, self.generator.max_edges), "max_edges")
        self.reward_fn = make_reward(reward)
        if invalid_action not in INVALID_ACTION_MODES:
            raise HulkInputError(
                f"unknown invalid_action '{invalid_action}'; choose one of {', '.join(INVALID_ACTION_MODES)}",
                field="invalid_action",
            )
        self.invalid_action = invalid_action
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise HulkInputError(
                f"unknown render_mode '{render_mode}'; choose one of {', '.join(self.metadata['render_modes'])}",
                field="render_mode",
            )
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(self.max_machines)
        self.observation_space = observation_space(self.max_machines, self.max_layers, self.max_edges)
        self._statics: OrderedDict[int, StaticParts] = OrderedDict()
        self._state: EpisodeState | None = None

    # ---- Gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        instance = options.pop("instance", None)
        if options:
            raise HulkInputError(f"unknown reset option(s) {sorted(options)}; the only option is 'instance'")
        if instance is None:
            instance = self.generator(self.np_random)
        elif not isinstance(instance, Instance):
            raise HulkInputError(
                f"options['instance'] must be a hulk_env.Instance, got {type(instance).__name__}"
            )
        static = self._static_parts(instance)
        self._state = _new_state(static, self.max_machines, self.max_layers)
        self.reward_fn.reset()
        _update_mask(self._state)
        if np.count_nonzero(self._state.mask) == 0:
            # Only possible when the naive placement fills a machine to within MEMORY_RTOL.
            raise HulkInputError(
                "no machine can hold the first layer within the mask's memory margin",
                source=instance.instance_id,
            )
        info = {
            "action_mask": self._state.mask.copy(),
            "instance_id": instance.instance_id,
            "reference_time_s": static.reference_time_s,
        }
        return self._observation(), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        s = self._state
        if s is None or s.ended:
            raise RuntimeError("the episode has ended (or never started): call reset()")
        a = _as_index(action, self.max_machines)
        invalid = a < 0 or not s.mask[a]
        if invalid:
            s.invalid_actions += 1
            if self.invalid_action == "penalty":
                return self._penalty_step(s)
            a = fallback_machine(s)
        _apply(s, a)
        static = s.static
        outcome = None
        info: dict[str, Any] = {"invalid_action": invalid, "applied_action": a}
        if s.t == s.placement.size:
            s.ended = True
            outcome = self._finish(s, info)
        else:
            _update_mask(s)
            if np.count_nonzero(s.mask) == 0:  # 5x faster than .any() on small arrays
                s.ended = s.dead_end = True
                outcome = DEAD_END_REWARD
                info.update(dead_end=True, placement=placement_info(s.placement), reference_time_s=static.reference_time_s)
        if s.ended:
            # No action follows a final observation; see the class docstring.
            s.mask[: static.instance.num_machines] = True
        if self.reward_fn.needs_transition:
            inst = static.instance
            reward = self.reward_fn(
                Transition(
                    inst.cluster,
                    inst.workload,
                    s.placement,
                    static.reference_placement,
                    static.reference_time_s,
                    outcome,
                )
            )
        else:
            reward = 0.0 if outcome is None else outcome
        info["action_mask"] = s.mask.copy()
        return self._observation(), reward, s.ended, False, info

    def action_masks(self) -> np.ndarray:
        """``[max_machines]`` bool: the machines the current slot may go to (sb3-contrib)."""
        if self._state is None:
            raise RuntimeError("call reset() before action_masks()")
        return self._state.mask.copy()

    def render(self) -> str | np.ndarray | None:
        if self.render_mode is None:
            gym.logger.warn(
                "render() called without a render_mode; pass render_mode='ansi' or 'rgb_array' "
                "to the constructor"
            )
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        if self.render_mode == "ansi":
            return placement_table(self._state)
        return placement_image(self._state)

    # ---- read-only views --------------------------------------------------------------------
    @property
    def instance(self) -> Instance:
        """The instance of the current episode."""
        if self._state is None:
            raise RuntimeError("call reset() first")
        return self._state.static.instance

    @property
    def state(self) -> EpisodeState:
        """The current episode's state record (do not modify)."""
        if self._state is None:
            raise RuntimeError("call reset() first")
        return self._state

    @property
    def placement(self) -> np.ndarray:
        """A copy of the ``[D, L]`` placement so far (``-1`` unplaced)."""
        return self.state.placement.copy()

    @property
    def reference_placement(self) -> np.ndarray:
        """The naive placement of the current instance (the reward's reference)."""
        return self.state.static.reference_placement.copy()

    # ---- internals --------------------------------------------------------------------------
    def _penalty_step(self, s: EpisodeState) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        truncated = s.invalid_actions >= s.placement.size
        info: dict[str, Any] = {"invalid_action": True, "applied_action": -1}
        if truncated:
            s.ended = True
            s.mask[: s.static.instance.num_machines] = True
            info.update(placement=placement_info(s.placement), reference_time_s=s.static.reference_time_s)
        info["action_mask"] = s.mask.copy()
        return self._observation(), INVALID_ACTION_REWARD, False, truncated, info

    def _finish(self, s: EpisodeState, info: dict[str, Any]) -> float:
        static = s.static
        inst = static.instance
        breakdown = cost.evaluate(inst.cluster, inst.workload, s.placement)
        time_s = float(breakdown.iteration_time_s)
        info.update(
            dead_end=False,
            cost=cost_info(breakdown),
            iteration_time_s=time_s,
            reference_time_s=static.reference_time_s,
            speedup=static.reference_time_s / time_s,
            placement=placement_info(s.placement),
        )
        return log_speedup_reward(time_s, static.reference_time_s)

    def _observation(self) -> dict[str, np.ndarray]:
        s = self._state
        static = s.static
        return {
            "machine_mask": static.machine_mask.copy(),
            "machine_features": s.machine_features.copy(),
            "links": static.links.copy(),
            "layer_mask": static.layer_mask.copy(),
            "layer_features": s.layer_features.copy(),
            "layer_machine": s.layer_machine.copy(),
            "edges": static.edges.copy(),
            "edge_mask": static.edge_mask.copy(),
            "cursor": np.array([s.t], dtype=np.float32),
            "globals": s.globals_.copy(),
            "action_mask": s.mask.astype(np.float32),
        }

    def _static_parts(self, instance: Instance) -> StaticParts:
        key = id(instance)
        static = self._statics.get(key)
        if static is not None and static.instance is instance:
            self._statics.move_to_end(key)
            return static
        _check_fits(instance, self.max_machines, self.max_layers, self.max_edges)
        static = build_static(instance, self.max_machines, self.max_layers, self.max_edges)
        self._statics[key] = static
        if len(self._statics) > _STATIC_CACHE_SIZE:
            self._statics.popitem(last=False)
        return static


# ---- info values ---------------------------------------------------------------------------------
# Gymnasium's vector envs stack each info key into an array typed by the first value they see:
# a key must keep one type (and ndarrays one shape) across instances and steps. Hence placements
# as tuples (their [D, L] shape varies between instances) and one type per cost field.


def placement_info(placement: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """A ``[D, L]`` placement as nested tuples (``np.array(...)`` turns it back)."""
    return tuple(tuple(row) for row in placement.tolist())


def cost_info(breakdown: cost.IterationCost) -> dict[str, Any]:
    """``breakdown.to_dict()`` with ``bottleneck`` always a list: ``[machine]`` or ``[from, to]``."""
    out = breakdown.to_dict()
    if not isinstance(out["bottleneck"], list):
        out["bottleneck"] = [int(out["bottleneck"])]
    return out


# ---- spaces -------------------------------------------------------------------------------------


def observation_space(max_machines: int, max_layers: int, max_edges: int) -> spaces.Dict:
    """The observation space for the given padding (see :class:`PlacementEnv`)."""
    m, n, e = max_machines, max_layers, max_edges

    def box(low: float | np.ndarray, high: float | np.ndarray, shape: tuple[int, ...]) -> spaces.Box:
        lo = np.broadcast_to(np.asarray(low, dtype=np.float32), shape).copy()
        hi = np.broadcast_to(np.asarray(high, dtype=np.float32), shape).copy()
        return spaces.Box(lo, hi, shape, np.float32)

    return spaces.Dict(
        {
            "machine_mask": box(0, 1, (m,)),
            "machine_features": box(0, _MACHINE_HIGH, (m, len(MACHINE_FEATURES))),
            "links": box(0, _CLIP, (m, m, len(LINK_FEATURES))),
            "layer_mask": box(0, 1, (n,)),
            "layer_features": box(0, _LAYER_HIGH, (n, len(LAYER_FEATURES))),
            "layer_machine": box(-1, m - 1, (n,)),
            "edges": box(0, max(n - 1, 0), (e, 2)),
            "edge_mask": box(0, 1, (e,)),
            "cursor": box(0, n, (1,)),
            "globals": box(0, _GLOBAL_HIGH, (len(GLOBAL_FEATURES),)),
            "action_mask": box(0, 1, (m,)),
        }
    )


# ---- construction helpers -----------------------------------------------------------------------


def _resolve_generator(
    generator: str | InstanceGenerator | None,
    cluster: str | None,
    model: str | None,
    generator_kwargs: dict | None,
) -> InstanceGenerator:
    kwargs = dict(generator_kwargs or {})
    if generator is None:
        generator = "fixed" if (cluster is not None or model is not None) else "random"
    if not isinstance(generator, str):
        if cluster is not None or model is not None or kwargs:
            raise HulkInputError("cluster, model and generator_kwargs go with a generator name, not a generator object")
        return generator
    if generator == "fixed":
        kwargs.setdefault("cluster", "default" if cluster is None else cluster)
        kwargs.setdefault("model", "default" if model is None else model)
    elif cluster is not None or model is not None:
        raise HulkInputError(
            f"cluster and model choose the 'fixed' generator's instance; the '{generator}' "
            "generator draws its own (set its ranges with generator_kwargs)",
            field="generator",
        )
    return make_generator(generator, **kwargs)


def _padding(value: int | None, needed: int, label: str) -> int:
    if value is None or value == 0:
        return int(needed)
    if int(value) != value or value < needed:
        raise HulkInputError(
            f"{label}={value!r} is below what the generator can draw ({needed}); raise it, or "
            "narrow the generator's ranges with generator_kwargs",
            field=label,
        )
    return int(value)


def _check_fits(instance: Instance, max_machines: int, max_layers: int, max_edges: int) -> None:
    sizes = (
        ("machines", instance.num_machines, max_machines, "max_machines"),
        ("replica x layer slots", instance.data_parallel * instance.num_layers, max_layers, "max_layers"),
        ("layer-graph edges (all replicas)", instance_edges(instance), max_edges, "max_edges"),
    )
    for what, have, limit, label in sizes:
        if have > limit:
            raise HulkInputError(
                f"instance has {have} {what}, above the env's padding {label}={limit}; "
                f"make the env with {label}>={have}",
                source=instance.instance_id,
            )


def build_static(instance: Instance, max_machines: int, max_layers: int, max_edges: int) -> StaticParts:
    """Reference placement and padded static observation parts of one instance.

    Raises:
        HulkInputError: the naive placement (the reward's reference) does not fit in memory.
    """
    c, w = instance.cluster, instance.workload
    m, d, n_layers = c.num_machines, w.data_parallel, w.num_layers
    ref = naive(instance)
    if ref.placement is None:
        raise HulkInputError(
            f"the env needs the naive placement as its reference, and it does not fit: {capacity_reason(instance)}",
            source=instance.instance_id,
        )
    ref_time = float(cost.evaluate(c, w, ref.placement).iteration_time_s)
    flops, mem = c.flops, c.memory_bytes
    train_flops = cost.TRAIN_FLOPS_FACTOR * w.flops
    balanced = d * float(train_flops.sum()) / float(flops.sum())

    mf = np.zeros((max_machines, len(MACHINE_FEATURES)), dtype=np.float32)
    mf[:m, _MF["flops_log"]] = np.clip((np.log10(flops) - np.log10(TFLOPS)) / 4.0, 0, _CLIP)
    mf[:m, _MF["flops_rel"]] = flops / flops.max()
    mf[:m, _MF["memory_log"]] = np.clip((np.log10(mem) - np.log10(GB)) / 3.0, 0, _CLIP)
    mf[:m, _MF["memory_rel"]] = mem / mem.max()
    mf[:m, _MF["free_memory"]] = 1.0

    links = np.zeros((max_machines, max_machines, len(LINK_FEATURES)), dtype=np.float32)
    links[:m, :m, 0] = np.clip(np.log10(1.0 + c.latency_s / 1e-3) / 3.0, 0, _CLIP)
    with np.errstate(divide="ignore"):
        links[:m, :m, 1] = np.clip(np.log10(c.bandwidth_bps / 1e6) / 4.0, 0, _CLIP)

    layer = np.zeros((n_layers, len(LAYER_FEATURES)), dtype=np.float64)
    layer[:, _LF["flops_log"]] = np.log10(1.0 + w.flops / 1e9) / 5.0
    layer[:, _LF["flops_rel"]] = w.flops / w.flops.max() if w.flops.max() > 0 else 0.0
    layer[:, _LF["params_log"]] = np.log10(1.0 + w.params / 1e6) / 5.0
    layer[:, _LF["memory_rel"]] = (w.state_bytes_per_param * w.params + w.stash_bytes) / mem.max()
    layer[:, _LF["activation_log"]] = np.log10(1.0 + w.activation_bytes / 1e6) / 4.0
    act_max = w.activation_bytes.max()
    layer[:, _LF["activation_rel"]] = w.activation_bytes / act_max if act_max > 0 else 0.0
    layer[:, _LF["depth"]] = np.arange(n_layers) / max(n_layers - 1, 1)
    lf = np.zeros((max_layers, len(LAYER_FEATURES)), dtype=np.float32)
    for r in range(d):
        rows = lf[r * n_layers : (r + 1) * n_layers]
        rows[:] = np.minimum(layer, _LAYER_HIGH)
        rows[:, _LF["replica"]] = r / max(d - 1, 1)

    e = len(w.edges)
    edges = np.zeros((max_edges, 2), dtype=np.float32)
    edge_mask = np.zeros(max_edges, dtype=np.float32)
    for r in range(d):
        edges[r * e : (r + 1) * e] = w.edges + r * n_layers
    edge_mask[: d * e] = 1.0
    machine_mask = np.zeros(max_machines, dtype=np.float32)
    machine_mask[:m] = 1.0
    layer_mask = np.zeros(max_layers, dtype=np.float32)
    layer_mask[: d * n_layers] = 1.0
    layer_machine = np.full(max_layers, float(UNPLACED), dtype=np.float32)
    for arr in (mf, links, lf, edges, edge_mask, machine_mask, layer_mask, layer_machine):
        arr.setflags(write=False)
    return StaticParts(
        instance=instance,
        num_machines=m,
        num_layers=n_layers,
        data_parallel=d,
        num_micro_batches=w.num_micro_batches,
        gpipe=w.schedule == "gpipe",
        memory_bytes=mem,
        reference_placement=ref.placement,
        reference_time_s=ref_time,
        capacity_bytes=mem * (1.0 - MEMORY_RTOL),
        state_bytes=tuple(float(x) for x in w.state_bytes_per_param * w.params),
        stash_bytes=tuple(float(x) for x in w.stash_bytes),
        train_s=train_flops[:, None] / flops[None, :],
        predecessors=w.predecessors,
        balanced_s=balanced if balanced > 0 else 1.0,
        machine_features=mf,
        links=links,
        layer_features=lf,
        edges=edges,
        edge_mask=edge_mask,
        machine_mask=machine_mask,
        layer_mask=layer_mask,
        layer_machine=layer_machine,
    )


def _new_state(static: StaticParts, max_machines: int, max_layers: int) -> EpisodeState:
    inst = static.instance
    w = inst.workload
    m = inst.num_machines
    gpipe = w.schedule == "gpipe"
    lf = static.layer_features.copy()
    lf[0, _LF["current"]] = 1.0
    g = np.zeros(len(GLOBAL_FEATURES), dtype=np.float32)
    g[_GF["micro_batches_log"]] = min(math.log2(w.num_micro_batches) / 10.0, _CLIP)
    g[_GF["is_1f1b"]] = 0.0 if gpipe else 1.0
    g[_GF["stash"]] = 1.0 if gpipe else 0.0
    return EpisodeState(
        static=static,
        placement=np.full((w.data_parallel, w.num_layers), UNPLACED, dtype=np.int64),
        t=0,
        used_bytes=np.zeros(m),
        load_s=[0.0] * m,
        held=[0] * m,
        in_replica=np.zeros(m, dtype=bool),
        replica_stash_bytes=np.zeros(m),
        depth=0,
        stash_count=w.num_micro_batches if gpipe else 0,
        mask=np.zeros(max_machines, dtype=bool),
        invalid_actions=0,
        ended=False,
        dead_end=False,
        machine_features=static.machine_features.copy(),
        layer_features=lf,
        layer_machine=static.layer_machine.copy(),
        globals_=g,
    )


# ---- the dynamics -------------------------------------------------------------------------------


def _as_index(action: Any, n: int) -> int:
    """The action as a machine index, or -1 when it is not an integer in ``[0, n)``."""
    try:
        a = int(action)
    except (TypeError, ValueError):
        try:
            a = int(np.asarray(action).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            return -1
    return a if 0 <= a < n else -1


def _update_mask(s: EpisodeState) -> None:
    """Set ``s.mask`` for slot ``s.t`` (exact memory rule, see the class docstring)."""
    static = s.static
    m = static.num_machines
    layer = s.t % static.num_layers
    free = static.capacity_bytes - s.used_bytes
    state_b, stash_b = static.state_bytes[layer], static.stash_bytes[layer]
    k = s.stash_count
    k_new = k if static.gpipe else min(static.num_micro_batches, s.depth + 1)
    if k_new == k:
        np.greater_equal(free, state_b + k * stash_b, out=s.mask[:m])
        return
    # A machine new to the replica raises its stash count: every machine of the replica must
    # hold (k_new - k) more micro-batches of its layers' stash.
    fits_same = free >= state_b + k * stash_b
    grow_ok = s.depth == 0 or bool(np.all(free >= (k_new - k) * s.replica_stash_bytes))
    if grow_ok:
        s.mask[:m] = (free >= state_b + k_new * stash_b) | (s.in_replica & fits_same)
    else:
        s.mask[:m] = s.in_replica & fits_same


def _apply(s: EpisodeState, a: int) -> None:
    """Place slot ``s.t`` on machine ``a`` (a valid action) and update the working arrays."""
    static = s.static
    n_layers = static.num_layers
    slot = s.t
    r, layer = divmod(slot, n_layers)
    mf = s.machine_features
    used = s.used_bytes
    if not s.in_replica[a]:
        s.depth += 1
        s.in_replica[a] = True
        mf[a, _M_IN_REPLICA] = 1.0
        if not static.gpipe and s.depth <= static.num_micro_batches:
            # 1F1B: the stash count min(m, depth) grows with the new machine.
            if s.depth > 1:
                used += s.replica_stash_bytes
                cap = static.memory_bytes
                mf[: static.num_machines, _M_FREE] = (cap - used) / cap
            s.stash_count = s.depth
            s.globals_[_G_STASH] = s.depth / static.num_micro_batches
    stash = static.stash_bytes[layer]
    used[a] += static.state_bytes[layer] + s.stash_count * stash
    s.replica_stash_bytes[a] += stash
    load = s.load_s[a] + static.train_s[layer, a]
    s.load_s[a] = load
    held = s.held[a] + 1
    s.held[a] = held
    s.placement[r, layer] = a
    s.t = t = slot + 1
    slots = s.placement.size
    cap_a = static.memory_bytes[a]
    row = mf[a]
    row[_M_FREE] = (cap_a - used[a]) / cap_a
    row[_M_LOAD] = load / (load + static.balanced_s)
    row[_M_HELD] = held / slots
    lf = s.layer_features
    lf[slot, _L_PLACED] = 1.0
    lf[slot, _L_CURRENT] = 0.0
    s.layer_machine[slot] = a
    g = s.globals_
    g[_G_PROGRESS] = t / slots
    for i in s.pred_rows:
        mf[i, _M_PRED] = 0.0
    if t == slots:
        s.pred_rows = ()
        return
    lf[t, _L_CURRENT] = 1.0
    r_next, layer_next = divmod(t, n_layers)
    if r_next != r:
        s.in_replica[:] = False
        s.replica_stash_bytes[:] = 0.0
        s.depth = 0
        mf[:, _M_IN_REPLICA] = 0.0
        if not static.gpipe:
            s.stash_count = 0
            g[_G_STASH] = 0.0
        g[_G_REPLICA] = r_next / max(static.data_parallel - 1, 1)
    placed = s.placement[r_next]
    s.pred_rows = rows = tuple(int(placed[u]) for u in static.predecessors[layer_next])
    for i in rows:
        mf[i, _M_PRED] = 1.0


def fallback_machine(s: EpisodeState) -> int:
    """The machine an invalid action is replaced by (``invalid_action="fallback"``).

    The machine of the current layer's first predecessor in the same replica if it is valid
    (no new link, no new pipeline stage), else the valid machine with the most free memory
    (lowest index on ties). The mask is never empty here: an empty one ends the episode.
    """
    static = s.static
    r, layer = divmod(s.t, static.num_layers)
    preds = static.predecessors[layer]
    if preds:
        a = int(s.placement[r, preds[0]])
        if s.mask[a]:
            return a
    m = static.num_machines
    free = np.where(s.mask[:m], static.capacity_bytes - s.used_bytes, -np.inf)
    return int(np.argmax(free))


# ---- rendering ----------------------------------------------------------------------------------


def _ranges(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    parts, start = [], None
    for i, v in enumerate(layers):
        if start is None:
            start = v
        if i + 1 == len(layers) or layers[i + 1] != v + 1:
            parts.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ",".join(parts)


def placement_table(s: EpisodeState) -> str:
    """The ``"ansi"`` rendering: one row per machine, grouped by region, with its slots."""
    static = s.static
    inst = static.instance
    c, w = inst.cluster, inst.workload
    slots = s.placement.size
    head = f"{inst.instance_id} | step {s.t}/{slots} | D={w.data_parallel} L={w.num_layers}"
    if s.t < slots and not s.ended:
        r, layer = divmod(s.t, w.num_layers)
        head += f" | next: replica {r} layer {layer} '{w.layer_names[layer]}'"
    if s.dead_end:
        head += " | DEAD END"
    lines = [head, f"{'region':<14} {'machine':<16} {'gpus':<16} {'TFLOP/s':>8} {'mem GB used/total':>18}  slots (replica:layers)"]
    for region_i, region in enumerate(c.regions):
        first = True
        for i in np.flatnonzero(c.region_index == region_i):
            mc = c.machines[i]
            held = [
                f"r{r}:{_ranges(np.flatnonzero(s.placement[r] == i).tolist())}"
                for r in range(w.data_parallel)
                if np.any(s.placement[r] == i)
            ]
            mem = f"{s.used_bytes[i] / GB:,.1f}/{mc.memory_bytes / GB:,.1f}"
            lines.append(
                f"{(region if first else ''):<14.14} {mc.name:<16.16} {f'{mc.num_gpus}x {mc.gpu}':<16.16} "
                f"{mc.flops / TFLOPS:>8.1f} {mem:>18}  {' '.join(held)}"
            )
            first = False
    lines.append(f"reference (naive) iteration time: {static.reference_time_s:.4g} s")
    if s.t == slots:
        t_iter = cost.iteration_time(c, w, s.placement)
        lines.append(f"iteration time: {t_iter:.4g} s, speed-up over naive: {static.reference_time_s / t_iter:.3f}x")
    return "\n".join(lines) + "\n"


def _machine_xy(s: EpisodeState) -> tuple[np.ndarray, np.ndarray, bool]:
    """Plot positions: lon/lat (machines of one city on a small circle) or a region grid."""
    c = s.static.instance.cluster
    m = c.num_machines
    rank = np.zeros(m)
    count = np.bincount(c.region_index, minlength=len(c.regions))
    seen = np.zeros(len(c.regions), dtype=int)
    for i, g in enumerate(c.region_index):
        rank[i] = seen[g]
        seen[g] += 1
    geo_ok = all(mc.lat is not None and mc.lon is not None for mc in c.machines)
    if geo_ok:
        angle = 2 * np.pi * rank / np.maximum(count[c.region_index], 1)
        radius = np.where(count[c.region_index] > 1, 2.5, 0.0)
        x = np.array([mc.lon for mc in c.machines]) + radius * np.cos(angle)
        y = np.array([mc.lat for mc in c.machines]) + radius * np.sin(angle)
        return x, y, True
    return c.region_index.astype(float), rank, False


def placement_image(s: EpisodeState) -> np.ndarray:
    """The ``"rgb_array"`` rendering: machines coloured by the mean depth of the layers they
    hold (grey: empty), sized by slots held, with each replica's pipeline drawn as a path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    static = s.static
    inst = static.instance
    c, w = inst.cluster, inst.workload
    x, y, geo_ok = _machine_xy(s)
    fig = Figure(figsize=(8, 4.5), dpi=100)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    depth = np.zeros(c.num_machines)
    placed = s.placement >= 0
    np.add.at(depth, s.placement[placed], np.nonzero(placed)[1] / max(w.num_layers - 1, 1))
    held = np.asarray(s.held)
    for r in range(w.data_parallel):
        path = s.placement[r][s.placement[r] >= 0]
        if len(path) > 1:
            ax.plot(x[path], y[path], "-", lw=1.0, alpha=0.5, color=f"C{r % 10}", zorder=1)
    empty = held == 0
    ax.scatter(x[empty], y[empty], s=20, facecolors="none", edgecolors="0.6", zorder=2)
    busy = ~empty
    if busy.any():
        points = ax.scatter(
            x[busy], y[busy], s=30 + 200 * held[busy] / max(held.max(), 1),
            c=depth[busy] / held[busy], cmap="viridis", vmin=0, vmax=1, edgecolors="k", zorder=3,
        )
        fig.colorbar(points, ax=ax, label="mean layer depth held (0 = input, 1 = output)")
    if geo_ok:
        ax.set_xlabel("longitude")
        ax.set_ylabel("latitude")
        for region_i, region in enumerate(c.regions):
            i = int(np.flatnonzero(c.region_index == region_i)[0])
            ax.annotate(region, (x[i], y[i]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    else:
        from matplotlib.ticker import MaxNLocator

        ax.set_xticks(range(len(c.regions)), c.regions, rotation=30, fontsize=7)
        ax.set_xlim(-0.5, len(c.regions) - 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("machine within region")
        for i, mc in enumerate(c.machines):
            ax.annotate(mc.name, (x[i], y[i]), fontsize=7, xytext=(8, -3), textcoords="offset points")
    title = f"{inst.instance_id}  step {s.t}/{s.placement.size}"
    if s.t == s.placement.size:
        title += f"  speed-up {static.reference_time_s / cost.iteration_time(c, w, s.placement):.2f}x"
    elif s.dead_end:
        title += "  dead end"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
