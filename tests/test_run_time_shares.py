"""python -m normgrow.results time-shares on committed records: a grid's finished runs are each counted once, under a setting
that reads them, and every run's parts add up to its wall time."""
import csv
import json
from pathlib import Path

import pytest

from normgrow import results

ROOT = Path(__file__).resolve().parents[1]
LADDER = ROOT / "outputs" / "grid" / "cpu" / "ladder" / "runs.csv"


def test_a_grid_s_finished_runs_are_each_counted_once(monkeypatch, capsys):
    monkeypatch.delenv("NORMGROW_OUTPUTS", raising=False)  # the repository's committed outputs
    rows = results.grid_time_shares("cpu", "ladder")
    with LADDER.open() as f:
        finished = {r["run_name"]: r for r in csv.DictReader(f) if r["status"] == "finished"}
    walls = {name: json.loads((ROOT / "outputs" / "runs" / "cpu" / name / "summary.json").read_text())["wall_s"]
             for name in finished}
    assert sum(t["runs"] for t in rows.values()) == len(finished)
    assert sum(t["wall_s"] for t in rows.values()) == pytest.approx(sum(walls.values()), rel=1e-12)
    for name, t in rows.items():
        setting, schedule = name.split(" ")
        members = [n for n, r in finished.items() if (r["setting"], r["schedule"]) == (setting, schedule)]
        assert t["runs"] == len(members)
        assert sum(t[k] for k in results.TIME_PARTS) == pytest.approx(t["wall_s"], rel=1e-9)
        assert 0 < t["eval_s"] < t["steps_s"]
    results.main(["--profile", "cpu", "time-shares", "--grid", "ladder"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + len(rows) + 1 and lines[-1].startswith("| all | ")
