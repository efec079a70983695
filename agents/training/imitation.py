"""Warm start by imitation: demonstrations from strong baselines, behaviour cloning of the policy.

Three steps, each a plain function:

1. :func:`demonstrate` -- per instance, the fastest memory-feasible placement of a few fast,
   strong baselines (:data:`DEMO_METHODS`: ``latency-chain-dp``, ``partition``,
   ``compute-greedy``; optionally ``anneal`` polishing them with a small budget). Which one
   wins depends on the instance: chain splits on wide clusters, the fastest machines when the
   model fits on few, spectral clusters when cities are far apart. For a policy that reads the
   DP plan (:mod:`agents.decision.plan`), :func:`with_plan` swaps in the plan from the demonstration's
   start machine when that is faster: the policy learns to follow the plan where it is the
   best it knows of, and where to leave it.
2. :func:`replay` -- the demonstration played through the placement env, slot by slot
   (replica-major, as the env asks), recording what the policy would see: the observation
   (with the one-step lookahead of :mod:`agents.training.shaping`), the action mask, the demonstrated
   machine and the return-to-go under the training reward (the stay shaping, so the critic
   starts from the values PPO will see). The env is built at the instance's own size: the
   network is size-agnostic, so no padding. Where the mask refuses a demonstrated machine
   (Placement-v1's mask is conservative), the label is :func:`expert_action`'s: the allowed
   machine whose completion "as demonstrated" is fastest (:attr:`Episode.relabelled` counts
   them). :func:`aggregate` labels the states the policy itself visits the same way (DAgger),
   so it also learns how to recover from its own mistakes.
3. :func:`behaviour_cloning` -- cross-entropy of the demonstrated action under the mask,
   computed through the policy's own SB3 seam ``evaluate_actions(obs, actions, action_masks)``
   (the same masked distribution PPO optimises), plus ``vf_coef`` x the squared error of the
   value against the return-to-go. One forward per episode (its slots are the batch, its
   static tensors broadcast), gradients accumulated over episodes up to ``batch_steps`` slots
   per Adam step. The ``imitation`` package is not used: it pins an old gymnasium and SB3.

After it, masked PPO fine-tunes the same network (:mod:`agents.training.train`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from hulk_env import cost
from hulk_env.baselines import get_method
from hulk_env.env import MACHINE_FEATURES_V1
from hulk_env.instance import Instance

DEMO_METHODS: tuple[str, ...] = ("latency-chain-dp", "partition", "compute-greedy")
TIE_RTOL = 1e-9  # iteration times this close are a tie for expert_action
_HOLDS_PREDECESSOR = MACHINE_FEATURES_V1.index("holds_predecessor")
# Observation keys that do not change during an episode: stored once per episode.
STATIC_KEYS = ("machine_mask", "links", "layer_mask", "edges", "edge_mask", "neighbours", "neighbour_links", "neighbour_mask")


# ------------------------------------------------------------------------- demonstrations
@dataclass(frozen=True)
class Demonstration:
    """The placement a policy should learn to make on one instance.

    Attributes:
        instance: the instance.
        placement: ``[D, L]`` machine per slot (memory-feasible).
        method: the baseline that found it.
        iteration_time_s: its iteration time (cost model).
        cost_evals: cost-model evaluations all the baselines spent on this instance.
        wall_s: their wall-clock seconds.
    """

    instance: Instance
    placement: np.ndarray
    method: str
    iteration_time_s: float
    cost_evals: int
    wall_s: float


def demonstrate(
    instance: Instance,
    methods: Sequence[str] = DEMO_METHODS,
    seed: int = 0,
    budget: int | None = None,
    polish_budget: int = 0,
) -> Demonstration | None:
    """The fastest memory-feasible placement of ``methods`` on ``instance`` (``None`` if none).

    Args:
        instance: the instance.
        methods: registered baselines (:data:`hulk_env.baselines.METHODS`).
        seed: passed to every method.
        budget: cost evaluations per method (``None``: each method's default).
        polish_budget: when > 0, also run ``anneal`` with this budget (it starts from the
            heuristics' placements) and keep it when faster.
    """
    start = time.perf_counter()
    runs = [(name, budget) for name in methods]
    if polish_budget > 0:
        runs.append(("anneal", polish_budget))
    best: tuple[float, str, np.ndarray] | None = None
    evals = 0
    for name, b in runs:
        result = get_method(name)(instance, seed, b)
        evals += result.cost_evals
        if not result.feasible:
            continue
        breakdown = cost.evaluate(instance.cluster, instance.workload, result.placement)
        t = float(breakdown.iteration_time_s)
        if breakdown.memory_feasible and (best is None or t < best[0]):
            best = (t, name, np.asarray(result.placement, dtype=np.int64))
    if best is None:
        return None
    return Demonstration(instance, best[2], best[1], best[0], evals, time.perf_counter() - start)


def with_plan(demo: Demonstration) -> Demonstration:
    """``demo``, or the DP plan from its start machine (:func:`agents.decision.plan.better_of_plan`)
    when that is faster; the method then reads ``"<method>+plan"``."""
    from agents.decision.plan import better_of_plan

    placement, time_s, planned = better_of_plan(demo.instance, demo.placement, demo.iteration_time_s)
    if not planned:
        return demo
    return replace(demo, placement=placement, iteration_time_s=time_s, method=f"{demo.method}+plan")


# --------------------------------------------------------------------------------- replay
@dataclass
class Episode:
    """One demonstration replayed through the env (arrays at the instance's own size).

    Attributes:
        instance_id: the instance.
        static: observation keys that do not change (:data:`STATIC_KEYS`), each ``[1, ...]``.
        dynamic: the other observation keys, each ``[T, ...]`` (``T`` slots replayed).
        actions: ``[T]`` the demonstrated machines.
        masks: ``[T, M]`` bool, the env's action masks.
        returns: ``[T]`` return-to-go of the training reward from each step.
        complete: the episode placed every slot.
        method: the baseline that made the demonstration.
        relabelled: slots whose label is not the demonstrated machine (the mask refused it,
            or, for :func:`aggregate`, the expert corrected the policy's path).
    """

    instance_id: str
    static: dict[str, np.ndarray]
    dynamic: dict[str, np.ndarray]
    actions: np.ndarray
    masks: np.ndarray
    returns: np.ndarray
    complete: bool
    method: str = ""
    relabelled: int = 0

    @property
    def steps(self) -> int:
        return len(self.actions)

    def tensors(self) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(obs, actions, masks, returns)`` as torch tensors, static keys broadcast to ``T``."""
        t = self.steps
        obs = {k: torch.from_numpy(v) for k, v in self.dynamic.items()}
        for k, v in self.static.items():
            obs[k] = torch.from_numpy(v).expand(t, *v.shape[1:])
        return obs, torch.from_numpy(self.actions), torch.from_numpy(self.masks), torch.from_numpy(self.returns)


def expert_action(
    demo: Demonstration, placed: np.ndarray, t: int, mask: np.ndarray, alternatives: Sequence[np.ndarray] = ()
) -> int:
    """The allowed machine for slot ``t`` whose completion "as demonstrated" is fastest.

    Every allowed machine ``a`` is scored by the cost model on the placement made of the slots
    placed so far (``placed``, flat), ``a`` at slot ``t``, and the demonstration's machines for
    the rest (one batched evaluation; memory-infeasible completions score ``inf``); with
    ``alternatives`` (other ``[D, L]`` placements, e.g. the DP plan the policy is shown) each
    machine also gets their machines for the rest, and keeps its best completion. On the
    demonstration's own path this is its machine (or a better one); off it, the correction
    that returns to it (or to an alternative) soonest. Ties (within ``TIE_RTOL``: common, since
    a slot off the bottleneck stage often does not change the iteration time) go to the
    demonstrated machine, then to the alternatives' machines, then to the machine of the
    replica's previous layer (staying in the stage), then to the lowest index, so that the
    labels are consistent. When no completion fits, the first allowed machine is taken.
    """
    allowed = np.flatnonzero(mask)
    rests = [np.asarray(p, dtype=np.int64).reshape(-1) for p in (demo.placement, *alternatives)]
    candidates = np.concatenate([np.tile(rest, (len(allowed), 1)) for rest in rests])
    candidates[:, :t] = placed[:t]
    candidates[:, t] = np.tile(allowed, len(rests))
    inst = demo.instance
    batch = candidates.reshape(len(candidates), *demo.placement.shape)
    penalised = cost.iteration_times(inst.cluster, inst.workload, batch).penalised()
    penalised = penalised.reshape(len(rests), len(allowed)).min(axis=0)
    best = float(penalised.min())
    if not np.isfinite(best):
        return int(allowed[0])
    tied = allowed[penalised <= best * (1 + TIE_RTOL)]
    layer = t % inst.num_layers
    preferred = [int(rest[t]) for rest in rests] + ([int(placed[t - 1])] if layer else [])
    for a in preferred:
        if a in tied:
            return a
    return int(tied[0])


def record(
    demo: Demonstration, make_env: Callable[[Instance], Any], choose: Callable[[dict, np.ndarray, int], tuple[int, int]]
) -> Episode:
    """One episode on ``demo.instance``; ``choose(obs, mask, t) -> (machine to take, label)``."""
    inst = demo.instance
    env = make_env(inst)
    obs, _ = env.reset(options={"instance": inst})
    steps: list[dict[str, np.ndarray]] = []
    masks, labels, rewards = [], [], []
    repaired = 0
    complete = False
    for t in range(demo.placement.size):
        mask = np.asarray(env.action_masks(), dtype=bool)
        take, label = choose(obs, mask, t)
        repaired += label != int(demo.placement.reshape(-1)[t])
        steps.append(obs)
        masks.append(mask)
        labels.append(label)
        obs, reward, terminated, truncated, info = env.step(take)
        rewards.append(float(reward))
        if terminated or truncated:
            complete = not info.get("dead_end", False) and not truncated and t + 1 == demo.placement.size
            break
    first = steps[0]
    static = {k: np.asarray(first[k], dtype=np.float32)[None] for k in STATIC_KEYS if k in first}
    dynamic_keys = [k for k in first if k not in STATIC_KEYS and k != "action_mask"]
    dynamic = {k: np.stack([np.asarray(s[k], dtype=np.float32) for s in steps]) for k in dynamic_keys}
    returns = np.cumsum(np.asarray(rewards, dtype=np.float64)[::-1])[::-1].astype(np.float32)
    return Episode(
        instance_id=inst.instance_id,
        static=static,
        dynamic=dynamic,
        actions=np.asarray(labels, dtype=np.int64),
        masks=np.asarray(masks, dtype=bool).reshape(len(labels), inst.num_machines),
        returns=returns,
        complete=complete,
        method=demo.method,
        relabelled=repaired,
    )


def replay(demo: Demonstration, make_env: Callable[[Instance], Any]) -> Episode:
    """Play ``demo`` through ``make_env(instance)`` (a Gymnasium env with ``action_masks``),
    every slot labelled with the demonstrated machine -- or, where the mask refuses it, with
    :func:`expert_action` (counted in :attr:`Episode.relabelled`), so the episode completes.

    The env must place the instance given as ``reset(options={"instance": ...})`` slot by slot,
    replica-major (:class:`hulk_env.env.PlacementEnvV1`, optionally wrapped).
    """
    flat = np.asarray(demo.placement, dtype=np.int64).reshape(-1)
    placed = np.full(flat.size, -1, dtype=np.int64)

    def choose(obs: dict, mask: np.ndarray, t: int) -> tuple[int, int]:
        a = int(flat[t]) if mask[flat[t]] else expert_action(demo, placed, t, mask)
        placed[t] = a
        return a, a

    return record(demo, make_env, choose)


def aggregate(
    policy: Any,
    demo: Demonstration,
    make_env: Callable[[Instance], Any],
    first: int | None = None,
    temperature: float | None = None,
    generator: Any = None,
) -> Episode:
    """DAgger (Ross et al. 2011): the policy's own greedy episode on ``demo.instance``, every
    state it visits labelled with :func:`expert_action` -- what to do from where the policy's
    mistakes led, which behaviour cloning of the demonstration alone never shows. When the env
    shows the DP plan (:mod:`agents.decision.plan`), the plan from the policy's own start machine is an
    alternative completion, so a label never sends the policy back to the demonstration where
    following the plan it sees is faster.

    ``first``: the first slot's machine is taken there instead of the policy's choice (its label
    stays the expert's), e.g. the decision's start, where ``hulk bench agent`` measures the
    rollout. ``temperature``: the policy's moves are drawn from ``softmax(logits / temperature)``
    (``generator``: a ``torch.Generator``) instead of its argmax, to visit more of its near-miss
    states; the labels are the expert's either way."""
    from agents.decision.inference import masked_logits
    from agents.decision.plan import PLAN_KEY, plan_from

    placed = np.full(demo.placement.size, -1, dtype=np.int64)
    static: list[Any] = [None]
    plans: list[np.ndarray] = []

    def choose(obs: dict, mask: np.ndarray, t: int) -> tuple[int, int]:
        if t == 1 and PLAN_KEY in obs:  # the plan the env now shows (from the policy's start)
            plan = plan_from(demo.instance, int(placed[0]))
            plans.extend([] if plan is None else [plan.placement])
        with torch.no_grad():
            logits, static[0] = masked_logits(policy, obs, mask, static[0])
        if t == 0 and first is not None and mask[first]:
            take = int(first)
        elif temperature is None:
            take = int(torch.argmax(logits))
        else:
            take = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator))
        label = expert_action(demo, placed, t, mask, plans)
        placed[t] = take
        return take, label

    return record(demo, make_env, choose)


# --------------------------------------------------------------------- expert iteration
def decision_demonstration(loaded: Any, instance: Instance, polish_budget: int = 0, seed: int = 0) -> Demonstration | None:
    """The policy's full decision on ``instance`` as the teacher (expert iteration: the network
    proposes starts, the stage DP turns them into plans, the cost model keeps the fastest --
    :func:`agents.decision.inference.policy_placement` -- and the network then imitates that placement,
    Anthony et al. 2017 "Thinking Fast and Slow"; AlphaZero's policy improvement). With
    ``polish_budget > 0`` the decision is polished by ``anneal`` from it (that many cost
    evaluations) and kept when faster. ``loaded``: a :class:`agents.network.saved_policy.LoadedPolicy`.
    ``None`` when the decision places nothing."""
    from agents.decision.inference import policy_placement

    started = time.perf_counter()
    with cost.count_evals() as counter:
        result = policy_placement(loaded, instance, seed)
        if result.placement is None:
            return None
        placement = np.asarray(result.placement, dtype=np.int64)
        time_s = float(cost.iteration_time(instance.cluster, instance.workload, placement))
        method = "decision"
        if polish_budget > 0:
            from hulk_env.baselines.anneal import anneal

            polished = anneal(instance, seed, polish_budget, starts=[placement])
            if polished.feasible:
                t = float(cost.iteration_time(instance.cluster, instance.workload, polished.placement))
                if t < time_s:
                    placement, time_s, method = np.asarray(polished.placement, dtype=np.int64), t, "decision+anneal"
    return Demonstration(instance, placement, method, time_s, counter.evals, time.perf_counter() - started)


# --------------------------------------------------------------------- behaviour cloning
@dataclass(frozen=True)
class BCSettings:
    """Behaviour-cloning hyper-parameters.

    Attributes:
        epochs: passes over the episodes.
        learning_rate: Adam's step size (decayed by cosine to 10% over the epochs).
        batch_steps: slots per Adam step (episodes are accumulated until at least this many).
        vf_coef: weight of the value loss.
        decision_weight: cross-entropy weight of the slots whose label is not the
            predecessor's machine (see :func:`decision_weights`).
        max_grad_norm: gradient clipping.
        seed: seeds the episode order.
        max_minutes: stop after this many minutes (0 = no limit).
        trainable: ``"all"`` the whole policy; ``"signals"`` only the pointer head's signal
            weights (:meth:`agents.network.policy.PointerHead.signal_weights`: the priors and the
            gain's log scale), every other weight frozen -- how much to trust the plan, the
            predecessor and the lookahead, learned without touching what the network has
            learned about the machines. The value head is not trained then (``vf_coef`` unused).
    """

    epochs: int = 20
    learning_rate: float = 1e-3
    batch_steps: int = 512
    vf_coef: float = 0.5
    decision_weight: float = 1.0
    max_grad_norm: float = 1.0
    seed: int = 0
    max_minutes: float = 0.0
    trainable: str = "all"


TRAINABLE = ("all", "signals")


def trainable_parameters(policy: Any, trainable: str) -> list[torch.nn.Parameter]:
    """The parameters behaviour cloning moves (:attr:`BCSettings.trainable`)."""
    if trainable == "all":
        return list(policy.parameters())
    if trainable == "signals":
        head = policy.mlp_extractor
        return [head.priors, head.gain_log_scale]
    raise ValueError(f"unknown trainable '{trainable}'; choose one of {', '.join(TRAINABLE)}")


@dataclass(frozen=True)
class BCEpoch:
    """What one epoch of behaviour cloning measured (means over its slots)."""

    epoch: int
    loss: float
    cross_entropy: float
    value_loss: float
    accuracy: float
    wall_s: float


@dataclass
class BCResult:
    """The curve of a behaviour-cloning run (the policy is trained in place)."""

    epochs: list[BCEpoch] = field(default_factory=list)
    stopped_early: bool = False


def decision_weights(episode: Episode, weight: float) -> torch.Tensor:
    """``[T]`` ``weight`` where the label is not the machine holding the slot's predecessor (a
    replica's first slot, a new stage), 1 where it is (the slot stays in its stage).

    Most slots stay; the few that start a replica or a stage decide the pipeline, and without
    a weight behaviour cloning fits the stays and misses them.
    """
    features = episode.dynamic["machine_features"]
    stays = features[np.arange(episode.steps), episode.actions, _HOLDS_PREDECESSOR] > 0.5
    return torch.from_numpy(np.where(stays, 1.0, float(weight)).astype(np.float32))


def episode_losses(policy: Any, episode: Episode) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(cross-entropy [T], value squared error [T], correct [T])`` of one episode.

    The cross-entropy is ``-log pi(a_demo | s, mask)`` from SB3's ``evaluate_actions``;
    ``correct`` says whether the masked argmax is the demonstrated machine.
    """
    obs, actions, masks, returns = episode.tensors()
    values, log_prob, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
    value_err = (values.reshape(-1) - returns) ** 2
    with torch.no_grad():
        logits = policy.action_logits(obs).masked_fill(~masks, -torch.inf)
        correct = (logits.argmax(-1) == actions).float()
    return -log_prob, value_err, correct


def behaviour_cloning(
    policy: Any,
    episodes: Sequence[Episode],
    settings: BCSettings = BCSettings(),
    on_epoch: Callable[[BCEpoch], bool | None] | None = None,
) -> BCResult:
    """Train ``policy`` (a :class:`agents.network.policy.PlacementPolicy`) to imitate ``episodes``.

    Args:
        policy: trained in place (train mode during, eval mode after).
        episodes: replayed demonstrations (:func:`replay`).
        settings: hyper-parameters.
        on_epoch: called after every epoch; returning ``True`` stops training (e.g. a
            validation check that has stopped improving).
    """
    if not episodes:
        raise ValueError("behaviour cloning needs at least one episode")
    rng = np.random.default_rng(settings.seed)
    params = trainable_parameters(policy, settings.trainable)
    vf_coef = settings.vf_coef if settings.trainable == "all" else 0.0
    optimizer = torch.optim.Adam(params, lr=settings.learning_rate)
    total_steps = max(1, settings.epochs * math.ceil(sum(e.steps for e in episodes) / settings.batch_steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(k, total_steps) / total_steps))
    )
    # frozen weights take no gradient (nor its time); restored as they were afterwards
    chosen = {id(p) for p in params}
    frozen = [p for p in policy.parameters() if p.requires_grad and id(p) not in chosen]
    for p in frozen:
        p.requires_grad_(False)
    try:
        return _cloning_epochs(policy, episodes, settings, on_epoch, rng, params, vf_coef, optimizer, schedule)
    finally:
        for p in frozen:
            p.requires_grad_(True)


def _cloning_epochs(
    policy: Any,
    episodes: Sequence[Episode],
    settings: BCSettings,
    on_epoch: Callable[[BCEpoch], bool | None] | None,
    rng: np.random.Generator,
    params: list[torch.nn.Parameter],
    vf_coef: float,
    optimizer: Any,
    schedule: Any,
) -> BCResult:
    """:func:`behaviour_cloning`'s epochs (its arguments, the optimiser built)."""
    result = BCResult()
    started = time.perf_counter()
    for epoch in range(settings.epochs):
        policy.set_training_mode(True)
        sums = np.zeros(4)
        pending = 0
        optimizer.zero_grad()
        for i in rng.permutation(len(episodes)):
            ep = episodes[i]
            if ep.steps == 0:
                continue
            ce, verr, correct = episode_losses(policy, ep)
            weighted = ce if settings.decision_weight == 1.0 else ce * decision_weights(ep, settings.decision_weight)
            loss = weighted.sum() + vf_coef * verr.sum()
            (loss / settings.batch_steps).backward()
            sums += (float(loss.detach()), float(ce.detach().sum()), float(verr.detach().sum()), float(correct.sum()))
            pending += ep.steps
            if pending >= settings.batch_steps:
                _step(params, optimizer, schedule, settings.max_grad_norm)
                pending = 0
        if pending:
            _step(params, optimizer, schedule, settings.max_grad_norm)
        n = max(1, sum(e.steps for e in episodes))
        record = BCEpoch(epoch + 1, *(sums / n), wall_s=time.perf_counter() - started)
        result.epochs.append(record)
        policy.set_training_mode(False)
        if on_epoch is not None and on_epoch(record):
            result.stopped_early = True
            break
        if settings.max_minutes > 0 and time.perf_counter() - started > 60 * settings.max_minutes:
            result.stopped_early = True
            break
    policy.set_training_mode(False)
    return result


def _step(params: list[torch.nn.Parameter], optimizer: Any, schedule: Any, max_grad_norm: float) -> None:
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()
