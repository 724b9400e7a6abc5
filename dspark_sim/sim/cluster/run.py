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
from .arrivals import ClosedArrivals, OpenArrivals
from ..core.units import NS
from ..cost.iteration import IterationCost
from ..engines.block import MAX_RUN, FastReplica
from .load import ClosedLoop
from ..engines import loop
from ..engines.native import compiled
from ..speculation.registry import make_policy
from ..engines.reference import ReferenceReplica
from ..engines.replica import ReplicaBase
from ..core.requests import RequestTable
from ..kv.semantics import KV_SEMANTICS, check_kv_fits, make_pool

# the per-iteration engine: its compiled build when that is in use (native.py), same results
LoopReplica = (compiled("_loop_native") or loop).LoopReplica

ROUTERS = ("round-robin", "least-outstanding")
ROUTER_ALIASES = {"rr": "round-robin", "round-robin": "round-robin",
                  "lo": "least-outstanding", "least-outstanding": "least-outstanding"}
ENGINES = ("fast", "block", "loop", "reference")
PREFILL_MODES = ("local", "disaggregated")
PROGRESS_EVERY_S = 600.0      # simulated seconds between progress reports


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
    """Owns the environment and the arrival source; replicas ask it for arrivals (`dispatch_until`,
    `next_arrival_ns`) and tell it of finishes (`finished`, which drives a closed loop)."""

    def __init__(self, table: RequestTable, replicas: int, router: str, hw: HardwareProfile,
                 policy_name: str, acceptance: AcceptanceProfile | None, seed: int,
                 engine: str = "fast", closed_loop: ClosedLoop | None = None,
                 prefill: str = "local", env: simpy.Environment | None = None,
                 replica_cls=None, kv_semantics: str = "reserve", schedule=None,
                 part: "PartContext | None" = None) -> None:
        """`env` and `replica_cls` let the real serving engine (dspark_sim/serve) run the same
        arrivals, router and replica bookkeeping on a wall-clock environment. `part`: this
        table is one replica's share of a larger trace (sim/partition.py)."""
        self.env = env if env is not None else simpy.Environment()
        self.prefill_elsewhere = prefill == "disaggregated"
        self.table = table
        self.tracks_outstanding = router == "least-outstanding" and replicas > 1 and closed_loop is None
        gamma = acceptance.gamma if acceptance is not None else 1

        def new_policy():      # one per replica: a policy may keep per-replica state
            return make_policy(policy_name, gamma, schedule=schedule, hw=hw)
        probe = new_policy()
        sampler = None
        if probe.speculative:
            sampler = part.sampler if part is not None else \
                AcceptanceSampler(acceptance, table.task, table.output, seed, pad=MAX_RUN)
        # the scheduler's cost view: drafting as the policy drafts, and attention over the
        # trace's typical KV length of a decoding request (prompt + half the output)
        cost = IterationCost(hw, acceptance.drafter_kind if probe.speculative and acceptance else None,
                             scheduler_drafts=probe.drafts if probe.drafts is not None else gamma,
                             scheduler_context=part.typical_context if part is not None
                             else typical_context(table))
        planned = probe.plan(np.zeros((1, gamma)), 1, cost) is not None and \
            (sampler is None or sampler.static_confidence or not probe.needs_confidence)
        loopable = planned or probe.needs_accepted        # oracle needs only the accepted runs
        if engine == "loop" and not loopable and replica_cls is None and not probe.stateful:
            raise InputError(f"engine 'loop' needs a policy decided per batch composition; "
                             f"{policy_name} with this profile is not", field="engine")
        if sampler is not None and sampler.caps_drafts and replica_cls is None \
                and engine in ("block", "loop"):
            # steps that drafted fewer than gamma (formats.md `drafted`) need a per-iteration engine
            raise InputError(f"the acceptance profile caps some steps' drafts (`drafted`); engine "
                             f"{engine!r} does not model that, use 'reference' or 'fast'", field="engine")
        cls = replica_cls or per_iteration_engine(engine, kv_semantics, probe.stateful, policy_name,
                                                  self.prefill_elsewhere) or \
            (ReferenceReplica if sampler is not None and sampler.caps_drafts else None) or \
            {"block": FastReplica, "loop": LoopReplica, "reference": ReferenceReplica}.get(engine)
        if cls is None:     # "fast": per-iteration python loop where it applies, else blocks
            cls = LoopReplica if loopable else FastReplica
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

    def dispatch_until(self, t_ns: int) -> None:
        """Queue at their replicas every request that has arrived by t, in arrival order."""
        self.source.dispatch_until(t_ns)

    def next_arrival_ns(self, replica: ReplicaBase) -> int | None:
        """Arrival time of the next request that could be queued at `replica`."""
        return self.source.next_arrival_ns(replica)

    def finished(self, replica: ReplicaBase, rids, t_ns) -> None:
        """Requests `rids` of `replica` finish at t_ns (scalar or one per request)."""
        self.source.finished(replica, rids, t_ns)

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


def per_iteration_engine(engine: str, kv_semantics: str, stateful: bool, policy_name: str,
                         disaggregated: bool):
    """The engine class paged KV or a stateful policy requires (None: no requirement). They run
    only one iteration at a time: `fast` picks that engine, `loop` and `block` are refused."""
    if kv_semantics == "reserve" and not stateful:
        return None
    why = "--kv-semantics blocks" if kv_semantics == "blocks" else f"policy {policy_name}"
    if engine in ("loop", "block"):
        raise InputError(f"{why} runs on the per-iteration engine only; use --engine fast or "
                         f"reference", field="engine")
    if kv_semantics == "reserve":
        return ReferenceReplica
    if disaggregated:
        raise InputError("--kv-semantics blocks does not model disaggregated prefill", field="prefill")
    return ReferenceReplica


@dataclass
class SimOutcome:
    """What one simulation produced."""

    table: RequestTable
    iterations: int
    wall_s: float
    cpu_s: float = 0.0       # CPU time of this process (robust on a shared machine)
    preemptions: int = 0     # paged KV: requests preempted (recomputed later)
    worker_peak_rss_kb: int = 0   # partitioned runs: the largest peak RSS of a worker process


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
                      sum(getattr(r, "preemptions", 0) for r in cluster.replicas))


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
