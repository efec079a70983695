"""Shared fixtures: the paper's data directory lives in ../shared, never in the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HULK_DATA = REPO.parent / "shared" / "data" / "hulk"
BAD_FILES = Path(__file__).resolve().parent / "data" / "bad"


@pytest.fixture(scope="session")
def hulk_data() -> Path:
    if not (HULK_DATA / "node_feature.csv").exists():
        pytest.skip(f"the paper's data is not at {HULK_DATA}")
    return HULK_DATA
