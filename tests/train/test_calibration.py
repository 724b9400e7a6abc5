"""Calibration metrics and Sequential Temperature Scaling."""
from __future__ import annotations

import numpy as np
import pytest

from dspark_sim.calibration import auroc, brier, ece, reliability
from dspark_sim.calibration.sts import RolloutSteps, fit_sts, position_report, survival


def test_metrics_on_known_values():
    p = np.array([0.1, 0.4, 0.35, 0.8])
    y = np.array([0, 0, 1, 1])
    assert auroc(p, y) == pytest.approx(0.75)
    assert brier(p, y) == pytest.approx(np.mean((p - y) ** 2))
    # perfectly calibrated bins have zero ECE; one bin off by 0.3 has ECE 0.3 * its share
    assert ece(np.full(10, 0.5), np.array([0, 1] * 5)) == pytest.approx(0.0)
    assert ece(np.full(4, 0.8), np.array([1, 1, 0, 0])) == pytest.approx(0.3)
    conf, freq, count = reliability(p, y, n_bins=20)
    assert count.sum() == 4 and np.nansum(conf * count) == pytest.approx(p.sum())


def _rollouts(n: int, seed: int, gamma: int = 5) -> RolloutSteps:
    """Steps whose true survival is sigmoid(s), with raw logits that are over-confident."""
    rng = np.random.default_rng(seed)
    s = rng.normal(1.0, 1.5, (n, gamma))
    c = 1 / (1 + np.exp(-s))
    accepted = np.zeros(n, dtype=int)
    for i in range(n):
        k = 0
        while k < gamma and rng.random() < c[i, k]:
            k += 1
        accepted[i] = k
    return RolloutSteps(z=3.0 * s + 0.5, accepted=accepted)


def test_sts_lowers_mean_ece_on_held_out_rollouts():
    fit, held = _rollouts(3000, 0), _rollouts(3000, 1)
    temps = fit_sts(fit)
    raw = np.mean([r["ece"] for r in position_report(held, None)])
    cal = np.mean([r["ece"] for r in position_report(held, temps)])
    assert cal < 0.5 * raw
    assert np.all(temps > 0)


def test_sts_never_reorders_confidences_within_a_position():
    steps = _rollouts(500, 2)
    temps = fit_sts(steps)
    before = 1 / (1 + np.exp(-steps.z))
    after = 1 / (1 + np.exp(-steps.z / temps))
    for k in range(steps.gamma):
        assert np.array_equal(np.argsort(before[:, k], kind="stable"),
                              np.argsort(after[:, k], kind="stable"))


def test_survival_is_the_running_product():
    z = np.array([[0.0, 0.0, 2.0]])
    a = survival(z, np.array([1.0, 1.0, 2.0]))
    assert a[0] == pytest.approx([0.5, 0.25, 0.25 / (1 + np.exp(-1.0))])
