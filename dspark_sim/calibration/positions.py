"""Calibration error per draft position as it was measured: how many samples each figure rests
on, a bootstrap interval, and a headline weighted by samples.

A confidence head's c_k claims P(draft k accepted | drafts 1..k-1 accepted). Its calibration at
position k can only be measured on the steps that *reached* k (drafts 1..k-1 accepted and a k-th
draft verified): those are position k's samples, n_k. Far positions are often reached a handful of
times or never; a plain mean over positions would count an empty position's trivial error as if it
were measured. So the headline ECE is sum_k n_k ECE_k / sum_k n_k, an empty position has no figure
(None, with n = 0 beside it) and weighs nothing, and every figure carries a 95% bootstrap interval
over whole requests (the steps of one request are not independent; a position whose samples all
come from one request gets none).

The survival view (a_k = c_1 ... c_k against "drafts 1..k all accepted", over every step: what
Sequential Temperature Scaling fits and the paper reports) is given per position beside it, with
its count of accepted prefixes.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .metrics import auroc, brier

N_BOOT = 200          # bootstrap resamples of the requests
N_BINS = 20           # equal-width ECE bins (method.md section 3)
METRIC = ("ECE (20 equal-width bins) of the conditional confidence c_k against 'draft k accepted', "
          "over the steps that reached position k (drafts 1..k-1 accepted, a k-th draft "
          "verified); n = those steps. Headline: weighted by n (empty positions weigh nothing). "
          "ci95: 95% basic bootstrap interval over resamples of whole requests (none where one "
          "request gave all the samples); it bounds the calibration error itself, and since an "
          "ECE measured on finitely many samples is biased upward it can lie below the measured "
          "figure.")


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _resample_weights(groups: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, N] weights of the steps: multinomial counts of their request per resample."""
    uniq, inv = np.unique(groups, return_inverse=True)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(uniq), np.full(len(uniq), 1.0 / len(uniq)), size=n_boot)
    return counts[:, inv.reshape(-1)].astype(np.float64)


def _weighted_ece(p: np.ndarray, y: np.ndarray, w: np.ndarray, n_bins: int) -> np.ndarray:
    """ECE of p against y under each row of weights w [B, n] (the usual ECE for unit weights):
    sum over bins of |sum w (y - p)| / sum w; NaN where a row's weights sum to 0."""
    idx = np.clip((p * n_bins).astype(np.int64), 0, n_bins - 1)
    b = w.shape[0]
    flat = (idx[None, :] + np.arange(b)[:, None] * n_bins).ravel()
    err = np.bincount(flat, weights=(w * (y - p)[None, :]).ravel(), minlength=b * n_bins)
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(err.reshape(b, n_bins)).sum(axis=1) / total


def _interval(estimate: float, samples: np.ndarray) -> list[float] | None:
    """95% basic (reverse-percentile) bootstrap interval, clipped to [0, 1]. An ECE measured on
    a resample with repeated requests comes out higher than on the sample (fewer distinct
    points per bin), so plain percentiles sit above the estimate and can exclude it; reflecting
    them about the estimate corrects that shift."""
    ok = samples[np.isfinite(samples)]
    if ok.size < 2:
        return None
    q_lo, q_hi = np.percentile(ok, [2.5, 97.5])
    return [float(np.clip(2 * estimate - q_hi, 0.0, 1.0)), float(np.clip(2 * estimate - q_lo, 0.0, 1.0))]


