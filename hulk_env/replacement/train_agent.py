"""Train the re-placement policy's weights by the cross-entropy method; write ``policy_weights.py``.

``python -m hulk_env.replacement.train_agent [--generations N] [--population P] [--seed S]``

Problems (with displaced slots and a feasible answer): random clusters over real cities with a GPU mix and random GPT-style models
(:class:`hulk_env.generators.RandomGeoGenerator`), placed by ``latency-chain-dp``, then hit by a
random failure (:func:`hulk_env.replacement.failures.random_scenario`); horizon 1,000. The
training and validation problems come from different seeds; the benchmark's scenarios are
never seen. A policy's score on a problem is ``log(total_s / (H x T_old))`` of the best of its greedy
rollouts in the two scopes and a few sampled ones (``+5`` when all dead-end), as the agent
uses it; the population is one lockstep batch per problem. Each generation keeps the elite's mean and spread (smoothed); the mean with
the best validation score is written out, with the sampling temperature that gives the best
best-of-32 validation score.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hulk_env.baselines import get_method
from hulk_env.generators import RandomGeoGenerator
from hulk_env.replacement.agent import DEFAULT_SAMPLES, LinearPolicy, agent_method, rollouts
from hulk_env.replacement.episode import (
    FEATURES,
    SCOPES,
    action_mask,
    apply_actions,
    candidate_features,
    current_slot,
    episode_spec,
    finished,
    new_episodes,
)
from hulk_env.replacement.failures import random_scenario
from hulk_env.replacement.methods import run_method
from hulk_env.replacement.problem import DEFAULT_HORIZON, ReplacementProblem

DEAD_SCORE = 5.0
TEMPERATURES = (0.1, 0.2, 0.5, 1.0)
OUT = Path(__file__).with_name("policy_weights.py")


def training_generator() -> RandomGeoGenerator:
    return RandomGeoGenerator(
        num_machines=(8, 40), num_regions=(2, 10), num_blocks=(6, 40), hidden=(1024, 2048, 4096, 5120),
        seq_len=(1024, 2048), data_parallel=(1, 2, 4), num_micro_batches=(4, 8, 16), name="replace-train",
    )


def make_problems(count: int, seed: int) -> list[ReplacementProblem]:
    """``count`` random re-placement problems (module docstring), seeded."""
    rng = np.random.default_rng(seed)
    gen = training_generator()
    out = []
    while len(out) < count:
        inst = gen(rng)
        start = get_method("latency-chain-dp")(inst, 0, None)
        if not start.feasible:
            continue
        sc = random_scenario(inst.cluster, start.placement, rng)
        if len(sc.failed) >= inst.num_machines:
            continue
        problem = ReplacementProblem(inst, start.placement, list(sc.failed), DEFAULT_HORIZON, label=sc.label)
        # Problems with nothing to decide, or no answer at all, teach nothing.
        if problem.displaced.any() and run_method(problem, "repair").feasible:
            out.append(problem)
    return out


def scores(
    population: np.ndarray, problems: list[ReplacementProblem], samples: int = 0, temperature: float = 1.0, seed: int = 0
) -> np.ndarray:
    """``[P, N]`` scores (module docstring) of each weight vector on each problem: its greedy
    rollouts in both scopes and ``samples`` sampled ones in scope ``"all"``, the best of them."""
    rng = np.random.default_rng(seed)
    p = len(population)
    out = np.empty((p, len(problems)))
    for j, problem in enumerate(problems):
        best = np.full(p, np.inf)
        for scope in SCOPES:
            each = 1 + (samples if scope == "all" else 0)
            spec = episode_spec(problem, scope)
            weights = np.repeat(population, each, axis=0)
            greedy = np.tile(np.arange(each) == 0, p)
            placements, dead = rollouts(spec, weights, p * each, temperature, rng, greedy)
            totals = np.where(dead, np.inf, problem.totals(placements).total_s).reshape(p, each)
            best = np.minimum(best, totals.min(axis=1))
        ref = max(problem.horizon_iterations * _old_time(problem), 1e-9)
        out[:, j] = np.where(np.isfinite(best), np.log(best / ref), DEAD_SCORE)
    return out


def imitation_data(
    problems: list[ReplacementProblem], teacher_budget: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-forced episodes (scope ``"all"``) following the ``search`` method's answers.

    Returns ``(features [T, M, F], masks [T, M], targets [T])`` over every step of every
    problem (padded to the largest ``M``): the machine the teacher put each slot on. Every
    prefix of a feasible placement is feasible (memory only grows), so targets are valid.
    """
    feats, masks, targets = [], [], []
    for problem in problems:
        answer = run_method(problem, "search", seed, teacher_budget)
        if not answer.feasible:
            continue
        spec = episode_spec(problem, "all")
        ep = new_episodes(spec, 1)
        while not finished(spec, ep):
            r, layer = current_slot(spec, ep)
            target = int(answer.placement[r, layer])
            feats.append(candidate_features(spec, ep)[0])
            masks.append(action_mask(spec, ep)[0])
            targets.append(target)
            apply_actions(spec, ep, np.array([target]))
    width = max(f.shape[0] for f in feats)
    pad = lambda a, v: np.pad(a, [(0, width - a.shape[0])] + [(0, 0)] * (a.ndim - 1), constant_values=v)  # noqa: E731
    return np.stack([pad(f, 0.0) for f in feats]), np.stack([pad(m, False) for m in masks]), np.array(targets)


