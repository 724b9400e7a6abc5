"""One serving replica: a SimPy process that alternates between waiting for work and `advance()`,
which plans and commits one or more iterations and returns when the last of them ends (the
process sleeps until then). The engines implement `advance()`: the per-iteration reference
(reference.py), the python loop (loop.py) and the numpy blocks (block.py); serve/'s real replica
runs real iterations. Queue, admission, chunked prefill and preemption are the scheduler's
(sim/scheduler.py); verify lengths the policy's (speculation/); iteration times the cost's (cost/).

Semantics (docs/simulator.md): a request whose prefill completes emits its first token at the
end of that iteration and decodes from the next one; a decoding request emits 1 + accepted
drafts per iteration, never more than it still owes (core/rules.py).
"""
from __future__ import annotations

from typing import Iterator, Protocol, Sequence

import numpy as np
import simpy

from ...profiles.hardware import HardwareProfile
from ..acceptance.sampler import AcceptanceSampler
from ..core.requests import RequestTable
from ..core.units import UNLIMITED
from ..cost.iteration import IterationCost
from ..kv.pool import KVPool, ReservePool
from ..scheduler import Scheduler
from ..speculation.base import Policy, PolicyInputs

_EMPTY = np.zeros(0, dtype=np.int64)


class ArrivalFeed(Protocol):
    """What a replica asks of the cluster it serves in (cluster/run.py's `Cluster` is one): the
    arrivals, and whom to tell of finishes. Replicas never import the cluster."""

    prefill_elsewhere: bool            # disaggregated prefill
    tracks_outstanding: bool           # least-outstanding routing reads finish times
    closed_think_ns: int | None        # a closed loop's think time (None: open loop)
    replica_count: int

    def dispatch_until(self, t_ns: int) -> None:
        """Queue at their replicas every request that has arrived by t."""

    def next_arrival_ns(self, replica: "ReplicaBase") -> int | None:
        """Arrival time of the next request that could be queued at `replica`."""

    def finished(self, replica: "ReplicaBase", rids, t_ns) -> None:
        """Requests `rids` of `replica` finish at t_ns (a closed loop's users send their next)."""


class ReplicaBase:
    """State and SimPy process of one replica; subclasses implement `advance()` and
    `join_decoding()`."""

    def __init__(self, index: int, env: simpy.Environment, feed: ArrivalFeed, table: RequestTable,
                 hw: HardwareProfile, cost: IterationCost, policy: Policy,
                 sampler: AcceptanceSampler | None, pool: KVPool | None = None) -> None:
        """`pool`: the KV pool (default: reservation at admission, kv/pool.py)."""
        self.index = index
        self.env = env
        self.feed = feed
        self.table = table
        self.cost = cost
        self.policy = policy
        self.sampler = sampler
        self.gamma = sampler.gamma if sampler is not None else 1
        self.prefill_elsewhere = feed.prefill_elsewhere   # disaggregated prefill
        self.sched = Scheduler(table, pool if pool is not None else ReservePool(table, hw.kv_capacity_tokens),
                               max_requests=hw.max_batch_requests or UNLIMITED,
                               budget=hw.max_batch_tokens or UNLIMITED,
                               prefill_elsewhere=self.prefill_elsewhere,
                               join=self.join_decoding, on_finish=self._finished,
                               leave=self.leave_decoding)
        self._prompt, self._output, _ = table.as_lists()   # fast scalar access
        self.routed = 0
        self.finished = 0
        self.iterations = 0
        self._run_finish_ns = _EMPTY             # finish times committed by the current advance()
        self._wake: simpy.Event | None = None
        self.process = env.process(self._run())

    @property
    def decoders(self) -> Sequence[int]:
        """The decoding requests in running order (the engine's container, shared with the
        scheduler)."""
        return self.sched.decoding

    @decoders.setter
    def decoders(self, rows: Sequence[int]) -> None:
        self.sched.decoding = rows

    @property
    def preemptions(self) -> int:
        return self.sched.preemptions

    # --- arrivals and routing --------------------------------------------------------------

    def submit(self, rid: int) -> None:
        """Queue a request routed to this replica; wake the replica if it is idle."""
        self.table.replica[rid] = self.index
        self.sched.queue(rid)
        self.routed += 1
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def outstanding_at(self, t_ns: int) -> int:
        """Requests routed here and not finished before t (a finish at exactly t still counts)."""
        return self.routed - self.finished + int(np.count_nonzero(self._run_finish_ns >= t_ns))

    # --- the process -------------------------------------------------------------------------

    def _run(self) -> Iterator[simpy.Event]:
        env = self.env
        sched = self.sched
        while True:
            self.feed.dispatch_until(env.now)
            self._run_finish_ns = _EMPTY
            self.admit()
            if not sched.prefilling and len(sched.decoding) == 0:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            end = self.advance()
            yield env.timeout(end - env.now)

    def advance(self) -> int:  # pragma: no cover
        """Plan and commit iterations from now; return the end time (ns) of the last one."""
        raise NotImplementedError

    def join_decoding(self, rids: list[int]) -> None:  # pragma: no cover
        """Requests (first token emitted) that decode from the next iteration on."""
        raise NotImplementedError

    def leave_decoding(self, rid: int) -> None:
        """Decoding request `rid` was preempted (paged KV): it leaves the decoding requests."""
        self.decoders.remove(rid)

    def admit(self, t_ns: int | None = None) -> None:
        """The scheduler's admission at the iteration boundary t (default: now)."""
        sched = self.sched
        if sched.pool.on_demand:
            sched.admit(int(self.env.now) if t_ns is None else t_ns,
                        self.policy.scheduled_drafts(self.gamma))
        elif sched.waiting:        # the time stamps only disaggregated joins
            sched.admit(t_ns if t_ns is not None else int(self.env.now) if self.prefill_elsewhere else 0)

    def _finished(self, rids, t_ns) -> None:
        """The scheduler released requests `rids` at t (scalar or per request): routing counts,
        and in a closed loop their users send their next requests."""
        count = len(rids)
        self.finished += count
        if self.feed.tracks_outstanding:
            self._run_finish_ns = np.concatenate([self._run_finish_ns, np.broadcast_to(t_ns, count)])
        if self.feed.closed_think_ns is not None:
            self.feed.finished(self, rids, t_ns)

    # --- policy inputs -------------------------------------------------------------------------

    def policy_inputs(self, rows: np.ndarray, active: np.ndarray, base: np.ndarray, cap: np.ndarray,
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

    def flush(self) -> None:
        """Write any state the engine keeps locally into the request table."""
