"""dspark_sim/train/reports/drafter_seeds.py: the seed table's numbers come from the measured reports, and a
warm start is named by the run it came from."""
import json
from pathlib import Path

from dspark_sim.train.reports import drafter_seeds


def _report(path: Path, taus: dict) -> None:
    path.write_text(json.dumps({"tasks": {t: {"mean_tau": v} for t, v in taus.items()}}))


def test_gains_and_spread_from_reports(tmp_path):
    for seed, (a, b) in enumerate([(1.2, 1.0), (1.1, 1.0)]):
        _report(tmp_path / f"dspark-s{seed}-800-t0.report.json", dict(math=a, code=a, chat=a))
        _report(tmp_path / f"dflash-s{seed}-800-t0.report.json", dict(math=b, code=b, chat=b))
    taus = drafter_seeds.load_taus(tmp_path, ["0", "1", "2"], "-800")
    assert taus["dspark", 0]["math"] == [1.2, 1.1]
    gain = drafter_seeds.macro_gains(taus, 0, "dspark", "dflash")
    assert gain == "+15.0% (seed pairs +10.0% .. +20.0%)"
    dspark_row = next(r for r in drafter_seeds.tau_table(taus, 0) if r.startswith("| DSpark |"))
    assert "1.150 ± 0.050 (2 seeds)" in dspark_row


def test_warm_start_named_by_its_run(tmp_path):
    run = tmp_path / "dspark-s1-800"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({
        "validation": {"accept@k": [0.465]}, "steps": 400, "prior_steps": 400, "total_steps": 800,
        "init_from": "runs/train/dspark-s1-400/drafter", "train_seconds": 1058.0,
        "data": {"tokens": 124440}}))
    rows = drafter_seeds.training_rows(tmp_path, ["1"], "-800")
    assert "800 (400 + 400 from dspark-s1-400)" in rows[2]
    assert drafter_seeds._run_name("dspark_sim/data/drafters/dspark") == "dspark"
    assert drafter_seeds._run_name("backbone:runs/train/dflash-s1-400/drafter") == \
        "the backbone of dflash-s1-400"


def test_dspark_alone_is_not_ranked_first(tmp_path):
    _report(tmp_path / "dspark-s0-bb800-t0.report.json", dict(math=1.2, code=1.2, chat=1.2))
    taus = drafter_seeds.load_taus(tmp_path, ["0"], "-bb800")
    assert drafter_seeds.first_on_every_task(taus, 0) == []
    _report(tmp_path / "dflash-s0-bb800-t0.report.json", dict(math=1.3, code=1.0, chat=1.0))
    lines = drafter_seeds.first_on_every_task(drafter_seeds.load_taus(tmp_path, ["0"], "-bb800"), 0)
    assert lines[0].startswith("- math: first DFlash") and "code: first DSpark" in lines[1]


def test_a_kind_read_under_another_tag(tmp_path):
    _report(tmp_path / "dspark-s0-copy-t0.report.json", dict(math=1.2, code=1.2, chat=1.2))
    _report(tmp_path / "dflash-s0-copy-t0.report.json", dict(math=1.15, code=1.15, chat=1.15))
    _report(tmp_path / "dflash-s0-copy1-t0.report.json", dict(math=1.0, code=1.0, chat=1.0))
    kind_tags = drafter_seeds.parse_kind_tags(["dflash=-copy1"])
    taus = drafter_seeds.load_taus(tmp_path, ["0"], "-copy", kind_tags)
    assert taus["dflash", 0]["math"] == [1.0] and taus["dspark", 0]["math"] == [1.2]
    assert drafter_seeds.macro_gains(taus, 0, "dspark", "dflash").startswith("+20.0%")
    import pytest
    with pytest.raises(SystemExit):
        drafter_seeds.parse_kind_tags(["dflsh=-copy1"])
