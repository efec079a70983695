"""Workload files: :func:`load_workload_file`.

YAML or JSON, one mapping, in one of two forms. Training settings (``micro_batch_size``,
``num_micro_batches``, ``data_parallel``, ``schedule``, ``state_bytes_per_param``,
``grad_bytes_per_param``, ``layers_per_block``, ``seq_len``, ``recompute``) and
``name``/``description`` may sit at the top level in both forms (``seq_len`` and
``recompute: selective`` only with a transformer; ``recompute: full`` of explicit layers keeps
each layer's input, see :func:`~hulk_env.workload.model.with_full_recompute`)::

    # 1. a transformer, built by build_transformer (keys = TransformerConfig fields)
    transformer:
      num_layers: 24
      hidden: 2048
      heads: 16
      vocab: 50257
      seq_len: 2048
      max_positions: 2048
      num_kv_heads: 4        # grouped-query attention (default: heads)
    micro_batch_size: 1
    recompute: selective     # none | selective | full

    # 2. an explicit layer list; numbers per micro-batch; any order (sorted topologically)
    name: my-net
    layers:
      - {name: embed, flops: 0, params: 1.0e8, activation_mb: 8, stash_mb: 4}
      - {name: body, tflops: 3.5, params: 1.2e9, activation_mb: 8, stash_mb: 900}
    edges: [[embed, body]]   # names or 0-based indices into `layers`; default: a chain

Each layer needs ``name``, ``flops`` or ``tflops``, ``params``, ``activation_bytes`` or
``activation_mb`` and ``stash_bytes`` or ``stash_mb`` (MB = 1e6 bytes).
"""

from __future__ import annotations

import difflib
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, Unpack

import networkx as nx
import numpy as np

from hulk_env.errors import HulkInputError
from hulk_env.inputs import check_keys, parse_number, relocate
from hulk_env.units import MB, TFLOPS
from hulk_env.validation import limits
from hulk_env.validation.reading import MAPPING_SUFFIXES, read_mapping
from hulk_env.workload.model import (
    TRAINING_KEYS,
    Workload,
    WorkloadOverrides,
    explicit_options,
    training_overrides,
)
from hulk_env.workload.transformer import TransformerConfig, build_transformer

FILE_SUFFIXES = MAPPING_SUFFIXES
_TOP_KEYS = ("name", "description", "transformer", "layers", "edges", *TRAINING_KEYS)
# Per-layer keys of the explicit form: field -> (alternative keys, scale to SI).
_LAYER_NUMBERS = {
    "flops": (("flops", 1.0), ("tflops", TFLOPS)),
    "params": (("params", 1.0),),
    "activation_bytes": (("activation_bytes", 1.0), ("activation_mb", MB)),
    "stash_bytes": (("stash_bytes", 1.0), ("stash_mb", MB)),
}
_LAYER_KEYS = ("name", *(key for alts in _LAYER_NUMBERS.values() for key, _ in alts))
_BUILD_KEYS = ("layers_per_block", "seq_len", "recompute")  # applied after the layers are read


def load_workload_file(path: str | Path, **overrides: Unpack[WorkloadOverrides]) -> Workload:
    """Load a workload file in the format of the module docstring.

    Training settings given here override the file's. For an explicit layer list the numbers
    are per micro-batch as written: overriding ``micro_batch_size`` relabels, it does not rescale.

    Raises:
        HulkInputError: naming the file, the item (``layers[3]``, ``edges[0]``) and the field.
    """
    path = Path(path)
    src = str(path)
    given = training_overrides(**overrides)
    # Layers counted while the YAML streams by: a 20,000-layer file is refused at layer 1,025.
    data = read_mapping(path, what="workload file", list_limits={"layers": (limits.MAX_LAYERS, "MAX_LAYERS")})
    _check_schema(data, src)
    check_keys(data, _TOP_KEYS, src)
    if ("transformer" in data) == ("layers" in data):
        raise HulkInputError(
            "give exactly one of 'transformer' (an architecture) or 'layers' (an explicit list)",
            source=src,
        )
    kinds = {f.name: str(f.type) for f in fields(TransformerConfig)}
    in_file = {k: _typed(data[k], kinds[k], src, None, k) for k in TRAINING_KEYS if k in data}
    name = str(data.get("name", path.stem))
    try:
        if "transformer" in data:
            if "edges" in data:
                raise HulkInputError("'edges' only goes with an explicit 'layers' list", source=src, field="edges")
            return _transformer_from_file(data["transformer"], name, in_file, given, src)
        settings = {**in_file, **given}
        return _layers_from_file(data["layers"], data.get("edges"), name, settings, src)
    except HulkInputError as err:
        if err.source == src:
            raise
        # Validation inside the dataclasses names the model; point at the file instead.
        raise relocate(err, src) from None


