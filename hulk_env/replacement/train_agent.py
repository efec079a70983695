"""Train the re-placement policy's weights: imitation of the search, then the cross-entropy method.

``python -m hulk_env.replacement.train_agent [--generations N] [--population P] [--seed S]``

Problems (with displaced slots and a feasible answer): random clusters with a GPU mix and
random GPT-style models (:class:`hulk_env.generators.RandomGeoGenerator`), placed by
``latency-chain-dp``, then hit by a random failure
(:func:`hulk_env.replacement.failures.random_scenario`); horizon 1,000. Training problems are
drawn over ``TRAINING_CITIES``, validation problems over ``VALIDATION_CITIES``
(:mod:`hulk_env.evaluation.suites`); the benchmark's scenarios are never seen.

1. Imitation: teacher-forced episodes along the ``search`` method's answers give, per step,
   the candidates' features and the teacher's machine; the masked linear softmax that predicts
   it best (a convex fit) gives the starting weights.
2. Cross-entropy method on the episodes' return: a policy's score on a problem is
   ``log(total_s / (H x T_old))`` of the best of its greedy rollouts in the two scopes and a
   few sampled ones (``+5`` when all dead-end), as the agent uses it; the population is one
   lockstep batch per problem. Each generation keeps the elite's mean and spread (smoothed);
   the mean with the best validation score is kept, with the sampling temperature that gives
   the best best-of-32 validation score.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from hulk_env.baselines import get_method
from hulk_env.evaluation.suites import TRAINING_CITIES, VALIDATION_CITIES
from hulk_env.generators import RandomGeoGenerator
from hulk_env.replacement.agent import LinearPolicy, agent_method, rollouts
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
TEMPERATURES = (0.5, 1.0, 1.5)
OUT = Path(__file__).with_name("policy_weights.py")


def problem_generator(cities: tuple[str, ...]) -> RandomGeoGenerator:
    """Random clusters over ``cities`` x GPT-style models of 1-13B-class widths, 1-4 replicas."""
    return RandomGeoGenerator(
        num_machines=(8, 40), num_regions=(2, 10), cities=cities, num_blocks=(6, 40),
        hidden=(1024, 2048, 4096, 5120), seq_len=(1024, 2048), data_parallel=(1, 2, 4),
        num_micro_batches=(4, 8, 16), name="replace",
    )


def make_problems(count: int, seed: int, cities: tuple[str, ...] = TRAINING_CITIES) -> list[ReplacementProblem]:
    """``count`` random re-placement problems (module docstring) over ``cities``, seeded."""
    rng = np.random.default_rng(seed)
    gen = problem_generator(cities)
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
        ref = _reference_s(problem)
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


def _reference_s(problem: ReplacementProblem) -> float:
    """``H x T_old``: the horizon total had nothing failed (the scores' yardstick)."""
    return episode_spec(problem, "displaced").reference_total_s


def cross_entropy(
    start: np.ndarray, problems: list[ReplacementProblem], generations: int, population: int, samples: int,
    seed: int, log=print,
) -> np.ndarray:
    """The cross-entropy method from ``start`` on the episode return (module docstring, step 2);
    returns the elite mean of the last generation."""
    rng = np.random.default_rng(seed)
    mean, std = start.copy(), np.full(len(start), 1.0)
    elite = max(2, population // 8)
    for g in range(generations):
        pop = mean + std * rng.standard_normal((population, len(start)))
        pop[0] = mean
        fit = scores(pop, problems, samples, 1.0, seed + g).mean(axis=1)
        top = pop[np.argsort(fit)[:elite]]
        mean = 0.7 * top.mean(axis=0) + 0.3 * mean
        std = np.maximum(0.7 * top.std(axis=0) + 0.3 * std, 0.05)
        log(f"generation {g}: best {fit.min():.4f}, mean {fit.mean():.4f}")
    return mean


def agent_score(policy: LinearPolicy, problems: list[ReplacementProblem]) -> float:
    """Mean ``log(total_s / (H x T_old))`` of the full ``agent`` method (lower is better)."""
    method = agent_method(policy)
    vals = []
    for problem in problems:
        ans = method(problem, 0, None)
        total = problem.totals(ans.placement[None]).total_s[0] if ans.placement is not None else np.inf
        ref = _reference_s(problem)
        vals.append(np.log(total / ref) if np.isfinite(total) else DEAD_SCORE)
    return float(np.mean(vals))


def train(
    generations: int, population: int, seed: int, train_count: int, val_count: int, samples: int = 8,
    teacher_budget: int = 4000, log=print,
) -> tuple[LinearPolicy, dict]:
    """Imitation, then the cross-entropy method; the weights and temperature that score best on
    the validation problems with the full ``agent`` method are returned with a training record."""
    t0 = time.perf_counter()
    train_set = make_problems(train_count, seed)
    val_set = make_problems(val_count, seed + 10_000, VALIDATION_CITIES)
    log(f"{len(train_set)} training and {len(val_set)} validation problems in {time.perf_counter() - t0:.0f} s")
    features, masks, targets = imitation_data(train_set, teacher_budget, seed)
    imitated = fit_imitation(features, masks, targets)
    accuracy = float((np.where(masks, features @ imitated, -np.inf).argmax(axis=1) == targets).mean())
    log(f"imitation: {len(targets)} teacher decisions, {100 * accuracy:.1f}% predicted, {time.perf_counter() - t0:.0f} s")
    finals = {"imitation": imitated}
    if generations:
        finals["imitation + cross-entropy"] = cross_entropy(imitated, train_set, generations, population, samples, seed, log)
    scored = {}
    for name, weights in finals.items():
        for temp in TEMPERATURES:
            scored[(name, temp)] = agent_score(LinearPolicy(weights, temp), val_set)
            log(f"{name}, temperature {temp}: validation {scored[(name, temp)]:.4f}")
    name, temperature = min(scored, key=scored.get)
    record = {
        "method": name,
        "teacher": f"search, budget {teacher_budget}",
        "imitation_accuracy": round(accuracy, 4),
        "generations": generations,
        "population": population,
        "samples": samples,
        "seed": seed,
        "train_problems": len(train_set),
        "validation_problems": len(val_set),
        "validation_log_ratio": round(scored[(name, temperature)], 4),
        "seconds": round(time.perf_counter() - t0),
    }
    return LinearPolicy(finals[name], temperature), record


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
    parser.add_argument("--generations", type=int, default=10, help="cross-entropy generations after imitation")
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=96, help="training problems")
    parser.add_argument("--validation", type=int, default=32, help="validation problems")
    parser.add_argument("--samples", type=int, default=8, help="sampled rollouts per policy and problem")
    parser.add_argument("--teacher-budget", type=int, default=4000, help="cost evaluations of the search teacher")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    policy, record = train(
        args.generations, args.population, args.seed, args.train, args.validation, args.samples, args.teacher_budget
    )
    write_weights(policy, record, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":  # pragma: no cover
    main()
