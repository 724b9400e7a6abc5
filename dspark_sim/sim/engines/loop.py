"""Per-iteration engine in plain Python, many iterations per SimPy wake.

For policies whose verify lengths depend only on who is in the batch (ar, mtp1, static-K,
and dspark / goodput with per-task confidences) the lengths come from per-composition plans,
so an iteration costs a few python operations per decoding request. The replica runs
iterations back to back -- admitting from its queue, prefilling, retiring finished requests
-- until the first iteration boundary at or after the next arrival it could be routed, and
only then sleeps. On the small batches of a lightly loaded replica this beats numpy calls on
tiny arrays; the vectorised engine (block.py) serves the other policies. Same results as the
reference engine, bit for bit (tests).

Bookkeeping that would cost a store per row and iteration is done per stretch instead: a
row's decode step is the iteration index minus the index of its first decode iteration, and
verified drafts are settled whenever the verify lengths change.

Paged KV (`--kv-semantics blocks`, with or without prefix caching): the scheduler grows the rows'
blocks and admits at every boundary, as on the reference engine, from the rows' generated tokens
written into the table first. A steady stretch runs only when the free blocks hold every row's
growth to its last step (no preemption can happen in it, and the head of the queue cannot come to
fit: free blocks only shrink); the growth is then taken at the stretch's end, the same blocks. A
preempted row leaves the lists with what it had done (`_resume`), and rejoins at its decode step
when its recompute ends.

Why one file past 400 lines: it is one class, the replica whose per-row lists every method
keeps in step, and it is the unit setup.py compiles (BUILDS: `_loop_native` from this file);
methods moved into a mixin elsewhere would leave the compiled build unless that file were
compiled too.
"""
from __future__ import annotations

from operator import sub

import numpy as np

from ..core.rules import step_tokens
from ..speculation.base import cap_in_order_list
from .replica import ReplicaBase
from .stretch import steady_stretch


# _TOKENS[l][a]: tokens of a step with accepted run a when l drafts are verified (before the clip)
_TOKENS = [bytes(step_tokens(a, length) for a in range(256)) for length in range(255)]