def _check_schema(data: dict, src: str) -> None:
    """Types, ranges and sizes (:func:`hulk_env.validation.schemas.workload_file_model`) before
    anything is built: ``num_layers: 1000000`` or a 1e300-FLOP layer never reaches a builder."""
    from hulk_env.validation.schemas import validate, workload_file_model  # pydantic: on load

    settings = tuple((f.name, str(f.type)) for f in fields(TransformerConfig))
    validate(workload_file_model(settings, tuple(TRAINING_KEYS)), data, src, rows="path")


def _check_mapping(item: Any, allowed: tuple[str, ...], src: str, row: str | None) -> None:
    if not isinstance(item, dict):
        raise HulkInputError(f"expected a mapping, got {type(item).__name__}", source=src, row=row)
    check_keys(item, allowed, src, row)


def _typed(value: Any, kind: str, src: str, row: str | None, field: str) -> Any:
    """Convert a config value to the dataclass field's annotated ``kind`` (int, float, bool, str)."""
    if kind.startswith("bool"):
        if not isinstance(value, bool):
            raise HulkInputError(f"must be true or false, got {value!r}", source=src, row=row, field=field)
        return value
    if kind.startswith("str"):
        return str(value)
    integer = kind.startswith("int")
    number = parse_number(value, src, row, field, minimum=0, integer=integer)
    return int(number) if integer else number


def _transformer_from_file(
    block: Any, name: str, in_file: dict, overrides: dict, src: str
) -> Workload:
    kinds = {f.name: str(f.type) for f in fields(TransformerConfig)}
    _check_mapping(block, tuple(kinds), src, "transformer")
    twice = sorted(set(block) & set(in_file))
    if twice:
        raise HulkInputError(
            "given both inside 'transformer' and at the top level; keep one",
            source=src,
            field=twice[0],
        )
    given = {**block, **in_file, **overrides}
    given.setdefault("name", name)
    required = [f.name for f in fields(TransformerConfig) if f.default is MISSING]
    missing = [k for k in required if k not in given]
    if missing:
        raise HulkInputError(
            f"missing required key(s) {', '.join(missing)}", source=src, row="transformer", field=missing[0]
        )
    values = {
        k: (v if v is None and "None" in kinds[k] else _typed(v, kinds[k], src, "transformer", k))
        for k, v in given.items()
    }
    return build_transformer(TransformerConfig(**values))


