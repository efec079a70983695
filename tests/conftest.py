"""Shared fixtures: the paper's data ships with the package, so no test skips for want of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hulk_env.cluster import paper_data_dir

BAD_FILES = Path(__file__).resolve().parent / "data" / "bad"


@pytest.fixture(scope="session")
def hulk_data() -> Path:
    """The paper's ``node_feature.csv`` and ``edge.txt``, as the installed package holds them."""
    return paper_data_dir()
