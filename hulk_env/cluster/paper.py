"""The Hulk paper's release format: ``node_feature.csv`` + ``edge.txt`` in one directory.

:func:`load_hulk_dir` reads it, cleans it (every rule in its docstring, each counted in a
:class:`CleaningReport`) and imputes the pairs that were never measured. The paper's own files
ship with the package (:func:`hulk_env.cluster.builtin.paper_data_dir`, the built-in cluster
``hulk-paper``); ``data/hulk-paper/SOURCE.md`` beside this module says where they come from.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from hulk_env.cluster.model import Cluster, Machine
from hulk_env.errors import HulkInputError
from hulk_env.hardware import geo
from hulk_env.hardware.gpus import DEFAULT_MFU, gpus_from_total_memory
from hulk_env.inputs import parse_number, relocate
from hulk_env.units import GB
from hulk_env.validation import limits
from hulk_env.validation.reading import read_text, safe_repr

HULK_NODE_FILE = "node_feature.csv"
HULK_EDGE_FILE = "edge.txt"
HULK_NODE_COLUMNS = ("node", "City", "Capability", "Memory")
HULK_EDGE_COLUMNS = ("u", "v", "latency_ms")


def _pair_key(a: str, b: str) -> tuple[str, str]:
    """An unordered pair as a dict key: the same for ``(a, b)`` and ``(b, a)``."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class CleaningReport:
    """What :func:`load_hulk_dir` fixed in the paper's files: counts of each fix.

    Attributes:
        source: the directory.
        machines: machines loaded.
        regions: distinct cities.
        names_stripped: cells whose surrounding spaces were stripped (``"Neimeng "``).
        self_loops: ``u v`` lines with ``u == v``, dropped.
        duplicate_pairs: machine pairs measured more than once; the minimum RTT is kept.
        impossible_edges: measured pairs faster than light in fibre over the cities'
            distance, dropped and then imputed.
        measured_pairs: distinct machine pairs kept from the measurements.
        imputed_pairs: pairs estimated instead (missing or impossible).
        imputed_from_city_pairs: of those, set to the median of the same two cities' measured
            pairs.
        imputed_from_geography: of those, set by the distance model (no measurement between
            the two cities).
        notes: one readable line per fix.
    """

    source: str
    machines: int
    regions: int
    names_stripped: int
    self_loops: int
    duplicate_pairs: int
    impossible_edges: int
    measured_pairs: int
    imputed_pairs: int
    imputed_from_city_pairs: int
    imputed_from_geography: int
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready dict (``notes`` as a list)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


def _read_file(file: Path, name: str) -> tuple[str, str]:
    """``(file as a message source, its text)``, read safely (size, file type, UTF-8)."""
    if not file.exists() and not file.is_symlink():
        raise HulkInputError(
            f"missing {name}: the paper's format is a directory holding "
            f"{HULK_NODE_FILE} and {HULK_EDGE_FILE}",
            source=str(file),
        )
    return str(file), read_text(file, limits.MAX_TEXT_FILE_BYTES, what=name)


def _check_columns(
    cells: Sequence[str], columns: tuple[str, ...], sep: str, src: str, line: int
) -> None:
    if len(cells) != len(columns):
        raise HulkInputError(
            f"expected {len(columns)} columns '{sep.join(columns)}', got {len(cells)}",
            source=src,
            row=line,
        )


