"""`dspark-sim replay`: serve a trace under one or more speculation policies, side by side."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from ..sim.defaults import DEFAULT_ACCEPTANCE, DEFAULT_HW, DEFAULT_MTP1_ACCEPTANCE

# (label, summary key path, format); None values print as "-".
TABLE_ROWS = [
    ("throughput (tok/s)", "throughput_tok_s", "{:,.0f}"),
    ("throughput / GPU (tok/s)", "throughput_tok_s_per_gpu", "{:,.0f}"),
    ("tok/s/user p10", "tps_user.p10", "{:.1f}"),
    ("tok/s/user p50", "tps_user.p50", "{:.1f}"),
    ("TTFT mean (s)", "ttft_s.mean", "{:.3f}"),
    ("TTFT p99 (s)", "ttft_s.p99", "{:.3f}"),
    ("TPOT p50 (ms)", "tpot_s.p50", "{:.2f}", 1000.0),
    ("TPOT p99 (ms)", "tpot_s.p99", "{:.2f}", 1000.0),
    ("mean verify len", "mean_verify_len", "{:.2f}"),
    ("mean tau", "mean_tau", "{:.2f}"),
    ("iterations", "iterations", "{:,}"),
    ("preemptions", "preemptions", "{:,}"),
    ("duration (s)", "duration_s", "{:,.1f}"),
    ("sim wall (s)", "sim_wall_s", "{:.2f}"),
]


def _lookup(summary: dict[str, Any], key: str) -> Any:
    value: Any = summary
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def summary_table(summaries: list[dict[str, Any]]):
    """A rich table: one column per policy, one row per metric."""
    from rich.table import Table

    first = summaries[0]
    table = Table(title=f"replay {first['trace']}  hw={first['hw']}  replicas={first['replicas']}  "
                        f"seed={first['seed']}")
    table.add_column("metric")
    for s in summaries:
        table.add_column(s["policy"], justify="right")
    for row in TABLE_ROWS:
        label, key, fmt = row[:3]
        scale = row[3] if len(row) > 3 else 1.0
        cells = []
        for s in summaries:
            v = _lookup(s, key)
            cells.append("-" if v is None else fmt.format(v * scale if scale != 1.0 else v))
        table.add_row(label, *cells)
    table.add_row("acceptance", *[str(s["acceptance"] or "-") for s in summaries])
    return table


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_cmd(
        trace: Path = typer.Argument(..., metavar="TRACE", help="Trace JSONL (formats.md)."),
        policy: str = typer.Option("dspark", "--policy", help="Policy or comma-separated policies "
                                   "to compare: ar, mtp1, static-K, dspark, dspark-lagged, goodput, oracle, "
                                   "vllm-schedule, vllm-adaptive."),
        hw: str = typer.Option(DEFAULT_HW, "--hw", help="Hardware profile: a shipped "
                               "name (see `dspark-sim profiles list`) or a YAML path."),
        acceptance: Optional[str] = typer.Option(None, "--acceptance", help="Acceptance profile "
                                                 "for every speculative policy (name or path), or "
                                                 "POLICY=ACC,... per policy. Default: "
                                                 f"{DEFAULT_MTP1_ACCEPTANCE} for mtp1, "
                                                 f"{DEFAULT_ACCEPTANCE} for the others."),
        replicas: int = typer.Option(1, "--replicas", help="Number of replicas behind the router."),
        router: str = typer.Option("rr", "--router", help="rr (round-robin) or least-outstanding."),
        seed: int = typer.Option(0, "--seed", help="Seed of the acceptance draws (same seed, "
                                 "byte-identical requests.csv)."),
        out: Path = typer.Option(Path("runs/replay"), "--out", help="Output directory: "
                                 "requests.csv and summary.json (in DIR/<policy>/ for several policies)."),
        engine: str = typer.Option("fast", "--engine", help="fast (default: the python iteration "
                                   "loop, or vectorised blocks for policies with measured "
                                   "per-step confidences), loop, block, or reference (one SimPy "
                                   "step per iteration). All give identical results."),
        kv_semantics: str = typer.Option("reserve", "--kv-semantics", help="reserve: each request "
                                         "reserves prompt + output KV tokens at admission, no "
                                         "preemption; blocks: vLLM's paged KV, blocks of the "
                                         "profile's kv_block_size (default 16) allocated on "
                                         "demand, preemption by recompute when they run out "
                                         "(per-iteration engine)."),
        bs_schedule: Optional[str] = typer.Option(None, "--bs-schedule", help="Batch-size schedule "
                                                  "of the vllm-schedule policy, as vLLM's JSON: "
                                                  "[[range_start, range_end, K], ...] or a "
                                                  "speculative-config object with "
                                                  "num_speculative_tokens_per_batch_size; text "
                                                  "or a file path."),
        requests_format: str = typer.Option("csv", "--requests-format", help="Per-request output: "
                                            "csv (requests.csv) or parquet (requests.parquet, "
                                            "needs pyarrow); written in chunks as it is produced."),
        quantiles: str = typer.Option("exact", "--quantiles", help="Summary percentiles: exact "
                                      "(numpy's, from every request's value) or sketch (within "
                                      "a relative 0.5% of the exact order statistic, memory "
                                      "not growing with the trace)."),
        parallel: str = typer.Option("none", "--parallel", help="none (one process), ray "
                                     "(each replica's share of a round-robin replay as a Ray "
                                     "task, merged into the same results) or inline (the same "
                                     "partitioning in this process)."),
        workers: int = typer.Option(2, "--workers", help="CPUs of the local Ray instance for "
                                    "--parallel ray."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster to "
                                                  "use instead of a local instance (every node "
                                                  "needs this package)."),
    ) -> None:
        """Simulate serving TRACE and compare policies: throughput per GPU, tok/s/user, TTFT."""
        from rich.console import Console

        from ..errors import InputError
        from ..sim.replay import Parallel, parse_acceptance_option, parse_policies, replay_files

        policies = parse_policies(policy)
        chosen = parse_acceptance_option(acceptance, policies)
        from ..profiles.describe import model_mismatch_warnings
        for warning in model_mismatch_warnings(hw, chosen):
            typer.echo(f"warning: {warning}", err=True)
        if parallel not in ("none", "ray", "inline"):
            raise InputError(f"expected none, ray or inline, got {parallel!r}", field="parallel")
        par = None if parallel == "none" else Parallel(parallel, workers, ray_address)
        console = Console(stderr=True)
        with console.status("simulating...") as status:
            results = replay_files(trace, policies, hw, chosen, replicas=replicas, router=router,
                                   seed=seed, engine=engine,
                                   progress=lambda p: status.update(f"simulated {p}"),
                                   kv_semantics=kv_semantics, bs_schedule=bs_schedule,
                                   parallel=par, out_dir=out, requests_format=requests_format,
                                   quantiles=quantiles,
                                   rows_progress=lambda n: status.update(f"wrote {n:,} requests"),
                                   sim_progress=lambda t: status.update(f"simulated {t:,.0f} s "
                                                                        "of traffic"))
        Console(width=max(100, 28 + 16 * len(results))).print(summary_table([r.summary for r in results]))
        written = [out] if len(results) == 1 else [out / r.policy for r in results]
        typer.echo("wrote " + ", ".join(str(w) for w in written))
