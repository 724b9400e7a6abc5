"""Least-squares fit of measured timings to the hardware-profile model, with per-point errors.

Model (formats.md): step(B, X) = T(B) + k * X, where T is piecewise linear with one knot per
measured batch size B (batch tokens) and X is the KV tokens of the batch's requests. The
unknowns T(knots) >= 0 and k >= 0 minimise the sum of squared *relative* errors against each
point's median, so fast and slow points weigh alike.

The smooth family (`fit_step_smooth`, used for serving engines such as vLLM whose iterations
are measured at many ragged sizes) has knots at powers of two only, T non-decreasing, and a
per-request term: step(B, X, R) = T(B) + k * X + per_request_s * R, R the requests in the
iteration. per_request_s is identified by points that vary the tokens per request at one
request count (verify steps with drafts, prefill chunks).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

from ..profiles.curve import Curve
from .profiler import Timing


@dataclass
class PointError:
    """How the fitted profile reproduces one measured point."""

    timing: Timing
    predicted_s: float

    @property
    def rel_error(self) -> float:
        return self.predicted_s / self.timing.median_s - 1.0

    @property
    def within_spread(self) -> bool:
        """Fit error no larger than the measurement's own p10..p90 spread."""
        return abs(self.predicted_s - self.timing.median_s) <= self.timing.p90_s - self.timing.p10_s

    def as_dict(self) -> dict:
        out = self.timing.as_dict()
        out.update(predicted_s=self.predicted_s, rel_error=self.rel_error,
                   within_spread=self.within_spread)
        return out


@dataclass
class StepFit:
    """Fitted batch-token table, per-context-token term, and the error at every point."""

    batch_tokens: np.ndarray
    seconds: np.ndarray
    per_context_token_s: float
    points: list[PointError]
    per_request_s: float = 0.0
    method: str = "least squares on relative error; knots at the measured batch sizes"

    @property
    def curve(self) -> Curve:
        return Curve.of(self.batch_tokens, self.seconds)

    def predict(self, batch_tokens, context_tokens, requests=0) -> np.ndarray:
        """Fitted step seconds at (batch tokens, KV tokens of the batch's requests, requests)."""
        return np.asarray(self.curve(batch_tokens)) + self.per_context_token_s * np.asarray(context_tokens) \
            + self.per_request_s * np.asarray(requests, dtype=float)

    def summary(self) -> dict:
        """Aggregate fit quality, for the profile's `fit` block."""
        rel = np.abs([p.rel_error for p in self.points])
        out = {"method": self.method, "points": len(self.points),
               "within_spread": int(sum(p.within_spread for p in self.points)),
               "median_abs_rel_error": float(np.median(rel)),
               "max_abs_rel_error": float(np.max(rel))}
        if self.per_request_s:
            out["per_request_s"] = self.per_request_s
        return out


def fit_step_time(timings: list[Timing]) -> StepFit:
    """Fit T(B) at the measured batch sizes and k >= 0 to the timings' medians."""
    if not timings:
        raise ValueError("no timings to fit")
    B = np.array([t.batch_tokens for t in timings], dtype=float)
    X = np.array([t.context_tokens for t in timings], dtype=float)
    y = np.array([t.median_s for t in timings])
    knots = np.unique(B)
    onehot = np.zeros((len(B), len(knots)))
    onehot[np.arange(len(B)), np.searchsorted(knots, B)] = 1.0   # every B is a knot
    design = np.column_stack([onehot, X])
    scale = 1.0 / y
    has_context = bool(np.any(X > 0))
    if not has_context:
        design = design[:, :-1]
    solution = lsq_linear(design * scale[:, None], y * scale, bounds=(0.0, np.inf)).x
    seconds = np.maximum(solution[: len(knots)], 1e-9)
    k = float(solution[-1]) if has_context else 0.0
    fit = StepFit(knots, seconds, k, [])
    fit.points = [PointError(t, float(p)) for t, p in zip(timings, fit.predict(B, X))]
    return fit


def smooth_knots(batch_tokens) -> np.ndarray:
    """Knots of the smooth family: 1, 2, 4, ... up to the largest batch size (itself a knot)."""
    top = float(np.max(batch_tokens))
    knots = [1.0]
    while knots[-1] * 2 < top:
        knots.append(knots[-1] * 2)
    return np.array(knots + ([top] if top > knots[-1] else []))


