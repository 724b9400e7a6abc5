"""Arrival sources of the cluster: the trace's own arrival times (open loop), or a closed loop
of users whose next request follows the previous one's finish.

A source answers two questions for the replicas: which requests have arrived by time t
(`dispatch_until`, pulled by a replica when it wakes and pushed by the source's own SimPy
events, so ties never depend on event order) and when the next request a replica could get
arrives (`next_arrival_ns`, where the engines end a stretch of iterations).
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Iterator

import numpy as np
import simpy

from ..core.requests import RequestTable
from ..core.units import NS
from .load import ClosedLoop

if TYPE_CHECKING:
    from .router import Router
    from ..engines.replica import ReplicaBase


class OpenArrivals:
    """Requests arrive at the trace's times (the table is in arrival order) and are routed
    on arrival."""

    think_ns = None          # not a closed loop: finishes create no arrivals

    def __init__(self, env: simpy.Environment, table: RequestTable, router: "Router") -> None:
        self.env = env
        self.table = table
        self.router = router
        self._next = 0
        self._arrival: list[int] = table.arrival_ns.tolist()    # fast scalar access
        env.process(self._arrivals())

    def _arrivals(self) -> Iterator[simpy.Event]:
        arrival = self._arrival
        env = self.env
        while self._next < self.table.n:
            t = arrival[self._next]
            if t > env.now:
                yield env.timeout(t - env.now)
            self.dispatch_until(int(env.now))

    def dispatch_until(self, t_ns: int) -> None:
        """Route every request that has arrived by t, in arrival order."""
        arrival, n, route = self._arrival, self.table.n, self.router.route
        while self._next < n and arrival[self._next] <= t_ns:
            rid = self._next
            self._next += 1
            route(rid, arrival[rid]).submit(rid)

    def next_arrival_ns(self, replica: "ReplicaBase") -> int | None:
        """Arrival time of the next request that could be routed to `replica`."""
        rid = self.router.candidate_after(self._next, replica)
        return self._arrival[rid] if rid is not None and rid < self.table.n else None

    def finished(self, replica: "ReplicaBase", rids, t_ns) -> None:
        """Requests finished (no effect on an open loop)."""


class ClosedArrivals:
    """C users (ClosedLoop): table row k*C + u is user u's request k. Every user sends its
    first request at time 0 and each next one `think_s` after the previous one finishes; user
    u is served by replica u mod N. Arrival times are written into the table as they become
    known (at the finish, which the engines record when they plan the iteration)."""

    def __init__(self, env: simpy.Environment, table: RequestTable, loop: ClosedLoop,
                 replicas: list["ReplicaBase"]) -> None:
        self.env = env
        self.table = table
        self.users = loop.users
        self.think_ns = int(round(loop.think_s * NS))
        self.replicas = replicas
        self._pending: list[list[tuple[int, int]]] = [[] for _ in replicas]   # heaps (t, rid)
        for rid in range(min(self.users, table.n)):
            self._send(rid, 0)

    def _send(self, rid: int, t_ns: int) -> None:
        self.table.arrival_ns[rid] = t_ns
        replica = self.replicas[(rid % self.users) % len(self.replicas)]
        heapq.heappush(self._pending[replica.index], (t_ns, rid))
        wake = self.env.timeout(t_ns - int(self.env.now))
        wake.callbacks.append(lambda _event: self.dispatch_until(int(self.env.now)))

    def dispatch_until(self, t_ns: int) -> None:
        """Queue at its replica every request sent by t, in (time, row) order."""
        for replica, heap in zip(self.replicas, self._pending):
            while heap and heap[0][0] <= t_ns:
                replica.submit(heapq.heappop(heap)[1])

    def next_arrival_ns(self, replica: "ReplicaBase") -> int | None:
        """Time of the next request sent to `replica` and not yet queued there."""
        heap = self._pending[replica.index]
        return heap[0][0] if heap else None

    def finished(self, replica: "ReplicaBase", rids, t_ns) -> None:
        """Each finished request's user sends its next one think_s later (if it has one)."""
        rids = np.atleast_1d(np.asarray(rids, dtype=np.int64))
        times = np.broadcast_to(np.asarray(t_ns, dtype=np.int64), rids.shape)
        for rid, t in zip(rids.tolist(), times.tolist()):
            nxt = rid + self.users
            if nxt < self.table.n:
                self._send(nxt, t + self.think_ns)
