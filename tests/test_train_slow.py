"""Long training runs (``pytest -m slow``): the project's target figures for training, measured.

* the main job (``hulk train`` defaults) beats ``naive`` and matches or beats
  ``latency-chain-dp`` on the built-in default instance;
* on ``tiny-v0`` a policy trained for the config's steps gets within 2% of the exact optimum
  (geometric mean over the 20 instances; the greedy policy and the policy with sampling are
  both reported, the assertion is on the best of the two the config names).
"""

from __future__ import annotations

import math

import pytest

from agents.benchmarks.compare import POLICY_METHOD, evaluate_run
from agents.training.config import TrainSettings
from agents.training.train import checkpoint_timesteps, train

pytestmark = pytest.mark.slow


def _by_method(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r.method, []).append(r)
    return out


def _train_all_steps(config: str, tmp_path) -> tuple:
    """Train ``config`` for all its steps (no wall-clock limit: a slower machine trains as much)."""
    settings = TrainSettings(config, ("train.max_minutes=0",), out=tmp_path, name=config, progress_bar=False)
    cfg = settings.resolve()
    run = train(cfg, label=settings.label)
    assert checkpoint_timesteps(run) >= cfg.train.total_timesteps
    return run, cfg


def test_main_job_beats_naive_and_matches_latency_chain_dp(tmp_path):
    run, _ = _train_all_steps("default", tmp_path)
    rows = _by_method(evaluate_run(run, methods=["naive", "latency-chain-dp"], progress=False)[0])
    (policy,), (naive,), (dp,) = rows[POLICY_METHOD], rows["naive"], rows["latency-chain-dp"]
    print(f"\nmain job: naive {naive.iteration_time_s:.4f} s, latency-chain-dp {dp.iteration_time_s:.4f} s, "
          f"policy {policy.iteration_time_s:.4f} s ({policy.speedup_vs_naive:.3f}x naive)")
    assert policy.iteration_time_s < naive.iteration_time_s
    assert policy.iteration_time_s <= dp.iteration_time_s * (1 + 1e-9)


def test_tiny_v0_within_two_percent_of_the_optimum(tmp_path):
    run, cfg = _train_all_steps("tiny", tmp_path)
    rows = _by_method(evaluate_run(run, methods=["exact"], progress=False)[0])
    exact = {r.instance: r.iteration_time_s for r in rows["exact"]}
    gaps = {}
    for name in (POLICY_METHOD, f"{POLICY_METHOD}+{cfg.eval.samples}"):
        ratios = [r.iteration_time_s / exact[r.instance] if r.feasible else math.inf for r in rows[name]]
        gaps[name] = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) - 1
        print(f"\n{name}: geometric-mean gap to the optimum {100 * gaps[name]:.2f}%, "
              f"within 2% on {sum(x <= 1.02 for x in ratios)}/{len(ratios)}, worst {100 * (max(ratios) - 1):.1f}%")
    assert min(gaps.values()) <= 0.02
