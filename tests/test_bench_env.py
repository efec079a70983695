"""bench_env returns the figures `hulk bench env --json` prints (speed itself is not asserted)."""

from __future__ import annotations

from hulk_env.bench import bench_env


def test_bench_env_reports_both_rates_and_their_ratio():
    out = bench_env(seconds=0.05)
    assert out["env_steps_per_s"] > 0 and out["cartpole_steps_per_s"] > 0
    assert out["ratio"] == out["env_steps_per_s"] / out["cartpole_steps_per_s"]
    assert out["machines"] == 47 and out["instance"] == "paper-12city-47xgpt3-1.3b"
    assert out["steps_per_episode"] == out["layers"] * out["data_parallel"]
