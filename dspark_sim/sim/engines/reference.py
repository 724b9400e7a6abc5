"""Per-iteration reference engine: one iteration per `advance()`, written for clarity.

The fast engines (fast.py, loop.py) must give byte-identical results; tests compare them on
random traces for every policy. Policies that keep state across iterations (`stateful`: the
vLLM batch-size schedule and adaptive verification) run only here and in the paged engine.
"""
from __future__ import annotations

import numpy as np

from .replica import ReplicaBase


class ReferenceReplica(ReplicaBase):
    """Runs exactly one iteration per call."""

    def join_decoding(self, rids: list[int]) -> None:
        self.decoders = [int(x) for x in self.decoders] + list(rids)

    def advance(self) -> int:
        t = self.table
        now = int(self.env.now)
        rows = np.asarray(self.decoders, dtype=np.int64)
        r = len(rows)
        # 1. Verify lengths, with the prefill this iteration could take as the batch's base.
        decode_max = r * (1 + self.policy.scheduled_drafts(self.gamma)) if self.policy.reserves_drafts else r
        prefill_max = min(self.pending_prefill(), max(0, self.budget - decode_max))
        steps = t.steps[rows][:, None]
        accepted = self.sampler.accepted(rows, steps) if self.sampler is not None and r else \
            np.zeros((r, 1), dtype=np.int64)
        cols = self.columns(rows, np.ones((1, r), dtype=bool), np.array([prefill_max]),
                            np.array([self.budget - r]), steps, accepted)
        if self.policy.stateful:        # who else is in the step, as vLLM's policies count it
            cols.rows = rows
            cols.others, cols.others_sampling = self.prefill_requests(prefill_max)
        lengths, raw = self.policy.decide(cols, self.cost)
        verify = lengths[0]
        if self.sampler is not None and self.sampler.caps_drafts and r:
            verify = np.minimum(verify, self.sampler.drafted(rows, steps)[:, 0])
        # 2. Decode tokens are budgeted first; prefill chunks take what is left, FCFS.
        decode_tokens = r + int(verify.sum())
        chunks, prefill_context = self.take_prefill(min(prefill_max, self.budget - decode_tokens))
        batch = decode_tokens + sum(take for _, take in chunks)
        context = int((t.prompt[rows] + t.generated[rows]).sum()) + prefill_context
        drafts = self.policy.drafts_per_iteration(lengths)
        end = now + int(self.cost.iteration_ns(np.array([r]), np.array([batch]), np.array([context]),
                                               drafts, batch - decode_tokens)[0])
        # 3. Commit: decoding requests emit 1 + accepted drafts, never more than they owe.
        acc = np.minimum(accepted[:, 0], verify)
        emitted = np.minimum(1 + acc, t.owed(rows))
        t.generated[rows] += emitted
        t.steps[rows] += 1
        t.drafted[rows] += int(drafts[0])
        t.verified[rows] += verify
        t.accepted[rows] += acc
        done = t.generated[rows] == t.output[rows]
        self.finish(rows[done], np.int64(end))
        joiners = self.stamp_prefill(self.apply_prefill(chunks), end)
        self.decoders = [int(x) for x in rows[~done]] + joiners
        self.iterations += 1
        self.policy.commit(raw)
        if self.policy.stateful:
            self.policy.observe(rows, cols.surv[0], r + len(chunks))
        return end

    def take_prefill(self, tokens: int) -> tuple[list[tuple[int, int]], int]:
        """This iteration's prefill chunks within `tokens` and the KV context they attend."""
        return self.allocate_prefill(tokens)

    def prefill_requests(self, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(requests with a prefill chunk, those whose chunk completes the prefill) if prefill
        took `tokens`, as (1,) arrays."""
        chunks, _ = self.allocate_prefill(tokens)
        done = sum(1 for rid, take in chunks if self._prefilled[rid] + take == self._target[rid])
        return np.array([len(chunks)]), np.array([done])
