"""`dspark-sim replay`: serve a trace under one or more speculation policies, side by side."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..sim.defaults import DEFAULT_HW
from ..sim.speculation.registry import policy_list
from .options import (OldEngineOpt, PrefixCachingOpt, SimAccOpt, SimEngineOpt, SimHwOpt, TraceArg,
                      machine_checked_hw, refuse_old_engine)
from .render import print_summaries


def register(app: typer.Typer) -> None:
    @app.command("replay")
    def replay_cmd(
        trace: TraceArg,
        policy: str = typer.Option("dspark", "--policy", help="Policy or comma-separated policies "
                                   f"to compare: {policy_list()}."),
        hw: SimHwOpt = DEFAULT_HW,
        acceptance: SimAccOpt = None,
        replicas: int = typer.Option(1, "--replicas", help="Number of replicas behind the router."),
        router: str = typer.Option("rr", "--router", help="rr (round-robin) or least-outstanding."),
        seed: int = typer.Option(0, "--seed", help="Seed of the acceptance draws (same seed, "
                                 "byte-identical requests.csv)."),
        out: Path = typer.Option(Path("runs/replay"), "--out", help="Output directory: "
                                 "requests.csv and summary.json (in DIR/<policy>/ for several policies)."),
        sim_engine: SimEngineOpt = "fast",
        engine: OldEngineOpt = None,
        kv_semantics: str = typer.Option("reserve", "--kv-semantics", help="reserve: each request "
                                         "reserves prompt + output KV tokens at admission, no "
                                         "preemption; blocks: vLLM's paged KV, blocks of the "
                                         "profile's kv_block_size (default 16) allocated on "
                                         "demand, preemption by recompute when they run out "
                                         "(per-iteration engine)."),
        prefix_caching: PrefixCachingOpt = False,
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
        from ..sim.kv.semantics import with_prefix_caching
        from ..sim.replay import Parallel, parse_acceptance_option, parse_policies, replay_files

        refuse_old_engine(engine)
        kv_semantics = with_prefix_caching(kv_semantics, prefix_caching)
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
            results = replay_files(trace, policies, machine_checked_hw(hw), chosen, replicas=replicas, router=router,
                                   seed=seed, engine=sim_engine,
                                   progress=lambda p: status.update(f"simulated {p}"),
                                   kv_semantics=kv_semantics, bs_schedule=bs_schedule,
                                   parallel=par, out_dir=out, requests_format=requests_format,
                                   quantiles=quantiles,
                                   rows_progress=lambda n: status.update(f"wrote {n:,} requests"),
                                   sim_progress=lambda t: status.update(f"simulated {t:,.0f} s "
                                                                        "of traffic"))
        print_summaries([r.summary for r in results])
        written = [out] if len(results) == 1 else [out / r.policy for r in results]
        typer.echo("wrote " + ", ".join(str(w) for w in written))
