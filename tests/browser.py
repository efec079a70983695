"""Headless Chromium from its command line: load a local page, screenshot it, read its DOM and
its console messages (no driver, no download: the Debian package ``chromium``).

Two runs of the same page: ``--screenshot`` and ``--dump-dom`` (the DOM after the page's
scripts ran; ``--virtual-time-budget`` lets the load event fire first). Console messages and
uncaught exceptions come from ``--enable-logging=stderr --v=0``, which prints each as a
``CONSOLE(line)`` record with the page as its source; every such record is a failure here, since
a report page logs nothing unless a part failed to render.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
REQUIRE_ENV = "HULK_REQUIRE_CHROMIUM"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
    "--enable-logging=stderr", "--v=0",
)
CONSOLE = re.compile(r":CONSOLE[^\]]*\]\s*(?P<message>.*)")


class PageCheck(NamedTuple):
    """What the browser saw: the screenshot file, the DOM after scripts, console records."""

    screenshot: Path
    dom: str
    console: list[str]


def chromium() -> str | None:
    """The Chromium executable, or ``None`` when it is not installed."""
    for path in CHROMIUM_PATHS:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromium")


def load_page(page: Path, work: Path, width: int = 1400, height: int = 2400, timeout_s: float = 120) -> PageCheck:
    """Open ``page`` (a local file) in headless Chromium; see the module docstring."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
    url = page.resolve().as_uri()
    shot = work / "screenshot.png"
    console: list[str] = []

    def run(*extra: str) -> str:
        with tempfile.TemporaryDirectory(dir=work) as profile:
            proc = subprocess.run(
                [exe, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
                 "--virtual-time-budget=5000", *extra, url],
                capture_output=True, text=True, timeout=timeout_s, check=False,
            )
        console.extend(m.group("message") for m in map(CONSOLE.search, proc.stderr.splitlines()) if m)
        if proc.returncode != 0:
            raise RuntimeError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc.stdout

    run(f"--screenshot={shot}")
    dom = run("--dump-dom")
    return PageCheck(shot, dom, sorted(set(console)))
