"""``python -m experiments.replacement --quick``: every file it promises, with consistent figures."""

from __future__ import annotations

import json

from experiments import replacement


def test_replacement_quick(tmp_path):
    out = replacement.main(["--quick", "--out", str(tmp_path)])
    for name in ("outage.md", "outage.json", "outage-before.png", "outage-after.png", "trace.md", "trace.json",
                 "timeline.png", "run.json"):
        assert (out / name).stat().st_size > 0, name
    outage = json.loads((out / "outage.json").read_text())
    assert outage["failed"].startswith("region:")
    assert {r["method"] for r in outage["rows"]} == set(replacement.METHODS)
    assert min(r["vs_best"] for r in outage["rows"]) == 1.0
    trace = json.loads((out / "trace.json").read_text())
    assert trace["least_time_lost"] in replacement.METHODS
    assert all(r["finished"] for r in trace["rows"])
