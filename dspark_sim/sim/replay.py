"""`replay`: simulate serving a trace under one or more policies; results and output files."""
from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from ..fileio import staged_dir, write_json_atomic, write_text_atomic
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..profiles.registry import (acceptance_profile_path, hw_profile_path, load_acceptance_profile,
                                 load_hw_profile)
from ..traces.schema import Trace, load_trace
from .cluster.load import ClosedLoop
from .cluster.partition import check_partitionable, simulate_partitioned
from .cluster.router import ROUTER_ALIASES
from .cluster.run import SimOutcome, simulate
from .defaults import DEFAULT_ACCEPTANCE, DEFAULT_HW, DEFAULT_MTP1_ACCEPTANCE
from .output.files import check_request_format, requests_file_name, write_requests
from .output.metrics import requests_csv, requests_frame, summarise
from .output.summary import QUANTILE_MODES, SummaryAccumulator
from .speculation.registry import check_policy_name, make_policy
from .speculation.spec_config import BatchSchedule, parse_schedule


def default_acceptance(policy: str) -> str | None:
    """Shipped acceptance profile a policy uses by default (None for no speculation)."""
    if policy == "ar":
        return None
    return DEFAULT_MTP1_ACCEPTANCE if policy == "mtp1" else DEFAULT_ACCEPTANCE


@dataclass
class ReplayResult:
    """One policy's simulation: per-request rows (None when they were streamed to a file)
    and the summary."""

    policy: str
    requests: pd.DataFrame | None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Parallel:
    """Simulate the replicas apart (sim/cluster/partition.py): as Ray tasks on `workers` CPUs (a local
    instance unless `address`), or 'inline' one after another."""

    executor: str = "ray"
    workers: int = 2
    address: str | None = None


@dataclass(frozen=True)
class Streamed:
    """Write per-request rows to `out_dir` in chunks as they are produced instead of keeping
    a frame; summary percentiles `exact` or from a `sketch` (summary.py)."""

    out_dir: Path
    requests_format: str = "csv"
    quantiles: str = "exact"
    progress: Any = None       # progress(rows written) after each chunk
    sim_progress: Any = None   # progress(simulated seconds) as the run goes (one process)


def _name(obj: Any, given: str | Path | None) -> str:
    return str(given) if given is not None else getattr(obj, "name", str(obj))


def replay(trace: Trace, policy: str, hw: HardwareProfile, acceptance: AcceptanceProfile | None,
           *, replicas: int = 1, router: str = "round-robin", seed: int = 0, engine: str = "fast",
           trace_name: str | None = None, hw_name: str | None = None,
           acceptance_name: str | None = None, closed_loop: ClosedLoop | None = None,
           prefill: str = "local", kv_semantics: str = "reserve", schedule=None,
           parallel: Parallel | None = None, streamed: Streamed | None = None) -> ReplayResult:
    """Simulate `trace` on `replicas` replicas of `hw` under `policy`; return the results.
    With `closed_loop`, users send the trace's requests back to back (sim/cluster/load.py); with
    prefill 'disaggregated', the replicas only decode (prompts are prefilled elsewhere);
    `kv_semantics` 'blocks' is vLLM's paged KV with preemption; `schedule` vllm-schedule's.
    `parallel`: replicas simulated apart (same results); `streamed`: rows and summary written
    to a directory as they are produced (the result then holds no frame)."""
    check_policy_name(policy)
    traits = make_policy(policy, acceptance.gamma if acceptance is not None else 1, schedule=schedule)
    if traits.speculative and acceptance is None:
        raise InputError(f"policy {policy} needs an acceptance profile", field="acceptance")
    acceptance = acceptance if traits.speculative else None
    if parallel is not None:
        outcome = simulate_partitioned(trace, policy, hw, acceptance, replicas=replicas,
                                       router=router, seed=seed, engine=engine, prefill=prefill,
                                       kv_semantics=kv_semantics, schedule=schedule,
                                       closed_loop=closed_loop, executor=parallel.executor,
                                       workers=parallel.workers, ray_address=parallel.address)
    else:
        outcome = simulate(trace, policy, hw, acceptance, replicas=replicas, router=router,
                           seed=seed, engine=engine, closed_loop=closed_loop, prefill=prefill,
                           kv_semantics=kv_semantics, schedule=schedule,
                           progress=streamed.sim_progress if streamed is not None else None)
    labels = dict(policy=policy, trace=trace_name or trace.name, hw=hw_name or hw.name,
                  acceptance=(acceptance_name or acceptance.name) if acceptance is not None else None,
                  seed=seed, gpus=hw.gpus_per_replica * replicas, iterations=outcome.iterations,
                  sim_wall_s=outcome.wall_s)
    if streamed is None:
        frame = requests_frame(outcome.table)
        summary = summarise(frame, **labels)
    else:
        frame = None
        acc = SummaryAccumulator(streamed.quantiles)
        write_requests(outcome.table, Path(streamed.out_dir) / requests_file_name(streamed.requests_format),
                       acc, fmt=streamed.requests_format, progress=streamed.progress)
        summary = acc.summary(**labels)
    summary.update(_run_fields(outcome, replicas, router, hw, closed_loop, prefill, kv_semantics))
    if parallel is not None:
        summary["partitioned"] = {"executor": parallel.executor, "workers": parallel.workers}
    if streamed is not None:
        write_json_atomic(Path(streamed.out_dir) / "summary.json", summary)
    return ReplayResult(policy, frame, summary)


