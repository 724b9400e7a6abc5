"""One sweep point: simulate a policy at one load and reduce the requests to the point's metrics.

Measurement (docs/sweeps.md):
- closed loop (`concurrency`): only steady-state requests count: a user's requests after its
  first `warmup` ones that finish before the first user has sent all of its requests (from
  then on fewer than C users are active). Throughput = C x (sum of output tokens) / (sum of
  cycle times = finish - arrival + think) over those requests: each user's token rate,
  summed over the users (exact for users in lock step, unbiased by the ramp and the drain).
- open loop (`rate`): every request; throughput = output tokens / (last finish - first arrival);
  `queue_growth` is the trend of TTFT through the run (overload.py).
- with prefill elsewhere (`disaggregated`), the replicas emit only the decode tokens (the first
  token comes with the request from the prefill fleet): throughput counts output_tokens - 1,
  and GPUs are the decode replicas' only.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from ..hardware.observations import WINDOWS
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..profiles.registry import load_acceptance_profile, load_hw_profile
from ..traces.schema import Trace, load_trace
from .overload import queue_growth
from .spec import Point, sim_version

PERCENTILES = list(range(101))      # tps_user percentiles kept per point (0..100)


@lru_cache(maxsize=16)
def cached_trace(path: str) -> Trace:
    """The trace file at `path`, read once per process."""
    return load_trace(path)


@lru_cache(maxsize=16)
def _hw(path: str) -> HardwareProfile:
    return load_hw_profile(path)


@lru_cache(maxsize=32)
def cached_acceptance(spec: str) -> AcceptanceProfile:
    """The acceptance profile `spec` names (a shipped name or a path), read once per process."""
    return load_acceptance_profile(spec)


def point_trace(point: Point) -> Trace:
    """The trace a point serves (first max_requests requests; arrivals scaled in rate mode)."""
    from ..sim.cluster.load import scale_arrivals

    trace = cached_trace(point.trace)
    if point.max_requests is not None and point.max_requests < len(trace):
        n = point.max_requests
        trace = Trace(ids=trace.ids[:n], arrival_s=trace.arrival_s[:n],
                      prompt_tokens=trace.prompt_tokens[:n], output_tokens=trace.output_tokens[:n],
                      task=trace.task[:n], name=trace.name,
                      **trace.prefix_fields(slice(0, n)))
    if point.load_mode == "rate":
        trace = scale_arrivals(trace, point.load)
    return trace


def closed_loop_of(point: Point, trace_len: int):
    """The point's closed loop; seed s starts at trace row s x C x R (disjoint while it fits)."""
    from ..sim.cluster.load import ClosedLoop

    users = int(point.load)
    return ClosedLoop(users=users, requests_per_user=point.requests_per_user, think_s=point.think_s,
                      offset=(point.seed * users * point.requests_per_user) % max(trace_len, 1))


def run_point(point: Point) -> dict[str, Any]:
    """Simulate the point; return its row of metrics (JSON-serialisable)."""
    from ..sim.replay import replay
    from ..sim.speculation.spec_config import parse_schedule

    trace = point_trace(point)
    hw = _hw(point.hw)
    acc = cached_acceptance(point.acceptance) if point.acceptance else None
    loop = closed_loop_of(point, len(trace)) if point.load_mode == "concurrency" else None
    schedule = parse_schedule(point.schedule, acc.gamma if acc else 1) if point.schedule else None
    result = replay(trace, point.policy, hw, acc, replicas=point.replicas, router=point.router,
                    seed=point.seed, engine=point.sim_engine, closed_loop=loop, prefill=point.prefill,
                    kv_semantics=point.kv_semantics, schedule=schedule)
    metrics = measure(result.requests, point, gpus=hw.gpus_per_replica * point.replicas)
    metrics.update(iterations=result.summary["iterations"], sim_wall_s=result.summary["sim_wall_s"],
                   preemptions=result.summary["preemptions"], sim_version=sim_version())
    return metrics


