"""Expert iteration: the network learns to place as well as its own decision does.

The shipped decision (``gnn-ppo``) is the network's start ranking plus the stage DP's plans plus
the cost model's choice; the network's own slot-by-slot rollout -- what the env and PPO are
about -- was far behind it (``policy_rollout_gap_geomean`` 0.38 / 1.06 on ``unseen-v0`` /
``unseen-v1``): it leaves the plan it is shown at a stage boundary by a logit margin of a few
hundredths, and the rest of the episode goes wrong from there. Each round here:

1. the teacher is the current network's full decision on each training instance
   (:func:`agents.training.imitation.decision_demonstration`; optionally polished by ``anneal``), the best
   one found in any round kept per instance -- the targets improve as the network does;
2. the network places each instance itself, greedy, from the teacher's start machine (where
   ``hulk bench agent`` measures its rollout), and every state it visits is labelled with the
   teacher's best completion (:func:`agents.training.imitation.aggregate`, DAgger); with ``--samples`` also
   episodes drawn at ``--temperature``, for the states just off its greedy path;
3. behaviour cloning (:func:`agents.training.imitation.behaviour_cloning`) on all rounds' episodes, the
   value head on the exact returns of the visited episodes;
4. validation (``val-v0`` and ``val-x-v0``, never the unseen suites): the rollout-only and the
   decision's geometric-mean gap to ``latency-chain-dp`` (each instance's chain-dp time measured
   once and cached in ``OUT/chain_dp.json``).

Choice rule (declared before the runs): the round with the least validation rollout gap among
those whose validation decision gap is at most round 0's + 0.005 (round 0: the starting weights).

    python -m experiments.expert_iteration --out runs/expert-iteration --instances 120 --rounds 3
    python -m experiments.expert_iteration --out runs/expert-iteration --ship   # + copy the chosen round

Writes ``OUT/curve.jsonl`` (one line per round: slots, episodes, BC accuracy, validation gaps,
wall seconds), ``OUT/round-<k>/`` (the policy after round ``k``) and, with ``--ship``, the chosen
round's weights into ``agents/pretrained/gnn-ppo/`` (same format; the previous ``TRAINING.md`` is
extended with this run's figures).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.common import REPO_ROOT

NAME = "expert_iteration"
VAL_SUITES = ("val-v0", "val-x-v0")
TRAIN_SEED = 34  # instance draws of the training distribution (not the imitation run's: new instances)
SHIPPED = REPO_ROOT / "agents" / "pretrained" / "gnn-ppo"
DECISION_SLACK = 0.005  # the choice rule's allowance on the validation decision gap


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m experiments.{NAME}", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO_ROOT / "runs" / "experiments" / NAME)
    p.add_argument("--start", type=Path, default=SHIPPED, help="Policy directory to start from (default: the shipped one).")
    p.add_argument("--instances", type=int, default=120, help="Training instances (generalist distribution).")
    p.add_argument("--machines", type=int, nargs=2, default=(4, 128), help="Their machine range.")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4, help="Behaviour-cloning epochs per round.")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--train", choices=("all", "signals"), default="all",
                   help="What behaviour cloning moves: the whole network, or only the signal weights (priors).")
    p.add_argument("--decision-weight", type=float, default=4.0)
    p.add_argument("--samples", type=int, default=0, help="Sampled episodes per instance and round besides the greedy one.")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--polish-budget", type=int, default=0, help="anneal evaluations polishing the teacher (0: the decision).")
    p.add_argument("--val-quick", action="store_true", help="Validation instances of at most 128 machines only.")
    p.add_argument("--ship", action="store_true", help="Copy the chosen round into agents/pretrained/gnn-ppo.")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def geomean_gap(times_s: list[float], reference_s: list[float]) -> float:
    """``exp(mean(log(T / T_ref))) - 1``."""
    return float(math.exp(np.mean(np.log(np.asarray(times_s) / np.asarray(reference_s)))) - 1.0)


def validation_instances(quick: bool) -> list[Any]:
    from hulk_env.evaluation.suites import load_suite

    return [i for s in VAL_SUITES for i in load_suite(s) if not quick or i.num_machines <= 128]


def chain_dp_times(instances: list[Any], path: Path) -> dict[str, float]:
    """``latency-chain-dp``'s iteration time per instance id (cached in ``path``)."""
    from hulk_env import cost
    from hulk_env.baselines import get_method
    from hulk_env.files import atomic_write_text

    done = json.loads(path.read_text()) if path.is_file() else {}
    for inst in instances:
        if inst.instance_id not in done:
            result = get_method("latency-chain-dp")(inst, 0, None)
            done[inst.instance_id] = float(cost.iteration_time(inst.cluster, inst.workload, result.placement))
            atomic_write_text(path, json.dumps(done, indent=1) + "\n")
    return done


def validate(loaded: Any, instances: list[Any], chain_dp: dict[str, float]) -> dict[str, Any]:
    """The rollout-only and the decision's gaps to ``latency-chain-dp`` (geometric means; a failed
    rollout counts as the naive placement, as in ``hulk bench agent``)."""
    from agents.decision.inference import policy_placement
    from hulk_env import cost
    from hulk_env.reference import naive_placement

    rolled, decided, ref, per = [], [], [], {}
    for inst in instances:
        naive_s = cost.iteration_time(inst.cluster, inst.workload, naive_placement(inst))
        times = []
        for rollout_only in (True, False):
            r = policy_placement(loaded, inst, rollout_only=rollout_only)
            times.append(naive_s if r.placement is None else float(cost.iteration_time(inst.cluster, inst.workload, r.placement)))
        rolled.append(times[0])
        decided.append(times[1])
        ref.append(chain_dp[inst.instance_id])
        per[inst.instance_id] = [round(times[0] / ref[-1] - 1, 4), round(times[1] / ref[-1] - 1, 4)]
    return {"rollout_gap": geomean_gap(rolled, ref), "decision_gap": geomean_gap(decided, ref), "per_instance": per}


