"""dspark_sim/train/reports/drafters_table.py: the training rows come from the runs that exist and, for a
drafter whose run is gone, from the committed snapshot, so re-shipping one drafter keeps the
others' rows."""
import argparse
import json
from pathlib import Path

import pytest

from dspark_sim.train.reports import drafter_seeds, drafters_table


def _summary(run: Path, acc: float) -> None:
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({
        "validation": {"accept@k": [acc]}, "parameters": 1000, "steps": 800, "total_steps": 800,
        "train_seconds": 60.0, "data": {"records": 4, "tokens": 100}}))


def test_one_fresh_run_keeps_the_other_rows(tmp_path):
    runs, snapshot = tmp_path / "runs", tmp_path / "training.json"
    _summary(runs / "dflash-s0", 0.40)
    _summary(runs / "dspark-s0", 0.42)
    first = drafters_table.training_rows(runs, snapshot, "-s0")
    assert [r["kind"] for r in first] == [k for k in drafters_table.KINDS if k in ("dflash", "dspark")]
    _summary(runs / "dspark-s0-new", 0.45)   # only DSpark re-trained
    rows = {r["kind"]: r for r in drafters_table.training_rows(runs, snapshot, "-s0-new")}
    assert rows["dspark"]["accept_at_k"] == [0.45]
    assert rows["dflash"]["accept_at_k"] == [0.40]            # from the snapshot
    saved = {r["kind"]: r for r in json.loads(snapshot.read_text())["drafters"]}
    assert saved.keys() == rows.keys() and saved["dspark"]["accept_at_k"] == [0.45]
    assert drafters_table.training_rows(tmp_path / "gone", snapshot) == list(rows.values())


def test_missing_measure_directory_is_an_error(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "no-such-measure"
    monkeypatch.setattr("sys.argv", ["drafters_table.py", "--measure", str(missing), "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as exc:
        drafters_table.main()
    assert exc.value.code == 2 and str(missing) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()                    # nothing written
    missing.mkdir()                                           # a directory with no reports
    with pytest.raises(SystemExit):
        drafters_table.main()


def test_seed_table_refuses_a_seed_without_reports(tmp_path, capsys):
    measure, out = tmp_path / "measure", tmp_path / "seeds.md"
    measure.mkdir()
    (measure / "dspark-s0-x-t0.report.json").write_text(json.dumps({"tasks": {}}))
    args = argparse.Namespace(measure=measure, runs=tmp_path, seeds="0 1", tag="-x", out=out)
    with pytest.raises(SystemExit) as exc:
        drafter_seeds.table(args)
    assert exc.value.code == 2 and "for seed(s) 1;" in capsys.readouterr().err
    assert not out.exists()


def test_seed_reports_named_as_the_measure_stage_writes_them(tmp_path):
    # scripts/ship_drafters.sh measure: RUN-tT with RUN = KIND-sSEEDTAG, a head-zeroed twin RUN-nohead
    assert drafter_seeds.report_path(tmp_path, "dspark", "2", "-bb800", 1).name == "dspark-s2-bb800-t1.report.json"
    assert (drafter_seeds.report_path(tmp_path, "dspark-nohead", "0", "", 0).name
            == "dspark-s0-nohead-t0.report.json")
    assert not drafter_seeds.seed_has_reports(tmp_path, "0")
    (tmp_path / "dspark-s0-nohead-t0.report.json").write_text("{}")   # a twin alone is no seed's table
    assert not drafter_seeds.seed_has_reports(tmp_path, "0")
    (tmp_path / "dflash-s0-t1.report.json").write_text("{}")
    assert drafter_seeds.seed_has_reports(tmp_path, "0") and not drafter_seeds.seed_has_reports(tmp_path, "1")


def test_calibration_table_names_its_held_out_set_and_each_fit_rule(tmp_path):
    rows = [{"ece": 0.02, "auroc": 0.8, "brier": 0.1, "accept_rate": 0.3}] * 3
    fit = [{"rule": "fitted", "positives": 300}, {"rule": "kept 1: no cross-validated ECE gain", "positives": 90},
           {"rule": "kept 1: fewer than 1000000 accepted prefixes", "positives": 40}]
    (tmp_path / "calibration-t1").mkdir()
    cal = {"temperatures": [0.9, 1.0, 1.0], "fit_steps": 500, "heldout_steps": 400, "raw": rows, "sts": rows,
           "mean_ece_raw": 0.02, "mean_ece_sts": 0.02, "fit": fit, "heldout_rollouts": "runs/b/rollouts.npz"}
    (tmp_path / "calibration-t1" / "calibration.json").write_text(json.dumps(cal))
    text = "\n".join(drafters_table.calibration_table(tmp_path))
    assert "fitted on all 500 steps" in text and "400 steps of other prompts (`runs/b/rollouts.npz`)" in text
    assert "| fit rule | fitted | kept 1 (no CV gain) | kept 1 (< 1000000 positives) |" in text
    assert "| fit positives | 300 | 90 | 40 |" in text
    del cal["heldout_rollouts"]
    (tmp_path / "calibration-t1" / "calibration.json").write_text(json.dumps(cal))
    text = "\n".join(drafters_table.calibration_table(tmp_path))
    assert "(even requests)" in text and "| fit-half positives |" in text


def test_calibration_table_reads_the_sample_weighted_headline(tmp_path):
    rows = [{"ece": 0.05, "n": 900, "auroc": 0.8, "brier": 0.1, "accept_rate": 0.3},
            {"ece": None, "n": 0, "auroc": None, "brier": None, "accept_rate": None}]
    head = {"ece": 0.05, "n": 900}
    cal = {"temperatures": [0.9, 1.0], "fit_steps": 500, "heldout_steps": 900, "raw": rows, "sts": rows,
           "headline": {"raw": head, "sts": head}}
    (tmp_path / "calibration-t0").mkdir()
    (tmp_path / "calibration-t0" / "calibration.json").write_text(json.dumps(cal))
    text = "\n".join(drafters_table.calibration_table(tmp_path))
    assert "ECE weighted by the steps reaching each position 5.00% raw -> 5.00% after STS" in text
    assert "| ECE STS | 5.0% | - |" in text and "| n (steps reaching k) | 900 | 0 |" in text
