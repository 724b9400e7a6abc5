"""A budget used some iterations after it is computed (dspark-lagged: `LAG` = 2, the paper's
production scheduler sizes iteration n's budget from the confidences of iteration n - 2).

`LaggedBudgets` is the history a lagged policy owns (one per replica): the raw budgets of the last
`lag` iterations. At a replica's first iterations the oldest budget there is serves. The numpy
form (`budgets`, many consecutive iterations at once) and the scalar form (`budget`, one
iteration of the python loop engine) are the same rule.
"""
from __future__ import annotations

import numpy as np

LAG = 2


class LaggedBudgets:
    """Raw budgets of the last `lag` iterations, and the budget each new iteration uses."""

    def __init__(self, lag: int = LAG) -> None:
        self.lag = lag
        self.history: list[int] = []

    def budgets(self, raw: np.ndarray, history: list[int] | None = None) -> np.ndarray:
        """Budgets of consecutive iterations whose raw budgets are `raw`, following the iterations
        whose raw budgets end `history` (default: those committed)."""
        h = self.history if history is None else history
        full = np.concatenate([np.asarray(h, dtype=np.int64), raw])
        return full[np.maximum(len(h) + np.arange(len(raw)) - self.lag, 0)]

    def budget(self, raw: int) -> int:
        """The budget of the next iteration, whose raw budget is `raw` (committed with it)."""
        h = self.history
        use = h[max(len(h) - self.lag, 0)] if h else raw
        h.append(raw)                # as commit([raw]), in place (the loop engine's hot path)
        if len(h) > self.lag:
            del h[0]
        return use

    def after(self, raw, history: list[int] | None = None) -> list[int]:
        """The history once iterations with raw budgets `raw` have run."""
        h = self.history if history is None else history
        return (list(h) + [int(v) for v in raw])[-self.lag:]

    def commit(self, raw) -> None:
        """Iterations with raw budgets `raw` ran."""
        self.history = self.after(raw)
