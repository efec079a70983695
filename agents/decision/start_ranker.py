"""A learned ranking of the first-slot machines: from which start is the stage DP's plan fastest?

The greedy decision (:func:`agents.decision.inference.planned_greedy`) builds the stage DP's plan from a
few first-slot machines and keeps the fastest; ``latency-chain-dp`` builds one from every
machine (up to 256). On the validation instances the best of *all* starts' plans is within 0.3%
of ``latency-chain-dp`` (geometric mean), while the plans from the policy's 4 best-scored starts
are 4% behind: the policy was trained to imitate one teacher's first machine, not to rank every
start. The ranker is trained for that ranking alone.

* **Labels** (:func:`start_times`): for each allowed first-slot machine ``s`` of an instance,
  the iteration time of the plan from ``s`` (:func:`agents.decision.plan.plan_from`; the chain's
  reverse split where no forward split fits, as the decision does), ``inf`` where neither fits.
  :func:`collect_labels` draws instances of the training distribution
  (:class:`agents.training.distribution.GeneralistGenerator`, training cities only) and labels them in
  worker processes; :func:`suite_labels` labels a suite's instances (validation).
* **Network**: a copy of the policy's network (same architecture, same observation, initialised
  with its weights), whose logits at the first slot are the scores; nothing else of it is used.
* **Loss** (:func:`ranking_loss`): ListNet's cross-entropy between the softmax of the allowed
  machines' scores and the target ``softmax(-log(T_s / T_best) / tau)`` (a start 5% slower than
  the best gets ``e^-1`` of its weight at ``tau = 0.05``; starts with no plan get none).
* **Selection** (:func:`regret`): the epoch whose ranking loses least on validation instances
  (neither training nor reported ones): ``log(min over the decision's starts of T / min over
  all starts of T)``, averaged over instances (the decision's starts:
  :func:`agents.decision.inference.choose_starts` with its settings).

Measured (``python -m experiments.start_ranker``, 286 training and 34 validation instances):
fine-tuning the policy's network this way did not beat its own ranking on validation -- the
training regret hardly moved (top-1 0.196 -> ~0.15, top-4 flat), the validation regret of the
decision's starts moved by noise only (best epoch 0.0412 against 0.0423) and the top-4 regret
rose (0.056 -> 0.05-0.11), with the whole network or its head alone, ListNet's loss or the
log-probability of the starts within 1% of the best: the first-slot features do not show what
makes one start's chain better than its neighbour's. So no ranker ships; the labels chose the
decision's second round of starts instead (:data:`agents.decision.inference.REFINE_STARTS`). Starts
screened by a bottleneck bound (:mod:`agents.decision.start_bound`) looked better on these labels and
were worse on ``unseen-v0``: see :data:`agents.decision.inference.START_CANDIDATES`.

Saved as a policy directory (:mod:`agents.network.saved_policy`: weights only) named
:data:`agents.network.saved_policy.RANKER_DIR` inside the policy's directory; :func:`agents.network.saved_policy.load_policy` loads
it with the policy, and the decision then ranks its starts with it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from hulk_env.instance import Instance

TAU = 0.05  # target temperature over log plan times (see the module docstring)
# Start settings (the network's starts, second-round starts in the best region, bound starts)
# whose validation regrets are recorded; the checkpoint is chosen on the decision's own
# (agents.decision.inference: 4 + 2 in the best region).
REGRET_SETTINGS: dict[str, tuple[int, int, int]] = {"top1": (1, 0, 0), "top2": (2, 0, 0), "top4": (4, 0, 0), "decision": (4, 2, 0)}


class PeakFlopsRanker:
    """Start ranking without learning: the allowed first-slot machines by FLOP/s, fastest first
    (ties to the lower index). The control of ``hulk bench agent``'s
    ``heuristic_starts_gap_geomean``: the same decision (:func:`agents.decision.inference.planned_greedy`:
    the same starts per region, second round and plans) with this ranking instead of the
    network's, so the gap between the two is what the network's ranking is worth.
    ``Machine.flops`` is the machine's peak times one utilisation, so its order is the peak's."""

    def first_slot_scores(self, instance: Instance) -> np.ndarray:
        """``[M]`` the score of each machine as a first slot (higher is tried first)."""
        return np.asarray(instance.cluster.flops, dtype=np.float64)


class StartLabels(NamedTuple):
    """The plan time from every first-slot machine of one instance."""

    instance_id: str
    key: int | None  # the training generator's key (rebuilds the instance), None for a suite's
    times_s: np.ndarray  # [M] seconds; inf where the machine is not allowed or no plan fits


def start_times(instance: Instance, env: Any = None) -> np.ndarray:
    """``[M]`` the iteration time of the plan from each allowed first-slot machine
    (:func:`agents.decision.inference.plan_times`: forward, else reverse, as the decision ranks starts),
    ``inf`` where the mask forbids the machine or no plan fits. ``env``: an
    :func:`agents.decision.inference.instance_env` with the plan (its plan cache is reused)."""
    from agents.decision.inference import instance_env, plan_times

    env = instance_env(instance, lookahead=False, plan=True) if env is None else env
    env.reset(options={"instance": instance})
    allowed = np.asarray(env.action_masks(), dtype=bool)[: instance.num_machines]
    out = np.full(instance.num_machines, np.inf)
    starts = [int(s) for s in np.flatnonzero(allowed)]
    out[starts] = plan_times(env, instance, starts)
    return out


def _in_workers(fn: Callable, jobs: list, workers: int) -> Iterator:
    """``fn`` over ``jobs`` in order: in this process, or in ``workers`` processes."""
    if workers <= 1:
        yield from map(fn, jobs)
        return
    with ProcessPoolExecutor(workers) as pool:
        yield from pool.map(fn, jobs)


def _label_key(args: tuple[dict, int]) -> StartLabels | None:
    from agents.training.distribution import GeneralistGenerator

    kwargs, key = args
    inst = GeneralistGenerator(**kwargs).instance(key)
    return None if inst is None else StartLabels(inst.instance_id, key, start_times(inst))


def collect_labels(
    count: int, seed: int, workers: int = 1, generator_kwargs: dict | None = None, log: Callable[[str], None] | None = None
) -> list[StartLabels]:
    """Labels of ``count`` instances of the training distribution (keys drawn from ``seed``;
    keys whose draw does not fit are skipped, so fewer may come back), in ``workers`` processes."""
    kwargs = dict(generator_kwargs or {})
    keys = [int(k) for k in np.random.default_rng([seed, 11]).integers(2**31, size=count)]
    out: list[StartLabels] = []
    started = time.perf_counter()
    for i, labels in enumerate(_in_workers(_label_key, [(kwargs, k) for k in keys], workers)):
        if labels is not None:
            out.append(labels)
        if log is not None and (i + 1) % 25 == 0:
            log(f"labelled {i + 1}/{count} instances ({time.perf_counter() - started:.0f} s)")
    return out


def _label_instance(instance: Instance) -> StartLabels:
    return StartLabels(instance.instance_id, None, start_times(instance))


@lru_cache(maxsize=4)
def _suite(name: str) -> list[Instance]:
    from hulk_env.evaluation.suites import load_suite

    return load_suite(name)


def _label_suite_instance(args: tuple[str, int]) -> StartLabels:
    name, index = args
    return _label_instance(_suite(name)[index])


def instance_labels(instances: Sequence[Instance]) -> list[StartLabels]:
    """Labels of given instances, in this process."""
    return [_label_instance(inst) for inst in instances]


def suite_labels(suite: str, workers: int = 1) -> list[StartLabels]:
    """Labels of a suite's instances (a validation suite's), in ``workers`` processes (each
    rebuilds the suite: instances are not sent between processes)."""
    return list(_in_workers(_label_suite_instance, [(suite, i) for i in range(len(_suite(suite)))], workers))


def labels_to_json(labels: Sequence[StartLabels]) -> list[dict]:
    """JSON rows (``inf`` written as ``null``)."""
    return [
        {"instance_id": lab.instance_id, "key": lab.key, "times_s": [None if not math.isfinite(t) else float(t) for t in lab.times_s]}
        for lab in labels
    ]


def labels_from_json(rows: Sequence[dict]) -> list[StartLabels]:
    """The inverse of :func:`labels_to_json`."""
    return [
        StartLabels(str(r["instance_id"]), None if r["key"] is None else int(r["key"]),
                    np.array([np.inf if t is None else float(t) for t in r["times_s"]]))
        for r in rows
    ]  # fmt: skip


# ------------------------------------------------------------------------------ the ranking
def target_distribution(times_s: np.ndarray, tau: float = TAU) -> np.ndarray:
    """``[M]`` the ranking target: ``softmax(-log(T_s / T_best) / tau)`` over the starts with a
    plan, 0 elsewhere (all 0 when no start has one)."""
    t = np.asarray(times_s, dtype=np.float64)
    ok = np.isfinite(t)
    out = np.zeros_like(t)
    if ok.any():
        w = np.exp(-(np.log(t[ok]) - np.log(t[ok].min())) / tau)
        out[ok] = w / w.sum()
    return out


def ranking_loss(logits: Any, target: Any) -> Any:
    """ListNet's cross-entropy ``-sum target * log_softmax(logits)`` over the finite logits
    (forbidden machines carry ``-inf`` and no target)."""
    import torch

    finite = torch.isfinite(logits)
    log_p = torch.log_softmax(logits.masked_fill(~finite, -1e9), dim=-1)
    return -(target * log_p.masked_fill(~finite, 0.0)).sum()


def top_starts(
    scores: np.ndarray,
    regions: Sequence[str],
    k: int,
    refine: int = 0,
    times_s: np.ndarray | None = None,
    bounded: Sequence[int] = (),
    bound: int = 0,
) -> list[int]:
    """The decision's starts for these scores (:func:`agents.decision.inference.choose_starts`): ``k``
    best, one per region first, then the first ``bound`` of ``bounded`` not among them (the
    machines by the bottleneck bound), then ``refine`` more in the region of the fastest of
    their plans (``times_s``); ``-inf`` scores are never taken."""
    from agents.decision.inference import choose_starts

    scores = np.asarray(scores, dtype=np.float64)
    ranked = [int(i) for i in np.argsort(-scores, kind="stable") if np.isfinite(scores[i])]
    times = np.full(len(scores), np.inf) if times_s is None else np.asarray(times_s, dtype=np.float64)
    return choose_starts(ranked, list(regions), k, refine if times_s is not None else 0, lambda first: times[first], bounded, bound)


def regret(
    scores: np.ndarray, times_s: np.ndarray, regions: Sequence[str], k: int, refine: int = 0, bounded: Sequence[int] = (), bound: int = 0
) -> float:
    """``log(best plan time among the decision's starts / best of all)`` for ``k`` starts,
    ``bound`` more of ``bounded`` and ``refine`` more (:func:`top_starts`): 0 when the best
    start is among them, the ``log`` of the decision's loss to trying every start. An instance
    with no plan anywhere has no regret."""
    t = np.asarray(times_s, dtype=np.float64)
    if not np.isfinite(t).any():
        return 0.0
    chosen = t[top_starts(scores, regions, k, refine, t, bounded, bound)]
    best = chosen.min() if len(chosen) else np.inf
    return float(np.log(best / t.min())) if np.isfinite(best) else float(np.log(10.0))  # a miss of every plan: capped


class RankerSample(NamedTuple):
    """One instance's first observation and its labels, ready for the network."""

    instance_id: str
    obs: dict[str, np.ndarray]
    mask: np.ndarray  # [M] allowed first-slot machines
    regions: list[str]
    times_s: np.ndarray
    bounded: list[int]  # the allowed machines by the bottleneck bound (agents.decision.start_bound)


def ranker_sample(instance: Instance, labels: StartLabels, plan: bool = True, lookahead: bool = False) -> RankerSample:
    """The first observation of ``instance`` as the policy reads it, with its labels."""
    from agents.decision.inference import instance_env
    from agents.decision.start_bound import bound_ranked

    env = instance_env(instance, lookahead, plan=plan)
    obs, _ = env.reset(options={"instance": instance})
    mask = np.asarray(env.action_masks(), dtype=bool)
    regions = [m.region for m in instance.cluster.machines]
    bounded = bound_ranked(instance, [int(i) for i in np.flatnonzero(mask[: instance.num_machines])])
    return RankerSample(instance.instance_id, obs, mask, regions, labels.times_s, bounded)


def start_scores(network: Any, sample_obs: dict[str, np.ndarray], mask: np.ndarray) -> Any:
    """``[M]`` scores of the first-slot machines (``-inf`` where forbidden), with gradients when
    enabled: the network's first-slot logits (:func:`agents.decision.inference.masked_logits`)."""
    from agents.decision.inference import masked_logits

    return masked_logits(network, sample_obs, mask)[0]


def mean_regret(network: Any, samples: Sequence[RankerSample], settings: dict[str, tuple[int, int, int]] | None = None) -> dict[str, float]:
    """Mean :func:`regret` over ``samples`` for each named ``(starts, refine, bound)`` setting
    (default :data:`REGRET_SETTINGS`)."""
    import torch

    settings = REGRET_SETTINGS if settings is None else settings
    out = {name: 0.0 for name in settings}
    with torch.no_grad():
        for s in samples:
            scores = start_scores(network, s.obs, s.mask).numpy()
            for name, (k, refine, bound) in settings.items():
                out[name] += regret(scores, s.times_s, s.regions, k, refine, s.bounded, bound) / max(len(samples), 1)
    return out


class TrainedRanker(NamedTuple):
    network: Any  # the best epoch's network (eval mode)
    history: list[dict]  # per epoch: loss, validation regrets
    best_epoch: int  # 0 = the policy's own weights, before any training


def train_ranker(
    policy: Any,
    train: Sequence[RankerSample],
    validation: Sequence[RankerSample],
    epochs: int = 20,
    lr: float = 3e-4,
    seed: int = 0,
    tau: float = TAU,
    log: Callable[[str], None] | None = None,
) -> TrainedRanker:
    """Fine-tune a copy of ``policy`` so that its first-slot logits rank the starts (see the
    module docstring); the epoch with the least validation regret of the decision's starts is
    kept (epoch 0, the policy's own ranking, included, so the result is never worse there)."""
    import copy

    import torch

    torch.manual_seed(seed)
    net = copy.deepcopy(policy)
    net.set_training_mode(False)  # no dropout or batch statistics in this network; eval mode throughout
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    targets = [torch.from_numpy(target_distribution(s.times_s, tau)).float() for s in train]
    order_rng = np.random.default_rng([seed, 3])

    def score(epoch: int, loss: float | None) -> dict:
        regrets = mean_regret(net, validation)
        row = {"epoch": epoch, "train_loss": loss, **{f"val_regret_{name}": v for name, v in regrets.items()}}
        if log is not None:
            log(f"epoch {epoch}: loss {loss if loss is not None else float('nan'):.4f}, validation regret "
                + ", ".join(f"{name} {v:.4f}" for name, v in regrets.items()))  # fmt: skip
        return row

    history = [score(0, None)]
    best_state, best = copy.deepcopy(net.state_dict()), history[0]["val_regret_decision"]
    best_epoch = 0
    for epoch in range(1, epochs + 1):
        total = 0.0
        for i in order_rng.permutation(len(train)):
            s = train[i]
            if not targets[i].any():
                continue
            loss = ranking_loss(start_scores(net, s.obs, s.mask)[: len(s.times_s)], targets[i])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            total += float(loss.detach()) / len(train)
        history.append(score(epoch, total))
        if history[-1]["val_regret_decision"] < best - 1e-9:
            best, best_epoch, best_state = history[-1]["val_regret_decision"], epoch, copy.deepcopy(net.state_dict())
    net.load_state_dict(best_state)
    return TrainedRanker(net, history, best_epoch)