def _read_hulk_nodes(file: Path, mfu: float) -> tuple[list[Machine], dict[int, int], int]:
    """Machines of ``node_feature.csv``, the node id -> index map, and stripped-cell count."""
    src, text = _read_file(file, HULK_NODE_FILE)
    rows = csv.reader(io.StringIO(text, newline=""))  # lazily: a huge file stops at the limit
    first = next(rows, None)
    header = [c.strip().lower() for c in first] if first else []
    if header != [c.lower() for c in HULK_NODE_COLUMNS]:
        got = safe_repr(",".join(first)) if first else "an empty file"
        raise HulkInputError(
            f"expected the header {','.join(HULK_NODE_COLUMNS)}, got {got}",
            source=src,
            row=1,
            field="header",
        )
    machines: list[Machine] = []
    index: dict[int, int] = {}
    stripped = 0
    for line, cells in enumerate(rows, start=2):
        if not any(c.strip() for c in cells):
            continue  # blank line
        if len(machines) == limits.MAX_MACHINES:
            raise HulkInputError(
                f"more than {limits.MAX_MACHINES:,} machines ({limits.cite('MAX_MACHINES')})",
                source=src,
                row=line,
            )
        _check_columns(cells, HULK_NODE_COLUMNS, ",", src, line)
        stripped += sum(c != c.strip() for c in cells)
        node_s, city_s, cc_s, mem_s = (c.strip() for c in cells)
        node = int(parse_number(node_s, src, line, "node", integer=True, minimum=0))
        if node in index:
            raise HulkInputError(f"node {node} appears twice", source=src, row=line, field="node")
        try:
            city = geo.get_city(city_s)
        except HulkInputError as err:
            raise relocate(err, src, line, "City") from None
        parse_number(cc_s, src, line, "Capability", positive=True)
        memory_gb = parse_number(
            mem_s, src, line, "Memory", positive=True,
            maximum=limits.MAX_MACHINE_MEMORY_BYTES / GB, limit="MAX_MACHINE_MEMORY_BYTES",
        )  # fmt: skip
        try:
            gpu, n = gpus_from_total_memory(cc_s, memory_gb)
        except HulkInputError as err:
            raise relocate(err, src, line, "Capability") from None
        index[node] = len(machines)
        machines.append(
            Machine(
                name=str(node),
                region=city.name,
                gpu=gpu.name,
                num_gpus=n,
                flops=n * gpu.effective_flops(mfu),
                memory_bytes=memory_gb * GB,
                lat=city.lat,
                lon=city.lon,
            )
        )
    if not machines:
        raise HulkInputError("no machines: the file has a header but no rows", source=src, row=2)
    return machines, index, stripped


def _read_hulk_edges(
    file: Path, index: dict[int, int]
) -> tuple[dict[tuple[int, int], list[float]], int]:
    """RTTs in ms of ``edge.txt`` per unordered machine-index pair, and the self-loop count."""
    src, content = _read_file(file, HULK_EDGE_FILE)
    pairs: dict[tuple[int, int], list[float]] = {}
    self_loops = 0
    with io.StringIO(content) as fh:
        for line, text in enumerate(fh, start=1):
            cells = text.split()
            if not cells or cells[0].startswith("#"):
                continue
            _check_columns(cells, HULK_EDGE_COLUMNS, " ", src, line)
            ends = []
            for field_name, cell in zip(HULK_EDGE_COLUMNS[:2], cells[:2], strict=True):
                node = int(parse_number(cell, src, line, field_name, integer=True, minimum=0))
                if node not in index:
                    raise HulkInputError(
                        f"node {node} is not in {HULK_NODE_FILE}",
                        source=src,
                        row=line,
                        field=field_name,
                    )
                ends.append(index[node])
            rtt_ms = parse_number(
                cells[2], src, line, "latency_ms", maximum=limits.MAX_LATENCY_MS, limit="MAX_LATENCY_MS"
            )
            if rtt_ms < 0:
                raise HulkInputError(
                    f"negative latency {rtt_ms:g} ms; a round-trip time is >= 0",
                    source=src,
                    row=line,
                    field="latency_ms",
                )
            i, j = sorted(ends)
            if i == j:
                self_loops += 1
                continue
            pairs.setdefault((i, j), []).append(rtt_ms)
    return pairs, self_loops