def fit_imitation(
    features: np.ndarray, masks: np.ndarray, targets: np.ndarray, l2: float = 1e-3, steps: int = 500, lr: float = 0.5
) -> np.ndarray:
    """Weights of the masked linear softmax that best predicts the teacher's machines
    (multinomial logistic regression, convex; full-batch gradient descent with momentum)."""
    w = np.zeros(features.shape[2])
    velocity = np.zeros_like(w)
    rows = np.arange(len(targets))
    for _ in range(steps):
        scores = np.where(masks, features @ w, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        expected = np.einsum("tm,tmf->tf", p, features)
        grad = (expected - features[rows, targets]).mean(axis=0) + l2 * w
        velocity = 0.9 * velocity - lr * grad
        w += velocity
    return w


def _old_time(problem: ReplacementProblem) -> float:
    return float(episode_spec(problem, "displaced").old_time_s)


def train(
    generations: int, population: int, seed: int, train_count: int, val_count: int, samples: int = 8, log=print
) -> tuple[LinearPolicy, dict]:
    """Cross-entropy method over the weights; returns the policy and its training record."""
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    train_set = make_problems(train_count, seed)
    val_set = make_problems(val_count, seed + 10_000)
    log(f"{len(train_set)} training and {len(val_set)} validation problems in {time.perf_counter() - t0:.0f} s")
    from hulk_env.replacement import policy_weights

    shipped = dict(zip(policy_weights.FEATURES, policy_weights.WEIGHTS, strict=True))
    mean = np.array([shipped.get(f, 0.0) for f in FEATURES])  # start from the shipped weights
    std = np.full(len(FEATURES), 1.5)
    elite = max(2, population // 8)
    best_val, best_w = np.inf, mean.copy()
    for g in range(generations):
        pop = mean + std * rng.standard_normal((population, len(FEATURES)))
        pop[0] = mean
        fit = scores(pop, train_set, samples, 1.0, seed + g).mean(axis=1)
        top = pop[np.argsort(fit)[:elite]]
        mean = 0.7 * top.mean(axis=0) + 0.3 * mean
        std = np.maximum(0.7 * top.std(axis=0) + 0.3 * std, 0.05)
        val = float(scores(mean[None], val_set, samples, 1.0, seed).mean())
        if val < best_val:
            best_val, best_w = val, mean.copy()
        log(f"gen {g:3d}: train {fit.min():.4f} (mean {fit.mean():.4f}), validation {val:.4f} "
            f"(best {best_val:.4f}), {time.perf_counter() - t0:.0f} s")
    temp_scores = {}
    for temp in TEMPERATURES:
        method = agent_method(LinearPolicy(best_w, temp), DEFAULT_SAMPLES)
        vals = []
        for problem in val_set:
            ans = method(problem, 0, None)
            total = problem.totals(ans.placement[None]).total_s[0] if ans.placement is not None else np.inf
            ref = problem.horizon_iterations * _old_time(problem)
            vals.append(np.log(total / ref) if np.isfinite(total) else DEAD_SCORE)
        temp_scores[temp] = float(np.mean(vals))
        log(f"temperature {temp}: validation best-of-{DEFAULT_SAMPLES} {temp_scores[temp]:.4f}")
    temperature = min(temp_scores, key=temp_scores.get)
    record = {
        "method": "cross-entropy method",
        "generations": generations,
        "population": population,
        "samples": samples,
        "seed": seed,
        "train_problems": len(train_set),
        "validation_problems": len(val_set),
        "validation_greedy_log_ratio": best_val,
        "validation_sampled_log_ratio": temp_scores[temperature],
        "seconds": round(time.perf_counter() - t0),
    }
    return LinearPolicy(best_w, temperature), record


def write_weights(policy: LinearPolicy, record: dict, path: Path = OUT) -> None:
    names = ", ".join(f'"{f}"' for f in FEATURES)
    weights = ", ".join(f"{w:.4f}" for w in policy.weights)
    path.write_text(
        '"""Weights of the shipped re-placement policy (written by ``hulk_env.replacement.train_agent``)."""\n\n'
        f"FEATURES = ({names},)\n"
        f"WEIGHTS = ({weights},)\n"
        f"TEMPERATURE = {policy.temperature}\n"
        f"TRAINING = {record!r}\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=30)
    parser.add_argument("--population", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=96, help="training problems")
    parser.add_argument("--validation", type=int, default=32, help="validation problems")
    parser.add_argument("--samples", type=int, default=8, help="sampled rollouts per policy and problem")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    policy, record = train(args.generations, args.population, args.seed, args.train, args.validation, args.samples)
    write_weights(policy, record, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":  # pragma: no cover
    main()
