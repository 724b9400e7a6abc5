"""The cluster: an arrival process, a router and N replica processes in one SimPy environment."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import simpy

from ..errors import InputError
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..traces.schema import Trace
from .acceptance import AcceptanceSampler
from .costs import IterationCost
from .fast import MAX_RUN, FastReplica
from .loop import LoopReplica
from .policies import make_policy
from .reference import ReferenceReplica
from .replica import ReplicaBase
from .requests import RequestTable

ROUTERS = ("round-robin", "least-outstanding")
ROUTER_ALIASES = {"rr": "round-robin", "round-robin": "round-robin",
                  "lo": "least-outstanding", "least-outstanding": "least-outstanding"}
ENGINES = ("fast", "block", "loop", "reference")


class Router:
    """Chooses a replica for each arrival: round-robin, or the fewest outstanding requests
    (routed and not finished; ties go to the lowest index)."""

    def __init__(self, kind: str, replicas: list[ReplicaBase]) -> None:
        self.kind = kind
        self.replicas = replicas

    def route(self, rid: int, t_ns: int) -> ReplicaBase:
        if self.kind == "round-robin":
            return self.replicas[rid % len(self.replicas)]
        loads = [rep.outstanding_at(t_ns) for rep in self.replicas]
        return self.replicas[int(np.argmin(loads))]

    def candidate_after(self, rid: int, replica: ReplicaBase) -> int | None:
        """First request index >= rid that may be routed to `replica` (None: none left)."""
        n = len(self.replicas)
        if self.kind == "round-robin" and n > 1:
            rid += (replica.index - rid) % n
        return rid


class Cluster:
    """Owns the environment; routes arrivals in time order (pushed by the arrival process,
    pulled by replicas waking at the same instant, so ties never depend on event order)."""

    def __init__(self, table: RequestTable, replicas: int, router: str, hw: HardwareProfile,
                 policy_name: str, acceptance: AcceptanceProfile | None, seed: int,
                 engine: str = "fast", env: simpy.Environment | None = None,
                 replica_cls=None) -> None:
        """`env` and `replica_cls` let the real serving engine (dspark_sim/serve) run the same
        arrivals, router and replica bookkeeping on a wall-clock environment."""
        self.env = env if env is not None else simpy.Environment()
        self.table = table
        self._next = 0
        self.tracks_outstanding = router == "least-outstanding" and replicas > 1
        gamma = acceptance.gamma if acceptance is not None else 1
        probe = make_policy(policy_name, gamma)
        sampler = None
        if probe.speculative:
            sampler = AcceptanceSampler(acceptance, table.task, table.output, seed, pad=MAX_RUN)
        cost = IterationCost(hw, acceptance.drafter_kind if probe.speculative and acceptance else None)
        planned = probe.plan(np.zeros((1, gamma)), 1, cost) is not None and \
            (sampler is None or sampler.static_confidence or not probe.needs_confidence)
        loopable = planned or probe.needs_accepted        # oracle needs only the accepted runs
        if engine == "loop" and not loopable and replica_cls is None:
            raise InputError(f"engine 'loop' needs a policy decided per batch composition; "
                             f"{policy_name} with this profile is not", field="engine")
        cls = replica_cls or {"block": FastReplica, "loop": LoopReplica,
                              "reference": ReferenceReplica}.get(engine)
        if cls is None:     # "fast": per-iteration python loop where it applies, else blocks
            cls = LoopReplica if loopable else FastReplica
        self.replicas: list[ReplicaBase] = [
            cls(i, self.env, self, table, hw, cost, make_policy(policy_name, gamma), sampler)
            for i in range(replicas)]
        self.router = Router(router, self.replicas)
        self.env.process(self._arrivals())

    def _arrivals(self) -> Iterator[simpy.Event]:
        arrival = self.table.arrival_ns
        env = self.env
        while self._next < self.table.n:
            t = int(arrival[self._next])
            if t > env.now:
                yield env.timeout(t - env.now)
            self.dispatch_until(int(env.now))

    def dispatch_until(self, t_ns: int) -> None:
        """Route every request that has arrived by t, in arrival order."""
        arrival = self.table.arrival_ns
        while self._next < self.table.n and arrival[self._next] <= t_ns:
            rid = self._next
            self._next += 1
            self.router.route(rid, int(arrival[rid])).submit(rid)

    def next_arrival_ns(self, replica: ReplicaBase) -> int | None:
        """Arrival time of the next request that could be routed to `replica`."""
        rid = self.router.candidate_after(self._next, replica)
        return int(self.table.arrival_ns[rid]) if rid is not None and rid < self.table.n else None

    def run(self) -> None:
        """Simulate until every request has finished."""
        self.env.run()
        for rep in self.replicas:
            rep.flush()
        if (self.table.finish_ns < 0).any():   # pragma: no cover - a model bug, not bad input
            raise RuntimeError("simulation ended with unfinished requests")


def check_kv_fits(table: RequestTable, hw: HardwareProfile) -> None:
    """Bad input when some request could never be admitted (prompt + output > KV capacity)."""
    kv = hw.kv_capacity_tokens
    if kv is not None and len(table.kv_need) and int(table.kv_need.max()) > kv:
        i = int(table.kv_need.argmax())
        raise InputError(f"request {table.ids[i]!r} needs {int(table.kv_need[i])} KV tokens "
                         f"(prompt + output) but the hardware profile holds {kv}",
                         field="kv_capacity_tokens")


@dataclass
class SimOutcome:
    """What one simulation produced."""

    table: RequestTable
    iterations: int
    wall_s: float
    cpu_s: float = 0.0       # CPU time of this process (robust on a shared machine)


def simulate(trace: Trace, policy: str, hw: HardwareProfile, acceptance: AcceptanceProfile | None,
             replicas: int = 1, router: str = "round-robin", seed: int = 0,
             engine: str = "fast") -> SimOutcome:
    """Serve `trace` with `replicas` replicas of `hw` under `policy`; every request finishes."""
    if router not in ROUTER_ALIASES:
        raise InputError(f"unknown router {router!r}; choose rr or least-outstanding", field="router")
    if replicas < 1:
        raise InputError(f"must be >= 1, got {replicas}", field="replicas")
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose {', '.join(ENGINES)}", field="engine")
    t0, c0 = time.perf_counter(), time.process_time()
    table = RequestTable(trace)
    check_kv_fits(table, hw)
    cluster = Cluster(table, replicas, ROUTER_ALIASES[router], hw, policy, acceptance, seed, engine)
    cluster.run()
    return SimOutcome(table, sum(r.iterations for r in cluster.replicas), time.perf_counter() - t0,
                      time.process_time() - c0)