def _run_fields(outcome: SimOutcome, replicas: int, router: str, hw: HardwareProfile,
                closed_loop: ClosedLoop | None, prefill: str, kv_semantics: str) -> dict[str, Any]:
    return {"replicas": replicas, "router": ROUTER_ALIASES.get(router, router),
            "gpus": hw.gpus_per_replica * replicas,
            "closed_loop": asdict(closed_loop) if closed_loop is not None else None,
            "prefill": prefill, "kv_semantics": kv_semantics, "preemptions": outcome.preemptions,
            **({"prefix_cached_tokens": outcome.prefix_cached_tokens}
               if kv_semantics == "blocks+prefix" else {})}


def parse_acceptance_option(text: str | None, policies: list[str]) -> dict[str, str | None]:
    """'ACC' (every speculative policy) or 'POLICY=ACC,...' (others keep their default)."""
    chosen = {p: default_acceptance(p) for p in policies}
    if not text:
        return chosen
    if "=" not in text:
        return {p: (text if chosen[p] is not None else None) for p in policies}
    for part in filter(None, (s.strip() for s in text.split(","))):
        pol, _, acc = part.partition("=")
        pol, acc = pol.strip(), acc.strip()
        if pol not in chosen:
            raise InputError(f"{pol!r} is not one of the policies being replayed "
                             f"({', '.join(policies)})", field="acceptance")
        if not acc:
            raise InputError(f"no profile given for {pol!r}", field="acceptance")
        chosen[pol] = acc
    return chosen


def parse_policies(text: str) -> list[str]:
    """'mtp1,static-3,dspark' -> validated, de-duplicated list."""
    out: list[str] = []
    for name in filter(None, (s.strip() for s in text.split(","))):
        check_policy_name(name)
        if name not in out:
            out.append(name)
    if not out:
        raise InputError("no policy given", field="policy")
    return out


def replay_files(trace_path: str | Path, policies: list[str], hw: str | Path = DEFAULT_HW,
                 acceptance: dict[str, str | None] | None = None, *, replicas: int = 1,
                 router: str = "round-robin", seed: int = 0, engine: str = "fast",
                 progress=None, kv_semantics: str = "reserve",
                 bs_schedule: str | None = None, parallel: Parallel | None = None,
                 out_dir: str | Path | None = None, requests_format: str = "csv",
                 quantiles: str = "exact", rows_progress=None,
                 sim_progress=None) -> list[ReplayResult]:
    """Load and validate every input first (nothing is simulated on bad input), then replay
    the trace under each policy. With `out_dir`, each policy's requests and summary are
    written as soon as it is simulated, in chunks, into a staging directory whose files move
    to DIR (or DIR/<policy> for several) when every policy has run; the results hold no
    frames (one policy's table in memory at a time)."""
    check_request_format(requests_format)
    if quantiles not in QUANTILE_MODES:
        raise InputError(f"unknown quantile mode {quantiles!r}; choose "
                         f"{' or '.join(QUANTILE_MODES)}", field="quantiles")
    if parallel is not None:
        check_partitionable(router, replicas, None)
    trace = load_trace(trace_path)
    hw_path = hw_profile_path(hw)
    hw_prof = load_hw_profile(hw_path)
    acceptance = acceptance or {p: default_acceptance(p) for p in policies}
    loaded: dict[str, tuple[AcceptanceProfile | None, str | None]] = {}
    schedules: dict[str, BatchSchedule | None] = {}
    for pol in policies:
        spec = acceptance.get(pol, default_acceptance(pol))
        if spec is None:
            loaded[pol] = (None, None)
            continue
        prof = load_acceptance_profile(acceptance_profile_path(spec))
        schedules[pol] = parse_schedule(bs_schedule, prof.gamma) \
            if pol == "vllm-schedule" and bs_schedule is not None else None
        make_policy(pol, prof.gamma, schedule=schedules[pol])   # static-K needs K <= gamma
        loaded[pol] = (prof, str(spec))
    results = []
    with contextlib.ExitStack() as stack:
        stage = None if out_dir is None else stack.enter_context(staged_dir(out_dir))
        for pol in policies:
            prof, acc_name = loaded[pol]
            streamed = None if stage is None else Streamed(
                stage if len(policies) == 1 else stage / pol, requests_format, quantiles,
                rows_progress, sim_progress)
            results.append(replay(trace, pol, hw_prof, prof, replicas=replicas, router=router,
                                  seed=seed, engine=engine, trace_name=str(trace_path),
                                  hw_name=str(hw), acceptance_name=acc_name,
                                  kv_semantics=kv_semantics, schedule=schedules.get(pol),
                                  parallel=parallel, streamed=streamed))
            if progress is not None:
                progress(pol)
    return results


def write_results(results: list[ReplayResult], out_dir: str | Path) -> list[Path]:
    """DIR/requests.csv + DIR/summary.json for one policy, DIR/<policy>/... for several."""
    out_dir = Path(out_dir)
    written = []
    for res in results:
        where = out_dir if len(results) == 1 else out_dir / res.policy
        write_text_atomic(where / "requests.csv", requests_csv(res.requests))
        write_json_atomic(where / "summary.json", res.summary)
        written.append(where)
    return written
