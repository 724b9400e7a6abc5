"""Iteration cost of one replica: draft time + target step time, tabulated on integer inputs.

Simulated time is kept in integer nanoseconds so that sums are exact and associative: the
vectorised and the per-iteration engines then agree to the last bit, and an arrival and an
iteration boundary at the same instant are really at the same instant.
"""
from __future__ import annotations

import numpy as np

from ..profiles.hardware import HardwareProfile

NS = 1_000_000_000
UNLIMITED = 1 << 40    # stands for "no limit" in token budgets and KV capacity


def to_ns(seconds) -> np.ndarray:
    """Seconds -> integer nanoseconds (at least 1 ns for a positive duration)."""
    return np.rint(np.asarray(seconds, dtype=float) * NS).astype(np.int64)


class IterationCost:
    """Seconds of one iteration: draft_time(kind, R, drafts) + step_time(B, context)."""

    def __init__(self, hw: HardwareProfile, drafter_kind: str | None) -> None:
        self.hw = hw
        self.kind = drafter_kind if drafter_kind in hw.draft_curves else None
        self.per_draft = self.kind in hw.per_draft_kinds
        self.per_context = float(hw.per_context_token_s)
        self._step = np.zeros(0)
        self._draft = np.zeros(0)
        self._grow_step(4096)
        self._grow_draft(256)
        lowest = hw.step_constant_s if hw.step_curve is None else float(hw.step_curve.y.min())
        self.min_step_ns = max(1, int(to_ns(lowest)))   # lower bound of any iteration's duration

    def _step_base(self, b: np.ndarray) -> np.ndarray:
        if self.hw.step_curve is None:
            return np.full(len(b), float(self.hw.step_constant_s))
        return np.asarray(self.hw.step_curve(b), dtype=float)

    def _grow_step(self, n: int) -> None:
        size = max(n, 2 * len(self._step))
        self._step = self._step_base(np.arange(size, dtype=float))
        self._sps = 1.0 / self._step

    def _grow_draft(self, n: int) -> None:
        size = max(n, 2 * len(self._draft))
        reqs = np.arange(size, dtype=float)
        if self.kind is None:
            self._draft = np.zeros(size)
        else:
            self._draft = np.where(reqs > 0, np.asarray(self.hw.draft_curves[self.kind](reqs), dtype=float), 0.0)

    def sps(self, batch_tokens: np.ndarray) -> np.ndarray:
        """Target steps per second at integer batch tokens (SPS(B) = 1 / step_time(B))."""
        b = np.asarray(batch_tokens, dtype=np.int64)
        top = int(b.max(initial=0))
        if top >= len(self._sps):
            self._grow_step(top + 1)
        return self._sps[b]

    def step_seconds(self, batch_tokens: np.ndarray) -> np.ndarray:
        """Target step seconds at integer batch tokens, without the context term."""
        b = np.asarray(batch_tokens, dtype=np.int64)
        top = int(b.max(initial=0))
        if top >= len(self._step):
            self._grow_step(top + 1)
        return self._step[b]

    def draft_seconds(self, requests: np.ndarray, drafts: np.ndarray) -> np.ndarray:
        """Drafting seconds for `requests` decoding requests making `drafts` sequential drafts."""
        r = np.asarray(requests, dtype=np.int64)
        top = int(r.max(initial=0))
        if top >= len(self._draft):
            self._grow_draft(top + 1)
        t = self._draft[r]
        return t * drafts if self.per_draft else np.where(np.asarray(drafts) > 0, t, 0.0)

    def iteration_ns(self, requests: np.ndarray, batch_tokens: np.ndarray, context: np.ndarray,
                     drafts: np.ndarray) -> np.ndarray:
        """Integer nanoseconds of each iteration (vectorised)."""
        seconds = self.draft_seconds(requests, drafts) + self.step_seconds(batch_tokens)
        if self.per_context:
            seconds = seconds + self.per_context * np.asarray(context, dtype=float)
        return np.maximum(to_ns(seconds), 1)
