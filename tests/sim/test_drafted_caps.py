"""Empirical steps that drafted fewer than gamma (vLLM's n-gram drafter finding a short match,
or none): the simulator verifies at most what was drafted, in the reference engine."""
import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.profiles import AcceptanceProfile
from dspark_sim.sim.replay import replay

from simkit import constant_hw, make_trace, table_hw


def _profile(drafted):
    reqs = [{"accepted": [2, 0, 0, 1, 0, 3], "drafted": drafted}]
    return AcceptanceProfile.from_dict({
        "schema": "dspark-sim/acceptance/v1", "name": "caps", "gamma": 3, "drafter_kind": "ngram",
        "default_task": "chat", "tasks": {"chat": {"kind": "empirical", "requests": reqs}}})


def test_no_draft_steps_verify_nothing_and_cost_one_token():
    trace = make_trace([0.0, 0.0, 0.5], [8, 8, 8], [40, 25, 30])
    capped = _profile([3, 0, 0, 3, 0, 3])
    full = _profile([3, 3, 3, 3, 3, 3])
    hw = table_hw([1, 4, 16], [0.01, 0.02, 0.05])
    a = replay(trace, "static-3", hw, capped, seed=1)
    b = replay(trace, "static-3", hw, full, seed=1)
    # the same accepted runs, so the same tokens per step ...
    assert a.summary["mean_tau"] == pytest.approx(b.summary["mean_tau"])
    assert (a.requests["steps"] == b.requests["steps"]).all()
    # ... but half the steps verify nothing: fewer verified drafts and cheaper iterations
    per_step = a.requests["verified_tokens"].sum() / a.requests["steps"].sum()
    assert per_step == pytest.approx(1.5, abs=0.35)
    assert b.requests["verified_tokens"].sum() == 3 * b.requests["steps"].sum()
    assert a.summary["duration_s"] < b.summary["duration_s"]


def test_a_cap_never_exceeds_the_policy_and_blocks_are_refused():
    trace = make_trace([0.0], [8], [30])
    capped = _profile([3, 0, 1, 3, 0, 3])
    one = replay(trace, "static-1", constant_hw(), capped, seed=0)
    assert one.requests["verified_tokens"].sum() <= one.requests["steps"].sum()
    with pytest.raises(InputError, match="drafted"):
        replay(trace, "static-3", constant_hw(), capped, seed=0, engine="block")
    fast = replay(trace, "static-3", constant_hw(), capped, seed=0, engine="fast")
    ref = replay(trace, "static-3", constant_hw(), capped, seed=0, engine="reference")
    assert np.array_equal(fast.requests.to_numpy(), ref.requests.to_numpy())
