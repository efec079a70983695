"""Reading files users write, safely: every loader's bytes come through here.

What a hostile or broken file can no longer do (each is one :class:`HulkInputError` naming the
file and, where known, the row):

* be endless or huge: only regular files are opened (a link to ``/dev/zero``, a pipe or a
  directory is refused before opening) and at most the size limit is read;
* be binary or in another encoding: bytes must be UTF-8 (a UTF-8 byte-order mark is dropped);
  NUL bytes, UTF-16 and Latin-1 name the byte offset and line of the first bad byte;
* nest without end: YAML and JSON deeper than ``MAX_NESTING_DEPTH`` are refused by a scan that
  does not recurse, so no parser can hit RecursionError or overflow the C stack;
* expand: YAML aliases (and ``<<`` merges) are counted at their expanded size while the event
  stream is scanned, before anything is built; a "billion laughs" file is refused and no
  message ever prints the expanded value (:func:`safe_repr` bounds every value shown);
* hide a value: a key given twice in one mapping is an error, not a silent overwrite;
* collide: machine and layer names are unique ignoring case (:func:`check_unique_names`);
* be long: top-level lists named by the loader (a workload's ``layers``, a trace's ``events``)
  are counted while the YAML event stream is scanned, before any object is built.

Every file the program reads comes through here (``tests/test_readers_audit.py`` walks the
code to prove it): cluster, workload, config and policy files, placements (``hulk replace
--placement``), failure traces (``--trace``), Hugging Face ``config.json`` and the
``results.csv``/``evaluate.json`` a ``hulk evaluate --resume`` picks up.

Limits are in :mod:`hulk_env.validation.limits`.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import reprlib
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from hulk_env.errors import HulkInputError
from hulk_env.validation import limits

MAPPING_SUFFIXES = (".yaml", ".yml", ".json")
_FAST_YAML = getattr(yaml, "CSafeLoader", None)  # libyaml: 10x faster, same events and marks
_SAFE_YAML: type = _FAST_YAML or yaml.SafeLoader


# ---- bytes -------------------------------------------------------------------------------------


def read_bytes(path: str | Path, max_bytes: int, *, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``max_bytes``.

    Raises:
        HulkInputError: missing, a directory, not a regular file (device, pipe, socket; also
            through a link), unreadable, or larger than ``max_bytes``.
    """
    file = Path(path)
    src = str(file)
    try:
        info = file.stat()  # follows links: a link to /dev/zero is a character device
    except FileNotFoundError:
        raise HulkInputError(f"cannot read the {what}: no such file", source=src) from None
    except OSError as err:
        raise HulkInputError(f"cannot read the {what} ({err.strerror or err})", source=src) from None
    if stat.S_ISDIR(info.st_mode):
        raise HulkInputError(f"cannot read the {what}: it is a directory", source=src)
    if not stat.S_ISREG(info.st_mode):
        raise HulkInputError(
            f"cannot read the {what}: not a regular file (a device, pipe or socket); give a file",
            source=src,
        )
    too_big = HulkInputError(
        f"the {what} is larger than {max_bytes / limits.MIB:g} MiB, the limit for this kind of "
        f"file ({limits.WHERE})",
        source=src,
    )
    if info.st_size > max_bytes:
        raise too_big
    try:
        with open(file, "rb") as fh:
            data = fh.read(max_bytes + 1)  # a file may grow, or report size 0 (procfs)
    except OSError as err:
        raise HulkInputError(f"cannot read the {what} ({err.strerror or err})", source=src) from None
    if len(data) > max_bytes:
        raise too_big
    return data


def decode_text(data: bytes, source: str) -> str:
    """UTF-8 text of ``data`` (a UTF-8 byte-order mark dropped).

    Raises:
        HulkInputError: UTF-16/32 (byte-order mark or NUL bytes), or bytes that are not UTF-8,
            naming the line and byte offset of the first bad byte.
    """
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    for bom, name in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if data.startswith(bom):
            raise HulkInputError(
                f"the file is {name} text (byte-order mark at byte offset 0); save it as UTF-8",
                source=source,
                row=1,
            )
    nul = data.find(b"\x00")
    if nul >= 0:
        raise HulkInputError(
            f"a NUL byte at byte offset {nul}: a binary file or UTF-16 text, not UTF-8; "
            "give a UTF-8 text file",
            source=source,
            row=data.count(b"\n", 0, nul) + 1,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise HulkInputError(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} at byte offset {err.start} "
            "(a binary file, or text saved as Latin-1/Windows-1252?); save it as UTF-8",
            source=source,
            row=data.count(b"\n", 0, err.start) + 1,
        ) from None


