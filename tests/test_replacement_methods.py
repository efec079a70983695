"""Re-placement methods and failure specs: valid answers, what each method promises, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env.baselines import get_method
from hulk_env.errors import HulkInputError
from hulk_env.generators import fixed_instance
from hulk_env.replacement import ReplacementProblem, parse_failures, standard_scenarios
from hulk_env.replacement.methods import get_replace_method, run_method
from hulk_env.testing import placement_problems

METHODS = ("scratch", "repair", "search")
BUDGET = 1500  # search budget in tests: small, the behaviour is the same


@pytest.fixture(scope="module")
def running():
    """GPT-3 1.3B x 2 replicas on the built-in 3-region cloud, placed by latency-chain-dp."""
    inst = fixed_instance("cloud-3region", "gpt3-1.3b", data_parallel=2)
    return inst, get_method("latency-chain-dp")(inst, 0, None).placement


def test_every_scenario_gets_a_valid_answer_from_every_method(running) -> None:
    inst, old = running
    for scenario in standard_scenarios(inst.cluster, old):
        problem = ReplacementProblem(inst, old, list(scenario.failed), label=scenario.label)
        for name in METHODS:
            result = run_method(problem, name, 0, BUDGET)
            assert result.feasible, (scenario.label, name, result.reason)
            assert not np.isin(result.placement, scenario.failed).any()
            assert placement_problems(inst, result.placement) == []
            o = result.outcome
            assert o.total_s == pytest.approx(o.migration_s + 1000 * o.iteration_time_s)
            assert result.cost_evals >= 1


def test_repair_keeps_every_surviving_slot(running) -> None:
    inst, old = running
    busiest = standard_scenarios(inst.cluster, old)[0]
    problem = ReplacementProblem(inst, old, list(busiest.failed))
    result = run_method(problem, "repair")
    kept = ~problem.displaced
    assert problem.displaced.any()
    np.testing.assert_array_equal(result.placement[kept], old[kept])


def test_search_is_never_worse_than_repair_and_counts_its_evaluations(running) -> None:
    inst, old = running
    region = standard_scenarios(inst.cluster, old)[1]
    problem = ReplacementProblem(inst, old, list(region.failed))
    repaired = run_method(problem, "repair")
    searched = run_method(problem, "search", 0, BUDGET)
    assert searched.outcome.total_s <= repaired.outcome.total_s + 1e-9
    assert searched.cost_evals == BUDGET  # the budget is spent exactly, heuristics included
    assert run_method(problem, "search", 0, BUDGET).placement.tolist() == searched.placement.tolist()


def test_scratch_places_on_the_survivors_with_the_named_method(running) -> None:
    inst, old = running
    problem = ReplacementProblem(inst, old, [int(old[0, 0])])
    result = run_method(problem, "scratch:compute-greedy")
    direct = get_method("compute-greedy")(problem.sub_instance, 0, None)
    np.testing.assert_array_equal(result.placement, problem.to_full(direct.placement))


def test_a_failure_that_leaves_too_little_memory_is_infeasible_for_every_method() -> None:
    inst = fixed_instance("cloud-3region", "gpt3-13b", data_parallel=2)
    old = get_method("latency-chain-dp")(inst, 0, None).placement
    # Only Dublin's two A10s (96 GB each) survive: 2 x 13B needs far more.
    keep = [i for i, m in enumerate(inst.cluster.machines) if m.name in ("dublin-0", "dublin-1")]
    failed = [i for i in range(inst.num_machines) if i not in keep]
    problem = ReplacementProblem(inst, old, failed)
    for name in METHODS:
        result = run_method(problem, name, 0, BUDGET)
        assert not result.feasible and "GB" in result.reason


def test_bad_problems_are_clear_errors(running) -> None:
    inst, old = running
    with pytest.raises(HulkInputError, match="does not match"):
        ReplacementProblem(inst, old[:, :-1], [0])
    with pytest.raises(HulkInputError, match="every machine"):
        ReplacementProblem(inst, old, list(range(inst.num_machines)))
    with pytest.raises(HulkInputError, match="unknown re-placement method"):
        get_replace_method("teleport")
    with pytest.raises(HulkInputError, match="unknown method"):
        get_replace_method("scratch:teleport")


def test_failure_specs(running) -> None:
    inst, _ = running
    c = inst.cluster
    assert parse_failures(c, "ashburn-0").failed == (0,)
    dublin = parse_failures(c, "region:dublin")
    assert {c.machines[i].region for i in dublin.failed} == {"Dublin"} and len(dublin.failed) == 4
    both = parse_failures(c, "Ashburn-0, region:Dublin")
    assert both.failed == tuple(sorted({0, *dublin.failed}))
    tenth = parse_failures(c, "10%", seed=3)
    assert len(tenth.failed) == 1 and tenth == parse_failures(c, "10%", seed=3)
    with pytest.raises(HulkInputError, match="did you mean 'ashburn-0'"):
        parse_failures(c, "ashburn0")
    with pytest.raises(HulkInputError, match="unknown region 'Mars'"):
        parse_failures(c, "region:Mars")
    with pytest.raises(HulkInputError, match="between 0% and 100%"):
        parse_failures(c, "100%")
    with pytest.raises(HulkInputError, match="no failed machines"):
        parse_failures(c, " , ")
