"""One serving replica: FCFS admission, chunked prefill, continuous batching, one SimPy process.

The replica process alternates between waiting for work and `advance()`, which plans and
commits one or more iterations and returns when the last of them ends; the process sleeps
until then. The engines implement `advance()`: the vectorised one (fast.py), the python loop
(loop.py), the per-iteration reference (reference.py) and its paged-KV variant
(paged_engine.py, which overrides `admit`, `kv_admit` and `release`). They share everything here.

Semantics (docs/simulator.md):
- admission at an iteration boundary, FCFS, while fewer than max_batch_requests are running
  and the KV cache can reserve prompt + output tokens (`kv_admit`); no preemption (the paged
  engine: blocks on demand, preemption by recompute, a recomputed request prefilling its
  prompt and generated tokens again, `recompute`);
- token budget max_batch_tokens per iteration: decode tokens first (1 + verified drafts per
  decoding request), the rest to prefill chunks, FCFS;
- a request whose prefill completes emits its first token at the end of that iteration and
  decodes from the next one; a decoding request emits 1 + accepted drafts per iteration,
  never more than it still owes.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Iterator

import numpy as np
import simpy

from ...profiles.hardware import HardwareProfile
from ..acceptance.sampler import AcceptanceSampler
from ..core.units import UNLIMITED
from ..cost.iteration import IterationCost
from ..speculation.base import Policy, PolicyInputs
from ..core.requests import RequestTable

if TYPE_CHECKING:
    from ..cluster.run import Cluster

_EMPTY = np.zeros(0, dtype=np.int64)


class ReplicaBase:
    """State and SimPy process of one replica; subclasses implement `advance()`."""

    def __init__(self, index: int, env: simpy.Environment, cluster: "Cluster", table: RequestTable,
                 hw: HardwareProfile, cost: IterationCost, policy: Policy,
                 sampler: AcceptanceSampler | None) -> None:
        self.index = index
        self.env = env
        self.cluster = cluster
        self.table = table
        self.cost = cost
        self.policy = policy
        self.sampler = sampler
        self.gamma = sampler.gamma if sampler is not None else 1
        self.budget = hw.max_batch_tokens or UNLIMITED
        self.max_requests = min(hw.max_batch_requests or UNLIMITED, self.budget)
        self.kv_capacity = hw.kv_capacity_tokens or UNLIMITED
        self._prompt, self._output, self._need = table.as_lists()   # fast scalar access
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self._prefilled: dict[int, int] = {}      # prompt tokens in the KV cache, while prefilling
        self._target: dict[int, int] = {}         # tokens each prefilling request must prefill
        self.recompute: dict[int, int] = {}       # preempted requests: output tokens to prefill again
        self._pending = 0                         # prompt tokens the prefilling requests still need
        self.decoders: list[int] = []
        self.kv_used = 0
        self.routed = 0
        self.finished = 0
        self.iterations = 0
        self.prefill_elsewhere = cluster.prefill_elsewhere   # disaggregated prefill
        self._run_finish_ns = _EMPTY             # finish times committed by the current advance()
        self._wake: simpy.Event | None = None
        self.process = env.process(self._run())

    # --- arrivals and routing --------------------------------------------------------------

    def submit(self, rid: int) -> None:
        """Queue a request routed to this replica; wake the replica if it is idle."""
        self.table.replica[rid] = self.index
        self.waiting.append(rid)
        self.routed += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def outstanding_at(self, t_ns: int) -> int:
        """Requests routed here and not finished before t (a finish at exactly t still counts)."""
        return self.routed - self.finished + int(np.count_nonzero(self._run_finish_ns >= t_ns))

    # --- the process -------------------------------------------------------------------------

    def _run(self) -> Iterator[simpy.Event]:
        env = self.env
        while True:
            self.cluster.dispatch_until(env.now)
            self._run_finish_ns = _EMPTY
            self.admit()
            if not self.prefilling and len(self.decoders) == 0:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            end = self.advance()
            yield env.timeout(end - env.now)

    def advance(self) -> int:  # pragma: no cover
        """Plan and commit iterations from now; return the end time (ns) of the last one."""
        raise NotImplementedError

    # --- shared steps --------------------------------------------------------------------------

    def admit(self, t_ns: int | None = None) -> None:
        """FCFS admission under max_batch_requests and KV capacity (reserve prompt + output) at
        the iteration boundary t (default: now). With prefill elsewhere (disaggregated), an
        admitted request arrives with its prompt's KV and first token and decodes at once."""
        while self._admit_pass(t_ns):        # disaggregated: finishes on admission free room
            pass

    def _admit_pass(self, t_ns: int | None) -> bool:
        """One pass of admission; True when requests with prefill elsewhere were admitted."""
        elsewhere: list[int] = []
        while self.waiting:
            rid = self.waiting[0]
            if len(self.prefilling) + len(self.decoders) + len(elsewhere) >= self.max_requests:
                break
            if not self.kv_admit(rid):
                break
            self.waiting.popleft()
            if self.prefill_elsewhere:
                elsewhere.append(rid)
                continue
            target = self._prompt[rid] + self.recompute.pop(rid, 0)
            self.prefilling.append(rid)
            self._prefilled[rid] = 0
            self._target[rid] = target
            self._pending += target
        if elsewhere:
            t = int(self.env.now) if t_ns is None else t_ns
            for rid in elsewhere:
                self.table.prefilled[rid] = self._prompt[rid]
            joiners = self.stamp_prefill(elsewhere, t)
            if joiners:
                self.join_decoding(joiners)
        return bool(elsewhere)

    def kv_admit(self, rid: int) -> bool:
        """Reserve the KV request `rid` needs for its whole life (prompt + output) if it fits."""
        need = self._need[rid]
        if self.kv_used + need > self.kv_capacity:
            return False
        self.kv_used += need
        return True

    def join_decoding(self, rids: list[int]) -> None:  # pragma: no cover
        """Requests (first token emitted) that decode from the next iteration on."""
        raise NotImplementedError

    def head_fits_after(self, freed_requests: int, freed_kv: int) -> bool:
        """Would the head of the queue be admitted once these resources are freed?"""
        if not self.waiting:
            return False
        running = len(self.prefilling) + len(self.decoders) - freed_requests
        return running < self.max_requests and \
            self.kv_used - freed_kv + self._need[self.waiting[0]] <= self.kv_capacity

    def pending_prefill(self) -> int:
        """Prompt tokens admitted requests still have to prefill."""
        return self._pending

    def allocate_prefill(self, tokens: int) -> tuple[list[tuple[int, int]], int]:
        """FCFS prefill chunks within `tokens`; also the KV context they attend (already prefilled)."""
        target, prefilled = self._target, self._prefilled
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

    def columns(self, rows: np.ndarray, active: np.ndarray, base: np.ndarray, cap: np.ndarray,
                steps: np.ndarray | None, accepted: np.ndarray | None) -> PolicyInputs:
        """Policy inputs for C iterations over `rows`; steps/accepted are (R, C)."""
        sampler = self.sampler
        c, r = active.shape
        g = self.gamma
        if sampler is None:
            mean = np.zeros((r, g))
            surv = np.zeros((c, r, g))
        else:
            mean = sampler.row_survival(rows)
            if self.policy.needs_confidence and not sampler.static_confidence:
                surv = sampler.survival(rows, steps).transpose(1, 0, 2)
            else:
                surv = np.broadcast_to(mean[None], (c, r, g))
        return PolicyInputs(surv=surv, active=active, base=base, cap=cap, mean_surv=mean,
                       accepted=None if accepted is None else accepted.T)

    # --- commit --------------------------------------------------------------------------------

    def finish(self, rids: np.ndarray, t_ns) -> None:
        """Record finishes (eagerly, at planning time) and free their KV reservations."""
        if len(rids) == 0:
            return
        self.table.finish_ns[rids] = t_ns
        self.release(rids, int(self.table.kv_need[rids].sum()), t_ns)

    def release(self, rids, kv: int, t_ns) -> None:
        """Free the slots and KV of requests `rids` finishing at t (scalar or per request); in a
        closed loop their users send their next requests."""
        count = len(rids)
        self.kv_used -= kv
        self.finished += count
        if self.cluster.tracks_outstanding:
            self._run_finish_ns = np.concatenate([self._run_finish_ns, np.broadcast_to(t_ns, count)])
        if self.cluster.closed_think_ns is not None:
            self.cluster.finished(self, rids, t_ns)

    def flush(self) -> None:
        """Write any state the engine keeps locally into the request table."""

    def apply_prefill(self, chunks: list[tuple[int, int]]) -> list[int]:
        """Add the chunks to the KV cache; return the requests whose prefill they complete
        (no longer prefilling; `stamp_prefill` records their first token)."""
        prompt, prefilled, target = self._prompt, self._prefilled, self._target
        completed = []
        for rid, take in chunks:
            prefilled[rid] += take
            self._pending -= take
            if prefilled[rid] == target[rid]:
                completed.append(rid)
        for rid in completed:
            self.prefilling.remove(rid)
            del prefilled[rid], target[rid]
            self.table.prefilled[rid] = prompt[rid]
        return completed

    def stamp_prefill(self, completed: list[int], t_ns: int) -> list[int]:
        """First tokens at the end of the iteration that completed the prefill; requests owing
        one token finish there. Returns those that decode from the next iteration."""
        t = self.table
        joiners, done = [], []
        for rid in completed:
            t.first_token_ns[rid] = t_ns
            t.generated[rid] = 1
            (done if t.output[rid] == 1 else joiners).append(rid)
        if done:
            self.finish(np.asarray(done, dtype=np.int64), np.int64(t_ns))
        return joiners
