"""`dspark-sim recommend`: the vLLM --speculative-config the simulator finds best, per SLA."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..fileio import json_text
from ..sim.defaults import DEFAULT_ACCEPTANCE, DEFAULT_HW, DEFAULT_MTP1_ACCEPTANCE
from .options import RequestsOpt, SimHwOpt, SlasOpt
from .render import print_markdown


def _pct(gain) -> str:
    return "baseline unmet" if gain is None else f"{gain * 100:+.0f}%"


def register(app: typer.Typer) -> None:
    @app.command("recommend")
    def recommend_cmd(
        trace: Path = typer.Option(..., "--trace", help="Trace JSONL whose request lengths and "
                                   "tasks the closed-loop users send."),
        sla: SlasOpt = "80,120",
        sla_percentile: str = typer.Option("50", "--sla-percentile", help="A load meets an SLA "
                                           "when this percentile of tok/s/user (0-100, or mean) "
                                           "reaches it."),
        hw: SimHwOpt = DEFAULT_HW,
        acceptance: str = typer.Option(DEFAULT_ACCEPTANCE, "--acceptance", help="Acceptance profile "
                                       "of the drafter to configure (name or path); its "
                                       "drafter_kind gives vLLM's method."),
        mtp1_acceptance: str = typer.Option(DEFAULT_MTP1_ACCEPTANCE, "--mtp1-acceptance",
                                            help="Acceptance profile of the MTP-1 baseline."),
        points: int = typer.Option(8, "--points", help="Closed-loop loads per candidate (geometric)."),
        load_range: Optional[str] = typer.Option(None, "--load-range", help="LOW,HIGH users "
                                                 "(default 1 .. the profile's max_batch_requests)."),
        seeds: int = typer.Option(1, "--seeds", help="Seeds per load."),
        requests_per_user: int = typer.Option(16, "--requests-per-user", help="Requests each "
                                              "user sends."),
        requests: RequestsOpt = None,
        kv_semantics: str = typer.Option("reserve", "--kv-semantics", help="reserve (prompt + "
                                         "output at admission) or blocks (vLLM's paged KV with "
                                         "preemption; slower engine)."),
        adaptive: bool = typer.Option(True, "--adaptive/--no-adaptive", help="Also try vLLM's "
                                      "adaptive verification (DSpark drafters only)."),
        min_gain: float = typer.Option(0.01, "--min-gain", help="A batch-size schedule or "
                                       "adaptive verification is recommended only when it beats "
                                       "the best fixed K by more than this fraction."),
        workers: int = typer.Option(2, "--workers", help="Parallel worker processes."),
        cache: Optional[Path] = typer.Option(None, "--cache", help="Per-point result cache "
                                             "(default DIR/cache)."),
        out: Path = typer.Option(Path("runs/recommend"), "--out", help="Output directory: "
                                 "recommend.json, sla.md, results.csv."),
    ) -> None:
        """Print the vLLM --speculative-config that serves TRACE best at each SLA, with the
        simulated throughput per GPU and its gain over MTP-1 and over the best fixed K."""
        from ..sweep.frontier import sla_markdown
        from ..sweep.recommend import RecommendConfig, recommend, write_recommendation
        from ..sweep.spec import parse_numbers, parse_range

        cfg = RecommendConfig(trace=str(trace), slas=parse_numbers(sla, "sla"), hw=hw,
                              acceptance=acceptance, mtp1_acceptance=mtp1_acceptance,
                              percentile=sla_percentile, points=points,
                              load_range=parse_range(load_range), seeds=seeds,
                              requests_per_user=requests_per_user, max_requests=requests,
                              kv_semantics=kv_semantics, adaptive=adaptive, min_gain=min_gain)
        rec = recommend(cfg, cache_dir=cache or out / "cache", workers=workers, show_progress=True)
        written = write_recommendation(rec, out)
        print_markdown(sla_markdown(rec.sla), "max throughput per GPU meeting each SLA, every candidate")
        typer.echo(f"derived batch-size schedule: {json_text(rec.schedule.to_json())}")
        for c in rec.choices:
            adaptive_gain = c["adaptive_gain_vs_best_fixed"]
            if c["speculative_config"] is None:
                typer.echo(f"@ {c['sla_tps_user']:g} tok/s/user: no candidate meets the SLA")
                continue
            typer.echo(f"@ {c['sla_tps_user']:g} tok/s/user: {c['policy']}, "
                       f"{c['throughput_tok_s_per_gpu']:,.0f} tok/s/GPU; vs MTP-1 "
                       f"{_pct(c['gain_vs_mtp1'])}, vs best fixed K ({c['best_fixed']}) "
                       f"{_pct(c['gain_vs_best_fixed'])}")
            typer.echo(f"  --speculative-config '{json_text(c['speculative_config'])}'")
            if adaptive_gain is not None:
                typer.echo(f"  adaptive verification vs best fixed K: {_pct(adaptive_gain)}")
        typer.echo("wrote " + ", ".join(str(w) for w in written))
