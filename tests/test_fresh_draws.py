"""experiments.fresh_draws end to end on its smallest cases: fresh draws differ from the suites',
every suite gets the three gaps, and each gap is the geometric mean of its per-instance ratios."""

from __future__ import annotations

import json
import math

import numpy as np

from experiments.fresh_draws import fresh_suite, main


def test_fresh_draws_measure_every_suite_the_same_way(tmp_path):
    from hulk_env.evaluation.suites import load_suite

    small = [i for i in load_suite("unseen-v0") if i.num_machines <= 8]
    fresh = fresh_suite(20301, 8)
    assert len(fresh) == len(small) and all(
        not np.array_equal(a.cluster.latency_s, b.cluster.latency_s) for a, b in zip(fresh, small, strict=True)
    )
    out = json.loads((main(["--out", str(tmp_path), "--seeds", "20301", "--max-machines", "8"]) / "fresh_draws.json").read_text())
    assert set(out) == {"unseen-v0", "unseen-v1", "fresh-20301", "wall_s"}
    for name in ("unseen-v0", "unseen-v1", "fresh-20301"):
        per = out[name]["per_instance"]
        assert out[name]["instances"] == len(per) == len(small)
        for key in ("decision_gap", "rollout_gap", "heuristic_starts_gap"):
            mean = math.exp(np.mean([math.log(1 + g[key]) for g in per.values()])) - 1
            assert abs(out[name][key] - mean) < 1e-3  # per-instance figures are rounded to 1e-4
