"""The placement environment: one decision per (replica, layer), machines as actions."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hulk_env import cost, parallelism
from hulk_env.env.observation import build_static, observation_space, placement_cost
from hulk_env.env.state import (
    EpisodeState,
    apply,
    as_index,
    fallback_machine,
    new_state,
    observation,
    update_mask,
)
from hulk_env.errors import HulkInputError
from hulk_env.feasibility import Padding
from hulk_env.generators import InstanceGenerator, make_generator
from hulk_env.instance import Instance
from hulk_env.rewards import (
    DEAD_END_REWARD,
    INVALID_ACTION_REWARD,
    Transition,
    log_speedup_reward,
    make_reward,
)

ENV_ID = "hulk/Placement-v0"
INVALID_ACTION_MODES = ("fallback", "penalty")
STATIC_CACHE_SIZE = 32  # instances whose static observation parts are kept (suites cycle)


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
    ``(1 - MEMORY_RTOL)`` of its memory under ``cost.memory_use_bytes``'s rule (under plan
    settings per machine: the ``d_m`` data-parallel groups inside a machine each hold a copy of
    the slot's sharded state and the busiest one stashes its share,
    :func:`hulk_env.feasibility.plan_slot_memory`; routed MoE experts are bounded by all of a
    layer's experts per slot), including the 1F1B rule: a machine new to the replica raises
    its stash count ``min(m, depth)``, which adds stash on all of the replica's machines, so it
    is valid only if they all still fit.
    Hence every completed placement is memory-feasible, and every memory-feasible placement
    can be reached through valid actions. Once the episode has ended the mask marks every real
    machine (no action is taken from a final observation; an all-zero mask would make masked
    samplers that still act on it divide by zero).

    **Invalid actions** (a masked-out or padding machine, or anything but an integer-valued number in range: 1.9, inf, "1"):
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
    | ``globals`` | (13,) | [0, 1.5] | ``GLOBAL_FEATURES``: progress, current replica, log2 micro-batches / 10, is 1F1B, current stash count / micro-batches; then the plan settings (:func:`hulk_env.env.observation.plan_features`, all 0 at the defaults): tensor parallel on, ``log2 t / 4``, ``log2`` micro-batch size ``/ 4`` under tensor parallel, ZeRO stage / 3, DiLoCo, ``log10 H / 3``, ``log2(32 / bits) / 3`` and streaming under DiLoCo |
    | ``action_mask`` | (M,) | {0, 1} | valid machines for the current slot |

    ## Rewards (:mod:`hulk_env.rewards`)

    The episode's value is ``R = max(log(T_ref / T_iter), -5)`` (log speed-up over the naive
    placement, floored); a dead end scores ``DEAD_END_REWARD = -6``.
    ``reward="terminal"`` pays ``R`` on the last step, 0 before; ``reward="dense"`` pays the
    change of the potential ``Phi`` (the log speed-up of the partial placement completed by the
    naive one; ``Phi = 0`` at the start): its undiscounted return equals the terminal one.
    ``reward="cost"`` pays instead, on the last step, ``C = max(log(USD_ref / USD_iter), -5)``
    (dollars per iteration, :mod:`hulk_env.money`) and ``reward="mixed"`` ``(R + C) / 2``.
    Penalty-mode invalid actions add -0.1 each to any of them.

    ## Episode end

    | event | terminated | truncated | reward (terminal) | info |
    |---|---|---|---|---|
    | all ``D * L`` slots placed | True | False | ``R`` | ``cost``, ``iteration_time_s``, ``reference_time_s``, ``speedup``, ``placement``, ``plan_settings``, ``dead_end=False`` |
    | dead end: after a step, no machine can take the next layer | True | False | ``DEAD_END_REWARD`` | ``dead_end=True``, ``placement`` (``-1`` unplaced), ``reference_time_s`` |
    | ``D * L`` invalid actions (penalty mode) | False | True | -0.1 | ``placement``, ``reference_time_s`` |

    A dead end is a true terminal state (no action exists), so it is ``terminated``: value
    bootstrapping from it would be wrong. ``info["placement"]`` is a tuple of ``D`` tuples of
    ``L`` machine indices (``np.array`` of it is the ``[D, L]`` placement) and ``info["cost"]``
    is ``IterationCost.to_dict()`` with ``bottleneck`` as ``[machine]`` or ``[from, to]``: one
    type per key, so Gymnasium's vector envs can stack infos across different instances. Every step's info holds ``action_mask``,
    ``invalid_action`` and ``applied_action``; ``reset``'s info holds ``action_mask``,
    ``instance_id``, ``reference_time_s`` and ``plan_settings`` (the instance's plan settings,
    :func:`hulk_env.parallelism.plan_info`: tensor parallel, ZeRO, sync, micro-batches, DiLoCo's
    inner steps, bits and streaming, under fixed keys; the cost, reward and ``cost`` breakdown
    are under those settings). Generated instances always admit the naive
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
    | ``reward`` | ``"terminal"`` | ``"terminal"``, ``"dense"``, ``"cost"`` or ``"mixed"`` |
    | ``invalid_action`` | ``"fallback"`` | ``"fallback"`` or ``"penalty"`` |
    | ``render_mode`` | ``None`` | ``"ansi"`` (:func:`hulk_env.render.placement_text` with the progress) or ``"rgb_array"`` (:func:`hulk_env.render.placement_figure` of the slots placed so far, HxWx3 uint8) |

    ``reset(options={"instance": inst})`` places a given instance (it must fit the padding and
    admit the naive placement). Instances come from ``self.np_random``: same seed, same episode.

    ## Version history

    * v0: first version.
    * v0, plan settings: ``globals`` gained the 8 plan-setting columns (13, was 5). They are 0 at the
      default settings, so default instances observe what they did (the first 5 columns
      unchanged); a policy saved with 5 globals loads with zero weights on the new columns
      (:func:`agents.network.saved_policy.pad_new_globals`) and decides as before.
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
        self.observation_space = self._observation_space()
        self._statics: OrderedDict[int, Any] = OrderedDict()
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
        self._state = self._new_state(static)
        self.reward_fn.reset()
        self._update_mask(self._state)
        if np.count_nonzero(self._state.mask) == 0:
            # Only possible when the naive placement fills a machine to within MEMORY_RTOL.
            raise HulkInputError(
                "no machine can hold the first layer within the mask's memory margin",
                source=instance.instance_id,
            )
        info = {
            "action_mask": self._state.mask.copy(),
            "instance_id": instance.instance_id,
            "reference_time_s": self._state.static.reference_time_s,
            "plan_settings": parallelism.plan_info(instance.workload),
        }
        return self._observation(), info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        s = self._state
        if s is None or s.ended:
            raise RuntimeError("the episode has ended (or never started): call reset()")
        a = as_index(action, self.max_machines)
        invalid = a < 0 or not s.mask[a]
        if invalid:
            s.invalid_actions += 1
            if self.invalid_action == "penalty":
                return self._penalty_step(s)
            a = self._fallback_machine(s)
        self._apply(s, a)
        info: dict[str, Any] = {"invalid_action": invalid, "applied_action": a}
        if s.t == s.placement.size:
            s.ended = True
            outcome = self._finish(s, info)
        else:
            outcome = self._next_mask(s, info)
        if s.ended:
            # No action follows a final observation; see the class docstring.
            s.mask[: s.static.num_machines] = True
        reward = self._reward(s, outcome)
        info["action_mask"] = s.mask.copy()
        return self._observation(), reward, s.ended, False, info

    def _reward(self, s: EpisodeState, outcome: float | None) -> float:
        """The step's reward: the episode's value at its end (``outcome``), shaped if dense."""
        if not self.reward_fn.needs_transition:
            return 0.0 if outcome is None else outcome
        static = s.static
        inst = static.instance
        return self.reward_fn(
            Transition(inst.cluster, inst.workload, s.placement, static.reference_placement, static.reference_time_s, outcome)
        )

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
        return render_state(self._state, self.render_mode)

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

    # ---- internals (the version-specific parts: Placement-v1 overrides these) ---------------------
    def _observation_space(self) -> spaces.Dict:
        return observation_space(self.max_machines, self.max_layers, self.max_edges)

    def _build_static(self, instance: Instance) -> Any:
        return build_static(instance, self.max_machines, self.max_layers, self.max_edges)

    def _new_state(self, static: Any) -> EpisodeState:
        return new_state(static, self.max_machines)

    # the per-step dynamics (module functions: one call per step, no method in between)
    _update_mask = staticmethod(update_mask)
    _apply = staticmethod(apply)
    _fallback_machine = staticmethod(fallback_machine)

    def _next_mask(self, s: EpisodeState, info: dict[str, Any]) -> float | None:
        """Set the mask for slot ``s.t`` (not the last); the episode's outcome if that ends it
        (a dead end: no machine can take the layer), else None."""
        update_mask(s)
        if np.count_nonzero(s.mask) == 0:  # 5x faster than .any() on small arrays
            s.ended = s.dead_end = True
            info.update(dead_end=True, placement=placement_info(s.placement), reference_time_s=s.static.reference_time_s)
            return DEAD_END_REWARD
        return None

    def _penalty_step(self, s: EpisodeState) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        truncated = s.invalid_actions >= s.placement.size
        info: dict[str, Any] = {"invalid_action": True, "applied_action": -1}
        if truncated:
            s.ended = True
            s.mask[: s.static.num_machines] = True
            info.update(placement=placement_info(s.placement), reference_time_s=s.static.reference_time_s)
        info["action_mask"] = s.mask.copy()
        return self._observation(), INVALID_ACTION_REWARD, False, truncated, info

    def _finish(self, s: EpisodeState, info: dict[str, Any]) -> float:
        static = s.static
        inst = static.instance
        breakdown = placement_cost(inst, s.placement)
        time_s = float(breakdown.iteration_time_s)
        info.update(
            dead_end=False,
            cost=cost_info(breakdown),
            iteration_time_s=time_s,
            reference_time_s=static.reference_time_s,
            speedup=static.reference_time_s / time_s,
            placement=placement_info(s.placement),
            plan_settings=parallelism.plan_info(inst.workload),
        )
        return log_speedup_reward(time_s, static.reference_time_s)

    def _observation(self) -> dict[str, np.ndarray]:
        s = self._state
        obs = observation(s)
        obs["links"] = s.static.links.copy()
        return obs

    def _static_parts(self, instance: Instance) -> Any:
        key = id(instance)
        static = self._statics.get(key)
        if static is not None and static.instance is instance:
            self._statics.move_to_end(key)
            return static
        Padding(self.max_machines, self.max_layers, self.max_edges).check_fits(instance)
        static = self._build_static(instance)
        self._statics[key] = static
        if len(self._statics) > STATIC_CACHE_SIZE:
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


# ---- rendering (the pictures and tables of hulk_env.render) ------------------------------------


def render_state(s: EpisodeState, mode: str) -> str | np.ndarray:
    """``"ansi"``: the placement table with the episode's progress; ``"rgb_array"``: the
    placement figure of the slots placed so far, as ``[H, W, 3]`` pixels."""
    from hulk_env import render  # on demand: render loads the evaluation package and the baselines

    static = s.static
    inst = static.instance
    w = inst.workload
    slots = s.placement.size
    done = s.t == slots
    speedup = static.reference_time_s / cost.iteration_time(inst.cluster, w, s.placement) if done else None
    if mode == "rgb_array":
        title = f"{inst.instance_id}  step {s.t}/{slots}"
        title += f"  speed-up {speedup:.2f}x" if done else "  dead end" if s.dead_end else ""
        return render.figure_to_rgb(render.placement_figure(inst, s.placement, title=title))
    head = f"{inst.instance_id} | step {s.t}/{slots} | D={w.data_parallel} L={w.num_layers}"
    if not done and not s.ended:
        r, layer = divmod(s.t, w.num_layers)
        head += f" | next: replica {r} layer {layer} '{w.layer_names[layer]}'"
    if s.dead_end:
        head += " | DEAD END"
    lines = [head, render.placement_text(inst, s.placement), f"reference (naive) iteration time: {static.reference_time_s:.4g} s"]
    if done:
        lines.append(f"speed-up over naive: {speedup:.3f}x")
    return "\n".join(lines) + "\n"
