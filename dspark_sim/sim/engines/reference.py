"""Per-iteration reference engine: one iteration per `advance()`, written for clarity.

The fast engines (loop.py, block.py) must give byte-identical results; tests compare them on
random traces for every policy, and the golden results (tests/sim/sim_golden.py) hold every
engine to the same hashes. What runs only one iteration at a time runs here: policies that
keep state across iterations (`stateful`: vLLM's batch-size schedule and adaptive
verification), acceptance profiles whose steps drafted fewer than gamma, and paged KV
(`--kv-semantics blocks`: the scheduler grows and preempts, sim/scheduler.py).
"""
from __future__ import annotations

import numpy as np

from ..core.rules import tokens_emitted_np
from .replica import ReplicaBase


class ReferenceReplica(ReplicaBase):
    """Runs exactly one iteration per call."""

    def join_decoding(self, rids: list[int]) -> None:
        self.decoders = [int(x) for x in self.decoders] + list(rids)

    def advance(self) -> int:
        t, sched, policy = self.table, self.sched, self.policy
        now = int(self.env.now)
        rows = np.asarray(self.decoders, dtype=np.int64)
        r = len(rows)
        # 1. Verify lengths, with the prefill this iteration could take as the batch's base.
        decode_max = r * (1 + policy.scheduled_drafts(self.gamma)) if policy.reserves_drafts else r
        prefill_max = sched.prefill_room(decode_max)
        steps = t.steps[rows][:, None]
        accepted = self.sampler.accepted(rows, steps) if self.sampler is not None and r else \
            np.zeros((r, 1), dtype=np.int64)
        cols = self.policy_inputs(rows, np.ones((1, r), dtype=bool), np.array([prefill_max]),
                                  np.array([sched.drafts_room(r)]), steps, accepted)
        if policy.stateful:        # who else is in the step, as vLLM's policies count it
            cols.rows = rows
            cols.others, cols.others_sampling = self.prefill_requests(prefill_max)
        lengths, raw = policy.decide(cols, self.cost)
        verify = lengths[0]
        if self.sampler is not None and self.sampler.caps_drafts and r:
            verify = np.minimum(verify, self.sampler.drafted(rows, steps)[:, 0])
        # 2. Decode tokens are budgeted first; prefill chunks take what is left, FCFS.
        decode_tokens = r + int(verify.sum())
        chunks, prefill_context = sched.take_prefill(min(prefill_max, sched.prefill_room(decode_tokens)))
        batch = decode_tokens + sum(take for _, take in chunks)
        context = int((t.prompt[rows] + t.generated[rows]).sum()) + prefill_context
        drafts = policy.drafts_per_iteration(lengths)
        end = now + int(self.cost.iteration_ns(np.array([r]), np.array([batch]), np.array([context]),
                                               drafts, batch - decode_tokens)[0])
        # 3. Commit: decoding requests emit 1 + accepted drafts, never more than they owe.
        acc = np.minimum(accepted[:, 0], verify)
        emitted = tokens_emitted_np(accepted[:, 0], verify, t.owed(rows))
        t.generated[rows] += emitted
        t.steps[rows] += 1
        t.drafted[rows] += int(drafts[0])
        t.verified[rows] += verify
        t.accepted[rows] += acc
        done = t.generated[rows] == t.output[rows]
        sched.finish(rows[done], np.int64(end))
        joiners = sched.stamp_prefill(sched.apply_prefill(chunks), end)
        self.decoders = [int(x) for x in rows[~done]] + joiners
        self.iterations += 1
        policy.commit(raw)
        if policy.stateful:
            policy.observe(rows, cols.surv[0], r + len(chunks))
        return end

    def prefill_requests(self, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(requests with a prefill chunk, those whose chunk completes the prefill) if prefill
        took `tokens`, as (1,) arrays."""
        sched = self.sched
        chunks, _ = sched.plan_prefill(tokens)
        done = sum(1 for rid, take in chunks if sched.prefilled[rid] + take == sched.target[rid])
        return np.array([len(chunks)]), np.array([done])
