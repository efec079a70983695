"""Issue 38, resumable results: rows carry seed, budget, settings fingerprint and a checksum;
``--resume`` refuses rows that do not match (how many and why, one line, nothing changed);
short, long and tampered rows are never a traceback; an empty method list is an error."""

from __future__ import annotations

import csv
import io

import pytest
from typer.testing import CliRunner

from hulk_cli.app import app
from hulk_cli.output import EXIT_BAD_INPUT
from hulk_env.errors import HulkInputError
from hulk_env.evaluation import load_suite
from hulk_env.evaluation.distributed import evaluate_tasks
from hulk_env.evaluation.results import JOURNAL_COLUMNS, RESULT_COLUMNS, row_checksum

METHODS = ["naive", "compute-greedy"]


@pytest.fixture(scope="module")
def instances():
    return load_suite("tiny-v0")[:2]


@pytest.fixture
def saved(tmp_path, instances):
    out = tmp_path / "eval"
    evaluate_tasks(instances, METHODS, out, progress=False)
    return out


def _lines(out) -> list[str]:
    return (out / "results.csv").read_text().splitlines(keepends=True)


def _refused(out, instances, message: str, **kwargs) -> str:
    before = (out / "results.csv").read_bytes()
    with pytest.raises(HulkInputError) as info:
        evaluate_tasks(instances, METHODS, out, progress=False, resume=True, **kwargs)
    line = info.value.one_line()
    assert message in line and "\n" not in line, line
    assert (out / "results.csv").read_bytes() == before  # nothing saved is changed
    return line


def test_rows_carry_provenance_and_a_checksum(saved, instances):
    table = list(csv.reader(io.StringIO((saved / "results.csv").read_text())))
    assert tuple(table[0]) == JOURNAL_COLUMNS
    assert len(table) == 1 + len(instances) * len(METHODS)
    for row in table[1:]:
        assert row[JOURNAL_COLUMNS.index("seed")] == "0" and len(row[JOURNAL_COLUMNS.index("settings")]) == 16
        assert row_checksum(row[:-1]) == row[-1]
    again = evaluate_tasks(instances, METHODS, saved, progress=False, resume=True)
    assert (again.skipped, again.ran) == (len(table) - 1, 0)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda cells: cells[:3], "1 of 4 saved rows do not match this run (1 cut or padded"),  # short row (was a NaN traceback)
        (lambda cells: cells[:6], "cut or padded"),  # 6 cells
        (lambda cells: [*cells, "x"], "cut or padded"),  # one cell too many
        (lambda cells: [*cells[:3], "99.0", *cells[4:]], "failed the row checksum"),  # a better speed-up typed in
    ],
    ids=["short", "six-cells", "long", "tampered"],
)
def test_damaged_rows_refuse_the_resume_in_one_line(saved, instances, edit, why):
    lines = _lines(saved)
    cells = next(csv.reader([lines[2]]))
    lines[2] = ",".join(edit(cells)) + "\n"
    (saved / "results.csv").write_text("".join(lines))
    line = _refused(saved, instances, why)
    assert "first at row 3" in line


def test_a_row_of_another_seed_is_refused(tmp_path, instances, saved):
    other = tmp_path / "seed1"
    evaluate_tasks(instances, METHODS, other, seed=1, progress=False)
    lines = _lines(saved)
    lines[1] = _lines(other)[1]  # an intact row, checksum and all, made with --seed 1
    (saved / "results.csv").write_text("".join(lines))
    _refused(saved, instances, "1 made with another seed")


def test_a_row_of_another_budget_or_settings_is_refused(saved, instances):
    lines = _lines(saved)
    cells = next(csv.reader([lines[1]]))
    cells[JOURNAL_COLUMNS.index("budget")] = "7"
    cells[-1] = row_checksum(cells[:-1])  # consistent, but not this run's
    lines[1] = ",".join(cells) + "\n"
    (saved / "results.csv").write_text("".join(lines))
    _refused(saved, instances, "made with another budget")


def test_an_old_results_csv_without_provenance_is_refused(saved, instances):
    lines = _lines(saved)
    rows = [next(csv.reader([line]))[: len(RESULT_COLUMNS)] for line in lines]
    (saved / "results.csv").write_text("".join(",".join(r) + "\n" for r in rows))
    _refused(saved, instances, "written by an older hulk")


def test_empty_method_list_is_an_error(tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["evaluate", "--limit", "1", "--methods", ",", "--out", str(out)])
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "names no method" in lines[0]
    assert not out.exists()


def test_cli_resume_with_a_cut_row_is_one_line(saved):
    lines = _lines(saved)
    lines[2] = lines[2].split(",", 3)[0] + ",naive,\n"
    (saved / "results.csv").write_text("".join(lines))
    result = CliRunner().invoke(app, ["evaluate", "--limit", "2", "--methods", ",".join(METHODS), "--out", str(saved), "--resume"])
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "cut or padded" in lines[0], result.output
