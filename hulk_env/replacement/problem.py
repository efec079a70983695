"""A re-placement problem (old placement, failed machines, horizon), a method's answer, and
the placement files it starts from (``hulk place --json`` output)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import numpy as np

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.instance import Instance
from hulk_env.replacement.migration import (
    CheckpointStore,
    HorizonTotals,
    Migration,
    Sources,
    failed_mask,
    horizon_totals,
    migration,
    sources,
)
from hulk_env.units import GB

DEFAULT_HORIZON = 1_000


@dataclass(frozen=True, eq=False)
class ReplacementProblem:
    """Re-place a running model after machines fail.

    Attributes:
        instance: the full cluster (failed machines included) and the workload.
        old: ``[D, L]`` the placement that was running (full machine indices).
        failed: ``[M]`` bool, the machines that are gone.
        horizon_iterations: ``H`` in ``total_s = migration_s + H x iteration_time_s``.
        store: where the last checkpoint lives.
        label: a name for reports (``"region:Tokyo"``).
        stale: ``[M]`` bool or ``None``: machines that are up but hold no valid state (they
            failed and came back since ``old`` started running); usable, but no source.
    """

    instance: Instance
    old: np.ndarray
    failed: np.ndarray
    horizon_iterations: int = DEFAULT_HORIZON
    store: CheckpointStore = field(default_factory=CheckpointStore)
    label: str = ""
    stale: np.ndarray | None = None

    def __post_init__(self) -> None:
        c, w = self.instance.cluster, self.instance.workload
        try:
            old = cost.validate_placement(self.old, c, w)[0]
        except ValueError as exc:
            raise HulkInputError(f"old placement does not match the model and cluster: {exc}") from None
        object.__setattr__(self, "old", old)
        object.__setattr__(self, "failed", failed_mask(c, self.failed))
        if self.stale is not None:
            object.__setattr__(self, "stale", failed_mask(c, self.stale))
        if int(self.horizon_iterations) < 0:
            raise HulkInputError(f"must be >= 0, got {self.horizon_iterations}", field="horizon")
        object.__setattr__(self, "horizon_iterations", int(self.horizon_iterations))
        if self.failed.all():
            raise HulkInputError("every machine of the cluster failed: nothing is left to place on")

    # ---- derived ------------------------------------------------------------------------------
    @cached_property
    def survivors(self) -> np.ndarray:
        """Indices of the machines still up, in index order."""
        return np.flatnonzero(~self.failed)

    @cached_property
    def sub_instance(self) -> Instance:
        """The instance on the surviving machines only (indices ``0..len(survivors) - 1``)."""
        c = self.instance.cluster
        return Instance(
            c.subset(self.survivors, name=f"{c.name}-survivors"),
            self.instance.workload,
            f"{self.instance.instance_id}/{self.label or 'failed'}",
        )

    @cached_property
    def sources(self) -> Sources:
        c, w = self.instance.cluster, self.instance.workload
        return sources(c, w, self.old, self.failed, self.store, self.stale)

    @property
    def displaced(self) -> np.ndarray:
        """``[D, L]`` bool: slots whose machine failed."""
        return self.failed[self.old]

    def to_full(self, sub_placement: np.ndarray) -> np.ndarray:
        """Map placements on :attr:`sub_instance` (``[..., D, L]``) to full machine indices."""
        return self.survivors[np.asarray(sub_placement, dtype=np.int64)]

    def to_sub(self, placement: np.ndarray) -> np.ndarray:
        """Map full-index placements (surviving machines only) to :attr:`sub_instance` indices."""
        lookup = np.full(self.instance.num_machines, -1, dtype=np.int64)
        lookup[self.survivors] = np.arange(len(self.survivors))
        out = lookup[np.asarray(placement, dtype=np.int64)]
        if np.any(out < 0):
            raise HulkInputError("the placement uses a failed machine")
        return out

    # ---- objective ----------------------------------------------------------------------------
    def totals(self, placements: np.ndarray) -> HorizonTotals:
        """The objective of a batch ``[N, D, L]`` of full-index placements (one cost eval each)."""
        c, w = self.instance.cluster, self.instance.workload
        return horizon_totals(c, w, self.sources, placements, self.horizon_iterations)

    def migration(self, placement: np.ndarray) -> Migration:
        return migration(self.instance.cluster, self.sources, placement)

    def check(self, placement: np.ndarray) -> str:
        """Why ``placement`` (full indices) is not a valid answer, or ``""``."""
        c, w = self.instance.cluster, self.instance.workload
        try:
            arr = cost.validate_placement(placement, c, w)
        except ValueError as exc:
            return str(exc)
        on_failed = np.flatnonzero(self.failed[arr[0]].any(axis=0))
        if len(on_failed):
            return f"layers {on_failed.tolist()} are placed on failed machines"
        used = cost.memory_use_bytes(c, w, arr)[0]
        over = np.flatnonzero(used > c.memory_bytes)
        if len(over):
            i = int(over[0])
            return f"machine '{c.machines[i].name}' would use {used[i] / GB:.1f} GB of {c.memory_bytes[i] / GB:.1f} GB"
        return ""


@dataclass(frozen=True)
class Outcome:
    """A new placement judged over the horizon.

    Attributes:
        iteration_time_s: the new placement's iteration time.
        migration_s: seconds to move the state.
        moved_bytes: bytes moved in all.
        checkpoint_bytes: of them, read from the checkpoint.
        lost_layers: layers that survived nowhere.
        horizon_iterations: ``H``.
        total_s: ``migration_s + H x iteration_time_s``.
    """

    iteration_time_s: float
    migration_s: float
    moved_bytes: float
    checkpoint_bytes: float
    lost_layers: tuple[int, ...]
    horizon_iterations: int
    total_s: float

    def to_dict(self) -> dict:
        return {
            "iteration_time_s": self.iteration_time_s,
            "migration_s": self.migration_s,
            "moved_bytes": self.moved_bytes,
            "checkpoint_bytes": self.checkpoint_bytes,
            "lost_layers": list(self.lost_layers),
            "horizon_iterations": self.horizon_iterations,
            "total_s": self.total_s,
        }


def outcome(problem: ReplacementProblem, placement: np.ndarray) -> Outcome:
    """The :class:`Outcome` of a valid new placement (full indices)."""
    c, w = problem.instance.cluster, problem.instance.workload
    mig = problem.migration(placement)
    t = float(cost.evaluate(c, w, placement).iteration_time_s)
    return Outcome(
        iteration_time_s=t,
        migration_s=mig.migration_s,
        moved_bytes=mig.moved_bytes,
        checkpoint_bytes=mig.checkpoint_bytes,
        lost_layers=mig.lost_layers,
        horizon_iterations=problem.horizon_iterations,
        total_s=mig.migration_s + problem.horizon_iterations * t,
    )


@dataclass(frozen=True)
class ReplacementResult:
    """A method's answer to a :class:`ReplacementProblem`.

    Attributes:
        method: the method's name.
        placement: ``[D, L]`` full machine indices, on surviving machines, memory-feasible; or
            ``None`` with a ``reason``.
        cost_evals: placements evaluated with the cost model to get there.
        decision_s: wall-clock seconds the method took.
        outcome: the placement judged over the horizon (``None`` when infeasible).
        reason: why there is no placement.
    """

    method: str
    placement: np.ndarray | None
    cost_evals: int
    decision_s: float
    outcome: Outcome | None = None
    reason: str = ""

    @property
    def feasible(self) -> bool:
        return self.placement is not None

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "feasible": self.feasible,
            "placement": None if self.placement is None else self.placement.tolist(),
            "cost_evals": self.cost_evals,
            "decision_s": self.decision_s,
            **(self.outcome.to_dict() if self.outcome else {}),
            "reason": self.reason,
        }


class Answer(NamedTuple):
    """What a method itself returns (:func:`hulk_env.replacement.methods.run_method` adds timing and the outcome).

    Attributes:
        placement: ``[D, L]`` full machine indices, or ``None``.
        cost_evals: placements evaluated with the cost model.
        reason: why there is no placement.
    """

    placement: np.ndarray | None
    cost_evals: int
    reason: str = ""


ReplaceMethod = Callable[[ReplacementProblem, int, "int | None"], Answer]


# ---- placement files (``hulk place --json`` output) ---------------------------------------------
class PlacementFile(NamedTuple):
    """A placement read from a file, not yet checked against a cluster and model.

    Attributes:
        rows: ``[D][L]`` machine indices or names, as written.
        machines: the machine names the file says it uses (``hulk place --json``'s
            ``machines``), or ``None``.
        source: the file.
    """

    rows: list
    machines: list[str] | None
    source: str


def read_placement_file(path: str | Path) -> PlacementFile:
    """Read ``hulk place --json`` output, ``{"placement": [[...]]}`` or a bare ``[[...]]`` list.

    Read through :func:`hulk_env.validation.reading.read_data` (regular file, size, UTF-8,
    depth, repeated keys); the replica x layer count is checked against ``MAX_SLOTS`` before
    any row is looked at.
    """
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_data

    src = str(path)
    data = read_data(path, syntax="json", what="placement file")
    machines = None
    if isinstance(data, dict):
        if "placement" not in data:
            raise HulkInputError("no 'placement' key: give the output of `hulk place --json`", source=src)
        machines = data.get("machines")
        data = data["placement"]
    if isinstance(data, list) and data and isinstance(data[0], list):
        slots = len(data) * len(data[0])
        if len(data) > limits.MAX_DATA_PARALLEL or slots > limits.MAX_SLOTS:
            raise HulkInputError(
                f"{len(data):,} replicas x {len(data[0]):,} layers, more than the limits "
                f"({limits.cite('MAX_DATA_PARALLEL')}, {limits.cite('MAX_SLOTS')})",
                source=src,
            )
    if not (isinstance(data, list) and data and all(isinstance(r, list) and r for r in data)):
        raise HulkInputError("'placement' must be a non-empty list of replicas, each a list of machines per layer", source=src)
    if len({len(r) for r in data}) != 1:
        raise HulkInputError("every replica of the placement must list the same number of layers", source=src)
    if machines is not None and not (isinstance(machines, list) and all(isinstance(x, str) for x in machines)):
        raise HulkInputError("'machines' must be a list of machine names", source=src)
    return PlacementFile(data, machines, src)


def placement_from_file(file: PlacementFile, instance: Instance) -> np.ndarray:
    """The ``[D, L]`` placement of a file on ``instance``; a mismatch is one clear error."""
    c, w = instance.cluster, instance.workload
    d, n_layers = len(file.rows), len(file.rows[0])
    if (d, n_layers) != (w.data_parallel, w.num_layers):
        raise HulkInputError(
            f"the placement has {d} replica(s) x {n_layers} layers but model '{w.name}' has "
            f"{w.data_parallel} x {w.num_layers}: give the --model (and --data-parallel) it was placed with",
            source=file.source,
        )
    lookup = {mc.name.lower(): i for i, mc in enumerate(c.machines)}
    out = np.empty((d, n_layers), dtype=np.int64)
    for r, row in enumerate(file.rows):
        for layer, x in enumerate(row):
            if isinstance(x, bool) or not isinstance(x, int | str):
                raise HulkInputError(f"replica {r} layer {layer}: {x!r} is not a machine index or name", source=file.source)
            if isinstance(x, str):
                if x.lower() not in lookup:
                    raise HulkInputError(f"machine '{x}' is not in cluster '{c.name}'", source=file.source)
                out[r, layer] = lookup[x.lower()]
            elif not 0 <= x < c.num_machines:
                raise HulkInputError(
                    f"machine index {x} is out of range for cluster '{c.name}' ({c.num_machines} machines): "
                    "give the --cluster it was placed on", source=file.source,
                )
            else:
                out[r, layer] = x
    if file.machines is not None:
        used = {c.machines[i].name for i in np.unique(out)}
        if used != set(file.machines):
            raise HulkInputError(
                f"the placement's machine indices name {sorted(used)[:4]}... in cluster '{c.name}' but the file "
                f"says {sorted(file.machines)[:4]}...: give the --cluster it was placed on", source=file.source,
            )
    return out
