"""dspark_sim/decode/gate_replay.py prices recorded outputs exactly: its oracle bounds every policy, and
the gate it replays is the shipped ScheduledVerify (skipping pays where drafts never land)."""
import numpy as np
import pytest

from dspark_sim.decode import gate_replay
from dspark_sim.profiles.registry import load_hw_profile

GAMMA = 7


def synthetic_record(rng, n_anchors: int, accept: float, conf_mean: float) -> dict:
    """Anchors whose k-draft blocks are accepted to a geometric depth, with noisy confidences."""
    anchors = []
    for _ in range(n_anchors):
        depth = 0
        while depth < GAMMA and rng.random() < accept:
            depth += 1
        anchors.append({str(k): {"n": min(depth, k),
                                 "c": list(np.clip(rng.normal(conf_mean, 0.1, k), 0.01, 0.99))}
                        for k in range(1, GAMMA + 1)})
    return {"task": "t", "prompt_len": 40, "anchors": anchors}


@pytest.fixture(scope="module")
def hw():
    return load_hw_profile(gate_replay.DEFAULT_HW)


@pytest.mark.parametrize("accept,conf", [(0.0, 0.05), (0.4, 0.4), (0.9, 0.9)])
def test_oracle_bounds_every_policy(hw, accept, conf):
    rec = synthetic_record(np.random.default_rng(0), 60, accept, conf)
    plain = gate_replay._walk(rec, "dspark", GAMMA, hw, None)
    oracle = gate_replay._oracle(rec, "dspark", GAMMA, hw)
    assert oracle >= plain * (1 - 1e-9)
    for skip, gate in ((False, None), (True, None), (True, {"smoothing": 1.0}), (True, {"max_skip": 4}),
                       (True, {"recent": 1})):
        assert gate_replay._walk(rec, "dspark", GAMMA, hw, skip, gate) <= oracle * (1 + 1e-9)
    for k in (1, 2, GAMMA):                 # drafting and verifying k every step, too
        assert gate_replay._walk(rec, "dspark", GAMMA, hw, True, None, fixed=k) <= oracle * (1 + 1e-9)


def test_gate_skips_where_drafts_never_land_and_drafts_where_they_do(hw):
    rng = np.random.default_rng(1)
    dead = synthetic_record(rng, 80, 0.0, 0.05)
    plain = gate_replay._walk(dead, "dspark", GAMMA, hw, None)
    every = gate_replay._walk(dead, "dspark", GAMMA, hw, False)
    gated = gate_replay._walk(dead, "dspark", GAMMA, hw, True)
    assert every < gated <= plain          # skipping saves most of the wasted draft steps
    assert gated > 0.9 * plain
    good = synthetic_record(rng, 80, 0.9, 0.9)
    plain = gate_replay._walk(good, "dspark", GAMMA, hw, None)
    assert gate_replay._walk(good, "dspark", GAMMA, hw, True) > 1.3 * plain
