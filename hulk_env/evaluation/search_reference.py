"""Reference search results of a suite: the best of ``genetic`` and ``anneal`` at 50,000 evaluations.

A learned policy is judged by its gap to the strongest per-instance search, which takes minutes
per instance. The searches' placements are therefore computed once, here, and shipped with the
package as ``hulk_env/evaluation/data/search-reference-<suite>.json``, so that ``hulk bench
agent`` compares against them in minutes.

The cache is keyed by the suite's name (its version is in the name: ``unseen-v0``) and, per
instance, by a fingerprint of the instance's numbers (:func:`instance_fingerprint`). Loading
(:func:`load_reference`) re-evaluates every stored placement with the current cost model: an
instance whose numbers changed, or a placement whose iteration time the cost model no longer
reproduces, is a clear error telling how to recompute -- a stale reference is never used.

Compute (or resume an interrupted computation; finished instances are kept):

    python -m hulk_env.evaluation.search_reference --suite unseen-v0 [--budget 50000] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hulk_env import cost
from hulk_env.baselines import PlacementResult, get_method
from hulk_env.errors import HulkInputError
from hulk_env.evaluation.suites import load_suite
from hulk_env.instance import Instance

REFERENCE_METHODS = ("genetic", "anneal")
REFERENCE_BUDGET = 50_000
REFERENCE_SEED = 0
DATA_DIR = Path(__file__).resolve().parent / "data"
FORMAT = 2  # 2: fingerprints to FINGERPRINT_BITS significant bits (1 was bit for bit)
FINGERPRINT_BITS = 20
_TIME_RTOL = 1e-9  # stored vs re-evaluated iteration time


def reference_path(suite: str) -> Path:
    """Where the shipped cache of ``suite`` lives."""
    return DATA_DIR / f"search-reference-{suite}.json"


def instance_fingerprint(instance: Instance) -> str:
    """SHA-256 (16 hex digits) of everything the cost model reads of an instance, each number
    to :data:`FINGERPRINT_BITS` significant bits (:func:`fingerprint_bytes`).

    Not bit for bit: the suites' clusters come from trigonometry and exponentials (great-circle
    distances, link noise), whose last bits differ between CPUs and their vectorised math
    libraries, so a bit-exact hash made the shipped reference "stale" on another machine (the
    same 22 instances, every cached iteration time reproduced to 1 ulp). Any real change of an
    instance moves its numbers far more than ``2^-20``; the cached placements' iteration times
    are checked on load as well.
    """
    c, w = instance.cluster, instance.workload
    h = hashlib.sha256()
    for arr in (c.flops, c.memory_bytes, c.latency_s, c.bandwidth_bps, w.flops, w.params, w.activation_bytes, w.stash_bytes, w.edges):
        a = np.ascontiguousarray(arr, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(fingerprint_bytes(a))
    settings = (w.num_micro_batches, w.data_parallel, w.state_bytes_per_param, w.grad_bytes_per_param, w.schedule, w.micro_batch_size)
    h.update(repr(settings).encode())
    return h.hexdigest()[:16]


def fingerprint_bytes(values: np.ndarray) -> bytes:
    """``values`` rounded to :data:`FINGERPRINT_BITS` significant bits, as bytes: mantissa and
    exponent from ``frexp`` (exact, no transcendental function), the mantissa rounded on an
    exact power-of-two grid, so the result is the same on every IEEE-754 machine."""
    mantissa, exponent = np.frexp(np.asarray(values, dtype=np.float64))
    grid = np.round(mantissa * float(2**FINGERPRINT_BITS))
    return np.ascontiguousarray(grid).tobytes() + np.ascontiguousarray(exponent, dtype=np.int64).tobytes()


@dataclass(frozen=True)
class SearchRecord:
    """One search on one instance.

    Attributes:
        method: ``genetic`` or ``anneal``.
        iteration_time_s: its placement's iteration time (``nan`` when it found none).
        cost_evals: cost-model placements evaluated (every call, counted by the cost model).
        wall_s: wall seconds on the machine that computed the cache.
        placement: ``[D, L]`` as nested lists, or ``None``.
        reason: why there is no placement.
    """

    method: str
    iteration_time_s: float
    cost_evals: int
    wall_s: float
    placement: list | None
    reason: str = ""

    @property
    def failed(self) -> bool:
        return not math.isfinite(self.iteration_time_s)


@dataclass(frozen=True)
class InstanceReference:
    """The reference of one instance: its searches and the best of them.

    Attributes:
        instance: the instance id.
        fingerprint: :func:`instance_fingerprint` when computed.
        records: one :class:`SearchRecord` per method.
    """

    instance: str
    fingerprint: str
    records: tuple[SearchRecord, ...]

    @property
    def best_time_s(self) -> float:
        """The fastest search's iteration time (``nan`` if no search found a placement)."""
        times = [r.iteration_time_s for r in self.records if math.isfinite(r.iteration_time_s)]
        return min(times) if times else math.nan

    def evals(self, method: str) -> int:
        """Cost evaluations ``method`` spent on this instance."""
        return next(r.cost_evals for r in self.records if r.method == method)