def read_text(path: str | Path, max_bytes: int = limits.MAX_TEXT_FILE_BYTES, *, what: str = "file") -> str:
    """:func:`read_bytes` then :func:`decode_text`."""
    return decode_text(read_bytes(path, max_bytes, what=what), str(path))


# ---- YAML --------------------------------------------------------------------------------------


def scan_yaml(text: str, source: str, list_limits: Mapping[str, tuple[int, str]] | None = None) -> int:
    """Check a YAML text's nesting depth and alias expansion without building it.

    ``list_limits`` maps a top-level key to ``(most items, limit name)``: the items of its list
    are counted as the events stream by, so a 20,000-layer file is refused at item 1,025,
    before the rest is read into objects.

    Streams the parser's events (the parser keeps a state stack, never recursing) and counts
    every value at its expanded size: an alias adds the size of the node it names, so an
    alias bomb is found after reading each anchor once.

    Returns:
        The number of values after expanding aliases.

    Raises:
        HulkInputError: syntax error, nesting deeper than ``MAX_NESTING_DEPTH``, more than
            ``MAX_YAML_NODES`` values after expanding aliases, an alias inside the node it
            names (recursive data), or a scalar longer than ``MAX_SCALAR_CHARS``.
    """
    sizes: dict[str, int] = {}  # anchor -> expanded size of its node
    stack: list[list] = []  # open collections: [anchor, expanded size so far]
    counted = _ListCounter(list_limits or {}, source)
    open_anchors: set[str] = set()
    total = 0
    try:
        for event in yaml.parse(text, Loader=_SAFE_YAML):
            counted.see(event, len(stack))
            if isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= limits.MAX_NESTING_DEPTH:
                    raise HulkInputError(
                        f"nested more than {limits.MAX_NESTING_DEPTH} levels deep; no hulk file "
                        f"needs more than 4 ({limits.cite('MAX_NESTING_DEPTH')})",
                        source=source,
                        row=event.start_mark.line + 1,
                    )
                stack.append([event.anchor, 1])
                if event.anchor:
                    open_anchors.add(event.anchor)
                total += 1
                continue
            if isinstance(event, yaml.CollectionEndEvent):
                anchor, size = stack.pop()
                if anchor:
                    sizes[anchor] = size
                    open_anchors.discard(anchor)
            elif isinstance(event, yaml.ScalarEvent):
                if len(event.value) > limits.MAX_SCALAR_CHARS:
                    raise HulkInputError(
                        f"a value of {len(event.value):,} characters, more than "
                        f"{limits.MAX_SCALAR_CHARS:,} ({limits.cite('MAX_SCALAR_CHARS')})",
                        source=source,
                        row=event.start_mark.line + 1,
                    )
                size = 1
                total += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                if event.anchor in open_anchors:
                    raise HulkInputError(
                        f"alias *{_short(event.anchor)} is inside the node it names (recursive "
                        "data); hulk files hold plain trees",
                        source=source,
                        row=event.start_mark.line + 1,
                    )
                size = sizes.get(event.anchor, 1)  # an undefined alias: the loader reports it
                total += size
            else:
                continue
            if stack:
                stack[-1][1] += size
            if total > limits.MAX_YAML_NODES:
                raise HulkInputError(
                    f"YAML aliases expand to more than {limits.MAX_YAML_NODES:,} values (an alias "
                    f"bomb?); write the values out or use fewer aliases ({limits.cite('MAX_YAML_NODES')})",
                    source=source,
                    row=event.start_mark.line + 1,
                )
    except yaml.YAMLError as err:
        raise _yaml_error(err, source) from None
    return total


class _ListCounter:
    """Counts the items of chosen top-level lists on the YAML event stream (see :func:`scan_yaml`).

    Depth 1 is the top-level mapping: its direct children alternate key, value; a sequence
    that is the value of a limited key has its direct children (depth 2) counted.
    """

    def __init__(self, list_limits: Mapping[str, tuple[int, str]], source: str) -> None:
        self.limits, self.source = list_limits, source
        self.top_children = 0  # direct children of the top-level mapping seen so far
        self.key: str | None = None  # the top-level key whose value comes next
        self.active: tuple[str, int, str] | None = None  # (key, limit, limit name) being counted
        self.items = 0

    def see(self, event: Any, depth: int) -> None:
        if not self.limits or isinstance(event, yaml.CollectionEndEvent):
            if isinstance(event, yaml.CollectionEndEvent) and depth == 2:
                self.active = None  # the counted list (or another value) has ended
            return
        if not isinstance(event, yaml.ScalarEvent | yaml.AliasEvent | yaml.CollectionStartEvent):
            return
        if depth == 1:  # a key or a value of the top-level mapping
            if self.top_children % 2 == 0:
                self.key = event.value if isinstance(event, yaml.ScalarEvent) else None
            elif isinstance(event, yaml.SequenceStartEvent) and self.key in self.limits:
                limit, name = self.limits[self.key]
                self.active, self.items = (self.key, limit, name), 0
            self.top_children += 1
        elif depth == 2 and self.active is not None:
            self.items += 1
            key, limit, name = self.active
            if self.items > limit:
                raise HulkInputError(
                    f"more than {limit:,} items in '{key}' ({limits.cite(name)}); refused before "
                    "reading the rest",
                    source=self.source,
                    row=event.start_mark.line + 1,
                    field=key,
                )


