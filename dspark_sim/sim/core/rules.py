"""The simulator's small rules, each defined once, with its scalar (python) and numpy forms side
by side where both are needed. Every engine, the scheduler and serve/'s replica use these;
tests/sim/test_layers.py greps the package for twins.
"""
from __future__ import annotations

import numpy as np


def survivals(confidence: np.ndarray) -> np.ndarray:
    """a[..., j] = prod_{i<=j} c[..., i]: probability that drafts 1..j all survive."""
    return np.cumprod(np.asarray(confidence, dtype=float), axis=-1)
