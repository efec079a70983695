"""The report in a real browser: headless Chromium loads it, takes a screenshot, runs its script.

Skips only when Chromium is absent and ``HULK_REQUIRE_CHROMIUM`` is unset; ``make test`` sets it
(and installs the Debian package ``chromium`` when missing), so CI always runs these.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from hulk_cli.report import write_report
from tests.browser import REQUIRE_ENV, chromium, load_page

pytestmark = pytest.mark.skipif(
    chromium() is None and not os.environ.get(REQUIRE_ENV),
    reason=f"chromium is not installed (apt-get install -y chromium, or `make test`); set {REQUIRE_ENV}=1 to fail instead",
)


def _check_rendered(page, tmp_path, parts: set[str]) -> None:
    seen = load_page(page, tmp_path)
    assert seen.console == [], seen.console  # no console errors, no uncaught exception, no failed load
    assert "<title>hulk report: ok</title>" in seen.dom, seen.dom[:500]
    rendered = set(seen.dom.split('data-rendered="', 1)[1].split('"', 1)[0].split())
    assert rendered == parts
    import matplotlib.image

    pixels = matplotlib.image.imread(str(seen.screenshot))[..., :3]
    assert pixels.shape[0] > 1000 and pixels.shape[1] > 1000
    # Non-blank: many colours, and far from one flat colour (a white page, or an error page).
    flat = (pixels * 255).astype(np.uint8).reshape(-1, 3)
    assert len(np.unique(flat[::7], axis=0)) > 200
    assert np.mean(np.any(flat != flat[0], axis=1)) > 0.1


def test_chromium_sees_a_part_that_did_not_render(tmp_path):
    """The check can fail: a report whose map is not a PNG logs a console error and says so."""
    from hulk_env.render.report_page import Picture, Report, write_report_file

    page = write_report_file(tmp_path / "broken.html", Report("t", "s", [Picture("map", "a map", b"not a png")]))
    seen = load_page(page, tmp_path)
    assert any("hulk report: parts not rendered: map" in line for line in seen.console), seen.console
    assert "<title>hulk report: missing map</title>" in seen.dom


def test_chromium_renders_the_evaluation_report(geo_evaluation, tmp_path):
    _check_rendered(geo_evaluation / "report.html", tmp_path, {"map", "gantt", "leaderboard", "plot"})


def test_chromium_renders_the_run_report(report_run_dir, tmp_path):
    _check_rendered(write_report(report_run_dir, tmp_path / "run.html"), tmp_path, {"map", "gantt", "leaderboard", "plot"})
