"""Calibration metrics and Sequential Temperature Scaling."""
from __future__ import annotations

import numpy as np
import pytest

from dspark_sim.calibration import auroc, brier, ece, reliability
from dspark_sim.calibration.rollouts import load_rollouts, save_rollouts
from dspark_sim.calibration.sts import (DEFAULT_GRID, RolloutSteps, _ece_curve, fit_sts, fit_sts_detail,
                                       position_report, survival)


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


def _rollouts(n: int, seed: int, gamma: int = 5, scale: float = 3.0, mean: float = 1.0) -> RolloutSteps:
    """Steps whose true survival is sigmoid(s), with raw logits scale * s + 0.5 (over-confident
    for scale > 1)."""
    rng = np.random.default_rng(seed)
    s = rng.normal(mean, 1.5, (n, gamma))
    accepted = accepted_runs(1 / (1 + np.exp(-s)), rng)
    return RolloutSteps(z=scale * s + 0.5 * (scale != 1.0), accepted=accepted)


def accepted_runs(c: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Drafts accepted per step [N] when draft k survives with conditional probability c[:, k]."""
    accepted = np.zeros(c.shape[0], dtype=int)
    for i in range(c.shape[0]):
        k = 0
        while k < c.shape[1] and rng.random() < c[i, k]:
            k += 1
        accepted[i] = k
    return accepted


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


def test_sts_keeps_temperature_one_where_positives_are_too_few():
    steps = _rollouts(400, 3, gamma=6, mean=-1.5)      # deep prefixes are almost never accepted
    temps, copy_cal, detail = fit_sts_detail(steps, min_positives=30)
    assert np.array_equal(copy_cal[:, 0], temps) and not copy_cal[:, 1].any()   # nothing copied
    y = steps.prefix_accepted().sum(axis=0)
    for k, info in enumerate(detail):
        assert info["positives"] == int(y[k])
        if y[k] < 30:
            assert temps[k] == 1.0 and info["rule"].startswith("kept 1: fewer than 30")
    assert y[-1] < 30 and y[0] >= 30 and detail[0]["rule"] == "fitted"


def test_sts_leaves_a_calibrated_head_near_one():
    fit = _rollouts(2000, 4, scale=1.0)
    temps = fit_sts(fit, groups=np.arange(2000) // 20)     # 100 "requests" of 20 steps
    assert np.all((temps > 0.75) & (temps < 1.33))


def test_rollouts_round_trip(tmp_path):
    parts = [_rollouts(n, 5 + n) for n in (7, 0, 12)]
    path = save_rollouts(tmp_path / "r.npz", parts, {"gamma": 5, "temperature": 1.0, "seed": 0})
    back, meta = load_rollouts(path)
    assert meta["temperature"] == 1.0 and [p.z.shape[0] for p in back] == [7, 0, 12]
    for a, b in zip(parts, back):
        assert np.allclose(a.z, b.z, atol=1e-5) and np.array_equal(a.accepted, b.accepted)


def test_grid_ece_curve_is_the_metrics_ece():
    """The vectorised objective STS searches equals calibration.ece at every temperature."""
    steps = _rollouts(300, 6)
    prefix = 1 / (1 + np.exp(-steps.z[:, 0]))
    y = steps.prefix_accepted()[:, 1]
    grid = DEFAULT_GRID[::20]
    curve = _ece_curve(prefix, steps.z[:, 1], y, grid, np.ones(300), 20)
    want = [ece(prefix / (1 + np.exp(-steps.z[:, 1] / t)), y, 20) for t in grid]
    assert curve == pytest.approx(want, abs=1e-12)


def test_fit_and_report_with_heldout_rollouts_fits_every_request_and_scores_the_others():
    from dspark_sim.calibration.rollouts import fit_and_report

    parts = [_rollouts(150, 20 + i) for i in range(8)]
    other = [_rollouts(150, 40 + i) for i in range(4)]
    temps_half, _, half, _ = fit_and_report(parts, 5)
    temps, _, rep, held = fit_and_report(parts, 5, heldout=other)
    assert half["fit_steps"] == 600 and half["heldout_steps"] == 600
    assert rep["fit_steps"] == 1200 and rep["heldout_steps"] == 600 == held.z.shape[0]
    assert np.allclose(held.z, np.concatenate([p.z for p in other]))
    # the over-confident logits are calibrated on rollouts the fit never saw
    # (STS fits the survival a_k: its ECE halves; the conditional c_k's weighted headline falls)
    survival = {v: np.mean([r["survival"]["ece"] for r in rep[v]]) for v in ("raw", "sts")}
    assert survival["sts"] < 0.5 * survival["raw"]
    assert rep["headline"]["sts"]["ece"] < 0.7 * rep["headline"]["raw"]["ece"]
    with pytest.raises(ValueError, match="too few"):
        fit_and_report(parts, 5, heldout=[_rollouts(5, 99)])
