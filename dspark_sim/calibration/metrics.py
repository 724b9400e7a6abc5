"""Calibration metrics of predicted probabilities against binary outcomes."""
from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def _check(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if p.shape != y.shape:
        raise ValueError(f"{p.size} probabilities but {y.size} outcomes")
    return p, y


def reliability(p: np.ndarray, y: np.ndarray, n_bins: int = 20
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per equal-width bin on [0, 1]: (mean confidence, observed frequency, count)."""
    p, y = _check(p, y)
    idx = np.clip((p * n_bins).astype(int), 0, n_bins - 1)
    count = np.bincount(idx, minlength=n_bins).astype(float)
    conf = np.bincount(idx, weights=p, minlength=n_bins)
    freq = np.bincount(idx, weights=y, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return conf / count, freq / count, count


def ece(p: np.ndarray, y: np.ndarray, n_bins: int = 20) -> float:
    """Expected calibration error: sum over bins of |B|/N * |frequency(B) - confidence(B)|."""
    conf, freq, count = reliability(p, y, n_bins)
    n = count.sum()
    if n == 0:
        return float("nan")
    ok = count > 0
    return float(np.sum(count[ok] / n * np.abs(freq[ok] - conf[ok])))


def brier(p: np.ndarray, y: np.ndarray) -> float:
    """Mean squared error of the probabilities."""
    p, y = _check(p, y)
    return float(np.mean((p - y) ** 2)) if p.size else float("nan")


def auroc(p: np.ndarray, y: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney, ties counted half); nan with one class only."""
    p, y = _check(p, y)
    pos = y > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(p)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
