"""One replica's scheduler: queue order, admission, the chunked-prefill budget, preemption and its
victim. Every engine (engines/) and serve/'s real replica ask it; none restates its rules.

- The queue is FCFS; a preempted request goes back to its front.
- Admission at an iteration boundary, in queue order, while fewer than `max_requests` requests
  run (prefilling or decoding) and the KV pool admits the head (kv/: reservation of prompt +
  output, or vLLM's check that the whole input fits the free blocks). With prefill elsewhere
  (disaggregated) an admitted request arrives with its prompt's KV and first token and decodes
  at once; one owing a single token finishes there and frees its seat for the next pass.
- The token budget of an iteration holds the decode tokens first; prefill chunks take what they
  leave (`prefill_room`), FCFS over the prefilling requests.
- With a pool that grows on demand (paged KV): at each boundary the decoding requests, in running
  order, grow to prompt + generated + their scheduled drafts, and each prefill chunk grows its
  request; when the pool is short the victim is the most recently admitted running request that
  holds blocks (vLLM's `running[-1]`: the last prefilling one holding blocks, else the last
  decoding one), preempted by recompute (blocks freed, back to the front of the queue; on
  re-admission it prefills its prompt and the tokens it had generated, then emits one token).
  Nothing is admitted at a boundary that preempted.

The scheduler writes each request's phase (core/requests.py) as it moves. It knows the engine's
decoding requests only through `decoding` (running order; an engine sets it) and the engine's
`join` and `leave` callbacks (`leave(rid)`: a decoding request is preempted; the engine drops it
from `decoding` and keeps what it had done); finishes are reported to `on_finish` (the replica's
bookkeeping: routing counts, a closed loop's next requests). A decoding request's KV length is
read from the table (`generated`): an engine that keeps it elsewhere writes it before `admit`.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Sequence

import numpy as np

from .core.requests import DECODING, DONE, PREEMPTED, PREFILLING, WAITING, RequestTable
from .kv.pool import KVPool


class Scheduler:
    """Queue, admission, prefill chunks and preemption of one replica."""

    def __init__(self, table: RequestTable, pool: KVPool, *, max_requests: int, budget: int,
                 prefill_elsewhere: bool, join: Callable[[list[int]], None],
                 on_finish: Callable[[object, object], None],
                 leave: Callable[[int], None] | None = None) -> None:
        self.table = table
        self.pool = pool
        self.budget = budget                          # tokens per iteration
        self.max_requests = min(max_requests, budget)  # each running request needs >= 1 token
        self.prefill_elsewhere = prefill_elsewhere
        self._join = join
        self._leave = leave if leave is not None else (lambda rid: self.decoding.remove(rid))
        self.on_finish = on_finish                    # an engine may put its own in
        self._prompt, self._output, _ = table.as_lists()   # fast scalar access
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.prefilled: dict[int, int] = {}      # prompt tokens in the KV cache, while prefilling
        self.target: dict[int, int] = {}         # tokens each prefilling request must prefill
        self.recompute: dict[int, int] = {}      # preempted requests: output tokens to prefill again
        self._resumed: set[int] = set()          # re-admitted after a preemption, prefilling again
        self.pending = 0                         # prompt tokens the prefilling requests still need
        self.decoding: Sequence[int] = []        # the engine's decoding requests, running order
        self.preemptions = 0
        self._preempted_now = False
        # queue(rid): a request routed to this replica waits at the back of the queue (FCFS)
        self.queue = self.waiting.append
        if not pool.on_demand:         # nothing grows: the chunks are the plan (one call less)
            self.take_prefill = self.plan_prefill
            if not prefill_elsewhere:  # and admission is one pass (one call less)
                self.admit = self._admit_pass

    # --- the queue and admission -----------------------------------------------------------------

    @property
    def running(self) -> int:
        """Requests holding a seat (prefilling or decoding)."""
        return len(self.prefilling) + len(self.decoding)

    def input_tokens(self, rid: int) -> int:
        """Tokens request `rid` must prefill when admitted: its prompt, and after a preemption the
        output tokens it had generated."""
        return self._prompt[rid] + self.recompute.get(rid, 0)

    def admit(self, t_ns: int, scheduled_drafts: int = 0, known: list[int] | None = None) -> None:
        """Admission at the iteration boundary t (the coming iteration schedules
        `scheduled_drafts` drafts per decoding request: what an on-demand pool grows them by).
        `known`: the decoding requests' KV positions now (prompt + generated), in running order,
        from an engine that keeps the generated tokens itself (default: read from the table)."""
        if not self.waiting and not self.pool.on_demand:
            return
        if self.pool.on_demand:
            self._preempted_now = False
            self._grow_decoding(scheduled_drafts, known)
            if self._preempted_now or not self.waiting:
                return
        while self._admit_pass(t_ns):        # disaggregated: finishes on admission free room
            pass

    def _admit_pass(self, t_ns: int, scheduled_drafts: int = 0) -> bool:
        """One pass of admission (`scheduled_drafts`: as `admit`, unused here); True when requests
        with prefill elsewhere were admitted."""
        elsewhere: list[int] = []
        phase, waiting, prefilling, pool = self.table.phase, self.waiting, self.prefilling, self.pool
        while waiting:
            rid = waiting[0]
            if len(prefilling) + len(self.decoding) + len(elsewhere) >= self.max_requests:
                break
            redo = self.recompute.get(rid, 0) if self.recompute else 0
            target = self._prompt[rid] + redo
            cached = pool.admit(rid, target)
            if cached is None:
                break
            waiting.popleft()
            if self.prefill_elsewhere:
                elsewhere.append(rid)
                continue
            if self.recompute and rid in self.recompute:
                del self.recompute[rid]
                if redo:             # it had emitted tokens: it resumes rather than starts
                    self._resumed.add(rid)
            phase[rid] = PREFILLING
            self.prefilling.append(rid)
            self.prefilled[rid] = cached
            self.target[rid] = target
            self.pending += target - cached
        if elsewhere:
            for rid in elsewhere:
                self.table.prefilled[rid] = self._prompt[rid]
            joiners = self.stamp_prefill(elsewhere, t_ns)
            if joiners:
                self._join(joiners)
        return bool(elsewhere)

    def head_fits_after(self, freed_requests: int, freed_kv: int) -> bool:
        """Would the head of the queue be admitted once `freed_requests` seats and `freed_kv`
        (the pool's `freed_by`) were freed?"""
        if not self.waiting:
            return False
        head = self.waiting[0]
        return self.running - freed_requests < self.max_requests and \
            self.pool.fits_after(head, self.input_tokens(head), freed_kv)

    # --- prefill ---------------------------------------------------------------------------------

    def prefill_room(self, decode_tokens: int) -> int:
        """Prefill tokens an iteration may take: what `decode_tokens` decode tokens leave of the
        token budget, at most the prompt tokens the admitted requests still need."""
        room = self.budget - decode_tokens       # (no min/max calls: the loop engine's hot path)
        if room <= 0:
            return 0
        return self.pending if self.pending < room else room

    def drafts_room(self, decoding: int) -> int:
        """Most drafts an iteration with `decoding` decoding requests may verify: the token
        budget less one token per decoding request (decode tokens are budgeted first)."""
        return self.budget - decoding

    def plan_prefill(self, tokens: int) -> tuple[list[tuple[int, int]], int]:
        """FCFS prefill chunks within `tokens` (nothing changes); also the KV context they attend
        (the tokens already prefilled)."""
        target, prefilled = self.target, self.prefilled
        chunks, context = [], 0
        for rid in self.prefilling:
            if tokens <= 0:
                break
            done = prefilled[rid]
            take = min(target[rid] - done, tokens)
            chunks.append((rid, take))
            context += done
            tokens -= take
        return chunks, context

    def take_prefill(self, tokens: int) -> tuple[list[tuple[int, int]], int]:
        """This iteration's prefill chunks within `tokens` and the KV context they attend; with an
        on-demand pool each chunk first grows its request (preempting later prefills if short; a
        chunk that still does not fit waits, and the chunks after it too)."""
        chunks, _ = self.plan_prefill(tokens)
        kept, context = [], 0
        for rid, take in chunks:
            if rid not in self.target:           # preempted for an earlier chunk
                continue
            done = self.prefilled[rid]
            if not self.make_room(rid, done + take):
                break
            kept.append((rid, take))
            context += done
        return kept, context

    def apply_prefill(self, chunks: list[tuple[int, int]]) -> list[int]:
        """Add the chunks to the KV cache; return the requests whose prefill they complete
        (no longer prefilling; `stamp_prefill` records their token)."""
        prompt, prefilled, target = self._prompt, self.prefilled, self.target
        completed = []
        for rid, take in chunks:
            prefilled[rid] += take
            self.pending -= take
            if prefilled[rid] == target[rid]:
                completed.append(rid)
        for rid in completed:
            self.prefilling.remove(rid)
            del prefilled[rid], target[rid]
            self.table.prefilled[rid] = prompt[rid]
        return completed

    def stamp_prefill(self, completed: list[int], t_ns: int) -> list[int]:
        """Tokens at the end of the iteration that completed the prefill: a new request's first
        token, a recomputed one's next token (its first-token time kept). Requests with nothing
        more to emit finish there; returns those that decode from the next iteration."""
        t, output, resumed = self.table, self._output, self._resumed
        phase, first_token, generated = t.phase, t.first_token_ns, t.generated
        joiners, done = [], []
        for rid in completed:
            if rid in resumed:
                resumed.discard(rid)
                left = output[rid] - int(generated[rid]) - 1
                generated[rid] += 1
            else:
                first_token[rid] = t_ns
                generated[rid] = 1
                left = output[rid] - 1
            if left:
                phase[rid] = DECODING
                joiners.append(rid)
            else:
                done.append(rid)
        if done:
            self.finish(np.asarray(done, dtype=np.int64), np.int64(t_ns))
        return joiners

    # --- finishing -------------------------------------------------------------------------------

    def finish(self, rids: np.ndarray, t_ns) -> None:
        """Requests `rids` emitted their last token at t (recorded now, at planning time)."""
        if len(rids) == 0:
            return
        self.table.finish_ns[rids] = t_ns
        self.release(rids, t_ns)

    def release(self, rids, t_ns) -> None:
        """Requests `rids` are done at t (scalar or one per request): their KV returns to the
        pool; the replica hears of it."""
        phase = self.table.phase
        if type(rids) is list:
            for rid in rids:
                phase[rid] = DONE
        else:
            phase[rids] = DONE
        self.pool.free(rids)
        self.on_finish(rids, t_ns)

    # --- preemption (a pool that grows on demand) --------------------------------------------

    def _grow_decoding(self, drafts: int, known: list[int] | None) -> None:
        """Grow each decoding request, in running order, for the coming iteration: its `known`
        KV positions (prompt + generated) + `drafts` scheduled drafts. A victim is always the
        last decoding request (or a prefilling one), so known[k] stays the k-th row's."""
        rows = self.decoding
        if known is None:
            prompt, generated = self._prompt, self.table.generated
            known = [prompt[rid] + int(generated[rid]) for rid in rows]
        grow_rows = self.pool.grow_rows
        k = grow_rows(rows, known, 0, drafts)
        while k < len(rows):                    # rows[k] does not fit: preempt to make room
            if not self.make_room(rows[k], known[k] + drafts):
                break          # rows[k] itself was preempted, and everyone after it before
            k = grow_rows(rows, known, k + 1, drafts)

    def make_room(self, rid: int, slots: int) -> bool:
        """Grow `rid` to `slots` KV positions, preempting the victim while the pool is short;
        False when `rid` itself had to go, or when `rid` holds no KV yet (its first chunk: in vLLM
        still a waiting request, which never preempts)."""
        pool = self.pool
        while not pool.grow(rid, slots):
            if not pool.holds(rid):
                if self._unadmit_after(rid):
                    continue
                return False
            victim = self.victim()
            self.preempt(victim)
            if victim == rid:
                return False
        return True

    def _unadmit_after(self, rid: int) -> bool:
        """Prefix caching: a request admitted after `rid` that holds only its cached blocks (no
        chunk yet: still waiting in vLLM's terms) goes back to the queue, the last first, so that
        `rid`'s first chunk may have the blocks (otherwise their pins could starve it). False when
        there is none."""
        later = self.prefilling[self.prefilling.index(rid) + 1:]
        for other in reversed(later):
            if self.pool.pins(other):
                self.prefilling.remove(other)
                self.pending -= self.target.pop(other) - self.prefilled.pop(other)
                if other in self._resumed:
                    self._resumed.discard(other)
                    self.recompute[other] = int(self.table.generated[other])
                self.pool.free([other])
                self.waiting.appendleft(other)
                self.table.phase[other] = PREEMPTED if self.table.preemptions[other] else WAITING
                return True
        return False

    def victim(self) -> int:
        """The most recently admitted running request holding KV (vLLM's `running[-1]`: admitted
        requests that have not had a chunk yet are still waiting in vLLM's terms)."""
        for rid in reversed(self.prefilling):
            if self.pool.holds(rid):
                return rid
        return self.decoding[-1]

    def preempt(self, rid: int) -> None:
        """Free `rid`'s KV and queue it first; it will recompute prompt + generated."""
        if rid in self.target:
            self.prefilling.remove(rid)
            self.pending -= self.target.pop(rid) - self.prefilled.pop(rid)
        else:
            self._leave(rid)
        self.recompute[rid] = int(self.table.generated[rid])
        self.pool.free([rid])
        self.waiting.appendleft(rid)
        self.table.phase[rid] = PREEMPTED
        self.table.preemptions[rid] += 1
        self.preemptions += 1
        self._preempted_now = True
