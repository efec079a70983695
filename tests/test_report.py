"""``hulk report``: one self-contained HTML page of an evaluation or a training run.

The browser check (headless Chromium renders it) is ``tests/test_report_browser.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.report import write_report
from hulk_env.render.geo import land_rings

runner = CliRunner()


def _parts(page: str) -> set[str]:
    return set(re.search(r'<body data-parts="([^"]*)"', page).group(1).split())


def _self_contained(page: str) -> None:
    """Nothing the page loads comes from elsewhere: no URLs in src/href, no external scripts or
    styles; every image is a PNG data URI."""
    assert not re.search(r'(src|href)\s*=\s*"(?!data:)', page), "an external resource"
    assert "<link" not in page and "@import" not in page and "url(" not in page
    srcs = re.findall(r'<img [^>]*src="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)


def _inside(ring: np.ndarray, lon: float, lat: float) -> bool:
    """Even-odd rule: a point inside a polygon crosses its boundary an odd number of times."""
    x, y = ring[:, 0], ring[:, 1]
    x2, y2 = np.roll(x, -1), np.roll(y, -1)
    cross = (y > lat) != (y2 > lat)
    with np.errstate(divide="ignore", invalid="ignore"):
        at = x + (lat - y) * (x2 - x) / (y2 - y)
    return bool(np.count_nonzero(cross & (lon < at)) % 2)


def test_shipped_land_is_the_world():
    rings = land_rings()
    points = np.concatenate(rings)
    assert len(rings) > 100 and 4000 < len(points) < 20000  # 1:110m, reduced
    assert np.all(np.abs(points[:, 0]) <= 180) and np.all(np.abs(points[:, 1]) <= 90)
    for name, lon, lat, land in [("Paris", 2.35, 48.86, True), ("Beijing", 116.4, 39.9, True),
                                 ("Sao Paulo", -46.6, -23.5, True), ("mid-Atlantic", -35.0, 30.0, False),
                                 ("Pacific", -150.0, 0.0, False), ("Mediterranean", 18.0, 35.0, False)]:
        assert any(_inside(r, lon, lat) for r in rings) == land, name


def test_evaluate_writes_a_complete_self_contained_report(geo_evaluation):
    page = (geo_evaluation / "report.html").read_text()
    assert _parts(page) == {"map", "gantt", "leaderboard", "plot"}
    _self_contained(page)
    for method in ("naive", "compute-greedy", "latency-chain-dp"):
        assert f"<td>{method}</td>" in page
    assert page.count("<td>geo-v0/") == 6  # every row, per instance and method
    settings = json.loads((geo_evaluation / "evaluate_settings.json").read_text())
    assert settings["suite"] == "geo-v0" and settings["limit"] == 2 and "numpy" in settings["versions"]
    assert "seed: 0" in page and "versions (when it ran)" in page
    assert not list(geo_evaluation.glob(".*tmp*"))


def test_report_command_rebuilds_the_evaluation_page(geo_evaluation, tmp_path):
    """`hulk report EVAL_DIR` rebuilds the instances, checks them against the manifest, places the
    winner again and finds the saved iteration time (else the page would say it differs)."""
    out = tmp_path / "again.html"
    result = runner.invoke(app, ["report", str(geo_evaluation), "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"report: {out}" in " ".join(result.output.split())
    page = out.read_text()
    assert _parts(page) == {"map", "gantt", "leaderboard", "plot"}
    assert 'class="note"' not in page  # no "placed again in X s; the evaluation saved Y s"


def test_a_failed_report_leaves_no_file_and_keeps_the_old_one(geo_evaluation, tmp_path):
    broken = tmp_path / "eval"
    broken.mkdir()
    for name in ("results.csv", "evaluate.json", "evaluate_settings.json"):
        (broken / name).write_bytes((geo_evaluation / name).read_bytes())
    (broken / "results.json").write_text('{"rows": [{"instance": "geo-v0/0"}]}')  # no method
    result = runner.invoke(app, ["report", str(broken)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "result row 1 is malformed" in result.output
    assert not (broken / "report.html").exists() and not list(broken.glob(".*tmp*"))

    old = tmp_path / "old.html"
    old.write_text("the previous report")
    result = runner.invoke(app, ["report", str(broken), "--out", str(old)])
    assert result.exit_code == 2 and old.read_text() == "the previous report"


@pytest.mark.parametrize("case", ["empty", "instances-changed"])
def test_report_input_errors_are_one_line(tmp_path, geo_evaluation, case):
    if case == "empty":
        target, message = tmp_path, "neither a run directory"
    else:  # the manifest's fingerprint of an instance no longer matches the suite as built now
        target = tmp_path / "eval"
        target.mkdir()
        for name in ("results.csv", "results.json", "evaluate_settings.json"):
            (target / name).write_bytes((geo_evaluation / name).read_bytes())
        manifest = json.loads((geo_evaluation / "evaluate.json").read_text())
        manifest["instances"]["geo-v0/1"] = "0" * 16
        (target / "evaluate.json").write_text(json.dumps(manifest))
        message = "not geo-v0's as built now (geo-v0/1 differ)"
    result = runner.invoke(app, ["report", str(target)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert message in " ".join(result.output.split())
    assert not list(Path(target).glob("*.html"))


def test_run_report_shows_the_policy_curves_and_config(report_run_dir):
    path = write_report(report_run_dir)
    assert path == report_run_dir / "report.html"
    page = path.read_text()
    assert _parts(page) == {"map", "gantt", "leaderboard", "plot"}
    _self_contained(page)
    assert "the trained policy on" in page and "learning curves" in page
    for method in ("policy", "naive", "compute-greedy"):
        assert f"<td>{method}</td>" in page
    assert "config.yaml" in page and "total_timesteps: 512" in page and "versions.json (when it trained)" in page
    assert "trained for 512 steps" in page
