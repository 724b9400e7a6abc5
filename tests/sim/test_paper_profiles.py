"""Shipped paper-derived acceptance profiles: reproducible from their derivation, consistent with
the paper's accepted lengths, loadable by name."""
import json

import numpy as np
import pytest

from dspark_sim.profiles import load_acceptance_profile
from dspark_sim.profiles.registry import ACCEPTANCE_DIR
from dspark_sim.sim.acceptance.paper import PAPER_TAU, paper_profiles, tau_of


@pytest.mark.parametrize("profile", paper_profiles(), ids=lambda p: p.name)
def test_shipped_file_equals_its_derivation(profile):
    shipped = json.loads((ACCEPTANCE_DIR / f"{profile.name}.acceptance.json").read_text())
    assert shipped == json.loads(json.dumps(profile.to_dict()))
    assert "source" in shipped and "notes" in shipped


@pytest.mark.parametrize("drafter", ["dspark", "dflash", "eagle3"])
def test_gamma7_tau_matches_the_paper(drafter):
    prof = load_acceptance_profile(f"paper-{drafter}-g7")
    for task, tau in PAPER_TAU[drafter].items():
        assert tau_of(prof.tasks[task].position_accept) == pytest.approx(tau, abs=0.01)


def test_shapes():
    dspark = load_acceptance_profile("paper-dspark-g7")
    for t in dspark.tasks.values():
        assert np.ptp(t.position_accept) == 0            # flat
    assert np.all(np.diff(load_acceptance_profile("paper-dflash-g7").tasks["chat"].position_accept) < 0)
    assert np.all(np.diff(load_acceptance_profile("paper-eagle3-g7").tasks["chat"].position_accept) > 0)
    g5 = load_acceptance_profile("paper-dspark-g5")
    g7 = load_acceptance_profile("paper-dspark-g7")
    for task in g5.tasks:
        np.testing.assert_array_equal(g5.tasks[task].position_accept, g7.tasks[task].position_accept[:5])
    mtp1 = load_acceptance_profile("paper-mtp1")
    assert mtp1.gamma == 1 and 0.85 <= mtp1.for_task("code").position_accept[0] <= 0.9