def position_calibration(confidence: np.ndarray, accepted: np.ndarray,
                         groups: np.ndarray | None = None, verified: np.ndarray | None = None, *,
                         n_bins: int = N_BINS, n_boot: int = N_BOOT, seed: int = 0,
                         survival: bool = True) -> dict[str, Any]:
    """Per-position and headline calibration of conditional confidences.

    confidence [N, gamma]: c_1..c_gamma of N steps (NaN where a step has no confidence there);
    accepted [N]: drafts accepted; groups [N]: the request of each step (None: one request per
    step); verified [N]: drafts verified (None: all gamma). Returns {"positions": [...],
    "headline": {...}, "metric": ...}; figures without samples are None, with n beside them."""
    c = np.asarray(confidence, dtype=np.float64)
    if c.ndim != 2:
        raise ValueError(f"confidence must be [steps, gamma], got shape {c.shape}")
    n, gamma = c.shape
    acc = np.asarray(accepted, dtype=np.int64).reshape(-1)
    ver = np.full(n, gamma) if verified is None else np.asarray(verified, dtype=np.int64).reshape(-1)
    grp = np.arange(n) if groups is None else np.asarray(groups).reshape(-1)
    if acc.shape != (n,) or ver.shape != (n,) or grp.shape != (n,):
        raise ValueError(f"accepted, verified and groups need one entry per step ({n})")
    n_groups = len(np.unique(grp)) if n else 0
    weights = _resample_weights(grp, n_boot, seed) if n_groups >= 2 and n_boot > 0 else None
    positions, boot_err, boot_n = [], [], []
    for k in range(1, gamma + 1):
        p_all = c[:, k - 1]
        reached = (acc >= k - 1) & (ver >= k) & np.isfinite(p_all)
        p, y = np.clip(p_all[reached], 0.0, 1.0), (acc[reached] >= k).astype(np.float64)
        m = int(reached.sum())
        row: dict[str, Any] = {"position": k, "n": m, "accepted": int(y.sum()),
                               "requests": int(len(np.unique(grp[reached]))) if m else 0,
                               "ece": None, "ece_ci95": None, "auroc": None, "brier": None,
                               "mean_confidence": None, "accept_rate": None}
        if m:
            row["ece"] = float(_weighted_ece(p, y, np.ones((1, m)), n_bins)[0])
            row.update(auroc=_finite(auroc(p, y)), brier=float(brier(p, y)),
                       mean_confidence=float(p.mean()), accept_rate=float(y.mean()))
            if weights is not None:
                w = weights[:, reached]
                errs = _weighted_ece(p, y, w, n_bins)
                if row["requests"] >= 2:          # one request's steps give no interval
                    row["ece_ci95"] = _interval(row["ece"], errs)
                boot_err.append(np.nan_to_num(errs) * w.sum(axis=1))
                boot_n.append(w.sum(axis=1))
        positions.append(row)
    total = sum(r["n"] for r in positions)
    headline: dict[str, Any] = {
        "ece": (sum(r["n"] * r["ece"] for r in positions if r["n"]) / total) if total else None,
        "ece_ci95": None, "n": total, "steps": n, "requests": n_groups,
        "positions": [r["position"] for r in positions if r["n"]],
        "empty_positions": [r["position"] for r in positions if not r["n"]]}
    if boot_err:
        num, den = np.sum(boot_err, axis=0), np.sum(boot_n, axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            headline["ece_ci95"] = _interval(headline["ece"], num / den)
    out = {"positions": positions, "headline": headline, "metric": METRIC}
    if survival:
        out["survival"] = survival_calibration(c, acc, ver, n_bins=n_bins, weights=weights)
    return out


def request_calibration(requests: list[tuple[Any, Any, Any]], gamma: int, **options: Any
                        ) -> dict[str, Any] | None:
    """position_calibration of measured requests, each (confidence rows, accepted per step,
    verified per step or None = gamma): a step's row may be shorter than gamma (fewer drafts).
    The last step of each request is left out (an EOS or the token budget may cut its
    acceptance, as calibrate's rollouts do). None when no step has a confidence."""
    rows, accepted, verified, groups = [], [], [], []
    for i, (conf, acc, ver) in enumerate(requests):
        if conf is None or len(conf) == 0:
            continue
        for t in range(min(len(acc), len(conf)) - 1):
            row = [float(x) for x in list(conf[t])[:gamma]]
            rows.append(row + [np.nan] * (gamma - len(row)))
            accepted.append(int(acc[t]))
            verified.append(gamma if ver is None else int(ver[t]))
            groups.append(i)
    if not rows:
        return None
    return position_calibration(np.array(rows), np.array(accepted), np.array(groups),
                                np.array(verified), **options)


def survival_calibration(confidence: np.ndarray, accepted: np.ndarray, verified: np.ndarray, *,
                         n_bins: int = N_BINS, weights: np.ndarray | None = None) -> list[dict]:
    """Per position k, over steps with k confidences and k drafts verified: ECE (with its
    bootstrap interval over requests, `weights` [B, N] from the resampling),
    AUROC and Brier of the survival a_k = c_1 ... c_k against "drafts 1..k all accepted", the
    number of steps and of accepted prefixes (`positives`), mean a_k and the observed rate."""
    c = np.asarray(confidence, dtype=np.float64)
    acc = np.asarray(accepted, dtype=np.int64)
    a = np.cumprod(c, axis=1)                     # NaN from the first missing confidence on
    out = []
    for k in range(1, c.shape[1] + 1):
        ok = np.isfinite(a[:, k - 1]) & (np.asarray(verified) >= k)
        p, y = np.clip(a[ok, k - 1], 0.0, 1.0), (acc[ok] >= k).astype(np.float64)
        m = int(ok.sum())
        row: dict[str, Any] = {"position": k, "steps": m, "positives": int(y.sum()), "ece": None,
                               "ece_ci95": None, "auroc": None, "brier": None,
                               "mean_survival": None, "rate": None}
        if m:
            row.update(ece=float(_weighted_ece(p, y, np.ones((1, m)), n_bins)[0]),
                       auroc=_finite(auroc(p, y)), brier=float(brier(p, y)),
                       mean_survival=float(p.mean()), rate=float(y.mean()))
            if weights is not None:
                row["ece_ci95"] = _interval(row["ece"], _weighted_ece(p, y, weights[:, ok], n_bins))
        out.append(row)
    return out


def format_headline(headline: dict[str, Any]) -> str:
    """'3.10% [2.41, 3.95] over 1,234 samples at positions 1-3 (4-7 empty)' style text."""
    if headline.get("ece") is None:
        return "no samples"
    ci = headline.get("ece_ci95")
    text = f"{100 * headline['ece']:.2f}%"
    if ci:
        text += f" [{100 * ci[0]:.2f}, {100 * ci[1]:.2f}]"
    text += f", n = {headline['n']:,} at positions {_ranges(headline['positions'])}"
    if headline.get("empty_positions"):
        text += f" ({_ranges(headline['empty_positions'])} never reached)"
    return text


def format_position(row: dict[str, Any]) -> str:
    """'k=2: 4.1% [2.0, 7.3] (n=210)' or 'k=7: - (n=0)'."""
    if row.get("ece") is None:
        return f"k={row['position']}: - (n=0)"
    ci = row.get("ece_ci95")
    band = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else ""
    return f"k={row['position']}: {100 * row['ece']:.1f}%{band} (n={row['n']})"


def _ranges(ks: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    parts, start = [], None
    for i, k in enumerate(ks):
        if start is None:
            start = k
        if i + 1 == len(ks) or ks[i + 1] != k + 1:
            parts.append(str(start) if start == k else f"{start}-{k}")
            start = None
    return ", ".join(parts)
