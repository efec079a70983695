"""hulk bench settings: its figures on the first two suite cases."""

from __future__ import annotations

import pytest

from hulk_env import planner
from hulk_env.bench_settings import (
    SETTING_KEYS,
    SETTINGS_SUITE,
    bench_case,
    case_instance,
    settings_used,
)


def test_suite_is_multi_gpu_and_multi_region():
    for case in SETTINGS_SUITE:
        inst = case_instance(case)
        assert inst.cluster.num_gpus.min() == 8 and len(inst.cluster.regions) >= 2
        assert 6e9 <= inst.workload.total_params <= 75e9


@pytest.mark.slow  # ~10 s of CPU: one planned search and six simulations
def test_joint_plan_never_slower_than_pp_dp_only():
    row = bench_case(SETTINGS_SUITE[1])
    assert row["pp_dp_s"] is None or row["joint_s"] <= row["pp_dp_s"] * (1 + 1e-12)
    assert set(row["sim_errors"]) >= {"chosen", "tensor_parallel_8", "zero_3", "diloco_h100_8bit"}
    assert all(e < 0.5 for e in row["sim_errors"].values())


def test_settings_used_counts_every_choice_of_every_plan():
    w = case_instance(SETTINGS_SUITE[0]).workload
    rows = [
        {"settings": planner.settings_of(w.with_training(tensor_parallel=8, zero=2))},
        {"settings": planner.settings_of(w.with_training(tensor_parallel=4, zero=2, sync="diloco"))},
        {"error": "no plan fits"},
    ]
    used = settings_used(rows)
    assert set(used) == set(SETTING_KEYS)
    assert used["tensor_parallel"] == {"8": 1, "4": 1} and used["zero"] == {"2": 2}
    assert used["sync"] == {"every-step": 1, "diloco": 1}
    assert used["micro_batch_size"] == {str(w.micro_batch_size): 2}
