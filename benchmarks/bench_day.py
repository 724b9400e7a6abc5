"""Benchmark: a long trace (a million requests, a generated day) replayed on one machine.

    .venv/bin/python benchmarks/bench_day.py TRACE [--policy dspark]
        [--hw h200x32-deepseek-v3-ep32-roofline] [--replicas 8] [--parallel none|ray|inline]
        [--workers 2] [--out DIR] [--quantiles exact|sketch]

Loads the trace (streaming reader), simulates it (one process, or each replica's share as a
Ray task), writes requests.csv in chunks and summary.json into DIR, and prints a line per
stage and, in one process, every 30 simulated minutes: wall time, CPU time and RSS so far.
The last line gives wall and CPU time per stage and the peak RSS of this process (and of the
largest Ray worker). Make a generated day with

    dspark-sim trace generate --count 10000000 --rate 115.74 --diurnal-amplitude 0.6 \\
        --diurnal-phase -21600 --out day.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process, MB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if line.startswith(("VmRSS", "VmHWM")))
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--policy", default="dspark")
    ap.add_argument("--hw", default="h200x32-deepseek-v3-ep32-roofline")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--parallel", default="none", choices=["none", "ray", "inline"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-day"))
    ap.add_argument("--quantiles", default="exact", choices=["exact", "sketch"])
    args = ap.parse_args()

    from dspark_sim.fileio import write_json_atomic
    from dspark_sim.profiles.registry import (acceptance_profile_path, hw_profile_path,
                                              load_acceptance_profile, load_hw_profile)
    from dspark_sim.sim.cluster.run import simulate
    from dspark_sim.sim.output.files import write_requests
    from dspark_sim.sim.cluster.partition import simulate_partitioned
    from dspark_sim.sim.replay import default_acceptance
    from dspark_sim.sim.output.summary import SummaryAccumulator
    from dspark_sim.traces.schema import load_trace

    t_start, c_start = time.perf_counter(), time.process_time()

    def say(what: str) -> None:
        now, peak = rss_mb()
        print(f"[{time.perf_counter() - t_start:8.1f} s wall, {time.process_time() - c_start:8.1f} s "
              f"cpu, rss {now:,.0f} MB, peak {peak:,.0f} MB] {what}", flush=True)

    print(f"load average {os.getloadavg()}", flush=True)
    trace = load_trace(args.trace)
    t_load = time.perf_counter() - t_start
    say(f"loaded {len(trace):,} requests over {trace.arrival_s[-1]:,.0f} s")
    hw = load_hw_profile(hw_profile_path(args.hw))
    spec = default_acceptance(args.policy)
    acc = load_acceptance_profile(acceptance_profile_path(spec)) if spec else None
    last = [0.0]

    def sim_progress(t: float) -> None:
        if t - last[0] >= 1800 or t == 0:
            last[0] = t
            say(f"simulated {t:,.0f} s")

    t0 = time.perf_counter()
    if args.parallel == "none":
        out = simulate(trace, args.policy, hw, acc, replicas=args.replicas, progress=sim_progress)
    else:
        out = simulate_partitioned(trace, args.policy, hw, acc, replicas=args.replicas,
                                   executor=args.parallel, workers=args.workers,
                                   progress=lambda d, n: say(f"replica shares done {d}/{n}"))
    t_sim = time.perf_counter() - t0
    say(f"simulated: {out.iterations:,} iterations")
    t0 = time.perf_counter()
    acc_sum = SummaryAccumulator(args.quantiles)
    write_requests(out.table, args.out / "requests.csv", acc_sum)
    summary = acc_sum.summary(policy=args.policy, trace=str(args.trace), hw=args.hw,
                              acceptance=spec, seed=0, gpus=hw.gpus_per_replica * args.replicas,
                              iterations=out.iterations, sim_wall_s=out.wall_s)
    write_json_atomic(args.out / "summary.json", summary)
    t_write = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    say(f"wrote {args.out}")
    print(json.dumps({"requests": len(trace), "parallel": args.parallel, "workers": args.workers,
                      "load_s": round(t_load, 1), "simulate_s": round(t_sim, 1),
                      "simulate_cpu_s_driver": round(out.cpu_s, 1), "write_s": round(t_write, 1),
                      "total_s": round(time.perf_counter() - t_start, 1),
                      "peak_rss_mb": round(peak_mb), "worker_peak_rss_mb":
                      round(out.worker_peak_rss_kb / 1024), "throughput_tok_s":
                      summary["throughput_tok_s"], "ttft_p99_s": summary["ttft_s"]["p99"],
                      "load_average_end": os.getloadavg()}), flush=True)


if __name__ == "__main__":
    main()
