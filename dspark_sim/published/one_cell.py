"""A diagnostic of `validate-published`: what one measured speculative cell buys.

A user who doubts a prediction from a baseline arm can measure one speculative point. Per
speculative arm (with at least three published loads) the baseline arm is fitted again together
with that arm's cell at its middle load, `profile fit`'s own way (the two policies let the fit
estimate `draft_scale`, sweep/calibrate.py: what the engine's speculative iterations cost beyond
their target forward, as priced by the case's draft costs), and the arm's other loads are
predicted under that fit. The cell used is reported, and the count of the others within 15% is
set beside the baseline-only prediction's on the same cells. It reads one published speculative
number per arm, so it is a diagnostic, never the prediction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..hardware.observations import LoadPoint
from ..sweep.calibrate import FitResult
from ..sweep.load_replay import FitConfig, simulate_load
from .cases import Case

TARGET = 0.15


@dataclass
class OneCellFit:
    """One arm's fit with its middle cell, and its gains at every load."""

    arm: str
    used_load: int
    draft_scale: float | None                      # None: not fitted (no priced drafter)
    rows: list[dict] = field(default_factory=list)

    def counts(self, baseline_rows: list[dict]) -> dict[str, int]:
        """Within the target on the cells not used: with the cell, and baseline-only."""
        others = [r for r in self.rows if not r["used"]]
        before = {r["load"]: r for r in baseline_rows if r["arm"] == self.arm}
        return {"cells": len(others),
                "within": sum(abs(r["gain_error"]) <= TARGET for r in others),
                "within_baseline_only": sum(abs(before[r["load"]]["gain_error"]) <= TARGET for r in others)}


def fit_one_cell(case: Case, points_of: Callable[[str], list[LoadPoint]],
                 fit: Callable[[list[LoadPoint]], tuple[FitResult, FitConfig]],
                 progress: Callable[[str], None] | None = None) -> list[OneCellFit]:
    """Per speculative arm with 3+ loads: `fit` the baseline points plus the arm's middle cell,
    simulate both arms at every load, tabulate the gains (`points_of(arm name)`: its load points)."""
    out = []
    base = case.arm(case.baseline)
    base_pub = case.per_gpu(base)
    for arm in case.arms:
        if arm.name == base.name or len(case.loads) < 3:
            continue
        k = len(case.loads) // 2
        base_pts, arm_pts = points_of(base.name), points_of(arm.name)
        result, cfg = fit(base_pts + [arm_pts[k]])
        pub = case.per_gpu(arm)
        res = OneCellFit(arm.name, case.loads[k], result.params.get("draft_scale"))
        for j, users in enumerate(case.loads):
            b = simulate_load(result.profile, base_pts[j], users, cfg).throughput_tok_s_per_gpu
            a = simulate_load(result.profile, arm_pts[j], users, cfg).throughput_tok_s_per_gpu
            if progress:
                progress(f"{arm.name} @ {users} (one cell)")
            pub_gain, gain = pub[j] / base_pub[j], a / b
            res.rows.append({"load": users, "used": j == k, "published_gain": float(pub_gain),
                             "predicted_gain": float(gain), "gain_error": float(gain / pub_gain - 1)})
        out.append(res)
    return out


def describe(fits: list[OneCellFit], case: Case, baseline_rows: list[dict]) -> str:
    """One paragraph per case for table.md."""
    parts = []
    for f in fits:
        c = f.counts(baseline_rows)
        label = case.arm(f.arm).label
        scale = f"draft_scale x{f.draft_scale:.3g}" if f.draft_scale is not None else "draft_scale not fitted"
        gains = " ".join(f"x{r['predicted_gain']:.2f}" + ("*" if r["used"] else "") for r in f.rows)
        errors = " ".join(f"{r['gain_error']:+.0%}" for r in f.rows)
        parts.append(f"{label}: with its cell at load {f.used_load} in the fit ({scale}), gains {gains} "
                     f"(errors {errors}): within 15% on "
                     f"{c['within']} of the {c['cells']} other cells (baseline-only prediction: "
                     f"{c['within_baseline_only']})")
    return ("One speculative cell (diagnostic: the arm's middle cell, marked *, fitted with the baseline "
            "arm, so it reads a published speculative number; not the prediction): " + "; ".join(parts) + ".")


def summary(fits_by_case: list[tuple[list[OneCellFit], list[dict]]]) -> dict[str, int]:
    """Totals over cases: other cells, within the target with the cell, and baseline-only."""
    tot = {"cells": 0, "within": 0, "within_baseline_only": 0}
    for fits, rows in fits_by_case:
        for f in fits:
            for k, v in f.counts(rows).items():
                tot[k] += v
    return tot


def as_dicts(fits: list[OneCellFit]) -> list[dict]:
    return [{"arm": f.arm, "used_load": f.used_load, "draft_scale": f.draft_scale, "rows": f.rows}
            for f in fits]
