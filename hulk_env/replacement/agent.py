"""The re-placement agent: a learned pointer policy driven in re-placement episodes.

The policy scores every machine for the current slot with a linear function of the
per-candidate features of :mod:`hulk_env.replacement.episode` (what placing the slot there
would do: keep its state or copy it, start a new stage, load the machine past the old
bottleneck, ...): ``score_m = w . phi_m``, masked to the valid machines; it acts by
``argmax`` (greedy) or samples ``softmax(score / temperature)``. One set of weights serves
clusters and models of any size. The shipped weights (:mod:`.policy_weights`) were trained by
the cross-entropy method on the episodes' return over random failure scenarios on generated
clusters (:mod:`.train_agent`), never on the benchmark's scenarios.

The ``agent`` method (:func:`agent_method`) drives the policy in re-placement episodes, then
lets the stage DP cut the layers over the machines it chose:

1. rollouts, in lockstep: one greedy in each scope (``"all"``: every slot decided again;
   ``"displaced"``: only the displaced ones) and ``samples`` sampled in scope ``"all"``;
2. the completed placements are judged in one batch by the horizon total;
3. for the ``polish`` best of them, the machines each one uses, in pipeline order (replica 0's,
   then the other replicas' new ones), form a chain that the stage DP splits optimally, as
   ``latency-chain-dp`` does for its nearest-latency chains
   (:func:`hulk_env.baselines.chains.chain_candidates`: every prefix, both directions, replicas
   shared, in blocks or interleaved). The policy decides which machines and in what order
   (which state to keep, which region to move to); the DP decides where the stages are cut,
   which a one-layer-at-a-time policy does poorly;
4. the answer is the candidate with the lowest horizon total.

Every placement judged is a counted cost evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hulk_env.baselines.chains import chain_candidates
from hulk_env.replacement.episode import (
    FEATURES,
    EpisodeSpec,
    action_mask,
    apply_actions,
    candidate_features,
    episode_spec,
    finished,
    new_episodes,
)
from hulk_env.replacement.problem import Answer, ReplacementProblem, ReplaceMethod

DEFAULT_SAMPLES = 256
DEFAULT_POLISH = 8


@dataclass(frozen=True)
class LinearPolicy:
    """``score = features @ weights`` per machine, masked; greedy or sampled at a temperature.

    Attributes:
        weights: ``[F]`` one weight per feature of :data:`~hulk_env.replacement.episode.FEATURES`.
        temperature: softmax temperature of sampled actions.
    """

    weights: np.ndarray
    temperature: float = 1.0

    def __post_init__(self) -> None:
        w = np.asarray(self.weights, dtype=np.float64)
        if w.shape != (len(FEATURES),):
            raise ValueError(f"weights have shape {w.shape}, expected ({len(FEATURES)},)")
        object.__setattr__(self, "weights", w)

    @classmethod
    def shipped(cls) -> LinearPolicy:
        """The trained weights shipped with the package."""
        from hulk_env.replacement import policy_weights

        if tuple(policy_weights.FEATURES) != FEATURES:
            raise RuntimeError("the shipped policy weights were trained on other features: retrain them")
        return cls(np.asarray(policy_weights.WEIGHTS), policy_weights.TEMPERATURE)


def masked_scores(features: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``[K, M]`` scores, ``-inf`` where masked; ``weights`` is ``[F]`` or one row per episode ``[K, F]``."""
    w = weights if weights.ndim == 2 else np.broadcast_to(weights, (len(features), len(weights)))
    scores = np.einsum("kmf,kf->km", features, w)
    return np.where(mask, scores, -np.inf)


def choose(scores: np.ndarray, temperature: float, rng: np.random.Generator | None, greedy: np.ndarray) -> np.ndarray:
    """``[K]`` actions: argmax where ``greedy`` (or without ``rng``), else softmax samples."""
    best = np.argmax(scores, axis=1)
    if rng is None or not np.any(~greedy):
        return best
    z = (scores - scores.max(axis=1, keepdims=True)) / max(temperature, 1e-6)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((len(scores), 1))
    sampled = np.minimum((np.cumsum(p, axis=1) < u).sum(axis=1), scores.shape[1] - 1)
    return np.where(greedy, best, sampled)


def rollouts(
    spec: EpisodeSpec,
    weights: np.ndarray,
    k: int,
    temperature: float = 1.0,
    rng: np.random.Generator | None = None,
    greedy: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``k`` lockstep episodes: ``([K, D, L] placements, [K] dead-ended)``.

    Args:
        spec: the episodes' problem and scope.
        weights: ``[F]`` or ``[K, F]`` (a different policy per episode: the trainer's population).
        k: episodes.
        temperature, rng: sampling (no ``rng``: every episode greedy).
        greedy: ``[K]`` bool, episodes that act greedily even with an ``rng``.
    """
    greedy = np.ones(k, dtype=bool) if greedy is None else greedy
    ep = new_episodes(spec, k)
    while not finished(spec, ep):
        mask = action_mask(spec, ep)
        stuck = ~mask.any(axis=1)
        ep.dead |= stuck
        mask[stuck] = spec.capacity_bytes > 0  # keep lockstep; the episode is discarded
        scores = masked_scores(candidate_features(spec, ep), weights, mask)
        apply_actions(spec, ep, choose(scores, temperature, rng, greedy))
    return ep.placement, ep.dead


def agent_method(
    policy: LinearPolicy | None = None, samples: int = DEFAULT_SAMPLES, polish: int = DEFAULT_POLISH
) -> ReplaceMethod:
    """The ``agent`` re-placement method (module docstring) with ``policy`` (default: shipped)."""
    chosen = policy or LinearPolicy.shipped()

    def agent(problem: ReplacementProblem, seed: int = 0, budget: int | None = None) -> Answer:
        del budget
        rng = np.random.default_rng(seed)
        candidates = []
        for scope, k in (("all", 1 + samples), ("displaced", 1)):
            spec = episode_spec(problem, scope)
            greedy = np.arange(k) == 0
            placements, dead = rollouts(spec, chosen.weights, k, chosen.temperature, rng, greedy)
            candidates.append(placements[~dead])
        batch = np.concatenate(candidates)
        if len(batch) == 0:
            return Answer(None, 0, "every rollout of the agent reached a slot no machine could take")
        batch = np.unique(batch, axis=0)
        totals = problem.totals(batch).total_s
        split = dp_splits(problem, batch[np.argsort(totals)[:polish]])
        if len(split):
            batch = np.concatenate([batch, split])
            totals = np.concatenate([totals, problem.totals(split).total_s])
        best = int(np.argmin(totals))
        if not np.isfinite(totals[best]):
            return Answer(None, len(batch), "no placement of the agent fits in memory")
        return Answer(batch[best], len(batch))

    return agent


def pipeline_chain(placement: np.ndarray) -> np.ndarray:
    """The machines of a ``[D, L]`` placement in pipeline order: replica 0's, then the others' new ones."""
    return np.array(list(dict.fromkeys(placement.ravel().tolist())), dtype=np.int64)


def dp_splits(problem: ReplacementProblem, placements: np.ndarray) -> np.ndarray:
    """``[N, D, L]`` the stage DP's splits over each placement's chain (module docstring, step 3)."""
    out = []
    for chain in dict.fromkeys(tuple(pipeline_chain(p).tolist()) for p in placements):
        out += [placement for _, placement in chain_candidates(problem.instance, np.array(chain))]
    if not out:
        return np.empty((0, *problem.old.shape), dtype=np.int64)
    return np.unique(np.stack(out).astype(np.int64), axis=0)
