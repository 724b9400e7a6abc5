"""`dspark-sim recommend`: the speculative setting the simulator finds best, per SLA, as vLLM's
--speculative-config and SGLang's server flags."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..fileio import json_text
from ..sim.defaults import DEFAULT_ACCEPTANCE, DEFAULT_HW, DEFAULT_MTP1_ACCEPTANCE
from ..sweep.intervals import SPREAD_DRAWS
from .options import BaselineOpt, RequestsOpt, SimHwOpt, SlasOpt, SpreadDrawsOpt
from .render import print_markdown


def _pct(gain) -> str:
    return "baseline unmet" if gain is None else f"{gain * 100:+.0f}%"


def _print_choice(c: dict, drafter: str) -> None:
    from ..sweep.tables import baseline_label, seconds_text

    if c["policy"] is None:
        typer.echo(c["notes"][0])
        return
    who = "no speculation" if c["policy"] == "ar" else f"{c['policy']} ({drafter})"
    gains = [f"vs {baseline_label(c['baseline'])} {_pct(c['gain_vs_baseline'])}"] if c["baseline"] \
        and c["policy"] != c["baseline"] else []
    if c["baseline"] != "ar" and c["policy"] != "ar":
        gains.append(f"vs no speculation {_pct(c['gain_vs_ar'])}")
    if c["policy"] != "ar":
        gains.append(f"vs best fixed K ({c['best_fixed']}) {_pct(c['gain_vs_best_fixed'])}")
    typer.echo(f"@ {c['sla_tps_user']:g} tok/s/user: {who}, {c['throughput_tok_s_per_gpu']:,.0f} "
               f"tok/s/GPU" + (f"; {', '.join(gains)}" if gains else ""))
    spread = c.get("interval")
    if spread:
        from ..sweep.frontier import format_gain

        low, high = (format_gain(spread[f"gain_vs_baseline_{k}"]) for k in ("low", "high"))
        gain = (f", gain vs {baseline_label(c['baseline'])} " + (low if low == high else f"{low}..{high}")) \
            if c["baseline"] and c["policy"] != c["baseline"] else ""
        others = [b or "none (unmet)" for b in spread["best_per_draw"] if b != c["policy"]]
        holds = (f"the best setting is {c['policy']} under all {spread['draws']} draws" if not others else
                 f"the best setting CHANGES under {len(others)} of {spread['draws']} draws "
                 f"({', '.join(dict.fromkeys(others))}), where {c['policy']} gives up at most "
                 f"{spread['loss_vs_draw_best_max']:.1%} of the draw's best tok/s/GPU")
        typer.echo(f"  fit interval: {spread['throughput_low']:,.0f}-{spread['throughput_high']:,.0f} "
                   f"tok/s/GPU{gain}; {holds}")
    if c.get("outside_observed"):
        typer.echo(f"  outside the loads the profile was fitted on: {c['outside_observed']}")
    if c.get("ttft_p99_s") is not None:
        typer.echo(f"  at {c['load_at_sla']:g} users: TTFT p50 {seconds_text(c['ttft_p50_s'])}, p99 "
                   f"{seconds_text(c['ttft_p99_s'])}, TPOT p99 {c['tpot_p99_ms']:.1f} ms")
    if c["speculative_config"] is not None:
        typer.echo(f"  vLLM:   --speculative-config '{json_text(c['speculative_config'])}'")
    if c["sglang_flags"]:
        typer.echo(f"  SGLang: {' '.join(c['sglang_flags'])}")
    if c["adaptive_gain_vs_best_fixed"] is not None:
        typer.echo(f"  adaptive verification vs best fixed K: {_pct(c['adaptive_gain_vs_best_fixed'])}")
    for note in c["notes"]:
        typer.echo(f"  note: {note}")


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
        mtp1_acceptance: str = typer.Option("auto", "--mtp1-acceptance",
                                            help="Acceptance profile of MTP-1, which is swept too "
                                            f"(auto: {DEFAULT_MTP1_ACCEPTANCE} when the hardware "
                                            "profile's model has an MTP head, e.g. DeepSeek-V3/V4, "
                                            "else MTP-1 is left out; none: left out). MTP-1 is "
                                            "recommended only for models with an MTP head."),
        baseline: BaselineOpt = "auto",
        draft_model: Optional[str] = typer.Option(None, "--draft-model", help="Draft checkpoint "
                                                  "(Hugging Face id or path) to name in vLLM's "
                                                  "config and SGLang's flags; default: the "
                                                  "acceptance profile's drafter_checkpoint."),
        points: int = typer.Option(8, "--points", help="Closed-loop loads per candidate (geometric)."),
        load_range: Optional[str] = typer.Option(None, "--load-range", help="LOW,HIGH users "
                                                 "(default 1 .. the profile's max_batch_requests)."),
        seeds: int = typer.Option(1, "--seeds", help="Seeds per load."),
        requests_per_user: int = typer.Option(16, "--requests-per-user", help="Requests each "
                                              "user sends (at least 3: one warm-up and 2 measured)."),
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
        spread_draws: SpreadDrawsOpt = SPREAD_DRAWS,
    ) -> None:
        """Print the speculative setting that serves TRACE best at each SLA (no speculation
        included) as vLLM's --speculative-config and SGLang's flags, with the simulated
        throughput per GPU, its gain over the baseline and over the best fixed K, and the
        latencies at that point."""
        from ..profiles.registry import load_acceptance_profile
        from ..sweep.recommend import RecommendConfig, recommend, write_recommendation
        from ..sweep.tables import sla_markdown
        from ..sweep.spec import parse_numbers, parse_range

        cfg = RecommendConfig(trace=str(trace), slas=parse_numbers(sla, "sla"), hw=hw,
                              acceptance=acceptance,
                              mtp1_acceptance=None if mtp1_acceptance == "none" else mtp1_acceptance,
                              baseline=baseline, draft_model=draft_model,
                              percentile=sla_percentile, points=points,
                              load_range=parse_range(load_range), seeds=seeds,
                              requests_per_user=requests_per_user, max_requests=requests,
                              kv_semantics=kv_semantics, adaptive=adaptive, min_gain=min_gain,
                              spread_draws=spread_draws)
        from ..profiles.describe import model_mismatch_warnings
        for warning in model_mismatch_warnings(hw, {"drafter": acceptance}):
            typer.echo(f"warning: {warning}", err=True)
        rec = recommend(cfg, cache_dir=cache or out / "cache", workers=workers, show_progress=True)
        written = write_recommendation(rec, out)
        print_markdown(sla_markdown(rec.sla, rec.results, "concurrency"),
                     f"max throughput per GPU meeting each SLA, every candidate; baseline "
                     f"{rec.baseline}: {rec.baseline_reason}")
        if rec.kv_note:
            typer.echo(rec.kv_note)
        if rec.spread_note:
            typer.echo(rec.spread_note)
        typer.echo(f"derived batch-size schedule: {json_text(rec.schedule.to_json())}")
        drafter = load_acceptance_profile(acceptance).name
        for c in rec.choices:
            _print_choice(c, drafter)
        typer.echo("wrote " + ", ".join(str(w) for w in written))
