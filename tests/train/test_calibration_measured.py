"""Calibration error as it was measured (calibration/positions.py): per position the samples
it rests on and a bootstrap interval, a headline weighted by samples, nothing for positions no
step reached; the same figures in calibration.json, strict JSON."""
from __future__ import annotations

import numpy as np
import pytest

from dspark_sim.calibration.positions import format_headline, position_calibration
from tests.strict_json import strict_loads


def _steps(n_requests: int, steps: int, p: float, seed: int, gamma: int = 5, reach: int = 1):
    """Steps of requests whose draft 1 is accepted with probability p, and whose later drafts
    are never accepted (positions reach+1.. are never reached), with confidences 0.9."""
    rng = np.random.default_rng(seed)
    n = n_requests * steps
    accepted = np.where(rng.random(n) < p, reach, 0) if reach else np.zeros(n, int)
    conf = np.full((n, gamma), 0.9)
    return conf, accepted, np.repeat(np.arange(n_requests), steps)


def test_headline_equals_the_one_populated_position_when_the_others_are_empty():
    # draft 1 accepted 30% of the time at confidence 0.9, nothing after it: positions 3-5 are
    # never reached, position 2 only by the steps that accepted draft 1
    conf, accepted, groups = _steps(40, 25, 0.3, seed=0, reach=1)
    cal = position_calibration(conf, accepted, groups)
    pos, head = cal["positions"], cal["headline"]
    assert pos[0]["n"] == 1000 and pos[0]["ece"] == pytest.approx(0.9 - accepted.mean())
    assert pos[1]["n"] == accepted.sum() and pos[1]["accepted"] == 0
    assert all(r["n"] == 0 and r["ece"] is None and r["ece_ci95"] is None for r in pos[2:])
    assert head["empty_positions"] == [3, 4, 5] and head["positions"] == [1, 2]
    assert head["ece"] == pytest.approx((pos[0]["n"] * pos[0]["ece"] + pos[1]["n"] * pos[1]["ece"])
                                        / (pos[0]["n"] + pos[1]["n"]))
    # with no step reaching position 2 either, the headline *is* position 1's figure; a plain
    # mean over positions would have been 1/5 of it
    cal = position_calibration(conf, np.zeros_like(accepted), groups)
    assert [r["n"] for r in cal["positions"]] == [1000, 0, 0, 0, 0]
    assert cal["headline"]["ece"] == cal["positions"][0]["ece"] == pytest.approx(0.9)
    assert cal["headline"]["ece_ci95"] == cal["positions"][0]["ece_ci95"]
    assert "n = 1,000 at positions 1 (2-5 never reached)" in format_headline(cal["headline"])


def test_intervals_shrink_with_samples_and_need_two_requests():
    few = position_calibration(*_steps(4, 10, 0.5, seed=1))
    many = position_calibration(*_steps(400, 10, 0.5, seed=1))
    w = [r["positions"][0]["ece_ci95"] for r in (few, many)]
    assert w[1][1] - w[1][0] < 0.3 * (w[0][1] - w[0][0])
    assert 0.0 <= w[1][0] <= many["positions"][0]["ece"] + 0.02
    conf, accepted, _ = _steps(1, 50, 0.5, seed=2)
    one = position_calibration(conf, accepted, np.zeros(50))       # one request: no interval
    assert one["positions"][0]["ece"] is not None and one["positions"][0]["ece_ci95"] is None


def test_calibration_json_is_strict_with_counts_beside_every_figure(tmp_path):
    """AUROC of a position with one class only is null (not NaN), with n and accepted beside it."""
    from dspark_sim.calibration.rollouts import fit_and_report
    from dspark_sim.calibration.sts import RolloutSteps
    from dspark_sim.fileio import write_json_atomic

    rng = np.random.default_rng(3)
    parts = [RolloutSteps(z=rng.normal(0, 1, (30, 4)), accepted=(rng.random(30) < 0.4).astype(int))
             for _ in range(8)]                      # never more than one draft accepted
    _, _, report, _ = fit_and_report(parts, 4)
    write_json_atomic(tmp_path / "calibration.json", report)
    doc = strict_loads((tmp_path / "calibration.json").read_text())
    pos3 = doc["sts"][2]
    assert pos3["n"] == 0 and pos3["ece"] is None and pos3["auroc"] is None
    assert doc["sts"][1]["accepted"] == 0 and doc["sts"][1]["auroc"] is None and doc["sts"][1]["n"] > 0
    assert doc["headline"]["sts"]["positions"] == [1, 2] and doc["headline"]["raw"]["n"] == \
        doc["sts"][0]["n"] + doc["sts"][1]["n"]


def test_reliability_diagram_draws_measured_points_only_with_counts_and_intervals(tmp_path):
    """A position no step reached gets no point (its panel says n = 0); a populated one gets a
    point per non-empty bin, its title the n and the report's ECE with its bootstrap interval."""
    import matplotlib.pyplot as plt

    from dspark_sim.calibration.plot import reliability_diagram, reliability_figure
    from dspark_sim.calibration.rollouts import fit_and_report
    from dspark_sim.calibration.sts import RolloutSteps

    rng = np.random.default_rng(4)
    parts = [RolloutSteps(z=rng.normal(0, 1, (30, 3)), accepted=(rng.random(30) < 0.4).astype(int))
             for _ in range(8)]                      # never more than one draft accepted: k=3 empty
    temps, copy_cal, report, held = fit_and_report(parts, 3)
    figures = {"raw": report["raw"], "sts": report["sts"]}
    fig = reliability_figure(held, temps, copy_cal=copy_cal, figures=figures)
    ax1, ax3 = fig.axes[0], fig.axes[2]
    r1 = report["raw"][0]
    assert ax1.get_title().startswith(f"position 1: n = {r1['n']} steps\nECE raw {100 * r1['ece']:.1f}% [")
    drawn = [c for c in ax1.containers]               # one errorbar container per variant
    bins = len(set(np.minimum((1 / (1 + np.exp(-held.z[:, 0])) * 20).astype(int), 19)))
    assert len(drawn) == 2 and len(drawn[0].lines[0].get_xdata()) == bins       # raw: a point a bin
    sts_points = len(drawn[1].lines[0].get_xdata())
    assert len(ax1.texts) == sts_points > 0           # a count beside every STS point
    assert ax3.get_title() == "position 3: n = 0" and not ax3.containers
    assert len(ax3.lines) == 1                        # the diagonal only
    plt.close(fig)
    out = reliability_diagram(held, temps, tmp_path / "r.png", copy_cal=copy_cal, figures=figures)
    assert out.stat().st_size > 10_000