class LoopReplica(ReplicaBase):
    """Runs iterations in a python loop until the next arrival boundary or idleness."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        p = self.policy
        self._fixed_table(0)        # the cost's drafting table as far as it reaches; grown on demand
        self._drafting: dict[int, float] = {}   # drafting ns by (rows, drafts), policies whose drafts vary
        self._task = self.sampler.task_index if self.sampler is not None else None
        self._oracle = p.needs_accepted          # verifies exactly the accepted run
        # decoding rows, in batch order (lists are changed in place)
        self._rid: list[int] = []
        self._seq: list[bytes] = []       # accepted run of each decode step
        self._tok: list[bytes] = []       # tokens of each decode step at the row's verify length
        self._tok_len: list[int] = []     # the verify length _tok was built for
        self._first: list[int] = []       # iteration index of the row's first decode step
        self._owed: list[int] = []
        self._ver: list[int] = []         # verified drafts, settled up to _settled
        self._tasks: list[int] = []
        self._settled = 0
        self._kv_sum = 0                  # prompt + generated over the decoding rows
        self._plans: dict[tuple, object] = {}
        self._results: list[tuple[int, int, int, int, int, int]] = []   # finished rows
        # paged KV: preempted requests' (steps, accepted, verified) so far, and for rows rejoined
        # after a recompute (steps, generated) at their rejoining
        self._on_demand = self.sched.pool.on_demand
        self._resume: dict[int, tuple[int, int, int]] = {}
        self._rejoined: dict[int, tuple[int, int]] = {}
        if self._on_demand:       # preempted rows may finish at their recompute's end
            self.sched.on_finish = self._finished_paged
        self._kv_end: list[int] = []      # paged KV: prompt + output (the row's KV at its end)
        self._columns = (self._rid, self._seq, self._tok, self._tok_len, self._first, self._owed,
                         self._ver) + ((self._kv_end,) if self._on_demand else ())
        self._sched_drafts = p.scheduled_drafts(self.gamma)     # fixed: no stateful policy here
        # the free blocks hold every row's growth to its end (`_room_to_finish`); once true it
        # stays true while blocks go only to these rows' growth (which takes from both sides
        # alike) or come back (finishes, preemptions): until a prefill chunk or a joining row
        self._room_ok = False
        self._write_generated = self.sched.pool.reads_generated   # else the rows' KV is passed
        self.decoders = self._rid
        self._refresh()

    def _fixed_table(self, requests: int) -> None:
        """The cost's drafting nanoseconds by request count at the policy's fixed drafts per
        step, covering `requests` (None for a policy whose drafts vary: it asks the cost for each
        iteration's, `_drafting_ns`)."""
        drafts = self.policy.drafts
        self._draft_fixed = self.cost.fixed_drafts_list(drafts, requests) if drafts is not None else None
        self._n_fixed = len(self._draft_fixed) if drafts is not None else 1 << 62

    # --- verify lengths --------------------------------------------------------------------

    def _plan(self, key: tuple):
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= 4096:
                self._plans.clear()
            rows = np.asarray(self._rid, dtype=np.int64)
            surv = self.sampler.row_survival(rows) if self.sampler is not None else \
                np.zeros((len(rows), self.gamma))
            plan = self._plans[key] = self.policy.plan(surv, self.sched.drafts_room(len(rows)), self.cost)
        return plan

    def _refresh(self) -> None:
        """The rows changed: verify lengths of iterations without prefill."""
        self._key = tuple(self._tasks) if self._task is not None else (len(self._rid),)
        if self._oracle:             # tokens at length gamma are 1 + the accepted run
            lengths = [self.gamma] * len(self._rid)
        else:
            lengths = self._plan(self._key).lengths_list(0) if self._rid else []
        self._lengths = lengths
        self._sum_lengths = sum(lengths)
        # drafting of an iteration at these lengths, for a policy whose drafts vary (else None)
        self._lengths_drafting = self._drafting_ns(len(lengths), lengths) \
            if self._draft_fixed is None else None
        tok_len = self._tok_len
        for k, length in enumerate(lengths):
            if tok_len[k] != length:
                self._tok[k] = self._seq[k].translate(_TOKENS[length])
                tok_len[k] = length

    def _settle(self, upto: int) -> None:
        """Credit the current verify lengths for iterations _settled..upto-1."""
        n = upto - self._settled
        if n:
            ver, lengths = self._ver, self._lengths
            for k in range(len(ver)):
                ver[k] += lengths[k] * n
        self._settled = upto

    # --- the loop ----------------------------------------------------------------------------

    def advance(self) -> int:
        now = int(self.env.now)
        t_arr = self.feed.next_arrival_ns(self)
        if t_arr is None:
            t_arr = 1 << 62
        rid, seq, tok, first, owed = self._rid, self._seq, self._tok, self._first, self._owed
        sched = self.sched
        prefilling, waiting = sched.prefilling, sched.waiting
        cost = self.cost
        context_ns, draft_fixed, n_fixed = cost.context_ns, self._draft_fixed, self._n_fixed
        iteration_ns, stretch_base = cost.iteration_ns_one, cost.stretch_base
        prefill_room, take_prefill = sched.prefill_room, sched.take_prefill
        it = self.iterations
        kv_sum = self._kv_sum
        lag, oracle = self.policy.lag, self._oracle
        tokens_at = _TOKENS
        total = self._sum_lengths
        closed = self.feed.closed_think_ns is not None
        inline = not closed and self.feed.replica_count == 1
        # steady stretches (and each time, not prefilling); not with a prefix cache, whose block
        # ids follow the order the rows grow in, one boundary after another
        steady = not (oracle or lag or self.prefill_elsewhere or self._write_generated)
        on_demand = self._on_demand
        while True:
            r = len(rid)
            if r and steady and not prefilling and (not on_demand or self._room_to_finish()):
                # iterations of the same rows at their usual verify lengths, without prefill:
                # only the rows' tokens and the KV context change, until a row finishes or an
                # iteration reaches the next arrival (admission cannot change meanwhile: only a
                # finish frees a slot or KV)
                if r >= n_fixed:
                    self._fixed_table(r)
                    draft_fixed, n_fixed = self._draft_fixed, self._n_fixed
                base = stretch_base(draft_fixed[r] if draft_fixed is not None else
                                    self._lengths_drafting, r + total)
                chunks = None
                it, now, end, kv_sum, emitted, done = steady_stretch(
                    tok, first, owed, r, it, now, t_arr, base, context_ns, kv_sum)
            else:
                if oracle:
                    once = self._oracle_trim(it, r) if r * self.gamma > sched.drafts_room(r) else None
                elif prefilling or lag:
                    once = self._lengths_now(it, r)
                else:
                    once = None
                # decoding rows: 1 + accepted drafts each (owed may go below 0: the surplus of the
                # last step is dropped when the row retires)
                emitted = 0
                done = None
                lengths = self._lengths if once is None else once
                for k in range(r):
                    e = tokens_at[lengths[k]][seq[k][it - first[k]]]
                    left = owed[k] - e
                    owed[k] = left
                    emitted += e
                    if left <= 0:
                        if done is None:
                            done = []
                        done.append(k)
                verified = emitted - r if oracle else (total if once is None else sum(once))
                batch = r + verified
                chunks, prefill_context = None, 0
                if prefilling:       # prefill takes what the decode tokens leave, FCFS
                    # (batch >= r: the room at the decode tokens is within the base's room)
                    chunks, prefill_context = take_prefill(prefill_room(batch))
                    batch += sum(take for _, take in chunks)
                if r >= n_fixed:
                    self._fixed_table(r)
                    draft_fixed, n_fixed = self._draft_fixed, self._n_fixed
                end = now + iteration_ns(draft_fixed[r] if draft_fixed is not None else
                                         self._lengths_drafting if once is None else
                                         self._drafting_ns(r, lengths), batch,
                                         batch - r - verified if chunks else 0,
                                         kv_sum + prefill_context)
            kv_sum += emitted
            it += 1
            if done is not None or chunks:
                self._kv_sum = kv_sum
                if done is not None:
                    self._retire(done, end, it)
                if chunks:
                    self._room_ok = False          # the chunks took blocks
                    joiners = sched.stamp_prefill(sched.apply_prefill(chunks), end)
                    if joiners:
                        self._join(joiners, it)
                kv_sum, total = self._kv_sum, self._sum_lengths
                if closed:          # a closed loop's finishes send the users' next requests
                    t_next = self.feed.next_arrival_ns(self)
                    if t_next is not None and t_next < t_arr:
                        t_arr = t_next
            now = end
            if now >= t_arr:
                if not inline:
                    break
                # the only replica of an open loop takes the arrivals itself rather than hand
                # back to SimPy: the same queue, in the same order, at the same boundary
                self.feed.dispatch_until(now)
                t_arr = self.feed.next_arrival_ns(self)
                if t_arr is None:
                    t_arr = 1 << 62
            if on_demand:          # rows grow (and may be preempted) at every boundary
                # ... where anything reads the free blocks: with room for every row to its end,
                # nobody waiting and no prefill, growth only moves blocks from free to the rows
                # that will hold them (a preemption cannot happen; a finish frees the same
                # blocks), and growing later to the larger size takes the same blocks. (Never
                # with a prefix cache: it runs no steady stretch, so _room_ok stays False; its
                # block ids follow the order of growth)
                if waiting or prefilling or not self._room_ok:
                    self._kv_sum, self.iterations = kv_sum, it
                    self.admit()
                    kv_sum, total = self._kv_sum, self._sum_lengths
            elif waiting:
                if self.prefill_elsewhere:       # admitted requests join the rows at once
                    self._kv_sum, self.iterations = kv_sum, it
                    self.admit(now)
                    kv_sum, total = self._kv_sum, self._sum_lengths
                    if closed:          # a request owing one token finishes on admission
                        t_next = self.feed.next_arrival_ns(self)
                        if t_next is not None and t_next < t_arr:
                            t_arr = t_next
                else:             # (reserve: nothing to write first; no time stamp to give)
                    sched.admit(0)
            if not prefilling and not rid:
                break
        self._kv_sum = kv_sum
        self.iterations = it
        return now

    def _drafting_ns(self, r: int, lengths: list[int]) -> float:
        """Drafting nanoseconds of an iteration with r rows verifying `lengths`, for a policy
        whose drafts per step vary (goodput pays for the k it picks)."""
        k = self.policy.drafts_made(lengths)
        key = (r << 8) | k                 # k <= gamma < 256; a table entry never changes
        ns = self._drafting.get(key)
        if ns is None:
            ns = self._drafting[key] = self.cost.draft_ns_one(r, k)
        return ns

    def _lengths_now(self, it: int, r: int) -> list[int] | None:
        """Verify lengths of an iteration with prefill to do (the base is the prefill it could
        take) or of a lagged policy (budget from two iterations earlier); None when they are
        the current rows' usual lengths."""
        prefill_max = self.sched.prefill_room(r) if self.sched.prefilling else 0
        lengths = self._lengths
        if self.policy.lag:
            plan = self._plan(self._key)
            raw = plan.raw(prefill_max) if r else 0
            use = self.policy.lagged.budget(raw)
            if r:
                lengths = plan.lengths_for(use)
        elif prefill_max and r:
            lengths = self._plan(self._key).lengths_list(prefill_max)
        if lengths is self._lengths or lengths == self._lengths:
            return None
        self._settle(it)                     # credit this one iteration's lengths apart
        ver = self._ver
        for k in range(r):
            ver[k] += lengths[k]
        self._settled = it + 1
        return lengths

    def _oracle_trim(self, it: int, r: int) -> list[int] | None:
        """oracle verifies each row's accepted run; when their total passes the drafts budget,
        earlier rows keep theirs first (as `cap_in_order`)."""
        room = self.sched.drafts_room(r)
        runs = [self._seq[k][it - self._first[k]] for k in range(r)]
        if sum(runs) <= room:
            return None
        return cap_in_order_list(runs, room)

    # --- rows in and out ---------------------------------------------------------------------

    def _join(self, joiners: list[int], it: int) -> None:
        """Requests whose prefill ended in iteration it-1 decode from iteration it on."""
        self._settle(it)
        self._room_ok = False
        for rid in joiners:
            steps = self._output[rid] - 1
            if self.sampler is not None:
                runs, period = self.sampler.sequence(rid)
                if period < steps:
                    runs = (runs * (steps // period + 1))[:steps]
            else:
                runs = bytes(steps)
            first, owed, generated = it, steps, 1
            if self._resume and rid in self._resume:      # back from a recompute
                done_steps = self._resume[rid][0]
                generated = int(self.table.generated[rid])
                first, owed = it - done_steps, self._output[rid] - generated
                self._rejoined[rid] = (done_steps, generated)
            self._rid.append(rid)
            self._seq.append(runs)
            self._tok.append(b"")
            self._tok_len.append(-1)
            self._first.append(first)
            self._owed.append(owed)
            self._ver.append(0)
            if self._on_demand:
                self._kv_end.append(self._prompt[rid] + self._output[rid])
            if self._task is not None:
                self._tasks.append(int(self._task[rid]))
            self._kv_sum += self._prompt[rid] + generated
        self._refresh()

    def join_decoding(self, rids: list[int]) -> None:
        self._join(rids, self.iterations)

    # --- paged KV ------------------------------------------------------------------------------

    def admit(self, t_ns: int | None = None) -> None:
        if not self._on_demand:
            super().admit(t_ns)
            return
        # the scheduler grows the rows from their KV positions (prompt + generated)
        output, owed, known = self._output, self._owed, None
        if self._write_generated:        # the pool reads them from the table
            generated = self.table.generated
            for k, rid in enumerate(self._rid):
                generated[rid] = output[rid] - owed[k]
        else:
            known = list(map(sub, self._kv_end, owed))
        self.sched.admit(int(self.env.now) if t_ns is None else t_ns, self._sched_drafts, known)

    def _room_to_finish(self) -> bool:
        """May a steady stretch run on paged KV: the free blocks hold every row's growth up to its
        last step (drafts included), and the head of the queue does not fit now (it could after
        a preemption, whose boundary admits nothing)?"""
        sched = self.sched
        if sched.waiting and sched.head_fits_after(0, 0):
            return False
        if self._room_ok:
            return True
        last = self._sched_drafts - 1       # the last step's KV: prompt + output - 1 + drafts
        self._room_ok = sched.pool.room_for(self._rid, [n + last for n in self._kv_end])
        return self._room_ok

    def _finished_paged(self, rids, t_ns) -> None:
        """`_finished`, and the results of rows back from a recompute that owed nothing more."""
        self._finished(rids, t_ns)
        if self._resume:          # back from a recompute owing nothing more: it finishes there
            drafts = self.policy.drafts
            for rid in [rids] if isinstance(rids, int) else list(rids):
                rid = int(rid)
                if rid in self._resume and rid not in self._rejoined:
                    steps, accepted, ver = self._resume.pop(rid)
                    if self._oracle:
                        ver = accepted
                    self._results.append((rid, int(t_ns), steps, accepted, ver,
                                          ver if drafts is None else steps * drafts))

    def leave_decoding(self, rid: int) -> None:
        """Row `rid` is preempted at the boundary before iteration `self.iterations`: what it
        has done so far waits in `_resume` for its return."""
        it = self.iterations
        self._settle(it)
        k = self._rid.index(rid)
        steps = it - self._first[k]
        generated = self._output[rid] - self._owed[k]
        self.table.generated[rid] = generated        # what the scheduler recomputes
        before_steps, before_generated = self._rejoined.pop(rid, (0, 1))
        acc0, ver0 = self._resume.pop(rid, (0, 0, 0))[1:]
        accepted = acc0 + (generated - before_generated) - (steps - before_steps)
        self._resume[rid] = (steps, accepted, ver0 + self._ver[k])
        self._kv_sum -= self._prompt[rid] + generated
        for values in self._columns:
            del values[k]
        if self._task is not None:
            del self._tasks[k]
        self._refresh()

    def _retire(self, done: list[int], end: int, it: int) -> None:
        """Rows that emitted their last token in iteration it-1, ending at `end`."""
        self._settle(it)
        drafts = self.policy.drafts
        output, prompt = self._output, self._prompt
        for k in done:
            rid = self._rid[k]
            out = output[rid]
            steps = it - self._first[k]
            # accepted drafts = decode tokens before the final clip - steps
            accepted = out - 1 - self._owed[k] - steps
            ver = self._ver[k]
            if self._resume and rid in self._resume:       # it was preempted: add its earlier stints
                before_steps, before_generated = self._rejoined.pop(rid)
                _, acc0, ver0 = self._resume.pop(rid)
                accepted = acc0 + out - self._owed[k] - before_generated - (steps - before_steps)
                ver += ver0
            if self._oracle:
                ver = accepted
            self._results.append((rid, end, steps, accepted, ver,
                                  ver if drafts is None else steps * drafts))
            self._kv_sum += self._owed[k] - prompt[rid] - out   # drop the overshoot and the row
        self.sched.release([self._rid[k] for k in done], end)
        if len(done) == 1:
            k = done[0]
            for values in self._columns:
                del values[k]
            if self._task is not None:
                del self._tasks[k]
        else:
            gone = set(done)
            keep = [k for k in range(len(self._rid)) if k not in gone]
            for values in self._columns:
                values[:] = [values[k] for k in keep]
            if self._task is not None:
                self._tasks[:] = [self._tasks[k] for k in keep]
        self._refresh()

    def flush(self) -> None:
        """Write the finished requests' results into the request table."""
        if not self._results:
            return
        rid, end, steps, accepted, verified, drafted = (np.array(c, dtype=np.int64)
                                                        for c in zip(*self._results))
        self._results = []
        t = self.table
        t.finish_ns[rid] = end
        t.steps[rid] = steps
        t.generated[rid] = t.output[rid]
        t.accepted[rid] = accepted
        t.verified[rid] = verified
        t.drafted[rid] = drafted
