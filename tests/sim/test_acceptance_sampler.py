"""Acceptance draws: parametric runs follow the per-position rates; empirical requests walk a
measured request's steps in order, cycling."""
import numpy as np
from simkit import empirical, parametric

from dspark_sim.sim.acceptance.sampler import AcceptanceSampler


def test_parametric_runs_follow_conditional_rates():
    rates = [0.9, 0.5, 0.8]
    sampler = AcceptanceSampler(parametric({"chat": rates}), np.array(["chat"]), np.array([200_001]), seed=1)
    a = sampler.accepted(np.array([0]), np.arange(200_000)[None, :])[0]
    for k in range(1, 4):
        reached = (a >= k - 1).sum()
        assert abs((a >= k).sum() / reached - rates[k - 1]) < 0.01
    assert sampler.static_confidence
    np.testing.assert_allclose(sampler.row_survival(np.array([0]))[0], np.cumprod(rates))


def test_empirical_walks_in_order_and_cycles():
    prof = empirical(
        {"code": [{"accepted": [3, 0, 2], "confidence": [[0.9, 0.8, 0.5], [0.2, 0.1, 0.1], [0.7, 0.6, 0.5]]}]},
        gamma=3)
    sampler = AcceptanceSampler(prof, np.array(["code", "chat"]), np.array([50, 50]), seed=0)
    steps = np.arange(7)[None, :].repeat(2, axis=0)
    np.testing.assert_array_equal(sampler.accepted(np.array([0, 1]), steps)[0], [3, 0, 2, 3, 0, 2, 3])
    surv = sampler.survival(np.array([0]), np.array([[1, 4]]))
    np.testing.assert_allclose(surv[0, 0], np.cumprod([0.2, 0.1, 0.1]))
    np.testing.assert_allclose(surv[0, 1], np.cumprod([0.2, 0.1, 0.1]))
    assert not sampler.static_confidence


def test_draws_depend_on_seed_request_and_step_only():
    prof = parametric({"chat": [0.8] * 4})
    a = AcceptanceSampler(prof, np.array(["chat"] * 3), np.array([30, 30, 30]), seed=5)
    b = AcceptanceSampler(prof, np.array(["chat"] * 3), np.array([30, 30, 30]), seed=5)
    steps = np.arange(10)[None, :].repeat(3, axis=0)
    rows = np.array([0, 1, 2])
    np.testing.assert_array_equal(a.accepted(rows, steps), b.accepted(rows, steps))
    np.testing.assert_array_equal(a.accepted(rows[1:], steps[1:, 3:6]), b.accepted(rows, steps)[1:, 3:6])


def test_a_request_measured_on_this_trace_walks_its_own_record():
    """Records that name the trace request they were measured on go to that request (a replay
    of the trace they came from); requests no record names draw one from the seed; the id
    survives a save and load, and two records with one id are refused."""
    import pytest

    from dspark_sim.errors import InputError
    from dspark_sim.profiles.acceptance import AcceptanceProfile

    records = [{"id": f"r{k}", "accepted": [k] * 4} for k in range(4)]
    prof = empirical({"code": records}, gamma=3)
    ids = np.array(["r3", "r0", "r2", "r1", "other"])
    steps = np.arange(3)[None, :].repeat(5, axis=0)
    for seed in (0, 1, 2):
        sampler = AcceptanceSampler(prof, np.array(["code"] * 5), np.full(5, 20), seed=seed, request_ids=ids)
        got = sampler.accepted(np.arange(5), steps)
        np.testing.assert_array_equal(got[:4, 0], [3, 0, 2, 1])
        assert got[4, 0] in (0, 1, 2, 3)
    again = AcceptanceProfile.from_dict(prof.to_dict())
    assert [r.request_id for r in again.tasks["code"].requests] == ["r0", "r1", "r2", "r3"]
    with pytest.raises(InputError, match="requests\\[1\\].id"):
        empirical({"code": [{"id": "a", "accepted": [1]}, {"id": "a", "accepted": [2]}]}, gamma=3)
