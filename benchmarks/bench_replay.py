"""Benchmark: wall time of replaying a trace (default: the imported Azure conversation hour).

    .venv/bin/python benchmarks/bench_replay.py [--policy dspark] [--repeats 7] [--core 0]

Imports ../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv at run time (it is not
part of the repository), pins the process to one core, and prints for each policy the median
wall time over the repeats of (a) the simulation alone, (b) `replay()` (simulation + metrics),
(c) `replay_files()` (also loading the trace JSONL and the profiles), plus the simulated
request-iterations per second. The machine is shared, so it also prints the simulation's
CPU time, the load average and the median time of a fixed pure-python calibration loop run
before each repeat, and the simulation's time as a ratio to it (wall and CPU), which is what
compares machines: the target of issue 16 is simulate <= 4.0x the loop.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AZURE_CONV = REPO.parent / "shared" / "traces" / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"


def calibration() -> tuple[float, float]:
    """(wall, CPU) seconds of a fixed pure-python workload (10M simple operations), for
    comparing machines."""
    t0, c0 = time.perf_counter(), time.process_time()
    acc = 0
    for i in range(2_000_000):
        acc += (i * 7) % 5
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, help="trace JSONL (default: import the Azure conversation hour)")
    ap.add_argument("--policy", default="dspark", help="comma-separated policies")
    ap.add_argument("--hw", default="h200-qwen3-8b-roofline")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--core", type=int, default=0, help="CPU core to pin to (-1: no pinning)")
    ap.add_argument("--sim-engine", default="fast", help="the simulator's engine (replay --sim-engine)")
    ap.add_argument("--kv-semantics", default="reserve", help="comma-separated KV semantics, "
                    "alternated within each repeat (reserve, blocks, blocks+prefix)")
    args = ap.parse_args()
    if args.core >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})

    from dspark_sim.profiles import load_acceptance_profile, load_hw_profile
    from dspark_sim.sim.cluster.run import simulate
    from dspark_sim.sim.replay import default_acceptance, parse_policies, replay, replay_files
    from dspark_sim.traces import load_trace, write_trace
    from dspark_sim.traces.importers import import_azure

    with tempfile.TemporaryDirectory() as tmp:
        if args.trace is None:
            trace_path = Path(tmp) / "azure-conv.jsonl"
            write_trace(trace_path, import_azure(AZURE_CONV).trace)
        else:
            trace_path = args.trace
        trace = load_trace(trace_path)
        hw = load_hw_profile(args.hw)
        print(f"trace {trace_path.name if args.trace else 'Azure conversation hour (imported)'}: "
              f"{len(trace):,} requests; hw {args.hw}; engine {args.sim_engine}; pinned to core "
              f"{args.core}; load average {os.getloadavg()[0]:.2f}")
        kvs = [k.strip() for k in args.kv_semantics.split(",") if k.strip()]
        for policy in parse_policies(args.policy):
            acc_name = default_acceptance(policy)
            acc = load_acceptance_profile(acc_name) if acc_name else None
            runs = {kv: ([], [], [], [], []) for kv in kvs}
            last = {}
            for _ in range(args.repeats):
                for kv in kvs:            # alternated, so the load is the same
                    sim_s, cpu_s, replay_s, files_s, cal = runs[kv]
                    cal.append(calibration())
                    out = last[kv] = simulate(trace, policy, hw, acc, engine=args.sim_engine,
                                              kv_semantics=kv)
                    sim_s.append(out.wall_s)
                    cpu_s.append(out.cpu_s)
                    t0 = time.perf_counter()
                    replay(trace, policy, hw, acc, engine=args.sim_engine, kv_semantics=kv)
                    replay_s.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    replay_files(trace_path, [policy], args.hw, engine=args.sim_engine, kv_semantics=kv)
                    files_s.append(time.perf_counter() - t0)
            for kv in kvs:
                _report(policy if len(kvs) == 1 else f"{policy} {kv}", runs[kv], last[kv], trace)


def _report(label: str, runs, out, trace) -> None:
    sim_s, cpu_s, replay_s, files_s, cal = runs
    req_iters = int(out.table.steps.sum() + len(trace))     # decode steps + prefill iterations
    med, cpu = statistics.median(sim_s), statistics.median(cpu_s)
    cal_wall, cal_cpu = (statistics.median(c) for c in zip(*cal))
    print(f"{label:>14}: simulate {med:.3f} s wall (min {min(sim_s):.3f}; CPU time median "
          f"{cpu:.3f} s); calibration loop {cal_wall:.3f} s wall, {cal_cpu:.3f} s CPU; "
          f"simulate / calibration {med / cal_wall:.2f}x wall, {cpu / cal_cpu:.2f}x CPU; replay() "
          f"{statistics.median(replay_s):.3f} s, replay_files() {statistics.median(files_s):.3f} s; "
          f"{out.iterations:,} iterations, {req_iters:,} request-iterations, "
          f"{req_iters / med:,.0f} request-iterations/s")


if __name__ == "__main__":
    main()
