"""Replicas simulated apart: a replay partitioned by replica, each share run as a Ray task (or in
this process), the shares merged into the table one process gives, byte for byte.

Under round-robin routing request i goes to replica i mod N whatever the replicas' state, so
each replica's share of the trace can be simulated alone. It must see what it sees in the whole
run: the same acceptance draws (the whole trace's sampler, `AcceptanceSampler.subset`) and the
same scheduler cost view (the whole trace's typical context). Least-outstanding routing reads
every replica's state at each arrival, which couples them; it is refused (docs/simulator.md,
"Partitioned replays", says what partitioning it would take and what error it would make).
"""
from __future__ import annotations

import resource
import time
from typing import Any, Callable

import numpy as np

from ...errors import InputError
from ...profiles.acceptance import AcceptanceProfile
from ...profiles.hardware import HardwareProfile
from ...traces.schema import Trace
from ..acceptance.sampler import AcceptanceSampler
from ..core.requests import RequestTable
from ..engines.block import MAX_RUN
from ..kv.semantics import check_kv_fits
from ..speculation.registry import make_policy
from .load import ClosedLoop
from .router import ROUTER_ALIASES
from .run import Cluster, PartContext, SimOutcome, check_options, typical_context

PART_EXECUTORS = ("ray", "inline")
RESULT_FIELDS = ("first_token_ns", "finish_ns", "prefilled", "generated", "steps", "drafted",
                 "verified", "accepted", "preemptions")


def check_partitionable(router: str, replicas: int, closed_loop: ClosedLoop | None) -> None:
    """Bad input unless the replicas can be simulated apart."""
    if ROUTER_ALIASES.get(router, router) == "least-outstanding" and replicas > 1:
        raise InputError("least-outstanding routing sends each arrival to the replica with the "
                         "fewest outstanding requests at that moment, which couples the replicas: "
                         "they cannot be simulated apart. Use --router rr, or simulate in one "
                         "process (docs/simulator.md, Partitioned replays)", field="router")
    if closed_loop is not None:
        raise InputError("partitioning a closed loop is not supported; simulate it in one "
                         "process", field="partition")


def split_trace(trace: Trace, replicas: int) -> list[np.ndarray]:
    """Rows of each replica under round-robin routing: replica k gets rows k, k + N, ..."""
    return [np.arange(k, len(trace), replicas, dtype=np.int64) for k in range(replicas)]


def take(trace: Trace, rows: np.ndarray) -> Trace:
    """The requests `rows` of a trace, in order."""
    return Trace(ids=trace.ids[rows], arrival_s=trace.arrival_s[rows],
                 prompt_tokens=trace.prompt_tokens[rows], output_tokens=trace.output_tokens[rows],
                 task=trace.task[rows], name=trace.name,
                 **trace.prefix_fields(rows))


def run_part(part: Trace, policy: str, hw: HardwareProfile, acceptance: AcceptanceProfile | None,
             context: PartContext, seed: int, engine: str, prefill: str, kv_semantics: str,
             schedule) -> dict[str, Any]:
    """Simulate one replica's share alone; its per-request results and counters."""
    table = RequestTable(part)
    cluster = Cluster(table, 1, "round-robin", hw, policy, acceptance, seed, engine, None, prefill,
                      kv_semantics=kv_semantics, schedule=schedule, part=context)
    cluster.run()
    replica = cluster.replicas[0]
    out: dict[str, Any] = {name: getattr(table, name) for name in RESULT_FIELDS}
    out["iterations"] = replica.iterations
    out["preemption_count"] = getattr(replica, "preemptions", 0)
    out["prefix_cached_tokens"] = getattr(replica.sched.pool, "hit_tokens", 0)
    out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss   # this worker's
    return out


def simulate_partitioned(trace: Trace, policy: str, hw: HardwareProfile,
                         acceptance: AcceptanceProfile | None, *, replicas: int,
                         router: str = "round-robin", seed: int = 0, engine: str = "fast",
                         prefill: str = "local", kv_semantics: str = "reserve", schedule=None,
                         closed_loop: ClosedLoop | None = None, executor: str = "ray",
                         workers: int = 2, ray_address: str | None = None,
                         progress: Callable[[int, int], None] | None = None) -> SimOutcome:
    """`cluster.simulate` with each replica simulated apart (Ray tasks, or one after another in
    this process with executor 'inline'); the same table, iterations and preemptions.
    progress(done, total) after each replica."""
    check_options(router, replicas, prefill, engine, kv_semantics)
    check_partitionable(router, replicas, closed_loop)
    if executor not in PART_EXECUTORS:
        raise InputError(f"unknown executor {executor!r}; choose {' or '.join(PART_EXECUTORS)}",
                         field="executor")
    if workers < 1:
        raise InputError(f"must be >= 1, got {workers}", field="workers")
    t0, c0 = time.perf_counter(), time.process_time()
    table = RequestTable(trace)
    gamma = acceptance.gamma if acceptance is not None else 0
    check_kv_fits(table, hw, kv_semantics, gamma)      # the whole trace's first offender
    traits = make_policy(policy, acceptance.gamma if acceptance is not None else 1,
                        schedule=schedule, hw=hw)
    sampler = AcceptanceSampler(acceptance, table.task, table.output, seed, pad=MAX_RUN,
                                request_ids=table.ids) \
        if traits.speculative else None
    context = typical_context(table)
    shares = [rows for rows in split_trace(trace, replicas) if len(rows)]

    def job(rows: np.ndarray) -> tuple:
        part_ctx = PartContext(sampler.subset(rows) if sampler is not None else None, context)
        return (take(trace, rows), policy, hw, acceptance, part_ctx, seed, engine, prefill,
                kv_semantics, schedule)

    iterations = preemptions = peak = cached = 0
    for done, (k, result) in enumerate(_results(shares, job, executor, workers, ray_address), 1):
        rows = shares[k]
        for name in RESULT_FIELDS:
            getattr(table, name)[rows] = result[name]
        table.replica[rows] = k
        iterations += result["iterations"]
        preemptions += result["preemption_count"]
        cached += result["prefix_cached_tokens"]
        peak = max(peak, result["peak_rss_kb"])
        if progress is not None:
            progress(done, len(shares))
    return SimOutcome(table, iterations, time.perf_counter() - t0, time.process_time() - c0,
                      preemptions, worker_peak_rss_kb=peak, prefix_cached_tokens=cached)


def _results(shares: list[np.ndarray], job, executor: str, workers: int, address: str | None):
    """(share index, run_part result) as each share finishes."""
    if executor == "inline":
        for k, rows in enumerate(shares):
            yield k, run_part(*job(rows))
        return
    from ...raytasks import ray_results, ray_session

    with ray_session(workers, address) as ray:
        remote = ray.remote(num_cpus=1)(run_part)
        # a share's arguments are built when it is submitted: at most `workers` at a time
        yield from ray_results(ray, remote, ((k, job(rows)) for k, rows in enumerate(shares)),
                               max_pending=workers)
