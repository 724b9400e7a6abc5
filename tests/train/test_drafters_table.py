"""benchmarks/drafters_table.py: the training rows come from the runs that exist and, for a
drafter whose run is gone, from the committed snapshot, so re-shipping one drafter keeps the
others' rows."""
import json
from pathlib import Path

from benchmarks import drafters_table


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