def _yaml_error(err: yaml.YAMLError, source: str) -> HulkInputError:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return HulkInputError(
        f"not valid YAML: {_short(problem, 120)}",
        source=source,
        row=mark.line + 1 if mark is not None else None,
    )


def _yaml_loader(source: str, line_key: str | None) -> type:
    """A safe YAML loader refusing duplicate keys, optionally storing each mapping's line."""

    class Loader(_SAFE_YAML):  # type: ignore[misc, valid-type]
        def construct_mapping(self, node, deep=False):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<:` merges may be overridden by explicit keys
                key = f"{key_node.tag}:{key_node.value}" if isinstance(key_node.value, str) else None
                line = key_node.start_mark.line + 1
                if key is not None and key in seen:
                    raise HulkInputError(
                        f"key '{_short(key_node.value)}' given twice in one mapping (first at row "
                        f"{seen[key]}); keep one",
                        source=source,
                        row=line,
                        field=_short(key_node.value),
                    )
                if key is not None:
                    seen[key] = line
            mapping = super().construct_mapping(node, deep=deep)
            if line_key is not None:
                mapping[line_key] = node.start_mark.line + 1
            return mapping

    return Loader


def load_yaml(
    text: str,
    source: str,
    *,
    line_key: str | None = None,
    list_limits: Mapping[str, tuple[int, str]] | None = None,
) -> Any:
    """Parse one YAML document after :func:`scan_yaml` has checked it.

    Args:
        text: the document.
        source: the file, for messages.
        line_key: if given, every mapping carries its 1-based line under this key.
        list_limits: top-level key -> (most items, limit name), checked while scanning.
    """
    scan_yaml(text, source, list_limits)
    loader = _yaml_loader(source, line_key)(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        raise _yaml_error(err, source) from None
    except HulkInputError:
        raise
    except (ValueError, OverflowError, TypeError) as err:  # e.g. an integer of > 4,300 digits
        raise HulkInputError(f"not valid YAML: {_value_problem(err)}", source=source) from None
    finally:
        loader.dispose()


# ---- JSON --------------------------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def check_json_depth(text: str, source: str) -> None:
    """Refuse JSON nested deeper than ``MAX_NESTING_DEPTH`` (a scan, no recursion).

    Strings are blanked first (brackets inside them do not nest); JSON strings hold no raw
    newlines, so line numbers survive.
    """
    bare = _JSON_STRING.sub('""', text).encode("utf-8", "replace")
    codes = np.frombuffer(bare, dtype=np.uint8)
    step = np.isin(codes, (0x5B, 0x7B)).astype(np.int32) - np.isin(codes, (0x5D, 0x7D))
    if not len(step):
        return
    depth = np.cumsum(step)
    deep = np.flatnonzero(depth > limits.MAX_NESTING_DEPTH)
    if len(deep):
        raise HulkInputError(
            f"nested more than {limits.MAX_NESTING_DEPTH} levels deep; no hulk file needs "
            f"more than 4 ({limits.cite('MAX_NESTING_DEPTH')})",
            source=source,
            row=bare.count(b"\n", 0, int(deep[0])) + 1,
        )


def load_json(text: str, source: str) -> Any:
    """Parse JSON after :func:`check_json_depth`, refusing duplicate keys."""
    check_json_depth(text, source)

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise HulkInputError(
                    f"key '{_short(key)}' given twice in one object; keep one",
                    source=source,
                    field=_short(key),
                )
            out[key] = value
        return out

    try:
        return json.loads(text, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as err:
        raise HulkInputError(f"not valid JSON: {err.msg}", source=source, row=err.lineno) from None
    except HulkInputError:
        raise
    except (ValueError, RecursionError) as err:  # an integer of > 4,300 digits
        raise HulkInputError(f"not valid JSON: {_value_problem(err)}", source=source) from None


# ---- one entry point for mapping files -------------------------------------------------------------


def read_mapping(
    path: str | Path,
    *,
    line_key: str | None = None,
    max_bytes: int = limits.MAX_MAPPING_FILE_BYTES,
    what: str = "file",
    list_limits: Mapping[str, tuple[int, str]] | None = None,
) -> dict:
    """A YAML (``.yaml``/``.yml``) or JSON (``.json``) file holding one mapping, read safely.

    Args:
        path: the file.
        line_key: if given, every mapping carries its 1-based line under this key (JSON is
            reread as YAML for the lines where YAML agrees with it).
        max_bytes: the file size limit.
        what: what the file is, for messages (``"cluster file"``).
        list_limits: top-level key -> (most items, limit name): a longer list is refused
            before it is built (YAML: while scanning; JSON: right after the C parser).

    Raises:
        HulkInputError: unknown suffix, an unreadable, oversized or non-UTF-8 file, a syntax
            error, too deep, an alias bomb, a duplicate key, or a top level that is not a
            mapping.
    """
    file = Path(path)
    src = str(file)
    suffix = file.suffix.lower()
    if suffix not in MAPPING_SUFFIXES:
        raise HulkInputError(
            f"unknown file type '{file.suffix}'; use one of {', '.join(MAPPING_SUFFIXES)}",
            source=src,
        )
    text = decode_text(read_bytes(file, max_bytes, what=what), src)
    if suffix == ".json":
        data = load_json(text, src)
        if isinstance(data, dict):
            check_list_limits(data, src, list_limits)
        if line_key is not None:
            try:
                data = load_yaml(text, src, line_key=line_key, list_limits=list_limits)
            except HulkInputError:  # YAML 1.1 disagrees with this JSON: keep it, without lines
                pass
    else:
        data = load_yaml(text, src, line_key=line_key, list_limits=list_limits)
    if not isinstance(data, dict):
        raise HulkInputError("the file must hold one mapping (key: value pairs)", source=src)
    return data


def check_list_limits(data: dict, source: str, list_limits: Mapping[str, tuple[int, str]] | None) -> None:
    """The top-level lists named in ``list_limits`` hold at most their limit of items."""
    for key, (limit, name) in (list_limits or {}).items():
        value = data.get(key)
        if isinstance(value, list) and len(value) > limit:
            raise HulkInputError(
                f"{len(value):,} items in '{key}', more than {limit:,} ({limits.cite(name)})",
                source=source,
                field=key,
            )


def read_data(
    path: str | Path,
    *,
    syntax: str,
    what: str,
    max_bytes: int = limits.MAX_MAPPING_FILE_BYTES,
    list_limits: Mapping[str, tuple[int, str]] | None = None,
) -> Any:
    """A JSON (``syntax="json"``) or YAML (``"yaml"``, which also reads JSON) file of any shape
    (a mapping or a bare list), read with every check of :func:`read_mapping` but the suffix.

    Raises:
        HulkInputError: as :func:`read_mapping`.
    """
    src = str(path)
    text = decode_text(read_bytes(path, max_bytes, what=what), src)
    if syntax == "json":
        data = load_json(text, src)
        if isinstance(data, dict):
            check_list_limits(data, src, list_limits)
        return data
    if syntax != "yaml":
        raise ValueError(f"syntax is json or yaml, not {syntax!r}")
    return load_yaml(text, src, list_limits=list_limits)


# ---- CSV -------------------------------------------------------------------------------------------


def read_csv_rows(
    path: str | Path,
    *,
    what: str,
    max_bytes: int = limits.MAX_TEXT_FILE_BYTES,
    max_rows: int = limits.MAX_CSV_ROWS,
    max_columns: int = limits.MAX_CSV_COLUMNS,
) -> list[list[str]]:
    """The rows (header first) of a UTF-8 CSV file, read with the checks of :func:`read_bytes`
    and :func:`decode_text`; every row at most ``max_columns`` cells of ``MAX_SCALAR_CHARS``.

    Raises:
        HulkInputError: as :func:`read_text`, a CSV syntax error (naming the row), too many
            rows or cells, or an over-long cell.
    """
    src = str(path)
    text = decode_text(read_bytes(path, max_bytes, what=what), src)
    return parse_csv_text(text, src, max_rows=max_rows, max_columns=max_columns)


def parse_csv_text(
    text: str,
    source: str,
    *,
    max_rows: int = limits.MAX_CSV_ROWS,
    max_columns: int = limits.MAX_CSV_COLUMNS,
) -> list[list[str]]:
    """The rows of CSV ``text`` already read by :func:`read_bytes`/:func:`decode_text` (the
    checks of :func:`read_csv_rows`)."""
    src = source
    rows: list[list[str]] = []
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            n = reader.line_num
            if len(rows) >= max_rows:
                raise HulkInputError(
                    f"more than {max_rows:,} rows ({limits.cite('MAX_CSV_ROWS')})", source=src, row=n
                )
            if len(row) > max_columns:
                raise HulkInputError(
                    f"{len(row):,} cells in one row, more than {max_columns} "
                    f"({limits.cite('MAX_CSV_COLUMNS')})",
                    source=src,
                    row=n,
                )
            if any(len(cell) > limits.MAX_SCALAR_CHARS for cell in row):
                raise HulkInputError(
                    f"a cell of more than {limits.MAX_SCALAR_CHARS:,} characters "
                    f"({limits.cite('MAX_SCALAR_CHARS')})",
                    source=src,
                    row=n,
                )
            rows.append(row)
    except csv.Error as err:
        raise HulkInputError(f"not valid CSV: {_short(err, 120)}", source=src, row=reader.line_num) from None
    return rows


# ---- checks on parsed data -------------------------------------------------------------------------


def check_depth(value: Any, source: str, limit: int = limits.MAX_NESTING_DEPTH) -> None:
    """Refuse already-parsed data nested deeper than ``limit`` (iterative, so recursive data
    ends at the node count limit instead of looping)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, dict | list | tuple):
            continue
        seen += 1
        if depth >= limit:
            raise HulkInputError(f"nested more than {limit} levels deep", source=source)
        if seen > limits.MAX_YAML_NODES:
            raise HulkInputError(
                f"more than {limits.MAX_YAML_NODES:,} nested values (shared or recursive data?)",
                source=source,
            )
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children)


def check_unique_names(
    names: Sequence[str],
    source: str,
    rows: Sequence[int | str | None] | None = None,
    *,
    what: str = "machine name",
) -> None:
    """Names must be unique ignoring case (``SJ`` and ``sj`` would be two machines in a table).

    Raises:
        HulkInputError: at the second occurrence, naming the first.
    """
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        key = str(name).casefold()
        if key not in first:
            first[key] = i
            continue
        j = first[key]
        here = rows[i] if rows is not None else None
        there = f"row {rows[j]}" if rows is not None and rows[j] is not None else f"machine #{j + 1}"
        if names[j] == name:
            problem = f"duplicate {what} '{_short(name)}' (first at {there}); names must be unique"
        else:
            problem = (
                f"{what} '{_short(name)}' differs from '{_short(names[j])}' ({there}) only in "
                "case; names must be unique ignoring case: rename one"
            )
        raise HulkInputError(problem, source=source, row=here, field="name")


def check_name(value: Any, source: str, row: int | str | None = None, field: str = "name") -> str:
    """A name as text: a string or number, stripped, non-empty, at most ``MAX_NAME_CHARS``."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise HulkInputError(f"expected a name, got {safe_repr(value)}", source=source, row=row, field=field)
    text = str(value).strip()
    if not text:
        raise HulkInputError("a name must not be empty", source=source, row=row, field=field)
    if len(text) > limits.MAX_NAME_CHARS:
        raise HulkInputError(
            f"a name of {len(text)} characters, more than {limits.MAX_NAME_CHARS} "
            f"({limits.cite('MAX_NAME_CHARS')})",
            source=source,
            row=row,
            field=field,
        )
    if any(ch in text for ch in "\n\r\x00"):
        raise HulkInputError("a name must be on one line", source=source, row=row, field=field)
    return text


# ---- messages ------------------------------------------------------------------------------------

_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 4
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlong = 40


def safe_repr(value: Any) -> str:
    """A short ``repr`` that never expands shared or huge values (at most ~200 characters)."""
    try:
        return _REPR.repr(value)
    except Exception:  # a hostile __repr__ cannot come from a file, but never crash a message
        return f"<{type(value).__name__}>"


def _value_problem(err: Exception) -> str:
    """A parser's complaint about one value, in words (Python's own messages name its API)."""
    if "digits" in str(err):
        return "a number with more than 4,300 digits; no hulk value needs more than 30"
    return _short(str(err), 120)


def _short(text: Any, limit: int = 60) -> str:
    text = str(text).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


__all__ = [
    "MAPPING_SUFFIXES",
    "check_depth",
    "check_json_depth",
    "check_list_limits",
    "check_name",
    "check_unique_names",
    "decode_text",
    "load_json",
    "load_yaml",
    "parse_csv_text",
    "read_bytes",
    "read_csv_rows",
    "read_data",
    "read_mapping",
    "read_text",
    "safe_repr",
    "scan_yaml",
]