def measure(fn: Callable[..., PlacementResult], instance: Instance, budget: int | None, seed: int = 0, name: str = "") -> SearchRecord:
    """Run ``fn(instance, seed, budget)``, counting every cost-model call it makes (the
    method's own count if larger), and check its placement with the cost model."""
    start = time.perf_counter()
    try:
        with cost.count_evals() as counter:
            result = fn(instance, seed, budget)
    except HulkInputError as err:  # e.g. a policy that refuses the instance
        return SearchRecord(name, math.nan, 0, time.perf_counter() - start, None, err.one_line())
    wall = time.perf_counter() - start
    evals = max(counter.evals, result.cost_evals)
    if result.placement is None:
        return SearchRecord(name, math.nan, evals, wall, None, result.reason or "no placement")
    breakdown = cost.evaluate(instance.cluster, instance.workload, result.placement)
    if not breakdown.memory_feasible:
        return SearchRecord(name, math.nan, evals, wall, None, "the returned placement does not fit in memory")
    return SearchRecord(name, float(breakdown.iteration_time_s), evals, wall, np.asarray(result.placement).tolist())


def run_search(instance: Instance, method: str, budget: int, seed: int = REFERENCE_SEED) -> SearchRecord:
    """One registered search on one instance (:func:`measure`)."""
    return measure(get_method(method), instance, budget, seed, method)


def compute_reference(
    suite: str,
    out: Path | None = None,
    budget: int = REFERENCE_BUDGET,
    methods: Sequence[str] = REFERENCE_METHODS,
    log=print,
) -> Path:
    """Run the searches on every instance of ``suite`` not already in ``out``; returns ``out``.

    The file is rewritten atomically after every instance, so an interrupted run resumes where
    it stopped. Entries of instances whose fingerprint changed are recomputed.
    """
    out = reference_path(suite) if out is None else Path(out)
    instances = load_suite(suite)
    done = _read(out, suite, budget, methods) if out.exists() else {}
    for inst in instances:
        fp = instance_fingerprint(inst)
        if inst.instance_id in done and done[inst.instance_id].fingerprint == fp:
            continue
        records = []
        for method in methods:
            rec = run_search(inst, method, budget)
            records.append(rec)
            log(f"{inst.instance_id} ({inst.num_machines} machines, D={inst.data_parallel}, {inst.workload.name}) "
                f"{method}: {rec.iteration_time_s:.6g} s, {rec.cost_evals} evals, {rec.wall_s:.1f} s wall")
        done[inst.instance_id] = InstanceReference(inst.instance_id, fp, tuple(records))
        _write(out, suite, budget, methods, [done[i.instance_id] for i in instances if i.instance_id in done])
    return out


