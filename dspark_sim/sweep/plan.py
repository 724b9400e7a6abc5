"""Capacity planning: the fewest replicas that serve a trace within an SLA, per policy.

A replica count *serves* the trace when, replaying the whole trace (arrival rate x
`rate_scale`) on that many replicas, tps_user at percentile P >= the SLA and TTFT p99 <= the
bound, for every seed. Overload makes the queue (and so TTFT) grow through the trace, so the
TTFT bound, and the queue-growth test of overload.py (median TTFT rising through the trace), are
what reject a count that cannot keep up. Assuming more replicas never hurt, the search doubles the count until it serves (1, 2, 4, ...), then bisects between the
last count that did not and the first that did. All policies search in lock step, so each
round's evaluations run in parallel; every evaluation is a cached sweep point.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from ..profiles.registry import hw_profile_path
from ..sim.cluster.router import ROUTER_ALIASES
from ..sim.cluster.run import PREFILL_MODES
from ..sim.defaults import DEFAULT_HW
from ..traces.schema import load_trace
from .baseline import AUTO, resolve_baseline, with_ar
from .cache import PointCache
from .executors import run_points
from .frontier import format_gain, parse_statistic, tps_of
from .intervals import (SPREAD_DRAWS, Operating, check_spread_draws, context_per_request, describe,
                        fit_spread, interval_text, merge_intervals, outside_observed,
                        rerun_on_draws)
from .overload import overload_reason
from .run import SweepConfig, kv_note, resolve_inputs
from .spec import Point
from .tables import baseline_label, interval_cell


@dataclass
class PlanConfig:
    """What to plan (see `dspark-sim plan --help`)."""

    trace: str
    policies: list[str]
    sla: float
    hw: str = DEFAULT_HW
    acceptance: dict[str, str | None] = field(default_factory=dict)
    percentile: int | str = 50      # or "mean"
    ttft_p99_s: float | None = 30.0
    rate_scale: float = 1.0
    router: str = "least-outstanding"
    seeds: int = 1
    max_replicas: int = 1024
    max_requests: int | None = None
    prefill: str = "local"
    baseline: str | None = AUTO     # auto: mtp1 if the model has an MTP head, else ar (baseline.py)
    gpu_hour_cost: float | None = None
    add_ar: bool = True             # no speculation is always a candidate
    spread_draws: int = SPREAD_DRAWS   # fitted profiles: representative draws for intervals (intervals.py)


@dataclass
class PlanResult:
    """Per policy: the replicas found and the evaluations that led there."""

    config: PlanConfig
    table: pd.DataFrame
    evaluations: pd.DataFrame
    cached: int
    computed: int
    wall_s: float
    baseline: str | None = None
    baseline_reason: str = ""
    kv_note: str = ""
    fit_spread: dict[str, Any] = field(default_factory=dict)    # intervals.describe
    spread_note: str = ""                                       # intervals.interval_text


class _Search:
    """Exponential then binary search of the smallest passing count in 1..max (monotone)."""

    def __init__(self, upper: int) -> None:
        self.fail, self.ok, self.upper = 0, None, upper     # largest failing, smallest passing

    def next(self) -> int | None:
        if self.ok is None:
            n = max(1, 2 * self.fail)
            return min(n, self.upper) if self.fail < self.upper else None
        return (self.fail + self.ok) // 2 if self.ok - self.fail > 1 else None

    def record(self, n: int, passed: bool) -> None:
        if passed:
            self.ok = n if self.ok is None else min(self.ok, n)
        else:
            self.fail = max(self.fail, n)


def passes(metrics: list[dict[str, Any]], cfg: PlanConfig) -> bool:
    """Every seed meets the tps_user SLA at the percentile, the TTFT bound, and is not
    overloaded (its queue does not grow through the trace; overload.py)."""
    for m in metrics:
        tps = tps_of(m, cfg.percentile)
        if tps is None or tps < cfg.sla:
            return False
        if overload_reason(m, cfg.ttft_p99_s):
            return False
    return True


def _check(cfg: PlanConfig) -> None:
    if not cfg.sla > 0:
        raise InputError(f"must be > 0, got {cfg.sla}", field="sla")
    if not cfg.rate_scale > 0 or not np.isfinite(cfg.rate_scale):
        raise InputError(f"must be a positive number, got {cfg.rate_scale}", field="rate-scale")
    if cfg.max_replicas < 1:
        raise InputError(f"must be >= 1, got {cfg.max_replicas}", field="max-replicas")
    if cfg.ttft_p99_s is not None and not cfg.ttft_p99_s > 0:
        raise InputError(f"must be > 0, got {cfg.ttft_p99_s}", field="ttft-p99")
    if cfg.seeds < 1:
        raise InputError(f"must be >= 1, got {cfg.seeds}", field="seeds")
    cfg.percentile = parse_statistic(cfg.percentile)
    check_spread_draws(cfg.spread_draws)
    if cfg.add_ar:
        cfg.policies = with_ar(cfg.policies)
    if cfg.router not in ROUTER_ALIASES:
        raise InputError(f"unknown router {cfg.router!r}; choose rr or least-outstanding", field="router")
    if cfg.prefill not in PREFILL_MODES:
        raise InputError(f"unknown prefill mode {cfg.prefill!r}; choose {' or '.join(PREFILL_MODES)}",
                         field="prefill")


def plan_capacity(cfg: PlanConfig, *, cache_dir=None, workers: int = 1, executor: str = "local",
                  show_progress: bool = False, ray_address: str | None = None,
                  what: str = "plan round") -> PlanResult:
    """Search each policy's minimum replica count; return the cost table. A fitted profile with
    draws is planned again under `cfg.spread_draws` representative draws: GPUs needed and saved
    get their range (intervals.py)."""
    _check(cfg)
    t0 = time.perf_counter()
    trace, hw_path, accs, hw = resolve_inputs(SweepConfig(cfg.trace, cfg.policies, hw=cfg.hw,
                                                          acceptance=cfg.acceptance,
                                                          max_requests=cfg.max_requests))
    fit_spread(hw, hw_path)                           # a malformed fit block: bad input, before any run
    baseline, why = resolve_baseline(cfg.baseline, cfg.policies, hw.model)
    base = Point(trace=trace, hw=hw_path, policy="", acceptance=None, load_mode="rate",
                 load=cfg.rate_scale, router=ROUTER_ALIASES[cfg.router], max_requests=cfg.max_requests,
                 prefill=cfg.prefill)
    cache = PointCache(cache_dir)
    searches = {p: _Search(cfg.max_replicas) for p in cfg.policies}
    seen: dict[Point, dict[str, Any]] = {}
    cached = computed = 0
    while True:
        asks = {p: s.next() for p, s in searches.items()}
        asks = {p: n for p, n in asks.items() if n is not None}
        if not asks:
            break
        points = [replace(base, policy=p, acceptance=accs[p], replicas=n, seed=s)
                  for p, n in asks.items() for s in range(cfg.seeds)]
        todo = []
        for pt in points:
            hit = cache.get(pt.key())
            if hit is None:
                todo.append(pt)
            else:
                seen[pt] = hit
                cached += 1

        def keep(pt: Point, m: dict[str, Any]) -> None:
            cache.put(pt.key(), pt, m)
            seen[pt] = m

        run_points(todo, keep, workers=workers, executor=executor, show_progress=show_progress,
                   ray_address=ray_address, what=what)
        computed += len(todo)
        for p, n in asks.items():
            ms = [seen[pt] for pt in points if pt.policy == p]
            searches[p].record(n, passes(ms, cfg))
    evaluations = _evaluations(seen, cfg)
    table = _cost_table(searches, seen, cfg, hw.gpus_per_replica, baseline)
    out = PlanResult(cfg, table, evaluations, cached, computed, time.perf_counter() - t0,
                     baseline=baseline, baseline_reason=why, kv_note=kv_note(hw))
    spread = fit_spread(hw, hw_path)
    ctx = context_per_request(load_trace(trace)) if spread is not None and cfg.spread_draws else 0.0
    where = [Operating(r.decoding * r.verify_tokens, r.decoding * ctx, r.policy not in ("ar", baseline),
                       r.decoding)
             for r in table.itertuples() if r.status == "ok"]
    spread, indices, subs = rerun_on_draws(
        out, hw, cfg.spread_draws, where, cache_dir, file=hw_path,
        rerun=lambda path, label: plan_capacity(
            replace(cfg, hw=path, spread_draws=0), cache_dir=cache_dir, workers=workers, executor=executor,
            show_progress=show_progress, ray_address=ray_address, what=label))
    tables = [s.table for s in subs]
    if tables:
        out.table = merge_intervals(out.table, tables, ("policy",),
                                    {"gpus": False, "gpus_saved_vs_baseline": False})
        out.table["gpus_unmet_draws"] = [sum(bool(t.loc[t["policy"] == p, "status"].iloc[0] != "ok")
                                             for t in tables) for p in out.table["policy"]]
    if spread is not None:
        out.table["outside_observed"] = [
            outside_observed(spread.observed_range, r.decoding * r.verify_tokens, r.policy != "ar")
            if r.status == "ok" else "" for r in out.table.itertuples()]
    out.fit_spread, out.spread_note = describe(spread, indices, hw), interval_text(spread, indices, hw)
    out.wall_s = time.perf_counter() - t0
    return out


def _evaluations(seen: dict[Point, dict[str, Any]], cfg: PlanConfig) -> pd.DataFrame:
    rows = [{"policy": pt.policy, "replicas": pt.replicas, "seed": pt.seed,
             "tps_user": tps_of(m, cfg.percentile),
             "ttft_p99_s": m["ttft_p99_s"], "throughput_tok_s_per_gpu": m["throughput_tok_s_per_gpu"],
             "queue_growth": m.get("queue_growth"), "overload_reason": overload_reason(m, cfg.ttft_p99_s),
             "passes": passes([m], cfg)} for pt, m in seen.items()]
    return pd.DataFrame(rows).sort_values(["policy", "replicas", "seed"]).reset_index(drop=True)


def _best_reached(seen: dict[Point, dict[str, Any]], policy: str, cfg: PlanConfig) -> dict[str, Any]:
    """The replica count whose slowest seed was fastest, for a policy that never passed."""
    by_count: dict[int, list[dict[str, Any]]] = {}
    for pt, m in seen.items():
        if pt.policy == policy:
            by_count.setdefault(pt.replicas, []).append(m)
    if not by_count:
        return {}
    speed = {n: min(tps_of(m, cfg.percentile) or 0.0 for m in ms) for n, ms in by_count.items()}
    n = max(speed, key=lambda k: (speed[k], -k))
    return {"best_tps_user": speed[n], "best_at_replicas": n,
            "best_ttft_p99_s": max(m["ttft_p99_s"] for m in by_count[n])}


def _cost_table(searches: dict[str, _Search], seen: dict[Point, dict[str, Any]], cfg: PlanConfig,
                gpus_per_replica: int, baseline: str | None) -> pd.DataFrame:
    rows = []
    for p, s in searches.items():
        row: dict[str, Any] = {"policy": p, "sla_tps_user": cfg.sla, "percentile": cfg.percentile,
                               "ttft_p99_bound_s": cfg.ttft_p99_s, "rate_scale": cfg.rate_scale}
        if s.ok is None:
            row.update(replicas=np.nan, gpus=np.nan, status=f"unmet up to {cfg.max_replicas} replicas",
                       **_best_reached(seen, p, cfg))
        else:
            ms = [m for pt, m in seen.items() if pt.policy == p and pt.replicas == s.ok]
            row.update(replicas=s.ok, gpus=s.ok * gpus_per_replica, status="ok",
                       tps_user=float(np.mean([tps_of(m, cfg.percentile) for m in ms])),
                       decoding=float(np.mean([m["decoding"] for m in ms])),
                       verify_tokens=float(np.mean([m["verify_tokens"] for m in ms])),
                       ttft_p99_s=float(np.mean([m["ttft_p99_s"] for m in ms])),
                       throughput_tok_s_per_gpu=float(np.mean([m["throughput_tok_s_per_gpu"] for m in ms])))
            if cfg.gpu_hour_cost is not None:
                row["cost_per_hour"] = row["gpus"] * cfg.gpu_hour_cost
        rows.append(row)
    table = pd.DataFrame(rows)
    table["baseline"] = baseline
    if baseline in set(table["policy"]):
        b = float(table.loc[table["policy"] == baseline, "gpus"].iloc[0])
        table["gpus_saved_vs_baseline"] = (b - table["gpus"]) / b if b == b else np.nan
    return table


def _unmet_text(r: pd.Series) -> str:
    best = r.get("best_tps_user", np.nan)
    if best is None or not np.isfinite(best):
        return r["status"]
    return (f"{r['status']}; best {best:,.1f} tok/s/user at {int(r['best_at_replicas'])} replicas "
            f"(TTFT p99 {r['best_ttft_p99_s']:,.1f} s)")


def _gpus_interval(r: pd.Series) -> str:
    """' [low-high]' GPUs over the fit's draws, with the draws under which no count served."""
    low, high = r.get("gpus_low", np.nan), r.get("gpus_high", np.nan)
    if low is None or not np.isfinite(low):
        return ""
    unmet = int(r.get("gpus_unmet_draws", 0) or 0)
    return f" [{low:.0f}-{high:.0f}" + (f"; unmet under {unmet} draw(s)" if unmet else "") + "]"