def _resolve_measurements(
    pairs: dict[tuple[int, int], list[float]], machines: Sequence[Machine], min_rtt_fraction: float
) -> tuple[np.ndarray, int, int, list[str]]:
    """Rules 3-4 of :func:`load_hulk_dir`: one RTT per pair (the minimum), impossible ones dropped.

    Returns:
        ``(rtt_ms, duplicate_pairs, impossible_pairs, notes)``; ``rtt_ms`` is ``[M, M]`` with NaN
        where no measurement is kept.
    """
    m = len(machines)
    city = [mc.region for mc in machines]
    lats = np.array([mc.lat for mc in machines])
    lons = np.array([mc.lon for mc in machines])
    km = geo.great_circle_km(lats[:, None], lons[:, None], lats[None, :], lons[None, :])
    rtt_ms = np.full((m, m), np.nan)
    notes: list[str] = []
    duplicates = 0
    impossible: dict[tuple[str, str], list[float]] = {}
    for (i, j), values in sorted(pairs.items()):
        if len(values) > 1:
            duplicates += 1
            notes.append(
                f"duplicate pair {machines[i].name}({city[i]})-{machines[j].name}({city[j]}) "
                f"measured {', '.join(f'{v:g}' for v in values)} ms: kept {min(values):g} ms"
            )
        value = min(values)
        if city[i] != city[j] and value < min_rtt_fraction * geo.min_rtt_ms_physical(km[i, j]):
            impossible.setdefault(_pair_key(city[i], city[j]), []).append(value)
            continue
        rtt_ms[i, j] = rtt_ms[j, i] = value
    for (a, b), values in impossible.items():
        ca, cb = geo.CITIES[a], geo.CITIES[b]
        dist = geo.great_circle_km(ca.lat, ca.lon, cb.lat, cb.lon)
        notes.append(
            f"dropped {len(values)} impossible pair(s) {a}-{b}: {min(values):g}-{max(values):g} "
            f"ms < {geo.min_rtt_ms_physical(dist):.1f} ms, light in fibre over {dist:.0f} km"
        )
    return rtt_ms, duplicates, sum(len(v) for v in impossible.values()), notes


def _impute_missing(
    rtt_ms: np.ndarray,
    measured: np.ndarray,
    city: Sequence[str],
    model_ms: np.ndarray,
    notes: dict[tuple[int, int], str],
) -> tuple[int, int]:
    """Rule 5 of :func:`load_hulk_dir`, in place: fill unmeasured pairs of ``rtt_ms``, and say
    in ``notes`` which city median each pair took (the distance model's pairs need no note).

    Returns:
        ``(from_city_pairs, from_geography)``: how many pairs got the median of the same two
        cities' measurements, and how many the distance model ``model_ms``.
    """
    by_cities: dict[tuple[str, str], list[float]] = {}
    for i, j in zip(*np.nonzero(np.triu(measured, 1)), strict=True):
        by_cities.setdefault(_pair_key(city[i], city[j]), []).append(rtt_ms[i, j])
    from_cities = from_geo = 0
    for i, j in zip(*np.nonzero(np.triu(~measured, 1)), strict=True):
        values = by_cities.get(_pair_key(city[i], city[j]))
        if values:
            rtt_ms[i, j] = rtt_ms[j, i] = float(np.median(values))
            notes[int(i), int(j)] = f"median of {len(values)} measured {city[i]}-{city[j]} pair(s) in {HULK_EDGE_FILE}"
            from_cities += 1
        else:
            rtt_ms[i, j] = rtt_ms[j, i] = model_ms[i, j]
            from_geo += 1
    return from_cities, from_geo


