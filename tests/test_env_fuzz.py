"""Fuzz: 2,000+ random masked episodes over random instances; zero exceptions, zero infeasible."""

from __future__ import annotations

import pytest

from hulk_env.env import PlacementEnv
from hulk_env.testing import fuzz_env

# Small random-geo instances whose memory binds (single small GPUs, long sequences, many
# micro-batches): the 1F1B growth rule and dead ends get exercised, not just the easy cases.
TIGHT_RANDOM = {
    "num_machines": [3, 8],
    "num_regions": [1, 3],
    "num_blocks": [2, 6],
    "gpu_mix": [["T4", 1, 1.0], ["GTX-1080", 2, 1.0], ["A10", 1, 1.0], ["V100-32GB", 1, 0.5]],
    "hidden": [1024, 1536, 2048],
    "seq_len": [1024, 2048],
    "num_micro_batches": [4, 8, 16],
    "data_parallel": [1, 2],
    "max_tries": 200,
}
CASES = {
    "toy": {"generator": "toy"},
    "toy-penalty-dense": {"generator": "toy", "invalid_action": "penalty", "reward": "dense"},
    "random-small": {"generator": "random", "generator_kwargs": {"num_machines": [2, 6], "num_blocks": [1, 4]}},
    "random-tight": {"generator": "random", "generator_kwargs": TIGHT_RANDOM},
}
EPISODES = {"toy": 800, "toy-penalty-dense": 200, "random-small": 400, "random-tight": 800}  # 2,200


@pytest.mark.parametrize("case", list(CASES))
def test_fuzz_random_masked_episodes(case):
    report = fuzz_env(PlacementEnv(**CASES[case]), episodes=EPISODES[case], seed=12345)
    assert report.episodes == EPISODES[case]
    assert report.infeasible == 0, report.problems[:5]
    assert report.problems == []
    assert report.completed + report.dead_ends + report.truncated == report.episodes
    assert report.truncated == 0  # masked agents never act invalidly
    assert report.completed > 0.5 * report.episodes