def plan_markdown(table: pd.DataFrame, baseline: str | None = None) -> str:
    """The cost table as Markdown; unmet policies with the best speed they reached."""
    baseline = baseline or (table["baseline"].iloc[0] if "baseline" in table else None)
    head = ["policy", "replicas", "GPUs", "tok/s/user", "TTFT p99 (s)", "tok/s/GPU"]
    has_cost = "cost_per_hour" in table
    has_saved = "gpus_saved_vs_baseline" in table
    head += ["cost/hour"] if has_cost else []
    head += [f"GPUs saved vs {baseline_label(baseline)}"] if has_saved else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in table.iterrows():
        if r["status"] != "ok":
            lines.append("| " + " | ".join([r["policy"], _unmet_text(r)] + [""] * (len(head) - 2)) + " |")
            continue
        cells = [r["policy"], f"{int(r['replicas'])}", f"{int(r['gpus'])}{_gpus_interval(r)}",
                 f"{r['tps_user']:.1f}",
                 f"{r['ttft_p99_s']:.2f}", f"{r['throughput_tok_s_per_gpu']:,.0f}"]
        cells += [f"{r['cost_per_hour']:,.2f}"] if has_cost else []
        cells += [format_gain(r["gpus_saved_vs_baseline"]) + interval_cell(r, "gpus_saved_vs_baseline")
                  if r["policy"] != baseline else "-"] if has_saved else []
        lines.append("| " + " | ".join(cells) + " |")
    if "outside_observed" in table and table["outside_observed"].astype(bool).any():
        lines += ["", "Outside the loads the profile was fitted on: " + "; ".join(
            f"{r.policy} ({r.outside_observed})" for r in table.itertuples() if r.outside_observed) + "."]
    if (table["status"] != "ok").all() and "best_tps_user" in table and table["best_tps_user"].notna().any():
        top = table.loc[table["best_tps_user"].idxmax()]
        lines += ["", f"No policy serves the trace at {top['sla_tps_user']:g} tok/s/user; the fastest "
                  f"reached is {top['best_tps_user']:,.1f} tok/s/user ({top['policy']}, "
                  f"{int(top['best_at_replicas'])} replicas)."]
    return "\n".join(lines) + "\n"
