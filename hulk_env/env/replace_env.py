"""The re-placement environment ``hulk/Replace-v0``: a running placement lost machines; fix it."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hulk_env.errors import HulkInputError
from hulk_env.generators import RandomGeoGenerator, fixed_instance
from hulk_env.instance import Instance
from hulk_env.reference import naive_placement
from hulk_env.replacement.episode import (
    FEATURE_MAX,
    FEATURES,
    SCOPES,
    Episodes,
    EpisodeSpec,
    action_mask,
    apply_actions,
    candidate_features,
    current_slot,
    episode_spec,
    finished,
    new_episodes,
)
from hulk_env.replacement.failures import parse_failures, random_scenario
from hulk_env.replacement.problem import (
    DEFAULT_HORIZON,
    PlacementFile,
    ReplacementProblem,
    outcome,
    placement_from_file,
    read_placement_file,
)
from hulk_env.rewards import DEAD_END_REWARD
from hulk_env.units import MS

ENV_ID = "hulk/Replace-v0"
MACHINE_FEATURES = (
    "speed",  # FLOP/s / the fastest machine's
    "memory_rel",  # memory / the largest machine's
    "failed",  # 1 for a failed machine
    "free_memory",  # free / total memory, now
)
SLOT_FEATURES = (
    "replica",  # r / max(D - 1, 1)
    "depth",  # l / max(L - 1, 1)
    "placed",  # 1 once the slot has a machine (kept or decided)
    "current",  # 1 for the slot to decide now
    "displaced",  # 1 if its old machine failed
    "to_decide",  # 1 if the episode decides it (now or later)
)
LINK_FEATURES = ("latency_log", "bandwidth_log")  # as in hulk/Placement-v0
_CLIP = 1.5
_MAX_RESAMPLE = 100


class ReplaceEnv(gym.Env):
    """Re-place a model whose running placement lost machines, weighing moved bytes and speed.

    An episode is one :class:`~hulk_env.replacement.problem.ReplacementProblem`: a cluster and
    model, the placement that was running, the machines that failed, a horizon ``H`` and where
    the last checkpoint lives. It starts from the old placement with the failed machines
    removed; each step assigns one (replica, layer) slot to a surviving machine, replica by
    replica in topological layer order. With ``scope="displaced"`` the steps are the slots
    whose machine failed (the others stay); with ``scope="all"`` (default) every slot is decided
    again, so the agent may also move others (a slot that stays where its state is moves
    nothing). Episode dynamics, memory rule and features: :mod:`hulk_env.replacement.episode`.

    ## Action space

    ``Discrete(max_machines)``: the machine for the current slot. ``action_masks()`` (and
    ``obs["action_mask"]``) marks the surviving machines that can take it within memory (the
    cost model's exact rule, the 1F1B stash included), so every completed placement fits.
    An invalid action (masked, padding, out of range) places the slot on the valid machine
    with the highest ``holds_state``, then ``same_as_prev`` feature (lowest index on ties) and
    sets ``info["invalid_action"]``.

    ## Observation space

    A flat ``Dict`` of float32 ``Box``es, padded to ``max_machines`` (``M``) and ``max_slots``
    (``N``; slot ``r * L + l``). Fresh arrays every step.

    | key | shape | range | meaning |
    |---|---|---|---|
    | ``candidate_features`` | (M, F) | [0, 3] | ``FEATURES`` of :mod:`~hulk_env.replacement.episode`: what placing the current slot on each machine would do |
    | ``machine_features`` | (M, 4) | [0, 1] | ``MACHINE_FEATURES``: speed, memory, failed, free memory |
    | ``links`` | (M, M, 2) | [0, 1.5] | ``LINK_FEATURES``: ``log10(1 + latency/1ms)/3``, ``log10(B/s / 1e6)/4`` (1.5 on the diagonal) |
    | ``slot_features`` | (N, 6) | [0, 1] | ``SLOT_FEATURES``: replica, depth, placed, current, displaced, to decide |
    | ``layer_machine`` | (N,) | [-1, M-1] | each slot's machine now (-1 undecided or padding) |
    | ``old_machine`` | (N,) | [-1, M-1] | each slot's machine before the failure (-1 if that machine failed) |
    | ``machine_mask`` / ``slot_mask`` | (M,) / (N,) | {0, 1} | real machines / slots |
    | ``cursor`` | (1,) | [0, N] | decisions made |
    | ``action_mask`` | (M,) | {0, 1} | valid machines for the current slot |

    ## Reward

    Paid at the end: ``R = max(log(H x T_old / total_s), -5)`` with ``total_s = migration_s + H
    x iteration_time_s`` of the new placement (:mod:`hulk_env.replacement.migration`) and
    ``T_old`` the old placement's iteration time: 0 is as good as if nothing had failed. A dead
    end (no machine can take the current slot) ends the episode with ``DEAD_END_REWARD`` (-6).

    ## Episode end

    | event | terminated | reward | info |
    |---|---|---|---|
    | every slot decided | True | ``R`` | ``placement``, ``total_s``, ``migration_s``, ``iteration_time_s``, ``moved_bytes``, ``reference_total_s``, ``dead_end=False`` |
    | dead end | True | -6 | ``dead_end=True``, ``placement`` (-1 undecided) |

    ``reset``'s info holds ``action_mask``, ``failed`` (machine names), ``label`` and
    ``reference_total_s``; every step's info holds ``action_mask`` and ``invalid_action``.

    ## Arguments

    | argument | default | meaning |
    |---|---|---|
    | ``cluster``, ``model`` | ``"default"`` | a built-in name or file (fixed problems) |
    | ``data_parallel`` | ``None`` | replicas ``D`` (the model's default when ``None``) |
    | ``fail`` | ``None`` | a failure spec (``NAME,...``, ``region:NAME``, ``P%``); ``None``: a random failure of the running placement each episode |
    | ``placement`` | ``None`` | the running placement of a fixed problem: a ``[D, L]`` list of machine indices or names, or the path of ``hulk place --json`` output; ``None``: the naive reference placement (:mod:`hulk_env.reference`) |
    | ``generator`` | ``"fixed"`` | ``"fixed"`` (``cluster`` x ``model``) or ``"random"`` (:class:`~hulk_env.generators.RandomGeoGenerator` with ``generator_kwargs``; the running placement is the naive one) |
    | ``generator_kwargs`` | ``None`` | keyword values for the random generator |
    | ``horizon`` | 1000 | ``H`` |
    | ``scope`` | ``"all"`` | ``"all"`` or ``"displaced"`` |
    | ``max_machines``, ``max_slots`` | ``None`` | padding; ``None``: the fixed instance's size, or the random generator's largest |

    ``reset(options={"problem": problem})`` plays a given problem (it must fit the padding and
    have a slot to decide): e.g. a placement found by any method, hit by any failure. Same seed, same episode. Failures that leave nothing to decide (a
    random failure of an unused machine with ``scope="displaced"``) are drawn again.

    ## Version history

    * v0: first version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(
        self,
        cluster: str = "default",
        model: str = "default",
        data_parallel: int | None = None,
        fail: str | None = None,
        placement: str | list | None = None,
        generator: str = "fixed",
        generator_kwargs: dict | None = None,
        horizon: int = DEFAULT_HORIZON,
        scope: str = "all",
        max_machines: int | None = None,
        max_slots: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        if scope not in SCOPES:
            raise HulkInputError(f"unknown scope '{scope}'; choose from {', '.join(SCOPES)}", field="scope")
        if generator not in ("fixed", "random"):
            raise HulkInputError(f"unknown generator '{generator}'; choose fixed or random", field="generator")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise HulkInputError(f"unknown render_mode '{render_mode}'; choose ansi", field="render_mode")
        self.scope, self.horizon, self.fail = scope, int(horizon), fail
        self.render_mode = render_mode
        self._fixed: tuple[Instance, np.ndarray] | None = None
        self._random: RandomGeoGenerator | None = None
        if generator == "fixed":
            inst, start = _running(cluster, model, data_parallel, placement)
            if fail is not None:
                parse_failures(inst.cluster, fail)  # a bad spec fails here, not at reset
            self._fixed = (inst, start)
            sizes = (inst.num_machines, inst.data_parallel * inst.num_layers)
        else:
            self._random = RandomGeoGenerator(**dict(generator_kwargs or {}))
            sizes = (self._random.max_machines, self._random.max_slots)
        self.max_machines = int(max_machines or sizes[0])
        self.max_slots = int(max_slots or sizes[1])
        if self.max_machines < sizes[0] or self.max_slots < sizes[1]:
            raise HulkInputError(f"padding ({self.max_machines} machines, {self.max_slots} slots) is below the instances' size {sizes}")
        self.action_space = spaces.Discrete(self.max_machines)
        self.observation_space = replace_observation_space(self.max_machines, self.max_slots)
        self._spec: EpisodeSpec | None = None
        self._ep: Episodes | None = None
        self._ended = True

    # ---- Gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        problem = options.pop("problem", None)
        if options:
            raise HulkInputError(f"unknown reset option(s) {sorted(options)}; the only option is 'problem'")
        if problem is None:
            problem = self._draw_problem()
        elif not isinstance(problem, ReplacementProblem):
            raise HulkInputError(f"options['problem'] must be a ReplacementProblem, got {type(problem).__name__}")
        spec = episode_spec(problem, self.scope)
        if spec.num_steps == 0:
            raise HulkInputError("the problem has no slot to decide (no displaced slot with scope='displaced')")
        inst = problem.instance
        if inst.num_machines > self.max_machines or spec.fixed.size > self.max_slots:
            raise HulkInputError(
                f"the problem has {inst.num_machines} machines and {spec.fixed.size} slots; the padding is "
                f"{self.max_machines} and {self.max_slots}"
            )
        self._spec, self._ep, self._ended = spec, new_episodes(spec, 1), False
        mask = self._mask()
        info = {
            "action_mask": mask.copy(),
            "failed": [inst.cluster.machines[i].name for i in np.flatnonzero(problem.failed)],
            "label": problem.label,
            "reference_total_s": spec.reference_total_s,
        }
        return self._observation(mask), info

    def step(self, action: Any):
        if self._spec is None or self._ended:
            raise RuntimeError("the episode has ended (or never started): call reset()")
        spec, ep = self._spec, self._ep
        mask = self._mask()
        a = _as_index(action, self.max_machines)
        invalid = a < 0 or not mask[a]
        if invalid:
            a = self._fallback(mask)
        apply_actions(spec, ep, np.array([a]))
        info: dict[str, Any] = {"invalid_action": invalid}
        reward = 0.0
        if finished(spec, ep):
            self._ended = True
            reward = self._finish(info)
            mask = np.zeros(self.max_machines, dtype=bool)
            mask[: spec.problem.instance.num_machines] = True
        else:
            mask = self._mask()
            if not mask.any():
                self._ended = True
                reward = DEAD_END_REWARD
                info.update(dead_end=True, placement=_nested(ep.placement[0]))
                mask[: spec.problem.instance.num_machines] = True
        info["action_mask"] = mask.copy()
        return self._observation(mask), float(reward), self._ended, False, info

    def action_masks(self) -> np.ndarray:
        """``[max_machines]`` bool: machines the current slot may go to (sb3-contrib)."""
        if self._spec is None:
            raise RuntimeError("call reset() before action_masks()")
        if self._ended:
            mask = np.zeros(self.max_machines, dtype=bool)
            mask[: self._spec.problem.instance.num_machines] = True
            return mask
        return self._mask()

    def render(self) -> str | None:
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi'")
            return None
        if self._spec is None:
            raise RuntimeError("call reset() before render()")
        from hulk_env.render import placement_text

        placement = self._ep.placement[0]
        if np.all(placement >= 0):
            return placement_text(self._spec.problem.instance, placement)
        return f"{int((placement >= 0).sum())} of {placement.size} slots placed; failed: {self._spec.problem.label}"

    # ---- views ------------------------------------------------------------------------------
    @property
    def problem(self) -> ReplacementProblem:
        if self._spec is None:
            raise RuntimeError("call reset() first")
        return self._spec.problem

    @property
    def placement(self) -> np.ndarray:
        """A copy of the ``[D, L]`` placement so far (``-1`` undecided)."""
        if self._ep is None:
            raise RuntimeError("call reset() first")
        return self._ep.placement[0].copy()

    # ---- internals --------------------------------------------------------------------------
    def _draw_problem(self) -> ReplacementProblem:
        rng = self.np_random
        for _ in range(_MAX_RESAMPLE):
            if self._fixed is not None:
                inst, start = self._fixed
            else:
                inst = self._random(rng)
                start = naive_placement(inst)
                if start is None:
                    continue
            if self.fail is not None:
                sc = parse_failures(inst.cluster, self.fail, int(rng.integers(2**31)))
            else:
                sc = random_scenario(inst.cluster, start, rng)
            if len(sc.failed) == inst.num_machines:
                continue
            problem = ReplacementProblem(inst, start, list(sc.failed), self.horizon, label=sc.label)
            if self.scope == "all" or problem.displaced.any():
                return problem
            if self.fail is not None:
                raise HulkInputError(f"failure '{self.fail}' hits no slot of the running placement: nothing to decide with scope='displaced'")
        raise HulkInputError(f"no problem with a slot to decide in {_MAX_RESAMPLE} draws")

    def _mask(self) -> np.ndarray:
        mask = np.zeros(self.max_machines, dtype=bool)
        m = self._spec.problem.instance.num_machines
        mask[:m] = action_mask(self._spec, self._ep)[0]
        return mask

    def _fallback(self, mask: np.ndarray) -> int:
        """The valid machine holding the layer's state, else the predecessor's, else the first."""
        m = self._spec.problem.instance.num_machines
        feats = candidate_features(self._spec, self._ep)[0]
        keys = np.where(mask[:m], 2.0 * feats[:, FEATURES.index("holds_state")] + feats[:, FEATURES.index("same_as_prev")], -np.inf)
        return int(np.argmax(keys))

    def _finish(self, info: dict[str, Any]) -> float:
        spec = self._spec
        placement = self._ep.placement[0]
        o = outcome(spec.problem, placement)
        info.update(
            dead_end=False,
            placement=_nested(placement),
            total_s=o.total_s,
            migration_s=o.migration_s,
            iteration_time_s=o.iteration_time_s,
            moved_bytes=o.moved_bytes,
            reference_total_s=spec.reference_total_s,
        )
        return max(math.log(spec.reference_total_s / o.total_s), -5.0) if o.total_s > 0 else 0.0

    def _observation(self, mask: np.ndarray) -> dict[str, np.ndarray]:
        spec, ep = self._spec, self._ep
        problem = spec.problem
        c = problem.instance.cluster
        m, big_m, big_n = c.num_machines, self.max_machines, self.max_slots
        d, n_layers = problem.old.shape
        cand = np.zeros((big_m, len(FEATURES)), dtype=np.float32)
        if not self._ended:
            cand[:m] = candidate_features(spec, ep)[0]
        machines = np.zeros((big_m, len(MACHINE_FEATURES)), dtype=np.float32)
        machines[:m, 0] = c.flops / c.flops.max()
        machines[:m, 1] = c.memory_bytes / c.memory_bytes.max()
        machines[:m, 2] = problem.failed
        machines[:m, 3] = np.where(problem.failed, 0.0, np.clip(1.0 - ep.used_bytes[0] / c.memory_bytes, 0.0, 1.0))
        links = np.zeros((big_m, big_m, len(LINK_FEATURES)), dtype=np.float32)
        links[:m, :m, 0] = np.clip(np.log10(1.0 + c.latency_s / MS) / 3.0, 0, _CLIP)
        with np.errstate(divide="ignore"):
            links[:m, :m, 1] = np.clip(np.log10(c.bandwidth_bps / 1e6) / 4.0, 0, _CLIP)
        slots = np.zeros((big_n, len(SLOT_FEATURES)), dtype=np.float32)
        n = d * n_layers
        rep, lay = np.divmod(np.arange(n), n_layers)
        slots[:n, 0] = rep / max(d - 1, 1)
        slots[:n, 1] = lay / max(n_layers - 1, 1)
        placement = ep.placement[0].ravel()
        slots[:n, 2] = placement >= 0
        if not self._ended:
            r, layer = current_slot(spec, ep)
            slots[r * n_layers + layer, 3] = 1.0
        slots[:n, 4] = problem.displaced.ravel()
        slots[:n, 5] = (spec.fixed < 0).ravel()
        layer_machine = np.full(big_n, -1, dtype=np.float32)
        layer_machine[:n] = placement
        old = np.full(big_n, -1, dtype=np.float32)
        old[:n] = np.where(problem.displaced.ravel(), -1, problem.old.ravel())
        machine_mask = np.zeros(big_m, dtype=np.float32)
        machine_mask[:m] = 1.0
        slot_mask = np.zeros(big_n, dtype=np.float32)
        slot_mask[:n] = 1.0
        return {
            "candidate_features": cand,
            "machine_features": machines,
            "links": links,
            "slot_features": slots,
            "layer_machine": layer_machine,
            "old_machine": old,
            "machine_mask": machine_mask,
            "slot_mask": slot_mask,
            "cursor": np.array([ep.step], dtype=np.float32),
            "action_mask": mask.astype(np.float32),
        }


def _running(
    cluster: str, model: str, data_parallel: int | None, placement: str | list | None
) -> tuple[Instance, np.ndarray]:
    """The fixed problem's instance and running placement (see the ``placement`` argument)."""
    file = None
    if isinstance(placement, str):
        file = read_placement_file(placement)
    elif placement is not None:
        file = PlacementFile([list(r) for r in np.asarray(placement, dtype=object).tolist()], None, "placement")
    d = data_parallel or (len(file.rows) if file is not None else None)
    inst = fixed_instance(cluster, model, data_parallel=d)
    if file is not None:
        start = placement_from_file(file, inst)
        problem = ReplacementProblem(inst, start, [])
        if problem.check(start):
            raise HulkInputError(f"the running placement does not fit: {problem.check(start)}", field="placement")
        return inst, start
    start = naive_placement(inst)
    if start is None:
        raise HulkInputError(f"model '{inst.workload.name}' does not fit cluster '{inst.cluster.name}'")
    return inst, start


def replace_observation_space(max_machines: int, max_slots: int) -> spaces.Dict:
    """The observation space of :class:`ReplaceEnv` for the given padding."""
    m, n = max_machines, max_slots

    def box(low: float, high: float, shape: tuple[int, ...]) -> spaces.Box:
        return spaces.Box(np.float32(low), np.float32(high), shape, np.float32)

    return spaces.Dict(
        {
            "candidate_features": box(0.0, FEATURE_MAX, (m, len(FEATURES))),
            "machine_features": box(0.0, 1.0, (m, len(MACHINE_FEATURES))),
            "links": box(0.0, _CLIP, (m, m, len(LINK_FEATURES))),
            "slot_features": box(0.0, 1.0, (n, len(SLOT_FEATURES))),
            "layer_machine": box(-1.0, max(m - 1, 0), (n,)),
            "old_machine": box(-1.0, max(m - 1, 0), (n,)),
            "machine_mask": box(0.0, 1.0, (m,)),
            "slot_mask": box(0.0, 1.0, (n,)),
            "cursor": box(0.0, n, (1,)),
            "action_mask": box(0.0, 1.0, (m,)),
        }
    )


def _as_index(action: Any, size: int) -> int:
    try:
        a = int(np.asarray(action).reshape(-1)[0])
    except (TypeError, ValueError, IndexError):
        return -1
    return a if 0 <= a < size else -1


def _nested(placement: np.ndarray) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(row) for row in placement.tolist())
