"""`recommend`: the speculative setting the simulator finds best for a hardware profile, an
acceptance profile, a trace and an SLA, as vLLM's `--speculative-config` and SGLang's flags.

The candidates: no speculation (`ar`, always, and the default baseline), MTP-1 when the hardware
profile's model has an MTP head (DeepSeek-V3/R1/V4; baseline.py) or its acceptance is given,
and what vLLM 0.32 can be told to run with the profile's drafter: a fixed
`num_speculative_tokens = K` for K = 1..gamma (`static-K`), a batch-size schedule
(`num_speculative_tokens_per_batch_size`, `vllm-schedule`) and, for a DSpark drafter, adaptive
verification (`vllm-adaptive`). Each is swept over a closed-loop load (sweep/run.py, cached
points). The schedule is derived from the fixed-K sweep: at each load (users ~ the batch size vLLM
looks up) the K with the highest throughput, between loads the boundary at their geometric mean,
equal neighbours merged; it is then swept like the others. Per SLA the simple setting (no
speculation, MTP-1 where the model has the head, a fixed K) with the highest throughput per GPU
wins unless the schedule or adaptive verification beats it by more than `min_gain` (1%: a more
complex setting must pay for itself); ties go to the simpler one (no speculation first, then the
shortest K). The gains over the baseline and over the best fixed K are printed with it; deploy.py
turns it into server settings.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fileio import write_json_atomic, write_text_atomic
from ..profiles.registry import (acceptance_profile_path, hw_profile_path, load_acceptance_profile,
                                 load_hw_profile)
from ..sim.defaults import DEFAULT_ACCEPTANCE, DEFAULT_HW, DEFAULT_MTP1_ACCEPTANCE
from ..sim.speculation.spec_config import BatchSchedule, parse_schedule, vllm_method
from .baseline import AUTO, has_mtp_head, resolve_baseline
from .deploy import deployment
from ..traces import shipped_trace
from ..traces.schema import load_trace
from .frontier import THROUGHPUT, aggregate, sla_table, tps_column
from .intervals import (SPREAD_DRAWS, check_spread_draws, context_per_request, describe, fit_spread,
                        flag_outside, interval_text, merge_intervals, operating_points,
                        rerun_on_draws)
from .run import SweepConfig, kv_note, run_sweep, write_table
from .tables import sla_markdown, unmet_text

@dataclass
class RecommendConfig:
    """What to recommend for (see `dspark-sim recommend --help`)."""

    trace: str
    slas: list[float]
    hw: str = DEFAULT_HW
    acceptance: str = DEFAULT_ACCEPTANCE
    mtp1_acceptance: str | None = AUTO   # auto: paper-mtp1 when the model has an MTP head, else none
    baseline: str | None = AUTO          # auto: mtp1 when the model has an MTP head, else ar
    draft_model: str | None = None       # the draft checkpoint for vLLM / SGLang (else the profile's)
    percentile: int | str = 50
    points: int = 8
    load_range: tuple[float, float] | None = None
    seeds: int = 1
    requests_per_user: int = 16
    warmup: int = 1
    max_requests: int | None = None
    kv_semantics: str = "reserve"
    adaptive: bool = True
    min_gain: float = 0.01      # a schedule or adaptive verification must beat the best fixed K by this
    spread_draws: int = SPREAD_DRAWS   # fitted profiles: representative draws for intervals (intervals.py)


@dataclass
class Recommendation:
    """Per SLA the winning candidate and its vLLM config; the SLA table of every candidate."""

    config: RecommendConfig
    sla: pd.DataFrame
    results: pd.DataFrame
    schedule: BatchSchedule
    choices: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    baseline: str | None = None
    baseline_reason: str = ""
    kv_note: str = ""
    fit_spread: dict[str, Any] = field(default_factory=dict)    # intervals.describe
    spread_note: str = ""                                       # intervals.interval_text


def derive_schedule(results: pd.DataFrame, statics: list[str], gamma: int) -> BatchSchedule:
    """Per load the fixed K of highest throughput (seed means); boundaries at the geometric mean
    of neighbouring loads; neighbours with the same K merged."""
    agg = aggregate(results[results["policy"].isin(statics)], tps_column(50))
    best: list[tuple[int, int]] = []
    for load, group in agg.groupby("load"):
        row = group.loc[group[THROUGHPUT].idxmax()]
        best.append((int(round(load)), int(str(row["policy"]).split("-")[1])))
    best.sort()
    ranges: list[list[int]] = []
    for i, (load, k) in enumerate(best):
        start = 1 if i == 0 else ranges[-1][1] + 1
        end = int(math.floor(math.sqrt(load * best[i + 1][0]))) if i + 1 < len(best) else max(load, start)
        end = max(end, start)
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, k])
    return parse_schedule(json.dumps(ranges), gamma)


def _value(sla: pd.DataFrame, policy: str, target: float) -> float:
    row = sla[(sla["policy"] == policy) & (sla["sla_tps_user"] == target)]
    return float(np.nan_to_num(row[THROUGHPUT].iloc[0])) if len(row) else 0.0


def _gain(value: float, base: float) -> float | None:
    """value / base - 1; None when the base is unmet (0 tok/s/GPU at the SLA)."""
    return value / base - 1.0 if base > 0 else None


def _mtp1_profile(cfg: RecommendConfig, mtp_head: bool) -> str | None:
    if cfg.mtp1_acceptance == AUTO:
        return DEFAULT_MTP1_ACCEPTANCE if mtp_head else None
    return cfg.mtp1_acceptance


def _point_latencies(table: pd.DataFrame, policy: str, target: float) -> dict[str, Any]:
    row = table[(table["policy"] == policy) & (table["sla_tps_user"] == target)].iloc[0]
    return {k: (None if not np.isfinite(row[k]) else float(row[k]))
            for k in ("load_at_sla", "ttft_p50_s", "ttft_p99_s", "tpot_p99_ms")}


def recommend(cfg: RecommendConfig, *, cache_dir=None, workers: int = 1, executor: str = "local",
              show_progress: bool = False, what: str = "sweep") -> Recommendation:
    """Sweep every candidate, derive and sweep the batch-size schedule, choose per SLA. A fitted
    profile with draws is recommended for again under `cfg.spread_draws` representative draws:
    each choice gets the range of its throughput and gain and whether the best setting changes
    under a draw (intervals.py)."""
    check_spread_draws(cfg.spread_draws)
    if not cfg.slas:
        raise InputError("no SLA given", field="sla")
    if not 0 <= cfg.min_gain < 10:
        raise InputError(f"must be in [0, 10), got {cfg.min_gain}", field="min-gain")
    acc = load_acceptance_profile(acceptance_profile_path(cfg.acceptance))
    hw = load_hw_profile(cfg.hw)
    fit_spread(hw, hw_profile_path(cfg.hw))           # a malformed fit block: bad input, before any run
    mtp_head = has_mtp_head(hw.model)
    gamma, method = acc.gamma, vllm_method(acc.drafter_kind)
    statics = [f"static-{k}" for k in range(1, gamma + 1)]
    mtp1_acc = _mtp1_profile(cfg, mtp_head)
    policies = ["ar"] + (["mtp1"] if mtp1_acc else []) + statics
    if cfg.adaptive and method == "dspark":         # vLLM supports it for method="dspark" only
        policies.append("vllm-adaptive")
    baseline, why = resolve_baseline(cfg.baseline, policies, hw.model)   # bad input before any run
    accs: dict[str, str | None] = {p: cfg.acceptance for p in policies + ["vllm-schedule"]}
    accs["ar"] = None
    if mtp1_acc:
        accs["mtp1"] = mtp1_acc
    sweep = SweepConfig(trace=cfg.trace, policies=policies, hw=cfg.hw, acceptance=accs,
                        points=cfg.points, load_range=cfg.load_range, seeds=cfg.seeds,
                        requests_per_user=cfg.requests_per_user, warmup=cfg.warmup,
                        max_requests=cfg.max_requests, slas=cfg.slas, percentile=cfg.percentile,
                        baseline=baseline, kv_semantics=cfg.kv_semantics, spread_draws=0)
    first = run_sweep(sweep, cache_dir=cache_dir, workers=workers, executor=executor,
                      show_progress=show_progress, what=what)
    schedule = derive_schedule(first.results, statics, gamma)
    sweep.policies, sweep.schedule, sweep.add_ar = ["vllm-schedule"], json.dumps(schedule.to_json()), False
    sweep.baseline = None
    second = run_sweep(sweep, cache_dir=cache_dir, workers=workers, executor=executor,
                       show_progress=show_progress, what=what)
    results = pd.concat([first.results, second.results], ignore_index=True)
    table = sla_table(results, cfg.slas, first.config.percentile, baseline)
    out = Recommendation(cfg, table, results, schedule, wall_s=first.wall_s + second.wall_s,
                         baseline=baseline, baseline_reason=why, kv_note=kv_note(hw))
    # deployable simple settings: MTP-1 only where the model has the head to run it
    simple = ["ar"] + (["mtp1"] if mtp1_acc and mtp_head else []) + statics
    complex_ = [p for p in policies if p.startswith("vllm-")] + ["vllm-schedule"]
    for target in cfg.slas:
        values = {p: _value(table, p, target) for p in simple + complex_}
        best_static = max(statics, key=lambda p: values[p])    # first on ties: the shortest K
        best = max(simple, key=lambda p: values[p])             # first on ties: the simplest
        top_simple = values[best]
        for p in complex_:
            if values[p] > max(values[best], top_simple * (1 + cfg.min_gain)):
                best = p
        base = _value(table, baseline, target) if baseline else 0.0
        met = values[best] > 0
        plan = deployment(best, method, gamma, schedule, acc, draft_model=cfg.draft_model,
                          fixed_k=int(best_static.split("-")[1]), max_running=hw.max_batch_requests) \
            if met else None
        out.choices.append({
            "sla_tps_user": target, "policy": best if met else None,
            "speculative_config": plan.vllm if plan else None,
            "sglang_flags": plan.sglang if plan else None,
            "notes": plan.notes if plan else [unmet_text(table, target)],
            "throughput_tok_s_per_gpu": values[best], "baseline": baseline,
            "baseline_tok_s_per_gpu": base, "gain_vs_baseline": _gain(values[best], base),
            "gain_vs_ar": _gain(values[best], values["ar"]),
            "best_fixed": best_static, "best_fixed_tok_s_per_gpu": values[best_static],
            "gain_vs_best_fixed": _gain(values[best], values[best_static]),
            "adaptive_gain_vs_best_fixed": _gain(values["vllm-adaptive"], values[best_static])
            if "vllm-adaptive" in values else None,
            **(_point_latencies(table, best, target) if met else {}),
        })
    _add_intervals(out, hw, cache_dir, dict(workers=workers, executor=executor,
                                            show_progress=show_progress))
    return out


def _add_intervals(rec: Recommendation, hw, cache_dir, run_kw: dict[str, Any]) -> None:
    """Recommend again under the fit's representative draws; ranges into the SLA table and
    each choice (`interval`: throughput and gain of the chosen setting, the best setting under
    each draw, whether it stays the same); operating points beyond the fit's loads flagged."""
    cfg = rec.config
    spread = fit_spread(hw, hw_profile_path(cfg.hw))
    where = operating_points(rec.sla, rec.results, context_per_request(load_trace(shipped_trace(cfg.trace))),
                             rec.baseline) if spread is not None and cfg.spread_draws else []
    spread, indices, subs = rerun_on_draws(
        rec, hw, cfg.spread_draws, where, cache_dir, file=hw_profile_path(cfg.hw),
        rerun=lambda path, label: recommend(replace(cfg, hw=path, spread_draws=0), cache_dir=cache_dir,
                                            what=label, **run_kw))
    rec.wall_s += sum(s.wall_s for s in subs)
    if subs:
        rec.sla = merge_intervals(rec.sla, [s.sla for s in subs], ("policy", "sla_tps_user"),
                                  {THROUGHPUT: True, "gain_vs_baseline": False})
    if spread is not None:
        rec.sla = flag_outside(rec.sla, rec.results, spread)
    for i, choice in enumerate(rec.choices):
        if spread is not None and choice["policy"] is not None:
            row = rec.sla[(rec.sla["policy"] == choice["policy"])
                          & (rec.sla["sla_tps_user"] == choice["sla_tps_user"])].iloc[0]
            choice["outside_observed"] = row["outside_observed"]
        if not subs or choice["policy"] is None:
            continue
        row = rec.sla[(rec.sla["policy"] == choice["policy"])
                      & (rec.sla["sla_tps_user"] == choice["sla_tps_user"])].iloc[0]
        best = [s.choices[i]["policy"] for s in subs]
        # what keeping this choice costs under a draw whose own best differs (0 when it is the same)
        kept = [_value(s.sla, choice["policy"], choice["sla_tps_user"]) for s in subs]
        tops = [s.choices[i]["throughput_tok_s_per_gpu"] for s in subs]
        loss = [1.0 - k / t if t > 0 else 0.0 for k, t in zip(kept, tops)]
        choice["interval"] = {
            "throughput_low": float(row[f"{THROUGHPUT}_low"]),
            "throughput_high": float(row[f"{THROUGHPUT}_high"]),
            "gain_vs_baseline_low": _finite(row.get("gain_vs_baseline_low")),
            "gain_vs_baseline_high": _finite(row.get("gain_vs_baseline_high")),
            "best_per_draw": best, "same_choice": all(b == choice["policy"] for b in best),
            "loss_vs_draw_best_max": float(max(loss)),
            "draws": len(subs)}
    rec.fit_spread, rec.spread_note = describe(spread, indices, hw), interval_text(spread, indices, hw)


def _finite(value) -> float | None:
    """A float for JSON (None for NaN or a missing value; inf stays, 'baseline unmet')."""
    return None if value is None or np.isnan(value) else float(value)


def write_recommendation(rec: Recommendation, out_dir: str | Path) -> list[Path]:
    """recommend.json (choices, schedule, config), sla.md, results.csv."""
    out = Path(out_dir)
    doc = {"config": asdict(rec.config), "schedule": rec.schedule.to_json(), "choices": rec.choices,
           "baseline": rec.baseline, "baseline_reason": rec.baseline_reason, "kv_note": rec.kv_note,
           "fit_spread": rec.fit_spread, "wall_s": rec.wall_s}
    write_json_atomic(out / "recommend.json", doc)
    write_text_atomic(out / "sla.md", sla_markdown(rec.sla, rec.results, "concurrency")
                      + (f"\n{rec.spread_note}\n" if rec.spread_note else ""))
    return [out / "recommend.json", out / "sla.md"] + write_table(rec.results, out / "results.csv")
