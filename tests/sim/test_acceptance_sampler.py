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
