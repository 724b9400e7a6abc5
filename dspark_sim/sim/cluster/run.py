"""The cluster: an arrival source (open or closed loop), a router and N replica processes in one
SimPy environment."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import simpy

from ...errors import InputError
from ...profiles.acceptance import AcceptanceProfile
from ...profiles.hardware import HardwareProfile
from ...traces.schema import Trace
from ..acceptance.sampler import AcceptanceSampler
from ..core.requests import RequestTable
from ..core.units import NS
from ..cost.iteration import IterationCost
from ..engines.block import MAX_RUN
from ..engines.capability import ENGINES, Needs, engine_class
from ..engines.replica import ReplicaBase
from ..kv.semantics import KV_SEMANTICS, check_kv_fits, make_pool
from ..speculation.registry import make_policy
from .arrivals import ClosedArrivals, OpenArrivals
from .load import ClosedLoop
from .router import ROUTER_ALIASES, Router


PREFILL_MODES = ("local", "disaggregated")
PROGRESS_EVERY_S = 600.0      # simulated seconds between progress reports


class Cluster:
    """Owns the environment and the arrival source; replicas ask it for arrivals (`dispatch_until`,
    `next_arrival_ns`) and tell it of finishes (`finished`, which drives a closed loop): it is
    their `ArrivalFeed` (engines/replica.py)."""

    def __init__(self, table: RequestTable, replicas: int, router: str, hw: HardwareProfile,
                 policy_name: str, acceptance: AcceptanceProfile | None, seed: int,
                 engine: str = "fast", closed_loop: ClosedLoop | None = None,
                 prefill: str = "local", env: simpy.Environment | None = None,
                 replica_cls=None, kv_semantics: str = "reserve", schedule=None,
                 part: "PartContext | None" = None) -> None:
        """`env` and `replica_cls` let the real serving engine (dspark_sim/serve) run the same
        arrivals, router and replica bookkeeping on a wall-clock environment. `part`: this
        table is one replica's share of a larger trace (sim/cluster/partition.py)."""
        self.env = env if env is not None else simpy.Environment()
        self.prefill_elsewhere = prefill == "disaggregated"
        self.table = table
        self.tracks_outstanding = router == "least-outstanding" and replicas > 1 and closed_loop is None
        self.replica_count = replicas
        gamma = acceptance.gamma if acceptance is not None else 1

        def new_policy():      # one per replica: a policy may keep per-replica state
            return make_policy(policy_name, gamma, schedule=schedule, hw=hw)
        traits = new_policy()      # what the policy is (its instances run the replicas)
        sampler = None
        if traits.speculative:
            sampler = part.sampler if part is not None else \
                AcceptanceSampler(acceptance, table.task, table.output, seed, pad=MAX_RUN,
                                request_ids=table.ids)
        # the scheduler's cost view: drafting as the policy drafts, and attention over the
        # trace's typical KV length of a decoding request (prompt + half the output)
        cost = IterationCost(hw, acceptance.drafter_kind if traits.speculative and acceptance else None,
                             scheduler_drafts=traits.most_drafts(gamma),
                             scheduler_context=part.typical_context if part is not None
                             else typical_context(table))
        static = sampler is None or sampler.static_confidence
        cls = replica_cls or engine_class(engine, Needs(
            policy_name, kv_semantics, stateful=traits.stateful,
            capped_drafts=sampler is not None and sampler.caps_drafts,
            planned=traits.plans_apply(cost, gamma, static), needs_accepted=traits.needs_accepted,
            disaggregated=self.prefill_elsewhere))
        self.replicas: list[ReplicaBase] = [
            cls(i, self.env, self, table, hw, cost, new_policy(), sampler,
                pool=make_pool(kv_semantics, table, hw)) for i in range(replicas)]
        self.router = Router(router, self.replicas)
        if closed_loop is None:
            self.source: OpenArrivals | ClosedArrivals = OpenArrivals(self.env, table, self.router)
        else:
            self.source = ClosedArrivals(self.env, table, closed_loop, self.replicas)
        # a closed loop's finishes create arrivals (think_ns after them); None for an open loop
        self.closed_think_ns: int | None = self.source.think_ns
        # the feed's three verbs (ArrivalFeed) are the source's own, bound once: the engines call
        # them every few iterations. dispatch_until(t): queue at their replicas every request that
        # has arrived by t, in arrival order; next_arrival_ns(replica): arrival time of the next
        # request that could be queued there; finished(replica, rids, t): they finish at t
        self.dispatch_until = self.source.dispatch_until
        self.next_arrival_ns = self.source.next_arrival_ns
        self.finished = self.source.finished

    def run(self, progress: Callable[[float], None] | None = None,
            every_s: float = PROGRESS_EVERY_S) -> None:
        """Simulate until every request has finished; with `progress`, call progress(simulated
        seconds) every `every_s` simulated seconds (the events run in the same order)."""
        if progress is None:
            self.env.run()
        else:
            step = max(1, int(every_s * NS))
            env, report_at = self.env, step
            while (upcoming := env.peek()) != simpy.core.Infinity:     # what env.run() does
                if upcoming >= report_at:
                    progress(env.now / NS)
                    report_at = (int(upcoming) // step + 1) * step
                env.step()
            progress(env.now / NS)
        for rep in self.replicas:
            rep.flush()
        if (self.table.finish_ns < 0).any():   # pragma: no cover - a model bug, not bad input
            raise RuntimeError("simulation ended with unfinished requests")


def typical_context(table: RequestTable) -> float:
    """The KV length of a typical decoding request of the trace: prompt + half the output."""
    return float(np.mean(table.prompt + table.output / 2)) if table.n else 0.0


@dataclass
class PartContext:
    """What a replica's share of a trace needs from the whole trace to simulate exactly as it
    would there: the whole trace's acceptance draws for its rows and the scheduler's typical
    context."""

    sampler: AcceptanceSampler | None
    typical_context: float


@dataclass
class SimOutcome:
    """What one simulation produced."""

    table: RequestTable
    iterations: int
    wall_s: float
    cpu_s: float = 0.0       # CPU time of this process (robust on a shared machine)
    preemptions: int = 0     # paged KV: requests preempted (recomputed later)
    worker_peak_rss_kb: int = 0   # partitioned runs: the largest peak RSS of a worker process
    prefix_cached_tokens: int = 0   # prefix caching: input tokens found cached at admissions


def simulate(trace: Trace, policy: str, hw: HardwareProfile, acceptance: AcceptanceProfile | None,
             replicas: int = 1, router: str = "round-robin", seed: int = 0,
             engine: str = "fast", closed_loop: ClosedLoop | None = None,
             prefill: str = "local", kv_semantics: str = "reserve", schedule=None,
             progress: Callable[[float], None] | None = None) -> SimOutcome:
    """Serve `trace` with `replicas` replicas of `hw` under `policy`; every request finishes.
    With `closed_loop`, the trace gives only the requests' lengths and tasks (load.py). With
    prefill 'disaggregated', prompts are prefilled elsewhere: a request arrives with its KV
    cache and first token and only decodes here. `kv_semantics` 'blocks' is vLLM's paged KV
    with preemption by recompute (kv/paged.py, sim/scheduler.py); `schedule` is vllm-schedule's batch-size
    schedule (spec_config.BatchSchedule). `progress(simulated s)` as the run goes."""
    check_options(router, replicas, prefill, engine, kv_semantics)
    t0, c0 = time.perf_counter(), time.process_time()
    table = RequestTable(trace if closed_loop is None else closed_loop.requests(trace))
    gamma = acceptance.gamma if acceptance is not None else 0
    check_kv_fits(table, hw, kv_semantics, gamma)
    cluster = Cluster(table, replicas, ROUTER_ALIASES[router], hw, policy, acceptance, seed, engine,
                      closed_loop, prefill, kv_semantics=kv_semantics, schedule=schedule)
    cluster.run(progress)
    return SimOutcome(table, sum(r.iterations for r in cluster.replicas), time.perf_counter() - t0,
                      time.process_time() - c0,
                      sum(getattr(r, "preemptions", 0) for r in cluster.replicas),
                      prefix_cached_tokens=sum(getattr(r.sched.pool, "hit_tokens", 0)
                                               for r in cluster.replicas))


def check_options(router: str, replicas: int, prefill: str, engine: str, kv_semantics: str) -> None:
    """Bad input for an unknown router, engine, prefill mode or KV semantics, or no replica."""
    if router not in ROUTER_ALIASES:
        raise InputError(f"unknown router {router!r}; choose rr or least-outstanding", field="router")
    if replicas < 1:
        raise InputError(f"must be >= 1, got {replicas}", field="replicas")
    if prefill not in PREFILL_MODES:
        raise InputError(f"unknown prefill mode {prefill!r}; choose {' or '.join(PREFILL_MODES)}",
                         field="prefill")
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose {', '.join(ENGINES)}", field="engine")
    if kv_semantics not in KV_SEMANTICS:
        raise InputError(f"unknown KV semantics {kv_semantics!r}; choose {' or '.join(KV_SEMANTICS)}",
                         field="kv-semantics")