def choose_round(curve: list[dict[str, Any]]) -> int:
    """The choice rule of the module docstring."""
    limit = curve[0]["val"]["decision_gap"] + DECISION_SLACK
    ok = [c for c in curve if c["val"]["decision_gap"] <= limit]
    return min(ok, key=lambda c: c["val"]["rollout_gap"])["round"]


def main(argv: list[str] | None = None) -> Path:
    import torch

    from agents.decision.inference import instance_env, single_thread
    from agents.network.saved_policy import load_policy, save_policy
    from agents.training.distribution import GeneralistGenerator
    from agents.training.imitation import (
        BCSettings,
        aggregate,
        behaviour_cloning,
        decision_demonstration,
    )
    from hulk_env.files import atomic_write_text

    args = parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    loaded = load_policy(args.start)
    loaded = loaded._replace(ranker=None) if loaded.ranker is None else loaded
    meta = loaded.meta
    plan = bool(meta["observation"].get("plan", False))
    lookahead = bool(meta["observation"].get("lookahead", False))
    make_env = lambda inst: instance_env(inst, lookahead, shape=True, plan=plan)  # noqa: E731 -- the stay reward: training's

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    val = validation_instances(args.val_quick)
    chain_dp = chain_dp_times(val, out / "chain_dp.json")
    curve_path = out / "curve.jsonl"
    curve: list[dict[str, Any]] = [json.loads(line) for line in curve_path.read_text().splitlines()] if curve_path.is_file() else []
    started = time.perf_counter()
    if not curve:
        with single_thread():
            v = validate(loaded, val, chain_dp)
        curve.append({"round": 0, "episodes": 0, "slots": 0, "accuracy": None, "val": v, "wall_s": 0.0})
        atomic_write_text(curve_path, "".join(json.dumps(c) + "\n" for c in curve))
        log(f"round 0: val rollout gap {v['rollout_gap']:.4f}, decision gap {v['decision_gap']:.4f}")
    else:  # resume from the last finished round
        last = curve[-1]["round"]
        if last:
            loaded = load_policy(out / f"round-{last}")
    rng = np.random.default_rng([args.seed, TRAIN_SEED])
    gen = GeneralistGenerator(num_machines=tuple(args.machines))
    instances = [gen(rng) for _ in range(args.instances)]
    log(f"{len(instances)} training instances ({sum(i.num_machines for i in instances)} machines in all)")
    teachers: dict[int, Any] = {}
    episodes: list[Any] = []
    generator = torch.Generator().manual_seed(args.seed)
    settings = BCSettings(epochs=args.epochs, learning_rate=args.lr, decision_weight=args.decision_weight, seed=args.seed,
                          trainable=args.train)
    for rnd in range(curve[-1]["round"] + 1, args.rounds + 1):
        t0 = time.perf_counter()
        policy = loaded.policy
        with single_thread():
            for k, inst in enumerate(instances):
                demo = decision_demonstration(loaded, inst, args.polish_budget, args.seed)
                best = teachers.get(k)
                if demo is not None and (best is None or demo.iteration_time_s < best.iteration_time_s):
                    teachers[k] = best = demo
                if best is None:
                    continue
                first = int(best.placement[0, 0])
                with torch.no_grad():
                    episodes.append(aggregate(policy, best, make_env, first=first))
                    for _ in range(args.samples):
                        episodes.append(aggregate(policy, best, make_env, first=first, temperature=args.temperature, generator=generator))
            log(f"round {rnd}: {len(episodes)} episodes, {sum(e.steps for e in episodes)} slots, "
                f"{sum(e.relabelled for e in episodes)} relabelled ({time.perf_counter() - t0:.0f} s)")  # fmt: skip
        torch.set_num_threads(1)
        result = behaviour_cloning(policy, episodes, settings)
        acc = result.epochs[-1].accuracy
        log(f"round {rnd}: BC accuracy {[round(e.accuracy, 3) for e in result.epochs]} ({time.perf_counter() - t0:.0f} s)")
        directory = save_policy(
            policy, out / f"round-{rnd}", policy_config=meta["policy"], padding=loaded.padding, lookahead=lookahead, plan=plan,
            extra={"num_timesteps": int(meta.get("num_timesteps", 0))},
        )  # fmt: skip
        loaded = load_policy(directory)
        with single_thread():
            v = validate(loaded, val, chain_dp)
        curve.append({"round": rnd, "episodes": len(episodes), "slots": int(sum(e.steps for e in episodes)), "accuracy": acc,
                      "val": v, "wall_s": round(time.perf_counter() - started, 1)})  # fmt: skip
        atomic_write_text(curve_path, "".join(json.dumps(c) + "\n" for c in curve))
        log(f"round {rnd}: val rollout gap {v['rollout_gap']:.4f}, decision gap {v['decision_gap']:.4f}")
    chosen = choose_round(curve)
    log(f"chosen round (rule: least val rollout gap, decision gap <= round 0's + {DECISION_SLACK}): {chosen}")
    if args.ship and chosen > 0:
        for name in ("policy.json", "weights.pt"):
            shutil.copyfile(out / f"round-{chosen}" / name, SHIPPED / name)
        log(f"shipped round {chosen} into {SHIPPED}")
    return out


if __name__ == "__main__":
    main()
