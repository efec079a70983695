"""A trained run against the baselines: the leaderboard and the plots of ``RUN_DIR/eval``.

``hulk train`` ends here: :func:`evaluate_run` places the run's held-out instances with its
policy and with the baselines its config names, and writes the results and figures next to
the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.decision.inference import policy_placement
from agents.decision.methods import agent_methods
from agents.network.saved_policy import LoadedPolicy, load_policy
from agents.training.runs import read_run_config
from agents.training.sources import training_source
from agents.training.tb_curves import read_curves
from hulk_env.baselines import Method
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import run_methods, write_results
from hulk_env.instance import Instance
from hulk_env.render import curves_figure, placement_figure, save_figure

POLICY_METHOD = "policy"  # the run's own policy ("gnn-ppo" is the shipped one, agents.decision.methods)


def evaluate_run(
    run_dir: str | Path,
    methods: Sequence[str] | None = None,
    which: str = "best",
    samples: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> tuple[list[Any], dict[str, Path]]:
    """The trained policy against baselines on the run's evaluation instances.

    Runs ``methods`` (default: the run's ``eval.baselines``) and the run's policy, named
    ``policy`` (greedy) and, with ``samples > 0`` (default: the run's ``eval.samples``),
    ``policy+N`` (best of the greedy and ``N`` sampled rollouts), through
    :func:`hulk_env.evaluation.run_methods`; agent-side methods (``hulk-gcn``, the shipped
    ``gnn-ppo`` and ``gnn-ppo+search``) may be named among ``methods``. Writes ``RUN_DIR/eval/results.{csv,json}``, ``summary.md``, and the plots
    ``curves.png`` (learning curves) and ``placement.png`` (the policy's placement of the first
    instance). Returns ``(rows, paths)``.
    """
    run_dir = Path(run_dir)
    config = read_run_config(run_dir)
    _, instances = training_source(config)
    names = list(methods) if methods is not None else list(config.eval.baselines)
    samples = config.eval.samples if samples is None else samples
    loaded = load_policy(run_dir, which)
    agents_side = agent_methods()
    extra: dict[str, Method] = {n: agents_side[n] for n in names if n in agents_side}
    extra[POLICY_METHOD] = lambda inst, s, b: policy_placement(loaded, inst, seed=s, name=POLICY_METHOD)
    if samples > 0:
        sampled = f"{POLICY_METHOD}+{samples}"
        temperature = config.eval.temperature
        extra[sampled] = lambda inst, s, b: policy_placement(
            loaded, inst, seed=s, samples=samples, name=sampled, temperature=temperature
        )
    rows = run_methods(instances, names, seed=seed, progress=progress, extra_methods=extra)
    paths = write_results(rows, run_dir / "eval", title=f"{run_dir.name}: policy vs baselines")
    paths.update(write_plots(run_dir, loaded, instances[0]))
    return rows, paths


def write_plots(run_dir: Path, loaded: LoadedPolicy, instance: Instance) -> dict[str, Path]:
    """``eval/curves.png`` and ``eval/placement.png`` (skipped, not fatal, when there is
    nothing to draw, e.g. a run without TensorBoard logs or a dead-end placement)."""
    out: dict[str, Path] = {}
    try:
        curves = read_curves(run_dir)
        tags = [t for t in ("placement/speedup_vs_naive", "eval/mean_speedup_vs_naive", "rollout/ep_rew_mean")
                if any(c.tag == t for c in curves)]
        out["curves"] = save_figure(curves_figure({run_dir.name: curves}, tags=tags or None), run_dir / "eval" / "curves.png")
    except HulkInputError:
        pass
    result = policy_placement(loaded, instance, name=POLICY_METHOD)
    if result.feasible:
        fig = placement_figure(instance, result.placement, title=f"{POLICY_METHOD} on {instance.instance_id}")
        out["placement"] = save_figure(fig, run_dir / "eval" / "placement.png")
    return out
