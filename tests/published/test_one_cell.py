"""validate-published's one-cell diagnostic (published/one_cell.py): a speculative arm's middle
cell fitted beside the baseline arm recovers a speculative path dearer than its priced drafting,
which the baseline arm alone cannot see."""
import json

import pytest
from known_case import EFFORT, known_case

from dspark_sim.cli import main


def test_one_cell_recovers_a_dearer_speculative_path(tmp_path):
    from dspark_sim.published.predict import run_case

    path, case, _ = known_case(tmp_path, draft_scale=6.0)
    res = run_case(case, EFFORT, interval_draws=0)
    spec = [r for r in res.rows if not r["baseline"]]
    assert max(r["gain_error"] for r in spec) > 0.08      # the baseline arm alone over-predicts
    assert [f.arm for f in res.one_cell] == ["fixed-k7", "adaptive-k7"]
    for fit in res.one_cell:
        assert fit.used_load == 16 and [r["used"] for r in fit.rows] == [False, True, False]
        assert fit.draft_scale == pytest.approx(6.0, rel=0.15)
        for r in fit.rows:                                  # baseline-only: +19% .. +32%
            assert abs(r["gain_error"]) < 0.15, (fit.arm, r)
        counts = fit.counts(res.rows)
        assert counts["cells"] == 2 and counts["within"] == 2


def test_the_table_reports_it_and_can_leave_it_out(tmp_path):
    path, _, _ = known_case(tmp_path, draft_scale=3.0)
    small = ["--requests-per-user", "3", "--max-requests-per-user", "3", "--rounds", "1", "--bootstrap", "4",
             "--interval-draws", "0"]
    assert main(["validate-published", str(path), "--out", str(tmp_path / "on"), *small]) == 0
    table = json.loads((tmp_path / "on" / "table.json").read_text())
    assert table["summary"]["one_cell"]["cells"] == 4
    fits = table["fits"]["vllm-pr52362-dsv4-flash-mi350x"]["one_cell"]
    assert {f["arm"] for f in fits} == {"fixed-k7", "adaptive-k7"} and all(f["draft_scale"] > 1.5 for f in fits)
    assert "One speculative cell" in (tmp_path / "on" / "table.md").read_text()
    assert main(["validate-published", str(path), "--out", str(tmp_path / "off"), *small, "--no-one-cell"]) == 0
    off = json.loads((tmp_path / "off" / "table.json").read_text())
    assert "one_cell" not in off["summary"] and "One speculative cell" not in (tmp_path / "off" / "table.md").read_text()