def load_hulk_dir(
    path: str | Path, *, min_rtt_fraction: float = 1.0, mfu: float = DEFAULT_MFU
) -> tuple[Cluster, CleaningReport]:
    """Load the Hulk paper's release: ``node_feature.csv`` + ``edge.txt`` in a directory.

    ``node_feature.csv`` has ``node,City,Capability,Memory`` (memory: total GPU GB of the
    machine); ``edge.txt`` has ``u v rtt_ms`` lines (a 64-byte ping round trip). Cleaning rules,
    in order, each counted in the report:

    1. strip spaces around every cell (``"Neimeng "`` -> ``"Neimeng"``);
    2. drop self-loops ``u u``;
    3. a pair measured more than once keeps its minimum: ping noise only ever adds delay;
    4. drop pairs in different cities whose RTT is below ``min_rtt_fraction x`` the round trip of
       light in a straight fibre over the cities' great-circle distance
       (:func:`hulk_env.hardware.geo.min_rtt_ms_physical`): they cannot be real measurements;
    5. fill every pair without a kept measurement with the median RTT of the measured pairs
       between the same two cities; where there is none, with the distance model
       (:func:`hulk_env.hardware.geo.rtt_ms_from_km`, or the LAN RTT inside one city), flagged
       ``imputed``. The city median keeps machines of one city consistent with each other
       (e.g. all Beijing-New Delhi pairs measure 340 ms; the model would say 63 ms);
    6. one-way latency = RTT / 2; bandwidth = the LAN value inside a city, else the WAN fit
       of the RTT (:func:`hulk_env.hardware.geo.wan_bandwidth_gbps`).

    GPUs: :func:`hulk_env.hardware.gpus.gpus_from_total_memory` infers model and count from capability
    and memory; the machine keeps the file's memory and gets ``n x peak x mfu`` FLOP/s.

    Args:
        path: the directory.
        min_rtt_fraction: 1.0 = strict physics. Smaller values tolerate measurements faster than
            light in fibre (0.1 drops only the grossest, e.g. Tokyo-Berlin at 4 ms).
        mfu: model-FLOPs utilisation.

    Raises:
        HulkInputError: missing file, malformed row, wrong column count, non-numeric or NaN
            value, negative latency, unknown city or compute capability, no machines.
    """
    root = Path(path)
    if not root.is_dir():
        raise HulkInputError(
            f"not a directory; the paper's format is a directory holding {HULK_NODE_FILE} "
            f"and {HULK_EDGE_FILE}",
            source=str(root),
        )
    machines, index, stripped = _read_hulk_nodes(root / HULK_NODE_FILE, mfu)
    pairs, self_loops = _read_hulk_edges(root / HULK_EDGE_FILE, index)
    city = [mc.region for mc in machines]
    lats = np.array([mc.lat for mc in machines])
    lons = np.array([mc.lon for mc in machines])
    same = geo.same_region(city)
    rtt_ms, duplicates, impossible, notes = _resolve_measurements(pairs, machines, min_rtt_fraction)
    measured = np.isfinite(rtt_ms)
    np.fill_diagonal(rtt_ms, 0.0)
    link_notes = {
        (i, j): f"rtt_ms {rtt_ms[i, j]:g} in {HULK_EDGE_FILE}" + (f" (least of {len(v)})" if len(v) > 1 else "")
        for (i, j), v in pairs.items() if measured[i, j]
    }  # fmt: skip
    from_cities, from_geo = _impute_missing(
        rtt_ms, measured, city, geo.modelled_rtt_ms(lats, lons, city), link_notes
    )

    latency_s, bandwidth_bps = geo.links_from_rtt_ms(rtt_ms, same)
    imputed = ~measured
    np.fill_diagonal(imputed, False)
    cluster = Cluster(tuple(machines), latency_s, bandwidth_bps, imputed, name=root.name, link_notes=link_notes)
    report = CleaningReport(
        source=str(root),
        machines=len(machines),
        regions=len(cluster.regions),
        names_stripped=stripped,
        self_loops=self_loops,
        duplicate_pairs=duplicates,
        impossible_edges=impossible,
        measured_pairs=int(np.triu(measured, 1).sum()),
        imputed_pairs=from_cities + from_geo,
        imputed_from_city_pairs=from_cities,
        imputed_from_geography=from_geo,
        notes=tuple(notes),
    )
    return cluster, report

