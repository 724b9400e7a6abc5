"""The reference engine with vLLM's KV semantics: paged KV on demand, preemption by recompute.

`--kv-semantics blocks` (docs/simulator.md). Instead of reserving prompt + output tokens at
admission, each request holds KV blocks (block_manager.py) for what it has needed so far:

- at an iteration boundary every decoding request, in running order, grows to prompt +
  generated + the drafts it is scheduled to verify (vLLM allocates for every scheduled draft,
  `Scheduler.schedule` -> `KVCacheManager.allocate_slots`); prefill chunks grow their request
  to the prompt tokens they reach;
- when the pool is short, the most recently admitted running request holding blocks is
  preempted (vLLM's FCFS victim `running[-1]`, repeatedly, until the allocation fits or the
  request itself was the victim; a request whose first chunk does not fit, still a waiting
  request in vLLM, preempts nobody and it and the chunks after it wait): its blocks are
  freed, it goes back to the front of the queue, and when
  re-admitted it prefills its prompt and every token it had generated (recompute) and then
  emits one new token; its first-token time is kept;
- admission stays FCFS under max_batch_requests, and admits the queue head only when its whole
  input (prompt, plus generated tokens after a preemption) fits the free blocks (vLLM's
  default `scheduler_reserve_full_isl`); nothing is admitted at a boundary that preempted.
  The requests admitted at one boundary are each checked against the same free blocks (vLLM
  allocates each one's first chunk before checking the next); one whose first chunk then does
  not fit just waits, as in vLLM.

While the pool never runs short these steps change nothing: the results are byte for byte
those of the reserving engines (tests/sim/test_paged_kv.py). Disaggregated prefill is not
modelled here.
"""
from __future__ import annotations

import numpy as np

from ..kv.paged import BlockManager
from ..core.units import UNLIMITED
from .reference import ReferenceReplica


class PagedReplica(ReferenceReplica):
    """One iteration per call, KV in blocks, preemption by recompute."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        hw = self.cost.hw
        self.blocks = BlockManager(hw.kv_capacity_tokens or UNLIMITED, hw.kv_block_size)
        self.kv_capacity = UNLIMITED               # nothing is reserved at admission
        self._preempted_now = False
        self.preemptions = 0

    # --- admission and growth at a boundary ----------------------------------------------

    def admit(self, t_ns: int | None = None) -> None:
        """Grow the decoding requests for the coming iteration (preempting if short), then
        admit from the queue unless that preempted."""
        self._preempted_now = False
        self._grow_decoders()
        if not self._preempted_now:
            super().admit(t_ns)

    def kv_admit(self, rid: int) -> bool:
        return self.blocks.can_allocate(self._prompt[rid] + self.recompute.get(rid, 0))

    def _grow_decoders(self) -> None:
        t, prompt, d = self.table, self._prompt, self.policy.scheduled_drafts(self.gamma)
        k = 0
        while k < len(self.decoders):
            rid = self.decoders[k]
            if self._make_room(rid, prompt[rid] + int(t.generated[rid]) + d):
                k += 1
            else:
                break          # rid itself was preempted, and everyone after it before

    def _make_room(self, rid: int, slots: int) -> bool:
        """Grow `rid` to `slots` KV positions, preempting from the tail of the running requests
        while the pool is short; False when `rid` itself had to go, or when `rid` holds no
        blocks yet (its first chunk: in vLLM still a waiting request, which never preempts)."""
        while not self.blocks.may_append(rid, slots):
            if not self.blocks.held.get(rid):
                return False
            victim = self._victim()
            self.preempt(victim)
            if victim == rid:
                return False
        self.blocks.allocate(rid, slots)
        return True

    def _victim(self) -> int:
        """The most recently admitted request holding blocks (vLLM's `running[-1]`: admitted
        requests that have not had a chunk yet are still waiting in vLLM's terms)."""
        for rid in reversed(self.prefilling):
            if self.blocks.held.get(rid):
                return rid
        return self.decoders[-1]

    def preempt(self, rid: int) -> None:
        """Free `rid`'s blocks and queue it first; it will recompute prompt + generated."""
        if rid in self._target:
            self.prefilling.remove(rid)
            self._pending -= self._target.pop(rid) - self._prefilled.pop(rid)
        else:
            self.decoders = [x for x in self.decoders if x != rid]
        self.recompute[rid] = int(self.table.generated[rid])
        self.blocks.deallocate(rid)
        self.waiting.appendleft(rid)
        self.table.preemptions[rid] += 1
        self.preemptions += 1
        self._preempted_now = True

    # --- the iteration's prefill ---------------------------------------------------------

    def take_prefill(self, tokens: int) -> tuple[list[tuple[int, int]], int]:
        """FCFS chunks within `tokens`, each given its blocks (preempting later prefills if short)."""
        chunks, _ = self.allocate_prefill(tokens)
        kept, context = [], 0
        for rid, take in chunks:
            if rid not in self._target:           # preempted for an earlier chunk
                continue
            done = self._prefilled[rid]
            if not self._make_room(rid, done + take):
                break                             # FCFS: later chunks wait too
            kept.append((rid, take))
            context += done
        return kept, context

    def stamp_prefill(self, completed: list[int], t_ns: int) -> list[int]:
        """A recomputed request emits its next token at the end of its prefill (its first token
        was stamped long ago); a new one emits its first token."""
        t = self.table
        if all(t.generated[rid] == 0 for rid in completed):
            return super().stamp_prefill(completed, t_ns)
        joiners = []
        for rid in completed:              # in completion order, as the reserving engines
            if t.generated[rid] == 0:
                joiners += super().stamp_prefill([rid], t_ns)
                continue
            t.generated[rid] += 1
            if t.generated[rid] == t.output[rid]:
                self.finish(np.array([rid], dtype=np.int64), np.int64(t_ns))
            else:
                joiners.append(rid)
        return joiners

    def release(self, rids, kv: int, t_ns) -> None:
        for rid in np.asarray(rids).tolist():
            self.blocks.deallocate(rid)
        super().release(rids, 0, t_ns)
