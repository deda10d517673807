"""docs/RESULTS.md is current: every table that ``python -m normgrow.results`` prints from a record committed outside
the archive (the study, the ladder, the curriculum's shapes) stands in RESULTS.md line for line, so a record trained
again, or counted differently by today's code, fails here until RESULTS.md shows its new numbers."""
from __future__ import annotations

from pathlib import Path

import pytest

from normgrow import results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "RESULTS.md"
PROFILE = "cpu"


def committed(table: str) -> bool:
    folder = results.record_of(table, PROFILE)
    return folder.is_dir() and any(folder.glob("*.csv"))


@pytest.fixture
def repository_outputs(monkeypatch):
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed outputs


@pytest.mark.parametrize("table", list(results.TABLES))
def test_results_doc_holds_each_committed_table_as_printed(table, repository_outputs):
    if not committed(table):
        pytest.skip(f"no committed record for the {table} table")
    lines = set(RESULTS.read_text().splitlines())
    printed = [line for line in results.TABLES[table](PROFILE).splitlines() if line.strip()]
    stale = [line for line in printed if line not in lines]
    assert not stale, (f"docs/RESULTS.md lacks {len(stale)} of the {len(printed)} lines of `python -m normgrow.results "
                       f"--profile {PROFILE} {table}`, e.g. {stale[0][:200]!r}")


def test_every_table_has_a_committed_record(repository_outputs):
    """The check above is not vacuous: each table's record is committed."""
    assert [t for t in results.TABLES if not committed(t)] == []


def test_a_table_changes_with_its_record(repository_outputs, tmp_path, monkeypatch):
    """A study whose claims read otherwise prints another claims table (what the check above would catch)."""
    import shutil
    copy = tmp_path / "study" / PROFILE
    shutil.copytree(ROOT / "outputs" / "study" / PROFILE, copy)
    before = results.study_tables(PROFILE)
    claims = (copy / "claims.csv").read_text()
    (copy / "claims.csv").write_text(claims.replace("not resolved", "supported", 1))
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path))
    after = results.study_tables(PROFILE)
    assert after != before
    assert [line for line in after.splitlines() if line not in set(RESULTS.read_text().splitlines())]


def test_an_unknown_table_is_an_error_naming_the_tables(capsys):
    with pytest.raises(SystemExit) as exit_:
        results.main(["nonsense"])
    assert "study, ladder, ladder-runs, shapes" in str(exit_.value)
