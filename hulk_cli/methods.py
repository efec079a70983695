"""Placement methods by name, and the options ``place`` and ``plot`` share.

A method is a baseline of :mod:`hulk_env.baselines` (torch-free), an agent method
(``hulk-gcn``), or a trained policy (``--policy RUN_DIR``, or a run directory given as the method
name). The agent's methods are imported only when named; without the agent stack they say in
one line how to install it.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from hulk_cli.output import require_agent
from hulk_env.errors import HulkInputError
from hulk_env.validation import limits

if TYPE_CHECKING:
    from hulk_env.baselines import PlacementResult
    from hulk_env.instance import Instance

ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="Built-in name, paper data directory or YAML/JSON file.")]
ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Built-in model name or YAML/JSON file.")]
MethodOpt = Annotated[str, typer.Option("--method", help="A placement method (see `hulk evaluate --help`) or a run directory.")]
PolicyOpt = Annotated[Path | None, typer.Option("--policy", help="A trained policy's run directory (replaces --method).")]
DataParallelOpt = Annotated[int | None, typer.Option("--data-parallel", "-d", min=1, max=limits.MAX_DATA_PARALLEL, help="Data-parallel replicas D.")]
MicroBatchesOpt = Annotated[int | None, typer.Option("--micro-batches", min=1, max=limits.MAX_MICRO_BATCHES, help="Micro-batches per iteration.")]
ScheduleOpt = Annotated[str | None, typer.Option("--schedule", help="gpipe or 1f1b.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=limits.MAX_SEED, help="Seed of randomised methods.")]
BudgetOpt = Annotated[int | None, typer.Option("--budget", min=1, max=limits.MAX_BUDGET, help="Cost-model evaluations for search methods.")]
TimeLimitOpt = Annotated[float | None, typer.Option("--time-limit", min=0.001, max=1e6, help="Seconds; then a method returns its best placement so far.")]
MicroBatchSizeOpt = Annotated[int | None, typer.Option("--micro-batch-size", min=1, max=limits.MAX_MICRO_BATCH_SIZE, help="Sequences per micro-batch (rebuilds a transformer).")]
SeqLenOpt = Annotated[int | None, typer.Option("--seq-len", min=1, max=limits.MAX_TRANSFORMER_DIM, help="Tokens per sequence (rebuilds a transformer).")]
LayersPerBlockOpt = Annotated[int | None, typer.Option("--layers-per-block", min=1, max=limits.MAX_TRANSFORMER_BLOCKS, help="Transformer blocks per placed layer.")]
RecomputeOpt = Annotated[str | None, typer.Option("--recompute", help="Activation recomputation: none, selective or full.")]


def model_overrides(
    micro_batch_size: int | None, seq_len: int | None, layers_per_block: int | None, recompute: str | None
) -> dict[str, Any]:
    """The model-building options given on the command line, as workload overrides."""
    given = dict(micro_batch_size=micro_batch_size, seq_len=seq_len, layers_per_block=layers_per_block, recompute=recompute)
    return {k: v for k, v in given.items() if v is not None}


def resolve_method(name: str):
    """A method ``(instance, seed, budget) -> PlacementResult`` by name (see the module docstring)."""
    from hulk_env.baselines import METHODS

    if name in METHODS:
        return METHODS[name]
    if Path(name).is_dir():
        return policy_method(Path(name))
    from agents.decision.methods import AGENT_METHODS

    if name in AGENT_METHODS:
        require_agent(f"method '{name}'")
        from agents.decision.methods import agent_methods

        return agent_methods()[name]
    from agents.benchmarks.compare import POLICY_METHOD

    if name == POLICY_METHOD:  # the comparison's name for a run's policy, not a method by itself
        raise HulkInputError(
            f"'{name}' is a trained policy: give its run directory (`--policy RUN_DIR`, written by `hulk train`)",
            field="method",
        )
    known = ", ".join([*METHODS, *AGENT_METHODS])
    raise HulkInputError(f"unknown method '{name}'; choose from {known}, or give a run directory", field="method")


def policy_method(run_dir: Path):
    """A trained policy as a placement method (loads weights only, never pickled code)."""
    require_agent("a trained policy")
    from agents.decision.methods import load_policy_method

    return load_policy_method(run_dir)


class Placed(NamedTuple):
    """A method's placement of an instance (feasible), with what it took."""

    instance: Instance
    method: str
    result: PlacementResult
    wall_s: float


@dataclass(frozen=True)
class PlacementRequest:
    """What to place and with which method: the options ``place`` and ``plot placement|gantt``
    share (given to a command by :func:`with_placement_options`)."""

    cluster: ClusterOpt = "default"
    model: ModelOpt = "default"
    method: MethodOpt = "latency-chain-dp"
    policy: PolicyOpt = None
    data_parallel: DataParallelOpt = None
    micro_batches: MicroBatchesOpt = None
    schedule: ScheduleOpt = None
    seed: SeedOpt = 0
    budget: BudgetOpt = None
    time_limit: TimeLimitOpt = None
    micro_batch_size: MicroBatchSizeOpt = None
    seq_len: SeqLenOpt = None
    layers_per_block: LayersPerBlockOpt = None
    recompute: RecomputeOpt = None

    def place(self) -> Placed:
        """Build the instance and place it with the method (or policy); infeasible is an error."""
        from hulk_env.generators import fixed_instance

        instance = fixed_instance(
            self.cluster, self.model, data_parallel=self.data_parallel,
            num_micro_batches=self.micro_batches, schedule=self.schedule,
            **model_overrides(self.micro_batch_size, self.seq_len, self.layers_per_block, self.recompute),
        )  # fmt: skip
        if self.policy is not None:
            name, fn = f"policy:{self.policy}", policy_method(self.policy)
        else:
            name, fn = self.method, resolve_method(self.method)
        from hulk_env.baselines.common import time_limit

        start = time.perf_counter()
        with time_limit(self.time_limit):
            result = fn(instance, self.seed, self.budget)
        wall_s = time.perf_counter() - start
        if not result.feasible:
            raise HulkInputError(f"{name} found no feasible placement: {result.reason}")
        return Placed(instance, name, result, wall_s)


def with_placement_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``command`` the options of :class:`PlacementRequest` (``--cluster`` ... ``--budget``);
    it receives them as one record, its first parameter, and keeps its own options.

    typer reads the command's signature, so the wrapper shows the command's required options,
    then the shared ones, then the command's others.
    """
    keyword = inspect.Parameter.KEYWORD_ONLY
    shared = [p.replace(kind=keyword) for p in inspect.signature(PlacementRequest, eval_str=True).parameters.values()]
    own = [p.replace(kind=keyword) for p in list(inspect.signature(command, eval_str=True).parameters.values())[1:]]

    @wraps(command)
    def wrapper(**kwargs: Any) -> Any:
        request = PlacementRequest(**{p.name: kwargs.pop(p.name) for p in shared})
        return command(request, **kwargs)

    required = [p for p in own if p.default is inspect.Parameter.empty]
    optional = [p for p in own if p.default is not inspect.Parameter.empty]
    wrapper.__signature__ = inspect.Signature([*required, *shared, *optional])  # type: ignore[attr-defined]
    return wrapper
