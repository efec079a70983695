"""bench_agent: the keys the issue names, failures counted, the reference checked for staleness."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from agents.benchmarks.bench_agent import (
    EVERY_START,
    HEURISTIC,
    KEYS,
    RANDOM_SEEDS,
    bench_agent,
    control_methods,
    every_start,
    flops_starts,
    gap_geomean,
    random_name,
    random_weights,
)
from hulk_env import cost
from hulk_env.baselines import PlacementResult, get_method
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite
from hulk_env.evaluation.search_reference import compute_reference, load_reference
from hulk_env.reference import naive_placement


@pytest.fixture(scope="module")
def tiny_reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref") / "search-reference-tiny-v0.json"
    compute_reference("tiny-v0", path, budget=300, log=lambda line: None)
    return path


def test_the_reference_holds_the_best_search_and_resumes(tiny_reference):
    refs = load_reference("tiny-v0", tiny_reference)
    assert len(refs) == 20
    for inst in load_suite("tiny-v0"):
        ref = refs[inst.instance_id]
        assert {r.method for r in ref.records} == {"genetic", "anneal"}
        assert all(r.cost_evals <= 300 for r in ref.records)
        best = min(r.iteration_time_s for r in ref.records)
        assert ref.best_time_s == best
        placement = np.asarray(next(r.placement for r in ref.records if r.iteration_time_s == best))
        assert cost.iteration_time(inst.cluster, inst.workload, placement) == pytest.approx(best, rel=1e-12)
    before = tiny_reference.read_bytes()
    compute_reference("tiny-v0", tiny_reference, budget=300, log=lambda line: pytest.fail(line))  # nothing left to do
    assert tiny_reference.read_bytes() == before


def test_a_stale_reference_is_refused(tiny_reference, tmp_path):
    payload = json.loads(tiny_reference.read_text())
    payload["instances"][3]["records"][0]["iteration_time_s"] *= 1.01  # the cost model "changed"
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(payload))
    with pytest.raises(HulkInputError, match="the cost model changed; recompute it with"):
        load_reference("tiny-v0", stale)
    payload = json.loads(tiny_reference.read_text())
    payload["instances"][0]["fingerprint"] = "0" * 16  # other instances
    stale.write_text(json.dumps(payload))
    with pytest.raises(HulkInputError, match="does not match instance tiny-v0/0"):
        load_reference("tiny-v0", stale)
    with pytest.raises(HulkInputError, match="no search reference for suite 'tiny-v0'"):
        load_reference("tiny-v0", tmp_path / "missing.json")


def test_keys_failures_and_evals_ratio(tiny_reference):
    chain = get_method("latency-chain-dp")
    anneal = get_method("anneal")
    calls = {"n": 0}

    def flaky(instance, seed, budget):  # fails on every other instance
        calls["n"] += 1
        if calls["n"] % 2:
            return PlacementResult("flaky", None, 0, "dead end")
        return chain(instance, seed, None)

    def polish(instance, seed, budget):
        return anneal(instance, seed, 100)

    out = bench_agent("tiny-v0", methods={"gnn-ppo": flaky, "gnn-ppo+search": polish}, reference_path=tiny_reference)
    assert tuple(out) == KEYS
    assert out["random_weights_gap_geomean"] is None and out["heuristic_starts_gap_geomean"] is None  # not given, not measured
    assert out["cost_evals"]["gnn-ppo+search"] == 20 * 100
    assert out["suite"] == "tiny-v0" and out["instances"] == 20
    assert out["dead_ends"] == 10  # the failures are counted, not dropped
    assert out["search_polish_gap_geomean"] >= -1e-12  # anneal at 100 never beats the best at 300... or ties
    assert out["policy_gap_geomean"] > out["chain_dp_gap_geomean"]  # failures enter as naive, worse
    refs = load_reference("tiny-v0", tiny_reference)
    genetic_total = sum(r.evals("genetic") for r in refs.values())
    assert out["search_polish_evals_ratio"] == pytest.approx(20 * 100 / genetic_total, rel=0.05)
    assert 0 < out["decision_s_median"] <= out["decision_s_max"] and out["chain_dp_s_median"] > 0
    assert out["decision_chain_dp_ratio"] == pytest.approx(out["decision_s_median"] / out["chain_dp_s_median"])


def test_a_failure_enters_the_geomean_as_the_naive_placement():
    inst = load_suite("tiny-v0")[0]
    naive_s = cost.iteration_time(inst.cluster, inst.workload, naive_placement(inst))
    ref_s = naive_s / 2
    assert gap_geomean([math.nan], [naive_s], [ref_s]) == pytest.approx(1.0)
    assert gap_geomean([ref_s, math.nan], [naive_s, naive_s], [ref_s, ref_s]) == pytest.approx(math.sqrt(2) - 1)


def test_cli_bad_input_is_one_line_and_exit_2():
    from typer.testing import CliRunner

    from hulk_cli.app import app
    from hulk_cli.output import EXIT_BAD_INPUT

    runner = CliRunner()
    cases = [
        (["bench", "agent", "--suite", "tiny-v0", "--json"], "no search reference for suite 'tiny-v0'"),
        (["bench", "env", "--env", "hulk/Nope-v0"], "--env must be hulk/Placement-v0 or hulk/Placement-v1"),
        (["bench", "env", "--large", "128,many"], "--large must be comma-separated machine counts"),
    ]
    for args, message in cases:
        result = runner.invoke(app, args, catch_exceptions=False)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == EXIT_BAD_INPUT and len(lines) == 1 and message in lines[0], (args, result.stderr)


def test_the_controls_are_the_median_of_their_seeds_and_count_their_failures(tiny_reference):
    chain = get_method("latency-chain-dp")
    naive = get_method("naive")

    def failing(instance, seed, budget):
        return PlacementResult("fails", None, 3, "dead end")

    # seed 0 as good as chain-dp, seed 1 naive, seed 2 always failing (enters as naive): median = naive's gap
    stand_ins = {"gnn-ppo": chain, "gnn-ppo+search": chain, HEURISTIC: naive}
    for seed, fn in zip(RANDOM_SEEDS, (chain, naive, failing), strict=True):
        stand_ins[random_name(seed)] = stand_ins[random_name(seed, True)] = fn
    out = bench_agent("tiny-v0", methods=stand_ins, reference_path=tiny_reference)
    assert out["heuristic_starts_gap_geomean"] == pytest.approx(out["random_weights_gap_geomean"])
    assert out["random_weights_gap_geomean"] == pytest.approx(out["random_weights_rollout_gap_geomean"])
    assert out["random_weights_gap_geomean"] > out["policy_gap_geomean"] == out["chain_dp_gap_geomean"]
    assert out["control_dead_ends"] == 2 * 20 and out["dead_ends"] == 0  # the controls' failures apart from the policy's
    assert out["cost_evals"][random_name(RANDOM_SEEDS[2])] == 3 * 20
    assert out["policy_rollout_gap_geomean"] is None


def test_the_controls_use_other_weights_and_other_start_rankings():
    import torch

    from agents.decision.inference import instance_env, ranked_first_slots
    from agents.decision.methods import pretrained_policy
    from hulk_env.evaluation.suites import (
        UNSEEN_CITIES,
        UNSEEN_V0_CASES,
        UNSEEN_V0_SEED,
        _draw_heldout_instance,
    )

    shipped = pretrained_policy()
    nets = [random_weights(shipped, s).policy for s in RANDOM_SEEDS]
    again = random_weights(shipped, RANDOM_SEEDS[0]).policy
    first = next(iter(shipped.policy.state_dict()))
    weights = [n.state_dict()[first] for n in [shipped.policy, *nets]]
    assert all(not torch.equal(a, b) for i, a in enumerate(weights) for b in weights[i + 1 :])  # four different networks
    assert all(torch.equal(again.state_dict()[k], v) for k, v in nets[0].state_dict().items())  # a fixed seed: the same one

    # unseen-v0/0 (8 machines over 3 cities), drawn alone
    inst = _draw_heldout_instance(np.random.default_rng([UNSEEN_V0_SEED, 0]), *UNSEEN_V0_CASES[0], UNSEEN_CITIES, "unseen-v0/0")
    env = instance_env(inst, lookahead=False, plan=True)
    by_flops = ranked_first_slots(flops_starts(shipped).ranker, env, inst)
    assert by_flops == sorted(by_flops, key=lambda m: (-inst.cluster.flops[m], m))
    rankings = [tuple(ranked_first_slots(p, env, inst)) for p in (shipped.policy, *nets)] + [tuple(by_flops)]
    assert len(set(rankings)) >= 4  # the shipped, random and FLOP/s rankings are not one ranking
    controls = control_methods(shipped, seeds=RANDOM_SEEDS[:1])
    assert set(controls) == {HEURISTIC, EVERY_START, random_name(0), random_name(0, True)}
    for name, fn in controls.items():
        result = fn(inst, 0, None)
        assert result.feasible and result.cost_evals > 0, name


def test_every_start_is_a_ceiling_no_start_ranking_passes():
    """The every-start control bounds any ranking: on val-x-v0's instances of at most 16 machines
    (validation cities, drawn alone), its placement is never slower than the decision from the
    network's starts, the FLOP/s starts' or a random network's, and it builds a plan from more
    starts (more cost evaluations) wherever the cluster has more machines than the decision's
    starts."""
    from agents.decision.inference import REFINE_STARTS, START_CANDIDATES, policy_placement
    from agents.decision.methods import pretrained_policy
    from hulk_env.evaluation.suites import UNSEEN_V0_CASES, suite_instance

    shipped = pretrained_policy()
    rankings = {"network": shipped, "flops": flops_starts(shipped), "random": random_weights(shipped, RANDOM_SEEDS[0])}
    small = [(i, case) for i, case in enumerate(UNSEEN_V0_CASES) if case[0] <= 16]
    assert len(small) >= 4
    for i, _ in small:
        inst = suite_instance("val-x-v0", i)
        ceiling = every_start(shipped, inst)
        ceiling_s = cost.iteration_time(inst.cluster, inst.workload, ceiling.placement)
        for name, loaded in rankings.items():
            chosen = policy_placement(loaded, inst)
            assert ceiling_s <= cost.iteration_time(inst.cluster, inst.workload, chosen.placement) * (1 + 1e-12), (inst.instance_id, name)
            if inst.num_machines > START_CANDIDATES + REFINE_STARTS:
                assert ceiling.cost_evals > chosen.cost_evals, (inst.instance_id, name)
