"""Where calibration lives (calibration/store.py): beside the checkpoint's weights, keyed by
their hash; never inside the installed package; kept by a re-export of the same weights and
marked stale (with the command that refits it) by one of new weights."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.calibration.rollouts import save_rollouts
from dspark_sim.calibration.sts import RolloutSteps
from dspark_sim.calibration.store import (CALIBRATION_FILE, StaleCalibration, usable_calibration,
                                          weights_digest)
from dspark_sim.cli import main

PACKAGE_DATA = Path(__file__).resolve().parents[2] / "dspark_sim" / "data"


def tree_digest(root: Path) -> str:
    """SHA-256 over every file's path and bytes under `root` (and nothing else there)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def _rollouts(path: Path, drafter: str, gamma: int = 7) -> Path:
    rng = np.random.default_rng(0)
    parts = []
    for _ in range(12):
        s = rng.normal(1.0, 1.5, (60, gamma))
        c = 1 / (1 + np.exp(-s))
        accepted = np.array([int(np.argmin(np.append(rng.random(gamma) < row, False))) for row in c])
        parts.append(RolloutSteps(z=2.5 * s, accepted=accepted))
    return save_rollouts(path, parts, {"drafter": drafter, "gamma": gamma, "temperature": 0.0, "seed": 0})


def test_calibrating_the_shipped_drafter_leaves_the_installed_package_unchanged(tmp_path, capsys,
                                                                                monkeypatch):
    """`calibrate --drafter dspark` (storing, not a dry run) writes a calibrated copy of the
    shipped checkpoint into a directory of the user's and says so; the package's data
    directory hashes the same before and after."""
    monkeypatch.chdir(tmp_path)
    before = tree_digest(PACKAGE_DATA)
    rollouts = _rollouts(tmp_path / "r.npz", "dspark")
    assert main(["calibrate", "--drafter", "dspark", "--rollouts", str(rollouts), "--report", "cal"]) == 0
    out = capsys.readouterr().out
    assert tree_digest(PACKAGE_DATA) == before
    copy = tmp_path / "cal" / "drafter"
    assert "is inside the installed package and stays unchanged" in out and f"--drafter {Path('cal/drafter')}" in out
    stored = json.loads((copy / CALIBRATION_FILE).read_text())
    report = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert stored["sts"]["0.0"] == [round(t, 5) for t in report["temperatures"]]
    assert stored["weights_sha256"] == weights_digest(PACKAGE_DATA / "drafters" / "dspark") == weights_digest(copy)
    assert usable_calibration(copy)["sts"]["0.0"] == stored["sts"]["0.0"]
    # a second fit reuses the copy, replaces that temperature's entry and says so
    assert main(["calibrate", "--drafter", "dspark", "--rollouts", str(rollouts), "--report", "cal"]) == 0
    assert "replaced the calibration for temperature 0.0" in capsys.readouterr().err
    assert tree_digest(PACKAGE_DATA) == before
    # a --save-to directory holding something else is refused, nothing written
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    assert main(["calibrate", "--drafter", "dspark", "--rollouts", str(rollouts), "--report", "cal2",
                 "--save-to", "other"]) == 2
    assert "--save-to" in capsys.readouterr().err and os.listdir(tmp_path / "other") == ["notes.txt"]


def test_a_re_export_keeps_or_marks_stale(trained, tmp_path):
    """The export of `train`: same weights keep the calibration; new weights mark it stale and
    the loader then ignores it with a StaleCalibration warning; temperatures an older
    checkpoint kept in config.json move beside the weights instead of being dropped."""
    import torch

    from dspark_sim.calibration.store import write_calibration
    from dspark_sim.decode.drafters.checkpoint import save_drafter
    from dspark_sim.train.pipeline import export_keeping_calibration

    module = trained["dspark"][0]
    ckpt = tmp_path / "drafter"
    save_drafter(module, ckpt)
    write_calibration(ckpt, 0.0, [1.1, 1.2, 1.3, 1.4], None, {"report": "r"})
    note = export_keeping_calibration(module, ckpt)
    assert note.startswith("kept the confidence calibration") and usable_calibration(ckpt)["sts"]["0.0"] == [1.1, 1.2, 1.3, 1.4]
    with torch.no_grad():
        next(module.parameters()).add_(0.01)
    try:
        note = export_keeping_calibration(module, ckpt)
    finally:
        with torch.no_grad():
            next(module.parameters()).sub_(0.01)
    assert "is now stale" in note and "dspark-sim calibrate --drafter" in note
    with pytest.warns(StaleCalibration, match="refit with: dspark-sim calibrate"):
        assert usable_calibration(ckpt) is None
    # an older checkpoint: temperatures in config.json, no calibration file
    legacy = tmp_path / "legacy"
    save_drafter(module, legacy)
    cfg = json.loads((legacy / "config.json").read_text())
    cfg["sts"] = {"1.0": [0.9, 0.8, 0.7, 0.6]}
    (legacy / "config.json").write_text(json.dumps(cfg))
    note = export_keeping_calibration(module, legacy)           # same weights: kept, moved
    assert note.startswith("kept") and usable_calibration(legacy)["sts"] == {"1.0": [0.9, 0.8, 0.7, 0.6]}
    assert json.loads((legacy / "config.json").read_text())["sts"] == {}


def test_a_damaged_calibration_file_names_the_field(trained, tmp_path):
    from dspark_sim.calibration.store import write_calibration
    from dspark_sim.decode.drafters.checkpoint import save_drafter
    from dspark_sim.errors import InputError
    from tests.strict_json import register_input

    ckpt = save_drafter(trained["dspark"][0], tmp_path / "drafter")
    path, _ = write_calibration(ckpt, 1.0, [1.0, 1.0, 1.0, 1.0], None, {})
    doc = json.loads(path.read_text())
    doc["sts"]["1.0"][2] = -1
    path.write_text(json.dumps(doc, indent=2))
    register_input(path)
    with pytest.raises(InputError, match=r"calibration\.sts\.json:\d+: field 'sts\.1\.0\[2\]'"):
        usable_calibration(ckpt)
