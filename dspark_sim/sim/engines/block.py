"""Vectorised engine: advance many iterations in one numpy block per `advance()`.

A block starts at an iteration boundary. Column 0 is that iteration (it may carry prefill
chunks); the requests whose prefill it completes join the decoding rows from column 1 on.
For R rows x M columns the block draws the accepted runs, takes the verify lengths, cumsums
tokens and iteration times, and cuts at the first event it cannot represent:

- a boundary at or after the next arrival that this replica could admit;
- a finish after which the head of the queue fits, or after which the remaining rows'
  verify lengths would change (checked against per-composition plans when the policy's
  decision depends only on who is in the batch, otherwise at the first finish);
- chunked prefill that continues past column 0 (the block is then that one iteration).

Columns up to the cut are committed; the rest is discarded. Decoding rows live in a
replica-local int64 state matrix (one row per field, one column per request) and reach the
request table when they finish. The reference engine (reference.py) runs the same model one
iteration at a time; tests check that both give identical results.
"""
from __future__ import annotations

import numpy as np

from ..core.rules import step_tokens_np
from .replica import ReplicaBase

MAX_RUN = 1024          # most iterations one block may span (samplers pad their draws by this)
_COLS = np.arange(MAX_RUN)
_PLAN_CACHE_LIMIT = 4096

# Fields of the state matrix (one column per decoding row): COUNT (1), BATCH_TOKENS (1 + the row's
# verify length), KV (prompt + generated) come first: one matmul with the activity mask
# gives the per-iteration request count, batch tokens and KV context.
COUNT, BATCH_TOKENS, KV, OWED, STEPS, VER, RID = range(7)
_FIELDS = 7