def load_reference(
    suite: str, path: Path | None = None, instances: Sequence[Instance] | None = None
) -> dict[str, InstanceReference]:
    """The cached reference of ``suite`` by instance id, checked against the suite (or the given
    ``instances`` of it) and the cost model.

    Raises:
        HulkInputError: no cache, a cache of other instances, or placements whose iteration
            time the current cost model does not reproduce (the cost model changed).
    """
    path = reference_path(suite) if path is None else Path(path)
    fix = f"recompute it with `python -m hulk_env.evaluation.search_reference --suite {suite}` (hours)"
    if not path.exists():
        raise HulkInputError(f"no search reference for suite '{suite}' at {path}; {fix}", field="suite")
    payload = _load(path)
    refs = _parse(payload, path)
    for inst in load_suite(suite) if instances is None else instances:
        ref = refs.get(inst.instance_id)
        if ref is None or ref.fingerprint != instance_fingerprint(inst):
            raise HulkInputError(f"the search reference at {path} does not match instance {inst.instance_id} of '{suite}'; {fix}")
        for rec in ref.records:
            if rec.placement is None:
                continue
            now = float(cost.iteration_time(inst.cluster, inst.workload, np.asarray(rec.placement)))
            if abs(now - rec.iteration_time_s) > _TIME_RTOL * rec.iteration_time_s:
                raise HulkInputError(
                    f"the cost model now gives {now:.6g} s for the cached {rec.method} placement of "
                    f"{inst.instance_id} (cached {rec.iteration_time_s:.6g} s): the cost model changed; {fix}"
                )
    return refs


# ---- the file ---------------------------------------------------------------------------------------


def _write(path: Path, suite: str, budget: int, methods: Sequence[str], refs: list[InstanceReference]) -> None:
    payload = {
        "format": FORMAT,
        "suite": suite,
        "methods": list(methods),
        "budget": budget,
        "seed": REFERENCE_SEED,
        "instances": [
            {"instance": r.instance, "fingerprint": r.fingerprint, "records": [_record_json(x) for x in r.records]}
            for r in refs
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, separators=(",", ":")) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _record_json(rec: SearchRecord) -> dict:
    out = asdict(rec)
    if not math.isfinite(out["iteration_time_s"]):
        out["iteration_time_s"] = None
    return out


def _load(path: Path) -> dict:
    """A reference file, read through the validation layer (package data, or a user's --out)."""
    from hulk_env.validation import limits
    from hulk_env.validation.reading import read_data

    payload = read_data(path, syntax="json", what="search reference", max_bytes=limits.MAX_TEXT_FILE_BYTES)
    if not isinstance(payload, dict):
        raise HulkInputError("a search reference holds one JSON object", source=str(path))
    return payload


def _read(path: Path, suite: str, budget: int, methods: Sequence[str]) -> dict[str, InstanceReference]:
    payload = _load(path)
    if payload.get("suite") != suite or payload.get("budget") != budget or payload.get("methods") != list(methods):
        raise HulkInputError(
            f"{path} holds suite {payload.get('suite')!r} at budget {payload.get('budget')} with "
            f"{payload.get('methods')}; pass another --out or delete it",
        )
    return _parse(payload, path)


def _parse(payload: dict, path: Path) -> dict[str, InstanceReference]:
    if payload.get("format") != FORMAT:
        raise HulkInputError(f"{path}: unknown search-reference format {payload.get('format')!r} (expected {FORMAT})")
    out = {}
    for entry in payload["instances"]:
        records = tuple(
            SearchRecord(
                method=r["method"],
                iteration_time_s=math.nan if r["iteration_time_s"] is None else float(r["iteration_time_s"]),
                cost_evals=int(r["cost_evals"]),
                wall_s=float(r["wall_s"]),
                placement=r["placement"],
                reason=r.get("reason", ""),
            )
            for r in entry["records"]
        )
        out[entry["instance"]] = InstanceReference(entry["instance"], entry["fingerprint"], records)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hulk_env.evaluation.search_reference", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="unseen-v0", help="Suite to compute (default unseen-v0).")
    parser.add_argument("--budget", type=int, default=REFERENCE_BUDGET, help="Cost evaluations per search.")
    parser.add_argument("--out", type=Path, default=None, help="Cache file (default: the shipped one).")
    args = parser.parse_args(argv)
    try:
        path = compute_reference(args.suite, args.out, args.budget, log=lambda line: print(line, flush=True))
    except HulkInputError as err:
        print(f"error: {err.one_line()}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
