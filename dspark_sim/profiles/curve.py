"""Piecewise-linear curves used by hardware profiles (step time, draft time)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Curve:
    """y(x): linear between points, linear from the last two points beyond the last one,
    flat below the first point; a single point is a constant."""

    x: np.ndarray
    y: np.ndarray

    @classmethod
    def of(cls, x, y) -> "Curve":
        return cls(np.asarray(x, dtype=float), np.asarray(y, dtype=float))

    def __call__(self, v):
        v_arr = np.asarray(v, dtype=float)
        out = np.interp(v_arr, self.x, self.y)
        if len(self.x) >= 2:
            slope = (self.y[-1] - self.y[-2]) / (self.x[-1] - self.x[-2])
            out = np.where(v_arr > self.x[-1], self.y[-1] + slope * (v_arr - self.x[-1]), out)
        return float(out) if np.ndim(out) == 0 else out