class BlockReplica(ReplicaBase):
    """Runs as many iterations per call as the batch composition allows."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        p, sampler = self.policy, self.sampler
        self._state = np.zeros((_FIELDS, 0), dtype=np.int64)
        self._surv = np.zeros((0, self.gamma))
        self.decoders = self._state[RID]
        self._task = sampler.task_index if sampler is not None else None
        self._key: tuple = ()
        self._plans: dict[tuple, object] = {}
        self._retired: list[tuple[np.ndarray, np.ndarray]] = []
        self._mean_ns = 0.0              # mean iteration length of the last block
        self._m_guess = MAX_RUN
        # Plans serve when the decision depends only on who is in the batch.
        self._planned = not p.lag and \
            p.plans_apply(self.cost, self.gamma, sampler is None or sampler.static_confidence)
        self._draft_ns = self.cost.fixed_drafts(p.drafts) if p.drafts is not None else None

    # --- verify lengths --------------------------------------------------------------------

    def _plan(self, key: tuple, surv: np.ndarray):
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            plan = self._plans[key] = self.policy.plan(surv, self.sched.drafts_room(len(surv)), self.cost)
        return plan

    def _key_of(self, rows: np.ndarray) -> tuple:
        return (len(rows),) if self._task is None else tuple(self._task[rows].tolist())

    def _general_lengths(self, rows: np.ndarray, steps: np.ndarray, accepted: np.ndarray,
                         base: int, history: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Verify lengths (R, C) and raw lagged budgets of C consecutive iterations in which
        every row decodes (per-step confidences, accepted runs or lagged budgets)."""
        r, c = steps.shape
        cols = self.policy_inputs(rows, np.ones((c, r), dtype=bool), np.full(c, base),
                            np.full(c, self.sched.drafts_room(r)), steps, accepted)
        lengths, raw = self.policy.decide(cols, self.cost, history)
        return lengths.T, raw

    def _accepted(self, rows: np.ndarray, steps: np.ndarray) -> np.ndarray:
        if self.sampler is None or len(rows) == 0:
            return np.zeros(steps.shape, dtype=np.int64)
        return self.sampler.accepted(rows, steps)

    # --- one block -------------------------------------------------------------------------

    def advance(self) -> int:
        now = int(self.env.now)
        state = self._state
        r0 = state.shape[1]
        planned = self._planned
        lag = self.policy.lag
        # Column 0: verify lengths first (the prefill it could take is the batch's base),
        # then prefill chunks from what the decode tokens leave.
        sched = self.sched
        pending = sched.pending
        prefill_max = sched.prefill_room(r0)
        raw = np.zeros(1 if lag and r0 == 0 else 0, dtype=np.int64)   # as decide() with no rows
        if r0 == 0:
            verify0 = state[COUNT]
        elif planned:
            verify0 = self._plan(self._key, self._surv).lengths(prefill_max)
        else:
            steps0 = state[STEPS][:, None]
            lengths, raw = self._general_lengths(state[RID], steps0, self._accepted(state[RID], steps0),
                                                 prefill_max)
            verify0 = lengths[:, 0]
        sum0 = int(verify0.sum())
        chunks, prefill_context = sched.take_prefill(sched.prefill_room(r0 + sum0))   # <= prefill_max
        prefill0 = sum(take for _, take in chunks)
        completed = sched.apply_prefill(chunks)
        output = self.table.output
        joiners = [rid for rid in completed if output[rid] > 1]
        done0 = [rid for rid in completed if output[rid] == 1]
        if joiners:
            state = self._join(joiners)
        rows = state[RID]
        r1 = len(rows)
        owed = state[OWED]
        # Block length: enough columns to reach the first event that could end the block.
        dependent = not self.policy.independent
        t_arr = None if sched.waiting else self.feed.next_arrival_ns(self)
        if prefill0 < pending or r1 == 0:
            m = 1
        else:
            m = int(owed.max() if (planned or not dependent) else owed.min()) + 1
            if t_arr is not None:
                # enough columns to pass the next arrival if iterations last at least 70% of
                # the last block's mean; a block that ends without an event is simply
                # followed by another, so this guess only affects speed
                step = max(self.cost.min_step_ns, int(0.7 * self._mean_ns))
                m = min(m, (t_arr - now) // step + 2)
            m = max(1, min(m, MAX_RUN, self._m_guess))
        cols = _COLS[:m]
        steps = state[STEPS][:, None] + cols
        accepted = self._accepted(rows, steps)
        # Tokens per row and column; verify lengths of column 0 as decided above (joiners
        # get -1 there: no tokens), of columns 1.. for the rows after the joins.
        first0 = np.full(r1, -1, dtype=np.int64)
        first0[:r0] = verify0
        if planned:
            verify = self._plan(self._key, self._surv).lengths(0)
            state[BATCH_TOKENS] = verify + 1
            tokens = step_tokens_np(accepted, verify[:, None])
        else:
            verify = np.zeros((r1, m), dtype=np.int64)
            verify[:r0, 0] = verify0
            if m > 1:
                rest, raw_rest = self._general_lengths(rows, steps[:, 1:], accepted[:, 1:], 0,
                                                       self.policy.lagged.after(raw) if lag else None)
                verify[:, 1:] = rest
                raw = np.concatenate([raw, raw_rest])
            tokens = step_tokens_np(accepted, verify)
        tokens[:, 0] = step_tokens_np(accepted[:, 0], first0)      # joiners (-1): no tokens
        cum = np.cumsum(tokens, axis=1)
        fin = (cum < owed[:, None]).sum(axis=1)           # finish column of each row (m: later)
        active = cols <= fin[:, None]
        if joiners:
            active[r0:, 0] = False
        # Per column: decoding requests, batch tokens and KV context (column 0 as planned).
        if planned:
            n_dec, batch, context = state[:KV + 1] @ active
        else:
            verify *= active
            n_dec = active.sum(axis=0)
            batch = n_dec + verify.sum(axis=0)
            context = state[KV] @ active
        context += ((cum - tokens) * active).sum(axis=0)
        n_dec[0] = r0
        batch[0] = r0 + sum0 + prefill0
        context[0] = int(state[KV, :r0].sum()) + prefill_context
        if self._draft_ns is not None:
            ns = self._fixed_ns(n_dec, batch, context, prefill0)
        else:
            drafts = self.policy.drafts
            if drafts is None:       # goodput: this iteration's k
                drafts = (verify[:, None] if planned else verify).max(axis=0, initial=0) \
                    * np.ones(m, dtype=np.int64)
                drafts[0] = int(verify0.max(initial=0))
            ns = self.cost.iteration_ns(n_dec, batch, context, drafts, prefill0)
        ns[0] += now
        times = np.cumsum(ns)
        end = self._block_end(fin, verify, times, m, t_arr, done0, planned, dependent)
        # Commit columns 0..end.
        sched.stamp_prefill(completed, int(times[0]))
        last = np.minimum(fin, end)
        emitted = cum[np.arange(r1), last]
        state[KV] += emitted
        state[OWED] -= emitted
        state[STEPS] += last + 1
        if planned:
            state[VER] += verify * last + np.maximum(first0, 0)
        else:
            state[VER] += verify[:, :end + 1].sum(axis=1)
        finished = fin <= end
        if finished.any():
            self._retire(finished, times[fin[finished]])
        self.iterations += end + 1
        self._mean_ns = (times[end] - now) / (end + 1)
        # other events (finishes that let the queue in, ...) end blocks early too: span at most
        # a few times the last block, doubling while blocks run out without an event
        self._m_guess = min(2 * m, MAX_RUN) if end == m - 1 else max(16, 4 * (end + 1))
        if lag:
            self.policy.commit(raw[:end + 1])
        return int(times[end])

    def _fixed_ns(self, n_dec: np.ndarray, batch: np.ndarray, context: np.ndarray,
                  prefill_first: int = 0) -> np.ndarray:
        """Iteration nanoseconds of a policy with a fixed number of drafts (`prefill_first`:
        the first iteration's prefill-chunk tokens); the cost tables grow (and this replica's
        draft table with them) when the block reaches past them."""
        try:
            return self.cost.iteration_ns_fixed(self._draft_ns, n_dec, batch, context, prefill_first)
        except IndexError:
            self.cost._fit(int(n_dec.max()), int(batch.max()))
            self._draft_ns = self.cost.fixed_drafts(self.policy.drafts)
            return self.cost.iteration_ns_fixed(self._draft_ns, n_dec, batch, context, prefill_first)

    # --- rows in and out ---------------------------------------------------------------------

    def join_decoding(self, rids: list[int]) -> None:
        self._join(rids, first_step=0)

    def _join(self, joiners: list[int], first_step: int = -1) -> np.ndarray:
        """Append requests whose prefill completed: they decode from the next column (or, with
        first_step 0, from the next block's column 0)."""
        t = self.table
        cols = [[1, 0, int(t.prompt[r]) + 1, int(t.output[r]) - 1, first_step, 0, r]
                for r in joiners]
        self._state = np.concatenate([self._state, np.array(cols, dtype=np.int64).T], axis=1)
        if self.sampler is not None:
            self._surv = np.concatenate([self._surv, self.sampler.row_survival(np.array(joiners))])
            self._key = self._key + tuple(int(self._task[r]) for r in joiners)
        else:
            self._surv = np.zeros((self._state.shape[1], self.gamma))
            self._key = (self._state.shape[1],)
        self.decoders = self._state[RID]
        return self._state

    def _retire(self, finished: np.ndarray, finish_ns: np.ndarray) -> None:
        """Drop finished rows (their fields reach the request table in `flush`)."""
        gone = self._state[:, finished]
        self._retired.append((gone, finish_ns))
        self.sched.release(gone[RID], finish_ns)
        keep = ~finished
        self._state = self._state[:, keep]
        self._surv = self._surv[keep]
        self.decoders = self._state[RID]
        self._key = self._key_of(self.decoders)

    def flush(self) -> None:
        """Write the retired rows to the request table."""
        if not self._retired:
            return
        t = self.table
        gone = np.concatenate([g for g, _ in self._retired], axis=1)
        finish = np.concatenate([f for _, f in self._retired])
        self._retired = []
        rows, steps = gone[RID], gone[STEPS]
        t.finish_ns[rows] = finish
        t.steps[rows] = steps
        t.generated[rows] = t.output[rows]
        # decode tokens before the final clip = steps + accepted drafts
        t.accepted[rows] = t.output[rows] - 1 - gone[OWED] - steps
        t.verified[rows] = gone[VER]
        # goodput drafts exactly the k it verifies; the others a fixed number per step
        t.drafted[rows] = gone[VER] if self.policy.drafts is None else steps * self.policy.drafts

    # --- where a block ends --------------------------------------------------------------------

    def _block_end(self, fin: np.ndarray, verify: np.ndarray, times: np.ndarray, m: int,
                   t_arr: int | None, done0: list[int], planned: bool, dependent: bool) -> int:
        """Last column of the block: the first event the block cannot represent."""
        if len(fin) == 0:
            return 0
        last_fin = int(fin.max())
        end = m - 1 if last_fin >= m else last_fin
        if t_arr is not None and m > 1:
            end = min(end, int(np.searchsorted(times, t_arr, side="left")))
        think = self.feed.closed_think_ns
        if think is not None and not self.sched.waiting:
            # a closed loop: the first finish sends its user's next request think_ns later
            first_t = int(times[0]) if done0 else None
            if int(fin.min()) < m:
                t = int(times[int(fin.min())])
                first_t = t if first_t is None else min(first_t, t)
            if first_t is not None:
                end = min(end, int(np.searchsorted(times, first_t + think, side="left")))
        # requests done at column 0 are no longer running but still hold their KV
        freed_kv0 = self.sched.pool.freed_by(done0) if done0 else 0
        if done0 and self.sched.head_fits_after(0, freed_kv0):
            return 0
        first = int(fin.min())
        if first >= end:
            return end
        if dependent and not planned:
            return first
        if not dependent and m > 1:
            # a length trimmed to the token budget could grow once rows leave
            per_col = verify.sum(axis=0) if verify.ndim == 2 else int(verify.sum())
            if np.any(per_col >= self.sched.drafts_room(len(fin))):
                return first
        if not (self.sched.waiting or (dependent and planned)):
            return end
        return self._finish_walk(fin, end, freed_kv0, dependent and planned, verify)

    def _finish_walk(self, fin: np.ndarray, end: int, freed_kv: int, check_plan: bool,
                     verify: np.ndarray) -> int:
        """Walk the finishes before `end` in column order; stop at the first one after which
        the head of the queue fits or the remaining rows' verify lengths would change."""
        sched = self.sched
        alive = np.ones(len(fin), dtype=bool)
        freed_n = 0
        uniform = int(verify[0]) if check_plan and verify.min() == verify.max() else None
        for f in sorted(set(fin[fin < end].tolist())):
            gone = fin == f
            alive &= ~gone
            freed_n += int(gone.sum())
            freed_kv += sched.pool.freed_by(self._state[RID, gone])
            if sched.waiting and sched.head_fits_after(freed_n, freed_kv):
                return f
            if check_plan and alive.any():
                rows = self._state[RID, alive]
                key = self._key_of(rows)
                plan = self._plans.get(key) or self._plan(key, self._surv[alive])
                now = plan.lengths(0)
                same = (uniform is not None and plan_uniform(plan) == uniform) or \
                    np.array_equal(now, verify[alive])
                if not same:
                    return f
        return end


def plan_uniform(plan) -> int | None:
    """The verify length a plan gives every row at base 0, if it is the same for all."""
    value = getattr(plan, "_uniform0", False)
    if value is False:
        lengths = plan.lengths(0)
        value = int(lengths[0]) if len(lengths) and lengths.min() == lengths.max() else None
        plan._uniform0 = value
    return value
