"""Units of the simulation: time in integer nanoseconds, and the stand-in for "no limit".

Simulated time is kept in integer nanoseconds so that sums are exact and associative: the
engines then agree to the last bit, and an arrival and an iteration boundary at the same
instant are really at the same instant.
"""
from __future__ import annotations

import numpy as np

NS = 1_000_000_000
UNLIMITED = 1 << 40    # stands for "no limit" in token budgets and KV capacity


def to_ns(seconds) -> np.ndarray:
    """Seconds -> integer nanoseconds (at least 1 ns for a positive duration)."""
    return np.rint(np.asarray(seconds, dtype=float) * NS).astype(np.int64)
