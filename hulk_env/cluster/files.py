"""YAML and JSON cluster files: :func:`load_cluster_file`.

A cluster file is one mapping in this format::

    name: my-lab                 # optional; default: the file name
    mfu: 0.4                     # optional model-FLOPs utilisation for machines given by GPU
    machines:
      - name: sj                 # optional; default <region>-<k>
        region: California       # a city of hulk_env.hardware.geo.CITIES (any case; Hohhot, ...)
                                 # or a cloud region with GPUs: aws:us-west-2, gcp:europe-west4,
                                 # azure:eastus, or the bare code (hulk_env.hardware.cloud_regions)
        gpu: A100-80GB           # a GPU of hulk_env.hardware.gpus.GPUS (any case; "a100 80gb")
        num_gpus: 8              # default 1
        count: 2                 # optional: 2 identical machines, named sj-0 and sj-1
      - name: lab
        region: Lab-7            # not a known city: give lat and lon (degrees)
        lat: 48.14
        lon: 11.58
        tflops: 150              # effective TFLOP/s of the whole machine, used as is (no MFU)
        memory_gb: 96            # required with tflops; with gpu it overrides num_gpus x memory
    links:                       # optional; each entry overrides the derived links of its pairs
      - {a: sj, b: lab, latency_ms: 40, bandwidth_gbps: 0.8}   # or rtt_ms: 80 (round trip)

A region label is printed as written (``Oregon`` stays ``Oregon``; its coordinates are
Boardman's). Links are derived from the regions by default
(:func:`hulk_env.hardware.geo.link_matrices`: LAN inside a region, the distance model across)
and flagged ``imputed`` (estimated, not measured). A ``links`` entry names as ``a`` and ``b`` a
machine, a counted entry (all its copies) or a region label (all its machines), and gives
``latency_ms`` (one-way) or ``rtt_ms`` (the round trip, e.g. a ping), not both;
``bandwidth_gbps`` is optional (default: the LAN value inside a region, else the WAN fit of the
RTT). Explicit pairs are not ``imputed``. JSON files hold the same object.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hulk_env.cluster.model import Cluster, Machine, machine_prefix
from hulk_env.errors import HulkInputError
from hulk_env.hardware import cloud_regions, geo
from hulk_env.hardware.gpus import DEFAULT_MFU, gpu_by_name
from hulk_env.inputs import (
    check_keys,
    parse_number,
    relocate,
)
from hulk_env.units import GB, TFLOPS, gbps_to_bytes_per_s, ms_to_s
from hulk_env.validation import limits
from hulk_env.validation.reading import (
    MAPPING_SUFFIXES,
    check_unique_names,
    read_mapping,
    safe_repr,
)

CLUSTER_FILE_SUFFIXES = MAPPING_SUFFIXES
_TOP_KEYS = ("name", "description", "mfu", "machines", "links")
_MACHINE_KEYS = ("name", "region", "lat", "lon", "gpu", "num_gpus", "count", "tflops", "memory_gb")
_LINK_KEYS = ("a", "b", "latency_ms", "rtt_ms", "bandwidth_gbps")
_LINE = "__line__"  # key under which the reader stores a mapping's 1-based line


def _entry_row(
    entry: object, kind: str, pos: int, needs: str, allowed: tuple[str, ...], src: str
) -> int | str:
    """Where one ``machines``/``links`` entry sits, once it is known to be a mapping of known keys."""
    if not isinstance(entry, dict):
        raise HulkInputError(
            f"{kind} {pos} must be a mapping {needs}, got {entry!r}", source=src, field=f"{kind}s"
        )
    row = entry.get(_LINE, f"{kind} {pos}")
    check_keys(entry, allowed, src, row, what=f"a {kind}", ignore=(_LINE,))
    return row


def _machines_from_entry(
    entry: object, pos: int, src: str, mfu: float, auto_names: dict[str, int]
) -> list[Machine]:
    """The machine(s) one ``machines`` entry describes (``count`` copies)."""
    row = _entry_row(entry, "machine", pos, "with region and gpu or tflops", _MACHINE_KEYS, src)
    region_raw = entry.get("region")
    if not isinstance(region_raw, str) or not region_raw.strip():
        raise HulkInputError(
            "missing region: give a city or cloud region (or any label plus lat and lon)",
            source=src,
            row=row,
            field="region",
        )
    has_lat, has_lon = "lat" in entry, "lon" in entry
    if has_lat != has_lon:
        raise HulkInputError("give both lat and lon, or neither", source=src, row=row, field="lat")
    if has_lat:
        lat = parse_number(entry["lat"], src, row, "lat", minimum=-90)
        lon = parse_number(entry["lon"], src, row, "lon", minimum=-180)
        if lat > 90 or lon > 180:
            raise HulkInputError(
                "lat must be in [-90, 90] and lon in [-180, 180]", source=src, row=row, field="lat"
            )
    else:
        try:
            site = cloud_regions.get_site(region_raw)
        except HulkInputError as err:
            raise relocate(err, src, row, "region") from None
        lat, lon = site.lat, site.lon
    region = region_raw.strip()  # the user's label, never renamed

    num_gpus = int(parse_number(entry.get("num_gpus", 1), src, row, "num_gpus", integer=True, minimum=1))
    if "gpu" in entry:
        try:
            spec = gpu_by_name(str(entry["gpu"]))
        except HulkInputError as err:
            raise relocate(err, src, row, "gpu") from None
        gpu_name = spec.name
        flops = num_gpus * spec.effective_flops(mfu)
        memory_bytes = num_gpus * spec.memory_bytes
    elif "tflops" in entry and "memory_gb" in entry:
        gpu_name, flops, memory_bytes = "custom", 0.0, 0.0
    else:
        raise HulkInputError(
            "give gpu (+ num_gpus), or tflops and memory_gb", source=src, row=row, field="gpu"
        )
    if "tflops" in entry:
        flops = parse_number(entry["tflops"], src, row, "tflops", positive=True) * TFLOPS
    if "memory_gb" in entry:
        memory_bytes = parse_number(entry["memory_gb"], src, row, "memory_gb", positive=True) * GB

    count = int(parse_number(entry.get("count", 1), src, row, "count", integer=True, minimum=1))
    base = entry.get("name")
    if base is not None and (isinstance(base, (dict, list)) or not str(base).strip()):
        raise HulkInputError(f"bad machine name {base!r}", source=src, row=row, field="name")
    names = []
    for k in range(count):
        if base is None:
            prefix = machine_prefix(region)
            names.append(f"{prefix}-{auto_names.get(prefix, 0)}")
            auto_names[prefix] = auto_names.get(prefix, 0) + 1
        else:
            names.append(str(base).strip() if count == 1 else f"{str(base).strip()}-{k}")
    return [
        Machine(name, region, gpu_name, num_gpus, flops, memory_bytes, lat, lon) for name in names
    ]


def _link_members(
    value: object,
    machines: Sequence[Machine],
    groups: dict[str, list[int]],
    src: str,
    row: int | str,
    key: str,
    index: tuple[dict[str, int], dict[str, list[int]]] | None = None,
) -> list[int]:
    """Machine indices a link end names: a machine, a counted entry's name, or a region.

    ``index`` is ``(machine name -> index, region -> indices)``, built once per file so that
    many links on many machines stay linear (built here when not given).
    """
    by_name, by_region = index or _link_index(machines)
    text = str(value).strip() if isinstance(value, (str, int)) else ""
    if text in by_name:
        return [by_name[text]]
    if text in groups:
        return groups[text]
    members = by_region.get(text.lower(), [])
    site = cloud_regions.find_site(text) if text and not members else None
    if site is not None:  # another spelling of a place the machines' labels name (Neimeng, Hohhot)
        places = {label: cloud_regions.find_site(label) for label in by_region}
        members = [i for label, s in places.items() if s and s.place == site.place for i in by_region[label]]
    if not members:
        known = [mc.name for mc in machines][:8] + list(dict.fromkeys(mc.region for mc in machines))[:8]
        raise HulkInputError(
            f"unknown machine or region {safe_repr(value)}; known: {', '.join(known)}",
            source=src,
            row=row,
            field=key,
        )
    return members


def _link_index(machines: Sequence[Machine]) -> tuple[dict[str, int], dict[str, list[int]]]:
    by_name = {mc.name: i for i, mc in enumerate(machines)}
    by_region: dict[str, list[int]] = {}
    for i, mc in enumerate(machines):
        by_region.setdefault(mc.region.lower(), []).append(i)
    return by_name, by_region


def _apply_links(
    links: object,
    machines: Sequence[Machine],
    groups: dict[str, list[int]],
    src: str,
    latency_s: np.ndarray,
    bandwidth_bps: np.ndarray,
    imputed: np.ndarray,
) -> dict[tuple[int, int], str]:
    """Overwrite the derived link matrices (in place) with the file's explicit ``links``.

    Returns:
        a note per pair written (:attr:`Cluster.link_notes`): the value and the entry's line.
    """
    if not isinstance(links, list):
        raise HulkInputError(
            "links must be a list of {a, b, latency_ms or rtt_ms[, bandwidth_gbps]}",
            source=src,
            field="links",
        )
    notes: dict[tuple[int, int], str] = {}
    index = _link_index(machines)
    regions = np.array([mc.region for mc in machines])
    written = 0  # machine pairs the links have written so far
    for pos, link in enumerate(links, start=1):
        row = _entry_row(link, "link", pos, "{a, b, latency_ms or rtt_ms}", _LINK_KEYS, src)
        for key in ("a", "b"):
            if key not in link:
                raise HulkInputError(f"missing {key}", source=src, row=row, field=key)
        given = [key for key in ("latency_ms", "rtt_ms") if link.get(key) is not None]
        if len(given) != 1:
            raise HulkInputError(
                "give latency_ms (one-way) or rtt_ms (round trip), not both"
                if given
                else "missing latency_ms (one-way) or rtt_ms (round trip)",
                source=src,
                row=row,
                field="rtt_ms" if given else "latency_ms",
            )
        ends_a = _link_members(link["a"], machines, groups, src, row, "a", index)
        ends_b = _link_members(link["b"], machines, groups, src, row, "b", index)
        value = parse_number(link[given[0]], src, row, given[0], minimum=0)
        latency_ms = value / 2 if given[0] == "rtt_ms" else value
        bw_gbps = None
        if link.get("bandwidth_gbps") is not None:
            bw_gbps = parse_number(link["bandwidth_gbps"], src, row, "bandwidth_gbps", positive=True)
        ia, ib = (a.ravel() for a in np.meshgrid(ends_a, ends_b, indexing="ij"))
        ia, ib = ia[ia != ib], ib[ia != ib]
        if not len(ia):
            raise HulkInputError(
                "a link needs two different machines", source=src, row=row, field="b"
            )
        written += len(ia)
        if written > limits.MAX_LINK_PAIRS:
            raise HulkInputError(
                f"the links write more than {limits.MAX_LINK_PAIRS:,} machine pairs "
                f"({limits.cite('MAX_LINK_PAIRS')}); name machines or regions once each",
                source=src,
                row=row,
                field="links",
            )
        if bw_gbps is not None:
            gbps = np.full(len(ia), bw_gbps)
        else:
            gbps = np.where(
                regions[ia] == regions[ib], geo.LAN_BANDWIDTH_GBPS, geo.wan_bandwidth_gbps(2 * latency_ms)
            )
        latency_s[ia, ib] = latency_s[ib, ia] = ms_to_s(latency_ms)
        bandwidth_bps[ia, ib] = bandwidth_bps[ib, ia] = gbps_to_bytes_per_s(gbps)
        imputed[ia, ib] = imputed[ib, ia] = False
        where = f"line {row}" if isinstance(row, int) else str(row)
        note = f"{given[0]} {value:g} in the links entry at {where}"
        if bw_gbps is not None:  # hulk_env.cluster.links.BANDWIDTH_GIVEN
            note += f", bandwidth_gbps {bw_gbps:g}"
        notes.update({(min(i, j), max(i, j)): note for i, j in zip(ia.tolist(), ib.tolist(), strict=True)})
    return notes


def _check_schema(data: dict, src: str) -> None:
    """Types, ranges and sizes (:class:`hulk_env.validation.schemas.ClusterFile`) before any
    machine is built: a count of a million or 1e308 TFLOP/s never reaches an allocation."""
    from hulk_env.validation.schemas import ClusterFile, validate  # pydantic: only when loading

    validate(ClusterFile, data, src, rows="line")


def load_cluster_file(path: str | Path) -> Cluster:
    """Load a YAML (``.yaml``/``.yml``) or JSON cluster file in the format of the module docstring.

    Raises:
        HulkInputError: missing file, syntax error, unknown key, city or GPU, non-numeric,
            NaN or negative value, no machines; with the file, line and field at fault.
    """
    file = Path(path)
    src = str(file)
    data = read_mapping(file, line_key=_LINE, what="cluster file")
    _check_schema(data, src)
    check_keys(data, _TOP_KEYS, src, None, what="the top level", ignore=(_LINE,))
    mfu = parse_number(data.get("mfu", DEFAULT_MFU), src, None, "mfu", positive=True)
    if mfu > 1:
        raise HulkInputError(f"mfu is a fraction of peak, got {mfu:g}", source=src, field="mfu")
    entries = data.get("machines")
    if not isinstance(entries, list) or not entries:
        raise HulkInputError(
            "no machines: the file needs a non-empty 'machines' list", source=src, field="machines"
        )
    auto_names: dict[str, int] = {}
    rows: list[object] = []
    machines: list[Machine] = []
    groups: dict[str, list[int]] = {}  # name of a counted entry -> its copies, for links
    for pos, entry in enumerate(entries, start=1):
        copies = _machines_from_entry(entry, pos, src, mfu, auto_names)
        if len(copies) > 1 and entry.get("name") is not None:
            groups[str(entry["name"]).strip()] = list(
                range(len(machines), len(machines) + len(copies))
            )
        machines += copies
        rows += [entry.get(_LINE, f"machine {pos}")] * len(copies)
    check_unique_names([mc.name for mc in machines], src, rows)  # names unique ignoring case
    regions = [mc.region for mc in machines]
    latency_s, bandwidth_bps = geo.link_matrices(
        [mc.lat for mc in machines], [mc.lon for mc in machines], regions
    )
    imputed = ~np.eye(len(machines), dtype=bool)
    notes: dict[tuple[int, int], str] = {}
    if data.get("links") is not None:
        notes = _apply_links(data["links"], machines, groups, src, latency_s, bandwidth_bps, imputed)
    name = str(data.get("name") or file.stem)
    try:
        return Cluster(tuple(machines), latency_s, bandwidth_bps, imputed, name=name, link_notes=notes)
    except HulkInputError as err:
        raise relocate(err, src) from None

