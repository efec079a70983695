"""One self-contained HTML page for a training run or an evaluation: ``hulk report``.

The page needs no network to be viewed: figures are PNG data URIs, the CSS and the small script
are inline, and the map's coastlines ship with the package (:mod:`hulk_env.render.geo`). It holds
the placement on a world map, its simulated schedule (Gantt), the leaderboard and every result
row (failures with their reason), the plots (learning curves, speed-ups) and the settings that
made it (config, versions, seed).

The script checks on load that every part the page declares (``data-parts``) rendered -- an
image that decoded, a table with rows -- and writes the parts it found into
``<body data-rendered=...>`` and the title (``hulk report: ok``); a missing part is a console
error. A headless browser reads that back (``tests/test_report_browser.py``).

Pure functions of what they are given (no torch, no TensorBoard): :mod:`hulk_cli.report`
gathers the parts of a run or an evaluation directory.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hulk_env.render.common import pyplot

PARTS = ("map", "placement", "gantt", "leaderboard", "plot")  # "map": a placement with coordinates
MAX_RESULT_ROWS = 2000  # per-instance rows shown; the rest stay in results.csv (the page says so)


@dataclass(frozen=True)
class Picture:
    """A rendered figure: ``part`` (one of :data:`PARTS`) names what it shows (``map``: a
    placement on the world map; ``placement``: the pipeline view alone, for a cluster without
    coordinates)."""

    part: str
    caption: str
    png: bytes


@dataclass(frozen=True)
class Report:
    """Everything one page shows.

    Attributes:
        title: the page heading.
        summary: one paragraph under it (what was run, what came first).
        pictures: the map, the Gantt and the plots, in page order.
        leaderboard: :func:`hulk_env.evaluation.leaderboard` entries.
        rows: every result row as a dict (``instance``, ``method``, ``iteration_time_s``,
            ``speedup_vs_naive``, ``gap_to_best``, ``cost_evals``, ``wall_s``, ``feasible``,
            ``reason``).
        settings: ``{heading: text}`` (config file, versions, seeds), shown verbatim.
        notes: sentences on what is missing or was recomputed.
    """

    title: str
    summary: str
    pictures: Sequence[Picture] = ()
    leaderboard: Sequence[Mapping[str, Any]] = ()
    rows: Sequence[Mapping[str, Any]] = ()
    settings: Mapping[str, str] = field(default_factory=dict)
    notes: Sequence[str] = ()

    @property
    def parts(self) -> list[str]:
        """The parts this page declares (the script checks each)."""
        found = {p.part for p in self.pictures} | ({"leaderboard"} if self.leaderboard else set())
        return [p for p in PARTS if p in found]


def figure_png(fig, dpi: int = 90) -> bytes:
    """A matplotlib figure as PNG bytes (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    return buf.getvalue()


def report_html(report: Report) -> str:
    """The page as one HTML string (see the module docstring)."""
    e = html.escape
    body = [f"<h1>{e(report.title)}</h1>", f'<p class="summary">{e(report.summary)}</p>']
    body += [f'<p class="note">{e(n)}</p>' for n in report.notes]
    for pic in report.pictures:
        uri = "data:image/png;base64," + base64.b64encode(pic.png).decode("ascii")
        body.append(
            f'<figure data-part="{e(pic.part)}"><img alt="{e(pic.caption)}" src="{uri}">'
            f"<figcaption>{e(pic.caption)}</figcaption></figure>"
        )
    if report.leaderboard:
        body.append("<h2>Leaderboard</h2>")
        body.append(_leaderboard_table(report.leaderboard))
    if report.rows:
        shown = report.rows[:MAX_RESULT_ROWS]
        more = f" (the first {len(shown)}; all {len(report.rows)} are in results.csv)" if len(shown) < len(report.rows) else ""
        body.append(f"<details><summary>Every result: {len(report.rows)} rows{e(more)}</summary>")
        body.append(_rows_table(shown))
        body.append("</details>")
    if report.settings:
        body.append("<h2>Settings</h2>")
        for heading, text in report.settings.items():
            body.append(f"<h3>{e(heading)}</h3><pre>{e(text)}</pre>")
    parts = " ".join(report.parts)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{e(report.title)}</title><style>{_CSS}</style></head>\n"
        f'<body data-parts="{parts}">\n' + "\n".join(body) + f"\n<script>{_SCRIPT}</script>\n</body></html>\n"
    )


