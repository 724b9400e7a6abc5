"""`dspark-sim sweep` (load sweeps, Pareto frontiers, SLA table) and `dspark-sim plan` (replicas
needed per policy)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..sim.defaults import DEFAULT_HW
from ..sweep.intervals import SPREAD_DRAWS
from .options import (machine_checked_hw, BaselineOpt, PoliciesOpt, PrefillOpt, PrefixCachingOpt,
                      RequestsOpt, SimAccOpt, SimHwOpt, SlasOpt, SpreadDrawsOpt, WorkersOpt)
from .render import print_markdown


def schedule_text(text_or_path: str | None) -> str | None:
    """The --bs-schedule JSON text (read from the file when a path), checked first so that a
    malformed file is reported with its name and line."""
    from ..sim.speculation.spec_config import parse_schedule, schedule_source

    if text_or_path is None:
        return None
    parse_schedule(text_or_path, 1 << 10)
    return schedule_source(text_or_path)


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep_cmd(
        trace: Path = typer.Option(..., "--trace", help="Trace JSONL: arrivals (rate load) or the "
                                   "request lengths and tasks the users send (concurrency load)."),
        policies: PoliciesOpt = "mtp1,static-3,dspark",
        hw: SimHwOpt = DEFAULT_HW,
        acceptance: SimAccOpt = None,
        load: str = typer.Option("concurrency", "--load", help="concurrency: a closed loop of C "
                                 "users (each sends its next request when the previous one "
                                 "finishes); rate: the trace's arrivals sped up by a factor."),
        points: int = typer.Option(10, "--points", help="Load points per policy (geometric spacing)."),
        load_range: Optional[str] = typer.Option(None, "--load-range", help="LOW,HIGH of the load: "
                                                 "users (default 1 to the profile's "
                                                 "max_batch_requests x replicas) or rate factors "
                                                 "(default 0.25,4)."),
        sla: SlasOpt = "80,120",
        sla_percentile: str = typer.Option("50", "--sla-percentile", help="A point meets an SLA "
                                           "when this percentile of its requests' tok/s/user is >= "
                                           "the SLA (50: the median request; 10: 90% of requests), "
                                           "or 'mean' for their mean."),
        seeds: int = typer.Option(1, "--seeds", help="Seeds per point (acceptance draws; in a closed "
                                  "loop also the trace rows the users start from)."),
        replicas: int = typer.Option(1, "--replicas", help="Replicas per point."),
        router: str = typer.Option("rr", "--router", help="rr or least-outstanding (rate load; a "
                                   "closed loop pins user u to replica u mod N)."),
        requests_per_user: int = typer.Option(16, "--requests-per-user", help="Concurrency load: "
                                              "requests each user sends (at least --warmup + 2)."),
        warmup: int = typer.Option(1, "--warmup", help="Concurrency load: each user's first "
                                   "requests left out of the metrics."),
        think: float = typer.Option(0.0, "--think", help="Concurrency load: seconds a user waits "
                                    "between a finish and its next request."),
        requests: RequestsOpt = None,
        prefill: PrefillOpt = "local",
        baseline: BaselineOpt = "auto",
        overload_ttft_p99: float = typer.Option(30.0, "--overload-ttft-p99", help="A point whose "
                                                "TTFT p99 exceeds this many seconds is overloaded "
                                                "(as is a rate-load point whose TTFT grows through "
                                                "the run); overloaded points are drawn apart and "
                                                "never used for an SLA (docs/sweeps.md)."),
        kv_semantics: str = typer.Option("reserve", "--kv-semantics", help="reserve (prompt + "
                                         "output KV at admission) or blocks (vLLM's paged KV with "
                                         "preemption by recompute; per-iteration engine)."),
        prefix_caching: PrefixCachingOpt = False,
        bs_schedule: Optional[str] = typer.Option(None, "--bs-schedule", help="vllm-schedule's "
                                                  "batch-size schedule: vLLM's JSON (text or "
                                                  "file), as for replay."),
        workers: WorkersOpt = 2,
        executor: str = typer.Option("local", "--executor", help="local (processes) or ray "
                                     "(pip install 'dspark-sim[ray]')."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address "
                                                  "(default: start a local Ray instance)."),
        cache: Optional[Path] = typer.Option(None, "--cache", help="Per-point result cache "
                                             "(default DIR/cache); finished points are reused."),
        out: Path = typer.Option(Path("runs/sweep"), "--out", help="Output directory."),
        acceptance_scale: Optional[str] = typer.Option(None, "--acceptance-scale", help="Sensitivity "
                                                       "view: comma-separated factors (e.g. "
                                                       "0.8,0.9,1,1.1); the sweep runs once per factor "
                                                       "with every position's acceptance x factor "
                                                       "(capped at 1) and writes sensitivity.csv/.md/.png "
                                                       "(each factor's outputs in DIR/scale-xF)."),
        spread_draws: SpreadDrawsOpt = SPREAD_DRAWS,
        scale_policies: Optional[str] = typer.Option(None, "--scale-policies", help="Policies whose "
                                                     "acceptance --acceptance-scale scales [every "
                                                     "speculative policy]."),
    ) -> None:
        """Sweep load per policy: frontier and concurrency plots, SLA table (docs/sweeps.md)."""
        from ..sim.replay import parse_acceptance_option, parse_policies
        from ..sweep.frontier import stat_label
        from ..sweep.run import SweepConfig, run_sweep, sweep_markdown, write_sweep
        from ..sweep.spec import parse_numbers, parse_range

        from ..sim.kv.semantics import with_prefix_caching

        kv_semantics = with_prefix_caching(kv_semantics, prefix_caching)
        pols = parse_policies(policies)
        cfg = SweepConfig(trace=str(trace), policies=pols, hw=machine_checked_hw(hw),
                          acceptance=parse_acceptance_option(acceptance, pols), load_mode=load,
                          points=points, load_range=parse_range(load_range), seeds=seeds,
                          replicas=replicas, router=router, requests_per_user=requests_per_user,
                          warmup=warmup, think_s=think, max_requests=requests, prefill=prefill,
                          slas=parse_numbers(sla, "sla"), percentile=sla_percentile,
                          baseline=baseline, kv_semantics=kv_semantics,
                          schedule=schedule_text(bs_schedule), overload_ttft_p99_s=overload_ttft_p99,
                          spread_draws=spread_draws)
        from ..profiles.describe import model_mismatch_warnings
        for warning in model_mismatch_warnings(cfg.hw, cfg.acceptance):
            typer.echo(f"warning: {warning}", err=True)
        run_kw = dict(cache_dir=cache or out / "cache", workers=workers, executor=executor,
                      show_progress=True, ray_address=ray_address)
        if acceptance_scale is not None:
            from ..sweep.sensitivity import run_sensitivity, sensitivity_markdown, write_sensitivity

            factors = parse_numbers(acceptance_scale, "acceptance-scale")
            scaled = parse_policies(scale_policies) if scale_policies else [p for p in pols if p != "ar"]
            table, results = run_sensitivity(cfg, factors, out, scaled, **run_kw)
            written = write_sensitivity(table, scaled, out, f"{trace.name} on {Path(str(hw)).stem}")
            print_markdown(sensitivity_markdown(table, scaled), "SLA throughput vs scaled acceptance")
            typer.echo(f"{sum(len(r.results) for r in results)} points: "
                       f"{sum(r.computed for r in results)} simulated, "
                       f"{sum(r.wall_s for r in results):.1f} s")
            typer.echo("wrote " + ", ".join(str(w) for w in written))
            return
        result = run_sweep(cfg, **run_kw)
        written = write_sweep(result, out)
        base = result.sla["baseline"].iloc[0]
        print_markdown(sweep_markdown(result), f"max throughput per GPU meeting each SLA "
                     f"(tok/s/user {stat_label(cfg.percentile)}), {load} load, {prefill} prefill; "
                     f"baseline {base or 'none'}" + (f": {result.baseline_reason}" if base else ""))
        typer.echo(f"{len(result.results)} points: {result.cached} from the cache, "
                   f"{result.computed} simulated, {result.wall_s:.1f} s")
        typer.echo("wrote " + ", ".join(str(w) for w in written))

    @app.command("plan")
    def plan_cmd(
        trace: Path = typer.Option(..., "--trace", help="Trace JSONL to serve."),
        sla: float = typer.Option(..., "--sla", help="tok/s/user the requests must get."),
        sla_percentile: str = typer.Option("50", "--sla-percentile", help="Percentile of the "
                                           "requests' tok/s/user that must meet the SLA, or 'mean'."),
        ttft_p99: float = typer.Option(30.0, "--ttft-p99", help="Bound on TTFT p99 in seconds; "
                                       "it also rejects replica counts that cannot keep up (their "
                                       "queue, and TTFT, grow through the trace)."),
        policies: PoliciesOpt = "mtp1,static-3,dspark",
        hw: SimHwOpt = DEFAULT_HW,
        acceptance: SimAccOpt = None,
        rate_scale: float = typer.Option(1.0, "--rate-scale", help="Serve the trace's arrivals sped "
                                         "up by this factor (2: traffic doubles)."),
        router: str = typer.Option("least-outstanding", "--router", help="rr or least-outstanding."),
        seeds: int = typer.Option(1, "--seeds", help="A count passes only if every seed passes."),
        max_replicas: int = typer.Option(1024, "--max-replicas", help="Largest count tried."),
        requests: RequestsOpt = None,
        prefill: PrefillOpt = "local",
        baseline: BaselineOpt = "auto",
        gpu_hour_cost: Optional[float] = typer.Option(None, "--gpu-hour-cost", help="Price of one "
                                                      "GPU-hour, for a cost column."),
        workers: WorkersOpt = 2,
        executor: str = typer.Option("local", "--executor", help="local (processes) or ray."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address."),
        cache: Optional[Path] = typer.Option(None, "--cache", help="Per-evaluation result cache "
                                             "(default DIR/cache)."),
        out: Path = typer.Option(Path("runs/plan"), "--out", help="Output directory."),
        spread_draws: SpreadDrawsOpt = SPREAD_DRAWS,
    ) -> None:
        """Fewest replicas (and GPUs) serving TRACE within the SLA, per policy (docs/sweeps.md)."""
        from ..fileio import write_json_atomic, write_text_atomic
        from ..sim.replay import parse_acceptance_option, parse_policies
        from ..sweep.frontier import stat_label
        from ..sweep.plan import PlanConfig, plan_capacity, plan_markdown
        from ..sweep.run import write_table

        pols = parse_policies(policies)
        cfg = PlanConfig(trace=str(trace), policies=pols, sla=sla, hw=hw,
                         acceptance=parse_acceptance_option(acceptance, pols),
                         percentile=sla_percentile, ttft_p99_s=ttft_p99, rate_scale=rate_scale,
                         router=router, seeds=seeds, max_replicas=max_replicas,
                         max_requests=requests, prefill=prefill, baseline=baseline,
                         gpu_hour_cost=gpu_hour_cost, spread_draws=spread_draws)
        from ..profiles.describe import model_mismatch_warnings
        for warning in model_mismatch_warnings(cfg.hw, cfg.acceptance):
            typer.echo(f"warning: {warning}", err=True)
        result = plan_capacity(cfg, cache_dir=cache or out / "cache", workers=workers,
                               executor=executor, show_progress=True, ray_address=ray_address)
        markdown = plan_markdown(result.table) + f"\n{result.spread_note}\n" + \
            (f"\n{result.kv_note}\n" if result.kv_note else "")
        written = write_table(result.table, out / "plan.csv")
        written += write_table(result.evaluations, out / "evaluations.csv")
        write_text_atomic(out / "plan.md", markdown)
        write_json_atomic(out / "plan.json", {"cached": result.cached, "computed": result.computed,
                                              "wall_s": result.wall_s, **vars(cfg),
                                              "baseline": result.baseline,
                                              "baseline_reason": result.baseline_reason,
                                              "kv_note": result.kv_note,
                                              "fit_spread": result.fit_spread})
        print_markdown(markdown, f"replicas serving {trace.name} x{rate_scale:g} at {sla:g} tok/s/user "
                     f"({stat_label(cfg.percentile)}), TTFT p99 <= {ttft_p99:g} s; baseline "
                     f"{result.baseline or 'none'}" + (f": {result.baseline_reason}" if result.baseline else ""))
        typer.echo(f"{len(result.evaluations)} evaluations: {result.cached} from the cache, "
                   f"{result.computed} simulated, {result.wall_s:.1f} s")
        typer.echo("wrote " + ", ".join(str(w) for w in written + [out / "plan.md", out / "plan.json"]))