def _layers_from_file(
    layers: Any, edges: Any, name: str, settings: dict, src: str
) -> Workload:
    if not isinstance(layers, list) or not layers:
        raise HulkInputError("must be a non-empty list of layers", source=src, field="layers")
    names: list[str] = []
    seen: dict[str, int] = {}  # casefolded name -> index: 'A' and 'a' are one name, as machines
    table = {label: [] for label in _LAYER_NUMBERS}
    for i, item in enumerate(layers):
        row = f"layers[{i}]"
        _check_mapping(item, _LAYER_KEYS, src, row)
        if "name" not in item:
            raise HulkInputError("missing required key", source=src, row=row, field="name")
        layer_name = str(item["name"])
        key = layer_name.casefold()
        if key in seen:
            other = names[seen[key]]
            same = "" if other == layer_name else f" (as '{other}'; names are unique ignoring case)"
            raise HulkInputError(
                f"duplicate layer name '{layer_name}' (also layers[{seen[key]}]){same}",
                source=src,
                row=row,
                field="name",
            )
        seen[key] = len(names)
        names.append(layer_name)
        for label, alternatives in _LAYER_NUMBERS.items():
            present = [(key, scale) for key, scale in alternatives if key in item]
            keys = " or ".join(key for key, _ in alternatives)
            if len(present) != 1:
                problem = "missing required key" if not present else "give only one of"
                raise HulkInputError(f"{problem} {keys}", source=src, row=row, field=label)
            key, scale = present[0]
            table[label].append(parse_number(item[key], src, row, key, minimum=0) * scale)
    pairs = _parse_edges(edges, names, src)
    order = _topological_order(len(names), pairs, names, src)
    rank = np.empty(len(names), dtype=np.int64)
    rank[order] = np.arange(len(names))
    workload = Workload(
        name=name,
        layer_names=tuple(names[i] for i in order),
        flops=np.array(table["flops"])[order],
        params=np.array(table["params"])[order],
        activation_bytes=np.array(table["activation_bytes"])[order],
        stash_bytes=np.array(table["stash_bytes"])[order],
        edges=rank[np.array(pairs, dtype=np.int64).reshape(-1, 2)],
        **{k: v for k, v in settings.items() if k not in _BUILD_KEYS},
    )
    return explicit_options(workload, settings, src)


def _parse_edges(edges: Any, names: list[str], src: str) -> list[tuple[int, int]]:
    """Edges as index pairs into ``names`` (file order); a chain in file order when omitted."""
    if edges is None:
        return [(i, i + 1) for i in range(len(names) - 1)]
    if not isinstance(edges, list):
        raise HulkInputError("must be a list of [from, to] pairs", source=src, field="edges")
    index = {n: i for i, n in enumerate(names)}
    pairs = []
    for j, edge in enumerate(edges):
        row = f"edges[{j}]"
        if not isinstance(edge, list | tuple) or len(edge) != 2:
            raise HulkInputError(f"must be a [from, to] pair, got {edge!r}", source=src, row=row, field="edges")
        ends = []
        for end in edge:
            if isinstance(end, int) and not isinstance(end, bool) and 0 <= end < len(names):
                ends.append(end)
            elif isinstance(end, str) and end in index:
                ends.append(index[end])
            else:
                close = difflib.get_close_matches(str(end), names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise HulkInputError(
                    f"endpoint {end!r} is not a layer name or an index 0..{len(names) - 1}{hint}",
                    source=src,
                    row=row,
                    field="edges",
                )
        pairs.append((ends[0], ends[1]))
    return pairs


def _topological_order(n: int, pairs: list[tuple[int, int]], names: list[str], src: str) -> list[int]:
    """File indices in topological order (file order among ties); cycles and islands rejected."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(pairs)
    if not nx.is_directed_acyclic_graph(graph):
        cycle = [u for u, _ in nx.find_cycle(graph)]
        path = " -> ".join(names[i] for i in [*cycle, cycle[0]])
        raise HulkInputError(
            f"the layer graph has a cycle {path}; remove one of its edges", source=src, field="edges"
        )
    parts = sorted(nx.weakly_connected_components(graph), key=len, reverse=True)
    if len(parts) > 1:
        island = sorted(set().union(*parts[1:]))
        shown = ", ".join(names[i] for i in island[:5]) + (", ..." if len(island) > 5 else "")
        raise HulkInputError(
            f"the layer graph is disconnected: layer(s) {shown} are not connected to "
            f"'{names[min(parts[0])]}'; add edges to join them",
            source=src,
            field="edges",
        )
    return list(nx.lexicographical_topological_sort(graph))
