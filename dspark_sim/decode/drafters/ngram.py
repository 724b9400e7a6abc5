"""Prompt-lookup drafting: copy what followed the latest earlier occurrence of the last n tokens.

Tries the longest n-gram first (max_n down to min_n) and, for each n, the most recent
earlier occurrence whose continuation is non-empty. Deterministic (no q): verification
under sampling uses the deterministic-draft rule.
"""
from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view

from ..context import Context
from ..sampling import Sampling
from ..target import Target
from .base import Draft, Drafter


def lookup(tokens: np.ndarray, gamma: int, max_n: int = 4, min_n: int = 1) -> np.ndarray:
    """Up to `gamma` tokens following the latest earlier match of the longest matching suffix."""
    length = tokens.shape[0]
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = tokens[length - n:]
        # Windows starting at 0..length-n-1: every earlier occurrence, excluding the suffix itself.
        windows = sliding_window_view(tokens[: length - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start: start + gamma]
    return tokens[:0]


class NGramDrafter(Drafter):
    """Prompt lookup over the request's own committed tokens (prompt and output)."""

    name = kind = "ngram"

    def __init__(self, target: Target | None = None, max_n: int = 4, min_n: int = 1) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
        self.max_n, self.min_n = max_n, min_n
        self._device = target.device if target is not None else torch.device("cpu")

    def propose(self, ctx: Context, gamma: int, sampling: Sampling,
                generator: torch.Generator | None = None) -> Draft:
        found = lookup(np.asarray(ctx.tokens, dtype=np.int64), gamma, self.max_n, self.min_n)
        return Draft(torch.as_tensor(found, dtype=torch.long, device=self._device))
