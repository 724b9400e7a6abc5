"""dspark_sim/train/reports/tau_decomposition.py: conditional acceptances and the split of a tau gain into
position 1 and the later positions, checked on acceptance files with known counts."""
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.train.reports import tau_decomposition as td
from dspark_sim.profiles.acceptance import AcceptanceProfile, EmpiricalRequest, TaskAcceptance


def _acceptance(path: Path, accepted: list[int], gamma: int = 3) -> None:
    tasks = {t: TaskAcceptance("empirical", requests=[EmpiricalRequest(np.array(accepted))])
             for t in td.TASKS}
    AcceptanceProfile(path.stem, gamma, tasks, default_task="chat").save(path)


def test_conditional_acceptance_counts_steps_that_reached_each_position(tmp_path):
    _acceptance(tmp_path / "a.json", [0, 0, 1, 2, 3, 3, 3, 1])   # 8 steps: 6 pass 1, 4 pass 2, 3 pass 3
    a, tau = td.conditional_acceptance(AcceptanceProfile.load(tmp_path / "a.json"), "math")
    assert a.tolist() == pytest.approx([6 / 8, 4 / 6, 3 / 4])
    assert tau == pytest.approx(1 + 13 / 8) == pytest.approx(td.tau_of(a))


def test_the_gain_splits_into_position_one_and_the_rest(tmp_path):
    _acceptance(tmp_path / "dspark-s0-t0.acceptance.json", [0, 1, 2, 3])
    _acceptance(tmp_path / "dflash-s0-t0.acceptance.json", [0, 0, 1, 2])
    # a temperature without files gives an empty table
    assert not any(r.startswith("| 0 |") for r in td.decompose(tmp_path, "dspark", "dflash", ["0"], "", 1))
    lines = td.decompose(tmp_path, "dspark", "dflash", ["0"], "", 0)
    a = np.array([3 / 4, 2 / 3, 1 / 2]); b = np.array([2 / 4, 1 / 2, 0.0])
    row = next(r for r in lines if r.startswith("| 0 | math"))
    cells = [float(c.strip().rstrip("%")) for c in row.split("|")[5:-1]]
    expected = [td.tau_of(a) / td.tau_of(b) - 1, td.tau_of(td.with_first(a, b[0])) / td.tau_of(b) - 1]
    expected += [td.tau_of(td.with_first(a, x)) / td.tau_of(td.with_first(b, x)) - 1 for x in td.COMMON_A1]
    assert cells == pytest.approx([round(100 * g, 1) for g in expected])
    assert expected[0] > expected[1] > 0             # part of the gain is position 1's