def write_report_file(path: str | Path, report: Report) -> Path:
    """Write the page atomically: a reader sees the old file or the new one, and a failure
    (rendering or writing) leaves no file and no temporary behind."""
    out = Path(path)
    text = report_html(report)  # everything rendered before anything is written
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def settings_text(values: Mapping[str, Any]) -> str:
    """``key: value`` lines (JSON for nested values) for the settings section."""
    return "\n".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items())


def _number(value: Any, fmt: str) -> str:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return "-"
    return format(x, fmt) if math.isfinite(x) else "-"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], part: str = "") -> str:
    e = html.escape
    attr = f' data-part="{part}"' if part else ""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="sortable"{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _leaderboard_table(entries: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            str(x["rank"]), str(x["method"]), "x" + _number(x["geomean_speedup_vs_naive"], ".3f"),
            _number(100 * float(x["mean_gap_to_best"]), ".2f") + "%", str(x["best_on"]),
            f"{x['solved']}/{x['instances']}", _number(x["mean_cost_evals"], ",.0f"),
            _number(x["total_wall_s"], ".2f"), ", ".join(x.get("unsolved") or []) or "-",
        ]
        for x in entries
    ]
    headers = ("#", "method", "speed-up (geomean vs naive)", "mean gap to best", "best on", "solved",
               "mean cost evals", "wall s", "unsolved")
    return _table(headers, rows, part="leaderboard")


def _rows_table(rows: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for r in rows:
        feasible = bool(r.get("feasible", True)) and math.isfinite(float(r.get("iteration_time_s", math.nan)))
        out.append([
            str(r["instance"]), str(r["method"]),
            _number(r["iteration_time_s"], ".4f") if feasible else "infeasible",
            ("x" + _number(r["speedup_vs_naive"], ".3f")) if feasible else "-",
            (_number(100 * float(r["gap_to_best"]), ".2f") + "%") if feasible else "-",
            _number(r["cost_evals"], ".0f"), _number(r["wall_s"], ".2f"), str(r.get("reason") or ""),
        ])
    return _table(("instance", "method", "iteration s", "speed-up", "gap to best", "cost evals", "wall s", "reason"), out)


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.5em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
.summary{font-size:1.05em}.note{color:#8a4b00}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #e3e3e3}figcaption{color:#555}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#f3f5f7;cursor:pointer}tbody tr:nth-child(even){background:#fafafa}
pre{background:#f6f8fa;padding:.8em;overflow:auto;max-height:30em}
""".strip()

# Checks the declared parts, records what rendered, reports resources that failed to load, and
# lets a click sort a table by a column.
_SCRIPT = """
(function () {
  window.addEventListener('error', function (e) {  // a resource that failed to load
    if (e.target && e.target !== window) console.error('hulk report: cannot load ' + (e.target.src || e.target.href));
  }, true);
  function rendered(part) {
    var el = document.querySelector('[data-part="' + part + '"]');
    if (!el) return false;
    if (el.tagName === 'TABLE') return el.tBodies[0].rows.length > 0;
    var img = el.querySelector('img');
    return !!img && img.complete && img.naturalWidth > 0;
  }
  function check() {
    var want = (document.body.getAttribute('data-parts') || '').split(' ').filter(Boolean);
    var ok = want.filter(rendered), missing = want.filter(function (p) { return !rendered(p); });
    document.body.setAttribute('data-rendered', ok.join(' '));
    if (missing.length) {
      console.error('hulk report: parts not rendered: ' + missing.join(', '));
      document.title = 'hulk report: missing ' + missing.join(', ');
    } else {
      document.title = 'hulk report: ok';
    }
  }
  document.querySelectorAll('table.sortable th').forEach(function (th, _, all) {
    th.addEventListener('click', function () {
      var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
      var rows = Array.prototype.slice.call(body.rows), asc = th.getAttribute('data-asc') !== '1';
      function key(r) { var t = r.cells[col].textContent.replace(/[x%,]/g, ''); var n = parseFloat(t);
        return isNaN(n) ? t : n; }
      rows.sort(function (a, b) { var x = key(a), y = key(b);
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); });
      rows.forEach(function (r) { body.appendChild(r); });
      th.setAttribute('data-asc', asc ? '1' : '0');
    });
  });
  if (document.readyState === 'complete') check(); else window.addEventListener('load', check);
})();
""".strip()