def least_requests_per_user(warmup: int) -> int:
    """Fewest closed-loop requests per user whose steady window (`steady_mask`) is a measurement:
    warmup + 2. With warmup + 1 the window ends when the first user's only measured request
    finishes, so it holds that one request, the earliest to finish and so the luckiest (at the
    SGLang card's batch 64 the simulated accepted length was 2.62-2.66 against the 2.42-2.46
    its acceptance input gives)."""
    return warmup + 2


def steady_mask(frame: pd.DataFrame, users: int, requests_per_user: int, warmup: int) -> np.ndarray:
    """Closed-loop requests measured: index >= warmup, finished before the first user is done
    (meaningful from `least_requests_per_user(warmup)` requests per user)."""
    rows = np.arange(len(frame))
    k = rows // users
    finish = frame["finish_s"].to_numpy()
    last = finish[k == requests_per_user - 1]
    t_end = last.min() if len(last) else finish.max()
    return (k >= warmup) & (finish <= t_end)


# How a closed loop's throughput is measured (hardware/observations.py WINDOWS): over its steady
# window (warm-up requests and the drain left out; a steady serving system) or over the whole
# run, every output token over the time from the first send to the last finish, ramp-up and
# drain included (what a benchmark client reports: `vllm bench serve`'s output_throughput is
# total output tokens / duration).


def measure(frame: pd.DataFrame, point: Point, gpus: int, window: str = "steady") -> dict[str, Any]:
    """Throughput (per GPU), tok/s/user percentiles, TTFT, verification and concurrency; a closed
    loop's over its steady window or its whole run (`WINDOWS`)."""
    arrival = frame["arrival_s"].to_numpy()
    first = frame["first_token_s"].to_numpy()
    finish = frame["finish_s"].to_numpy()
    output = frame["output_tokens"].to_numpy()
    if point.prefill == "disaggregated":
        output = output - 1                     # the first token came from the prefill fleet
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {WINDOWS}, got {window!r}")
    offered = growth = None
    if point.load_mode == "concurrency" and window == "steady":
        users = int(point.load)
        keep = steady_mask(frame, users, point.requests_per_user, point.warmup)
        cycle = (finish - arrival)[keep] + point.think_s
        total_cycle = float(cycle.sum())
        throughput = users * float(output[keep].sum()) / total_cycle
        # mean requests in the system / decoding, per replica (each user's share of time)
        in_system = users * float((finish - arrival)[keep].sum()) / total_cycle
        decoding = users * float((finish - first)[keep].sum()) / total_cycle
    else:                                   # a trace's arrivals, or a closed loop's whole run
        keep = np.ones(len(frame), dtype=bool)
        duration = float(finish.max() - arrival.min())
        throughput = float(output.sum()) / duration
        in_system = float((finish - arrival).sum()) / duration
        decoding = float((finish - first).sum()) / duration
        if point.load_mode != "concurrency":
            span = float(arrival.max() - arrival.min())
            offered = (len(frame) - 1) / span if span > 0 else None    # one burst: no arrival rate
            growth = queue_growth(arrival, frame["ttft_s"].to_numpy(dtype=float))
    sub = frame[keep]
    tps = sub["tps_user"].dropna().to_numpy(dtype=float)
    ttft = sub["ttft_s"].to_numpy(dtype=float)
    steps = int(sub["steps"].sum())
    verified = int(sub["verified_tokens"].sum())
    accepted = int(sub["accepted_tokens"].sum())
    pct = np.percentile(tps, PERCENTILES).tolist() if len(tps) else [None] * len(PERCENTILES)
    return {
        "requests": int(len(frame)), "measured_requests": int(keep.sum()), "gpus": gpus,
        "throughput_tok_s": throughput, "throughput_tok_s_per_gpu": throughput / gpus,
        "tps_user_mean": float(tps.mean()) if len(tps) else None, "tps_user_percentiles": pct,
        "ttft_mean_s": float(ttft.mean()), "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "mean_verify_len": verified / steps if steps else 0.0,
        "verify_tokens": 1.0 + (verified / steps if steps else 0.0),
        "mean_tau": (accepted + steps) / steps if steps else 1.0,
        "concurrency": in_system / point.replicas, "decoding": decoding / point.replicas,
        "offered_rate_req_s": offered, "queue_growth": growth,
    }
