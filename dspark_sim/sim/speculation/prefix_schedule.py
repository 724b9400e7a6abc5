"""The hardware-aware prefix scheduler (Algorithm 1 of method.md), vectorised over iterations.

For one engine iteration with R decoding requests and calibrated conditional confidences
c[r, 1..gamma], the survivals a[r, j] = prod_{i<=j} c[r, i] are admitted greedily in
descending order (stable, so each request's drafts enter as a prefix) while the expected
throughput tau * SPS(B) strictly improves; the first non-improvement stops the search
(the early stop that keeps speculative sampling lossless). The unconstrained variant (no
break, global maximum) is what the production "lagged" scheduler uses to size its budget.
"""
from __future__ import annotations

from operator import le, mul
from typing import Callable

import numpy as np

from ..core.rules import survivals

_NO_CANDIDATE = -1.0   # survival given to rows that are not in an iteration: sorted last, never admitted


def _rank(surv: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates of each iteration sorted best first (stable, so prefixes stay prefixes).

    Returns (order (M, R*g) flat candidate indices, tau (M, R*g + 1) expected tokens after
    admitting n candidates, summed in Algorithm 1's order, n_active (M,))."""
    m, r, g = surv.shape
    flat = np.where(active[:, :, None], surv, _NO_CANDIDATE).reshape(m, r * g)
    order = np.argsort(-flat, axis=1, kind="stable")
    ranked = np.take_along_axis(flat, order, axis=1)
    n_active = active.sum(axis=1)
    tau = np.cumsum(np.concatenate([n_active[:, None].astype(float), np.maximum(ranked, 0.0)], axis=1),
                    axis=1)
    return order, tau, n_active


def _count(tau: np.ndarray, n_active: np.ndarray, base: np.ndarray, limit: np.ndarray,
           sps: Callable[[np.ndarray], np.ndarray], early_stop: bool) -> np.ndarray:
    """How many ranked candidates to admit: stop at the first tau * SPS(B) that does not
    improve (early stop), or take the global maximum; never more than `limit`."""
    n = tau.shape[1]
    steps = np.arange(n)
    value = tau * sps((base + n_active)[:, None] + steps[None, :])
    allowed = steps[None, :] <= limit[:, None]
    if early_stop:
        worse = (value[:, 1:] <= value[:, :-1]) | ~allowed[:, 1:]
        return np.where(worse.any(axis=1), worse.argmax(axis=1), n - 1)
    return np.where(allowed, value, -np.inf).argmax(axis=1)


def _search(surv: np.ndarray, active: np.ndarray, base: np.ndarray, cap: np.ndarray,
            sps: Callable[[np.ndarray], np.ndarray], early_stop: bool) -> tuple[np.ndarray, np.ndarray]:
    """Sort the candidates of M iterations and pick how many each admits.

    surv (M, R, g) survivals, active (M, R) bool, base (M,) tokens already in the batch
    besides the anchors (prefill chunks), cap (M,) most drafts that may be verified.
    Returns (order (M, R*g) candidate indices sorted best first, admitted count (M,)).
    """
    g = surv.shape[2]
    order, tau, n_active = _rank(surv, active)
    limit = np.minimum(n_active * g, np.maximum(cap, 0))
    return order, _count(tau, n_active, base, limit, sps, early_stop)


class RankedBatch:
    """Algorithm 1 for one fixed set of requests with fixed confidences, many batch bases.

    The ranking is computed once; each call then only scores the prefixes at the given
    base (prefill tokens). Same arithmetic as
    `schedule_batch`, so the results are identical.
    """

    def __init__(self, surv: np.ndarray, cap: int) -> None:
        r, g = surv.shape
        order, tau, n_active = _rank(surv[None], np.ones((1, r), dtype=bool))
        self.n = int(n_active[0])
        self.limit = int(min(self.n * g, max(cap, 0)))
        self.tau = tau[0, :self.limit + 1]                     # prefixes Algorithm 1 may reach
        self.row_of_rank = order[0] // g                       # (R*g,) request of each candidate
        self.r = r
        self._steps = np.arange(self.limit + 1)
        self._py: tuple[list[float], list[int]] | None = None
        self._by_count: dict[int, list[int]] | None = None

    def lengths(self, base: int, sps_table: np.ndarray, early_stop: bool = True) -> np.ndarray:
        """Verify lengths (R,) at `base` prefill tokens; sps_table[B] = SPS(B) must cover
        B = base + R + limit."""
        value = self.tau * sps_table[base + self.n + self._steps]
        if early_stop:
            worse = value[1:] <= value[:-1]
            count = int(worse.argmax()) if worse.any() else self.limit
        else:
            count = int(value.argmax())
        return np.bincount(self.row_of_rank[:count], minlength=self.r)

    def lengths_py(self, base: int, sps: list[float]) -> list[int]:
        """`lengths` with early stop in plain Python (same arithmetic, so the same result);
        faster for the small batches a single replica usually holds. The list returned is
        shared (one per candidate count): do not modify it."""
        if self._py is None:
            self._py = (self.tau.tolist(), self.row_of_rank.tolist())
        tau = self._py[0]
        b0 = base + self.n
        value = list(map(mul, tau, sps[b0:b0 + self.limit + 1]))
        # the first i >= 1 with value[i] <= value[i - 1] stops the search at i - 1 candidates
        worse = list(map(le, value[1:], value))
        if True in worse:
            count = worse.index(True)
        elif len(value) == self.limit + 1:
            count = self.limit
        else:           # as sps[b0 + i] past the table's end would
            raise IndexError("the SPS table does not cover the candidates")
        return self._admitting(count)

    def _admitting(self, count: int) -> list[int]:
        """Verify lengths that admit the `count` best candidates (memoised by count)."""
        if self._by_count is None:
            self._by_count = {}
        out = self._by_count.get(count)
        if out is None:
            out = self._by_count[count] = [0] * self.r
            for row in self._py[1][:count]:
                out[row] += 1
        return out

    def budget_py(self, base: int, sps: list[float]) -> int:
        """Unconstrained search (no break): the number of candidates at the global maximum of
        tau * SPS(B), first on ties -- `budget_batch` in plain Python."""
        if self._py is None:
            self._py = (self.tau.tolist(), self.row_of_rank.tolist())
        tau = self._py[0]
        b0 = base + self.n
        best, count = tau[0] * sps[b0], 0
        for i in range(1, self.limit + 1):
            value = tau[i] * sps[b0 + i]
            if value > best:
                best, count = value, i
        return count

    def top_k_py(self, k: int) -> list[int]:
        """Verify lengths admitting the k best candidates (`top_k_batch` in plain Python)."""
        if self._py is None:
            self._py = (self.tau.tolist(), self.row_of_rank.tolist())
        return self._admitting(min(k, len(self._py[1])))

    @property
    def max_batch(self) -> int:
        """Largest batch-token count `lengths` looks up, beyond the base."""
        return self.n + self.limit


def _lengths_from_admitted(order: np.ndarray, count: np.ndarray, r: int, g: int) -> np.ndarray:
    m = order.shape[0]
    admitted = np.arange(r * g)[None, :] < count[:, None]
    chosen = np.zeros((m, r * g), dtype=bool)
    np.put_along_axis(chosen, order, admitted, axis=1)
    return chosen.reshape(m, r, g).sum(axis=2)


def schedule_batch(surv: np.ndarray, active: np.ndarray, base: np.ndarray, cap: np.ndarray,
                   sps: Callable[[np.ndarray], np.ndarray], early_stop: bool = True) -> np.ndarray:
    """Algorithm 1 for M iterations at once: verify lengths (M, R); inactive rows get 0."""
    m, r, g = surv.shape
    order, count = _search(surv, active, base, cap, sps, early_stop)
    return _lengths_from_admitted(order, count, r, g)


def budget_batch(surv: np.ndarray, active: np.ndarray, base: np.ndarray, cap: np.ndarray,
                 sps: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Total draft budget K (M,) from the unconstrained search (global maximum, no break)."""
    return _search(surv, active, base, cap, sps, early_stop=False)[1]


def top_k_batch(surv: np.ndarray, active: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Admit the K best survivals of each iteration (prefix-closed): verify lengths (M, R)."""
    m, r, g = surv.shape
    flat = np.where(active[:, :, None], surv, _NO_CANDIDATE).reshape(m, r * g)
    order = np.argsort(-flat, axis=1, kind="stable")
    count = np.minimum(k, active.sum(axis=1) * g)
    return _lengths_from_admitted(order, count, r, g)


def prefix_schedule(confidence, sps: Callable, base_tokens: int = 0,
                    max_drafts: int | None = None, early_stop: bool = True) -> np.ndarray:
    """Algorithm 1 (method.md section 4): how many drafts each request verifies this iteration.

    confidence: (R, gamma) calibrated conditional confidences c[r, j]; sps: batch tokens ->
    target forward steps per second (vectorised or scalar); base_tokens: other tokens in the
    batch (prefill chunks) besides the R anchors; max_drafts: budget for verified drafts.
    Returns int array (R,): 0 = plain decode, j = verify drafts 1..j.
    """
    conf = np.asarray(confidence, dtype=float)
    if conf.ndim != 2:
        raise ValueError(f"confidence must be (R, gamma), got shape {conf.shape}")
    r, g = conf.shape
    if r == 0:
        return np.zeros(0, dtype=np.int64)
    cap = r * g if max_drafts is None else max_drafts

    def sps_vec(b):
        return np.asarray(np.vectorize(sps, otypes=[float])(b), dtype=float) \
            if not _is_vectorised(sps) else np.asarray(sps(b), dtype=float)

    out = schedule_batch(survivals(conf)[None], np.ones((1, r), dtype=bool),
                         np.array([base_tokens]), np.array([cap]), sps_vec, early_stop)
    return out[0].astype(np.int64)


def _is_vectorised(fn: Callable) -> bool:
    try:
        res = np.asarray(fn(np.array([1, 2])), dtype=float)
    except Exception:
        return False
    return res.shape == (2,)
