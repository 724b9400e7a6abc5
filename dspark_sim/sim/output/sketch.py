"""A relative-error quantile sketch (DDSketch-style logarithmic bins), fed chunk by chunk.

A positive value x falls in bin i = ceil(log_g(x)) with g = (1 + a) / (1 - a); bin i holds
(g^(i-1), g^i] and is reported as 2 g^i / (g + 1), which is within a relative `a` of every
value in the bin. The quantile at level q is the bin holding the value of rank floor(q (n-1))
(0-based) of the sorted values, so the estimate is within a relative `a` of that order
statistic, whatever the distribution and however the values were chunked (Masson, Rim & Lee,
"DDSketch", VLDB 2019). Memory: one counter per occupied bin, about
log(max / min) / log(g) bins: 1,400 for a = 0.5% over 6 decades. Zeros (and values below
`min_value`) are counted apart and reported as 0.
"""
from __future__ import annotations

import math

import numpy as np

DEFAULT_ACCURACY = 0.005


class QuantileSketch:
    """Counts of values in logarithmic bins; `quantile(q)` within relative `accuracy`."""

    def __init__(self, accuracy: float = DEFAULT_ACCURACY, min_value: float = 1e-12) -> None:
        if not 0.0 < accuracy < 1.0:
            raise ValueError(f"accuracy must lie in (0, 1), got {accuracy}")
        self.accuracy = accuracy
        self.gamma = (1.0 + accuracy) / (1.0 - accuracy)
        self._log_gamma = math.log(self.gamma)
        self.min_value = min_value
        self.bins: dict[int, int] = {}
        self.zeros = 0
        self.count = 0

    def add(self, values: np.ndarray) -> None:
        """Count the finite values of an array (NaN is skipped)."""
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return
        if (v < 0).any():
            raise ValueError("QuantileSketch takes values >= 0")
        small = v < self.min_value
        self.zeros += int(small.sum())
        positive = v[~small]
        idx, counts = np.unique(np.ceil(np.log(positive) / self._log_gamma).astype(np.int64),
                                return_counts=True)
        for i, c in zip(idx.tolist(), counts.tolist()):
            self.bins[i] = self.bins.get(i, 0) + c
        self.count += int(v.size)

    def quantile(self, q: float) -> float | None:
        """Estimate of the value of rank floor(q (n - 1)); None when empty."""
        if self.count == 0:
            return None
        rank = math.floor(q * (self.count - 1))
        seen = self.zeros
        if rank < seen:
            return 0.0
        for i in sorted(self.bins):
            seen += self.bins[i]
            if seen > rank:
                return 2.0 * self.gamma ** i / (self.gamma + 1.0)
        raise AssertionError("rank beyond the counted values")   # pragma: no cover
