"""Vectorised engine: advance many iterations in one numpy block per `advance()`.

A run starts at an iteration boundary. Column 0 is that iteration (it may carry prefill
chunks); the requests whose prefill it completes join the decoding rows from column 1 on.
For R rows x M columns the run draws the accepted runs, decides verify lengths, cumsums
the tokens and the iteration times, and cuts at the first event that the block cannot
represent:

- a boundary at or after the next arrival that this replica could admit;
- a finish after which the verify lengths of the remaining rows would change (composition-
  dependent policies; checked against a cache for per-task confidences, otherwise at the
  first finish), or after which the head of the queue fits;
- chunked prefill that continues past column 0 (then the run is that one iteration).

Everything up to the cut is committed; the rest is discarded. The reference engine
(reference.py) runs the same model one iteration at a time; both give identical results.
"""
from __future__ import annotations

import numpy as np

from .replica import ReplicaBase

MAX_RUN = 1024     # most iterations one block may span (samplers pad their draws by this)
_NONE = np.zeros(0, dtype=np.int64)


class FastReplica(ReplicaBase):
    """Runs as many iterations per call as the batch composition allows."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._cache: dict[tuple, np.ndarray] = {}
        p = self.policy
        # One decision serves every column of a block when it depends only on who is in the
        # batch (per-task confidences), not on each step's draws or on a lagged budget.
        self._columns_equal = not p.lag and not p.needs_accepted and \
            (self.sampler is None or self.sampler.static_confidence or not p.needs_confidence)
        self._cacheable = self._columns_equal and not p.independent
        self._task = self.sampler.task_index if self.sampler is not None else None

    # --- verify lengths --------------------------------------------------------------------

    def _one_column(self, rows: np.ndarray, base: int) -> np.ndarray:
        """Verify lengths (R,) of an iteration whose decision depends only on its rows."""
        key = None
        if self._cacheable:
            key = (tuple(self._task[rows].tolist()), base)
            hit = self._cache.get(key)
            if hit is not None:
                return hit
        r = len(rows)
        cols = self.columns(rows, np.ones((1, r), dtype=bool), np.array([base]),
                            np.array([self.budget - r]), None, None)
        out = self.decide(cols, [])[0][0]
        if key is not None:
            self._cache[key] = out
        return out

    def _decide_block(self, rows: np.ndarray, base: int, steps: np.ndarray, accepted: np.ndarray,
                      history: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Verify lengths (R, C) and raw lagged budgets (C,) of C consecutive iterations in
        which every row decodes; steps and accepted are (R, C)."""
        r, c = steps.shape
        if self._columns_equal:
            return np.broadcast_to(self._one_column(rows, base)[:, None], (r, c)), _NONE
        cols = self.columns(rows, np.ones((c, r), dtype=bool), np.full(c, base),
                            np.full(c, self.budget - r), steps, accepted)
        lengths, raw = self.decide(cols, history)
        return lengths.T, raw

    # --- one block -------------------------------------------------------------------------

    def advance(self) -> int:
        t = self.table
        now = int(self.env.now)
        old = np.asarray(self.decoders, dtype=np.int64)
        r0 = len(old)
        # Column 0: verify lengths first (the prefill it could take is the batch's base),
        # then prefill chunks from what the decode tokens leave.
        pending = self.pending_prefill()
        prefill_max = min(pending, max(0, self.budget - r0))
        acc0 = self._accepted(old, t.steps[old][:, None])
        verify0, raw0 = self._decide_block(old, prefill_max, t.steps[old][:, None], acc0, self.history)
        chunks, prefill_context = self.allocate_prefill(
            min(prefill_max, self.budget - r0 - int(verify0.sum())))
        prefill0 = sum(take for _, take in chunks)
        joiners = [rid for rid in self.completing(chunks) if t.output[rid] > 1]
        rows = np.concatenate([old, np.asarray(joiners, dtype=np.int64)])
        r1 = len(rows)
        owed = t.output[rows] - t.generated[rows]
        owed[r0:] -= 1                              # joiners: the prefill emits their first token
        # Block length: enough columns to reach the first event that could end the block.
        spans_finishes = self._cacheable or self.policy.independent
        if prefill0 < pending or r1 == 0:
            m = 1
        else:
            m = int(owed.max() if spans_finishes else owed.min()) + 1
            t_arr = None if self.waiting else self.cluster.next_arrival_ns(self)
            if t_arr is not None:
                m = min(m, (t_arr - now) // self.cost.min_step_ns + 2)
            m = max(1, min(m, MAX_RUN))
        col = np.arange(m)
        start = np.zeros(r1, dtype=np.int64)
        start[r0:] = 1
        steps = t.steps[rows][:, None] + col[None, :] - start[:, None]
        accepted = self._accepted(rows, steps)
        verify = np.zeros((r1, m), dtype=np.int64)
        verify[:r0, 0] = verify0[:, 0]
        raw = raw0
        if m > 1:
            rest, raw_rest = self._decide_block(rows, 0, steps[:, 1:], accepted[:, 1:],
                                                (self.history + raw0.tolist())[-2:])
            verify[:, 1:] = rest
            raw = np.concatenate([raw0, raw_rest])
        tokens = 1 + np.minimum(accepted, verify)
        tokens[r0:, 0] = 0
        cum = np.cumsum(tokens, axis=1)
        done = cum >= owed[:, None]
        fin = np.where(done.any(axis=1), done.argmax(axis=1), m)    # finish column per row
        active = (col[None, :] >= start[:, None]) & (col[None, :] <= fin[:, None])
        # Iteration times of every column (columns after the cut are discarded).
        n_dec = active.sum(axis=0)
        verify = np.where(active, verify, 0)
        batch = n_dec + verify.sum(axis=0)
        batch[0] += prefill0
        kv0 = t.prompt[rows] + t.generated[rows]
        kv0[r0:] += 1
        context = np.where(active, kv0[:, None] + cum - tokens, 0).sum(axis=0)
        context[0] += prefill_context
        drafts = self.policy.drafts_per_iteration(verify.T)
        times = now + np.cumsum(self.cost.iteration_ns(n_dec, batch, context, drafts))
        done0 = [rid for rid in self.completing(chunks) if t.output[rid] == 1]
        freed0 = (len(done0), int(t.kv_need[done0].sum()))
        end = self._block_end(rows, fin, verify, times, m, r1, freed0)
        # Commit columns 0..end.
        self.commit_prefill(chunks, int(times[0]))
        last = np.minimum(fin, end)
        n_steps = np.maximum(last - start + 1, 0)
        cum_last = cum[np.arange(r1), last]
        t.generated[rows] += np.minimum(cum_last, owed)
        t.steps[rows] += n_steps
        t.accepted[rows] += cum_last - n_steps
        t.verified[rows] += verify[:, :end + 1].sum(axis=1)
        t.drafted[rows] += np.where(active[:, :end + 1], drafts[None, :end + 1], 0).sum(axis=1)
        finished = fin <= end
        self.finish(rows[finished], times[fin[finished]])
        self.decoders = rows[~finished].tolist()
        self.iterations += end + 1
        self.record_history(raw[:end + 1])
        return int(times[end])

    def _accepted(self, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        if self.sampler is None or len(rows) == 0:
            return np.zeros(steps.shape, dtype=np.int64)
        return self.sampler.accepted(rows, steps)

    def _block_end(self, rows: np.ndarray, fin: np.ndarray, verify: np.ndarray, times: np.ndarray,
                   m: int, r1: int, freed0: tuple[int, int]) -> int:
        """Last column of the block: the first event the block cannot represent. `freed0`:
        requests (and their KV) that finish at column 0 straight from prefill."""
        end = m - 1 if (fin >= m).any() else int(fin.max(initial=0))
        if m > 1 and not self.waiting:
            t_arr = self.cluster.next_arrival_ns(self)
            if t_arr is not None:
                end = min(end, int(np.searchsorted(times, t_arr, side="left")))
        first = int(fin.min(initial=m))
        if freed0[0] and self.head_fits_after(*freed0):
            return 0
        if first >= end:
            return end
        cap_binds = self.policy.independent and m > 1 and \
            bool((verify[:, 1:].sum(axis=0) >= self.budget - r1).any())
        if not (self._cacheable or self.policy.independent) or cap_binds:
            return first
        if not (self.waiting or self._cacheable):
            return end
        return self._finish_walk(rows, fin, verify, end, freed0)

    def _finish_walk(self, rows: np.ndarray, fin: np.ndarray, verify: np.ndarray, end: int,
                     freed0: tuple[int, int]) -> int:
        """Walk the finishes before `end` in column order; stop at the first one after which
        the head of the queue fits or the remaining rows' verify lengths would change."""
        kv_need = self.table.kv_need
        alive = np.ones(len(rows), dtype=bool)
        freed_n, freed_kv = freed0
        for f in np.unique(fin[fin < end]).tolist():
            gone = fin == f
            alive &= ~gone
            freed_n += int(gone.sum())
            freed_kv += int(kv_need[rows[gone]].sum())
            if self.head_fits_after(freed_n, freed_kv):
                return f
            if self._cacheable and alive.any() and \
                    not np.array_equal(self._one_column(rows[alive], 0), verify[alive, f + 1]):
                return f
        return end