def fit_step_smooth(timings: list[Timing]) -> StepFit:
    """Fit the smooth family (module docstring): T at power-of-two knots as a first value plus
    non-negative increments (so T never falls between neighbouring sizes), k >= 0 and
    per_request_s >= 0; robust least squares on log relative error (`_robust_log_fit`)."""
    if not timings:
        raise ValueError("no timings to fit")
    B = np.array([t.batch_tokens for t in timings], dtype=float)
    X = np.array([t.context_tokens for t in timings], dtype=float)
    R = np.array([t.requests for t in timings], dtype=float)
    y = np.array([t.median_s for t in timings])
    knots = smooth_knots(B)
    n = len(knots)
    basis = np.array([np.interp(B, knots, np.eye(n)[j]) for j in range(n)]).T   # hat functions
    cumulative = np.cumsum(basis[:, ::-1], axis=1)[:, ::-1]    # T(knot_i) = sum_{j <= i} d_j
    design = np.column_stack([cumulative, X[:, None], R[:, None]])
    start = lsq_linear(design / y[:, None], np.ones_like(y), bounds=(0.0, np.inf)).x
    solution = _robust_log_fit(design, y, start)
    seconds = np.maximum(np.cumsum(solution[:n]), 1e-9)
    fit = StepFit(knots, seconds, float(solution[n]), [], per_request_s=float(solution[n + 1]),
                  method="robust (soft-L1) least squares on log relative error; smooth family: "
                         "non-decreasing T at power-of-two knots + per_context_token_s x context + "
                         "per_request_s x requests")
    fit.points = [PointError(t, float(p)) for t, p in zip(timings, fit.predict(B, X, R))]
    return fit


def _robust_log_fit(design: np.ndarray, y: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Non-negative coefficients c minimising sum soft_l1(log(design c / y)): relative error on
    a log scale, with a loss that grows like sqrt beyond ~10% so a few wild medians (a shared
    machine's slow spells; a speculative point whose proposer share was subtracted to ~0) do
    not drag the curve. Starts from the plain least-squares solution."""
    from scipy.optimize import least_squares

    good = y > 0
    design, y = design[good], y[good]
    used = start > 1e-9 * max(float(np.max(start)), 1e-300)   # the start's non-zero terms
    scale = np.where(used, start, np.median(y) / max(float(np.max(design)), 1.0))

    def resid(c: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(design @ (c * scale), 1e-12) / y)

    x0 = np.where(used, 1.0, 0.0)
    res = least_squares(resid, x0, bounds=(0.0, np.inf), loss="soft_l1", f_scale=0.1,
                        x_scale=1.0, max_nfev=5000)
    return np.where(res.x > 1e-6, res.x, 0.0) * scale      # at the bound: exactly 0


def draft_slope(timings: list[Timing]) -> tuple[Curve, int, np.ndarray]:
    """A block drafter timed at several depths (`width` = drafts per request): its table at the
    deepest depth D (as `draft_curve`), D, and per request count the least-squares slope of the
    median seconds over the depths, clipped to [0, seconds(D) / D] (a cost that cannot fall
    below zero without drafts)."""
    depth = max(t.width for t in timings)
    curve = draft_curve([t for t in timings if t.width == depth])
    slopes = []
    for r, top in zip(curve.x, curve.y):
        mine = [t for t in timings if t.requests == r]
        d = np.array([t.width for t in mine], dtype=float)
        y = np.array([t.median_s for t in mine])
        slope = float(np.polyfit(d, y, 1)[0]) if len(np.unique(d)) > 1 else 0.0
        # just under seconds(D) / D, so that a value read back from the file passes the
        # loader's check (slope x D <= seconds) whatever the rounding of the product
        slopes.append(min(max(slope, 0.0), top / depth * (1.0 - 1e-9)))
    return curve, depth, np.asarray(slopes)


def draft_curve(timings: list[Timing]) -> Curve:
    """A drafter's draft_time table: median seconds per request count (contexts pooled)."""
    requests = sorted({t.requests for t in timings})
    seconds = [float(np.median([s for t in timings if t.requests == r for s in t.samples_s]))
               for r in requests]
    return Curve.of(requests, seconds)
