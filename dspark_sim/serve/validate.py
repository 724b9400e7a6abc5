"""Sim-to-real validation: the real engine and the simulator serve the same trace; error table.

The engine serves the trace `repeats` times per policy (policies interleaved, so slow spells of
a shared machine fall on all of them); the simulator replays the same trace with the measured
hardware profile and the acceptance profile measured with the same drafter, over as many
seeds. For every policy and metric the table holds the engine's mean, its run-to-run range
and half-range (the spread), the simulator's mean and its error against the engine's mean. A
metric passes when the error is within 5% or within the engine's own range. Per engine run,
the profile's cost of each real iteration (draft_time + step_time at that iteration's
requests, batch tokens and context) is compared with the iteration's measured duration.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..sim.replay import ReplayResult, replay
from ..traces.schema import Trace
from .engine import ServeResult

TOLERANCE = 0.05
METRICS = [            # (summary key path, label)
    ("throughput_tok_s", "throughput (tok/s)"),
    ("tps_user.mean", "tok/s/user mean"),
    ("tps_user.p10", "tok/s/user p10"),
    ("tps_user.p50", "tok/s/user p50"),
    ("tps_user.p90", "tok/s/user p90"),
    ("ttft_s.mean", "TTFT mean (s)"),
    ("ttft_s.p50", "TTFT p50 (s)"),
    ("ttft_s.p90", "TTFT p90 (s)"),
    ("ttft_s.p99", "TTFT p99 (s)"),
    ("tpot_s.p50", "TPOT p50 (s)"),
    ("mean_verify_len", "mean verify length"),
    ("mean_tau", "mean tau"),
    ("duration_s", "duration (s)"),
]
HEADLINE = ("throughput_tok_s", "tps_user.p50")


def lookup(summary: dict[str, Any], key: str) -> float:
    """summary['a']['b'] for key 'a.b' (NaN when missing or None)."""
    value: Any = summary
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float("nan") if value is None else float(value)


def iteration_cost_errors(iterations: pd.DataFrame, hw: HardwareProfile, kind: str | None) -> dict:
    """How the profile's iteration cost predicts the engine's measured iterations."""
    if iterations is None or iterations.empty:
        return {}
    measured = (iterations["end_s"] - iterations["start_s"]).to_numpy()
    predicted = np.asarray(hw.step_time(iterations["batch_tokens"].to_numpy(dtype=float),
                                        iterations["context_tokens"].to_numpy(dtype=float),
                                        iterations["prefill_tokens"].to_numpy()), dtype=float)
    decoding = iterations["decode_requests"].to_numpy()
    drafts = iterations["drafts_per_request"].to_numpy()
    if kind:
        draft = np.asarray(hw.draft_time(kind, decoding, drafts), dtype=float)
        predicted = predicted + np.where(drafts > 0, draft, 0.0)
    rel = predicted / measured - 1.0
    prefill = iterations["prefill_tokens"].to_numpy() > 0

    def total(mask: np.ndarray) -> float:
        return float(predicted[mask].sum() / measured[mask].sum() - 1.0) if mask.any() else float("nan")

    return {"iterations": int(len(measured)), "measured_s": float(measured.sum()),
            "predicted_s": float(predicted.sum()),
            "total_error": float(predicted.sum() / measured.sum() - 1.0),
            "median_error": float(np.median(rel)), "median_abs_error": float(np.median(np.abs(rel))),
            "p90_abs_error": float(np.percentile(np.abs(rel), 90)),
            "decode_only_error": total(~prefill), "with_prefill_error": total(prefill),
            "forward_share": float(iterations["forward_s"].sum() / measured.sum()),
            "draft_share": float(iterations["draft_s"].sum() / measured.sum())}


def error_table(engine: dict[str, list[ServeResult]], sim: dict[str, list[ReplayResult]]) -> pd.DataFrame:
    """One row per policy and metric: engine mean / min / max / spread, sim mean, error, pass."""
    rows = []
    for pol, runs in engine.items():
        for key, label in METRICS:
            real = np.array([lookup(r.summary, key) for r in runs])
            simv = np.array([lookup(r.summary, key) for r in sim[pol]])
            mean = float(np.nanmean(real)) if np.isfinite(real).any() else float("nan")
            lo, hi = (float(np.nanmin(real)), float(np.nanmax(real))) if np.isfinite(real).any() \
                else (float("nan"), float("nan"))
            s = float(np.nanmean(simv)) if np.isfinite(simv).any() else float("nan")
            error = s / mean - 1.0 if mean else float("nan")
            spread = (hi - lo) / 2.0 / abs(mean) if mean else float("nan")
            within_range = bool(lo <= s <= hi) if np.isfinite(s) else False
            ok = bool(np.isfinite(error) and (abs(error) <= TOLERANCE or within_range)) or \
                (mean == 0 and s == 0)
            rows.append({"policy": pol, "metric": key, "label": label, "engine_mean": mean,
                         "engine_min": lo, "engine_max": hi, "engine_spread": spread,
                         "runs": int(len(real)), "sim": s, "sim_error": error,
                         "within_5pct": bool(np.isfinite(error) and abs(error) <= TOLERANCE),
                         "within_engine_range": within_range, "pass": ok})
    return pd.DataFrame(rows)


def markdown_table(table: pd.DataFrame, metrics: tuple[str, ...] | None = None) -> str:
    """The error table as markdown: one row per policy x metric."""
    lines = ["| policy | metric | engine mean | engine range | spread (half-range) | sim | sim error | pass |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        if metrics and r["metric"] not in metrics:
            continue
        lines.append(f"| {r['policy']} | {r['label']} | {_fmt(r['engine_mean'])} | "
                     f"{_fmt(r['engine_min'])} - {_fmt(r['engine_max'])} | {_pct(r['engine_spread'])} | "
                     f"{_fmt(r['sim'])} | {_pct(r['sim_error'], sign=True)} | "
                     f"{'yes' if r['pass'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def _fmt(v: float) -> str:
    if not np.isfinite(v):
        return "-"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"


def _pct(v: float, sign: bool = False) -> str:
    if not np.isfinite(v):
        return "-"
    return f"{v:+.1%}" if sign else f"{v:.1%}"


def outputs_agree(engine: dict[str, list[ServeResult]]) -> dict[str, Any]:
    """At T = 0 every run of every policy must generate the same tokens (greedy decoding)."""
    runs = [r for rs in engine.values() for r in rs]
    first = runs[0].outputs
    differing = sorted({i for r in runs[1:] for i, (a, b) in enumerate(zip(first, r.outputs)) if a != b})
    return {"runs": len(runs), "requests": len(first), "requests_differing": len(differing)}


@dataclass
class Validation:
    """Everything `validate` measured."""

    table: pd.DataFrame
    engine: dict[str, list[ServeResult]]
    sim: dict[str, list[ReplayResult]]
    cost: dict[str, list[dict]] = field(default_factory=dict)      # iteration cost errors per run
    agreement: dict[str, Any] = field(default_factory=dict)


def validate(trace: Trace, policies: list[str], run_engine: Callable[[str, int], ServeResult],
             hw: HardwareProfile, acceptance: dict[str, tuple[AcceptanceProfile | None, str | None]],
             repeats: int = 3, seed: int = 0, trace_name: str | None = None,
             hw_name: str | None = None,
             on_run: Callable[[str, int, ServeResult], None] | None = None) -> Validation:
    """Serve `trace` `repeats` times per policy with `run_engine(policy, repeat)` (interleaved),
    replay it in the simulator with seeds seed .. seed + repeats - 1, and compare."""
    engine: dict[str, list[ServeResult]] = {p: [] for p in policies}
    for k in range(repeats):
        for pol in policies:
            res = run_engine(pol, k)
            engine[pol].append(res)
            if on_run is not None:
                on_run(pol, k, res)
    return compare_with_sim(trace, engine, hw, acceptance, seed, trace_name, hw_name)


def compare_with_sim(trace: Trace, engine: dict[str, list[ServeResult]], hw: HardwareProfile,
                     acceptance: dict[str, tuple[AcceptanceProfile | None, str | None]],
                     seed: int = 0, trace_name: str | None = None,
                     hw_name: str | None = None, kv_semantics: str = "reserve",
                     schedule: list[list[int]] | None = None,
                     run_hw: dict[str, list[HardwareProfile]] | None = None) -> Validation:
    """Replay `trace` in the simulator as often as the engine served it (seeds seed, seed + 1,
    ...; KV reserved at admission or paged with preemption) and compare with the engine's runs
    of each policy. `run_hw`: a profile per policy and run (seed k is simulated on run k's),
    e.g. `hw` scaled to each run's speed check; else `hw` for all."""
    policies = list(engine)
    repeats = max(len(r) for r in engine.values())
    hw_of = (lambda pol, k: run_hw[pol][k]) if run_hw else (lambda pol, k: hw)
    sim = {}
    for pol in policies:
        prof, name = acceptance[pol]
        sched = None
        if schedule and pol == "vllm-schedule":
            from ..sim.speculation.spec_config import parse_schedule
            sched = parse_schedule(json.dumps(schedule), prof.gamma)
        sim[pol] = [replay(trace, pol, hw_of(pol, k), prof, seed=seed + k,
                           trace_name=trace_name, hw_name=hw_name, acceptance_name=name,
                           kv_semantics=kv_semantics, schedule=sched) for k in range(repeats)]
    cost = {}
    for pol, runs in engine.items():
        kind = acceptance[pol][0].drafter_kind if acceptance[pol][0] is not None else None
        cost[pol] = [iteration_cost_errors(r.iterations, hw_of(pol, k), kind) for k, r in enumerate(runs)]
    return Validation(error_table(engine, sim), engine, sim, cost, outputs_agree(engine))


def report_markdown(v: Validation, meta: dict[str, Any]) -> str:
    """validation.md: setup, headline table, full table, iteration cost errors, agreement."""
    out = [f"# Sim-to-real validation: {meta.get('trace', '')}", ""]
    for key in ("command", "target", "drafter", "hw", "repeats", "threads", "load_average"):
        if key in meta:
            out.append(f"- {key}: `{meta[key]}`")
    out += ["", "## Headline: throughput and median tok/s/user", "",
            markdown_table(v.table, HEADLINE), "## Every metric", "", markdown_table(v.table),
            "## Profile cost of the engine's own iterations", "",
            "Per engine run: the profile's draft_time + step_time(B, context) at every real iteration "
            "against its measured wall time; the error on decode-only iterations and on those with "
            "prefill chunks; the share of wall time in the batched forward and in drafting (the "
            "rest is verification, the scheduler and bookkeeping).", "",
            "| policy | run | iterations | measured s | profile s | total error | decode-only | with prefill | median error | median abs | p90 abs | forward share | draft share |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pol, runs in v.cost.items():
        for k, c in enumerate(runs):
            if c:
                out.append(f"| {pol} | {k} | {c['iterations']} | {c['measured_s']:.2f} | "
                           f"{c['predicted_s']:.2f} | {c['total_error']:+.1%} | "
                           f"{_pct(c['decode_only_error'], sign=True)} | {_pct(c['with_prefill_error'], sign=True)} | "
                           f"{c['median_error']:+.1%} | "
                           f"{c['median_abs_error']:.1%} | {c['p90_abs_error']:.1%} | "
                           f"{c['forward_share']:.0%} | {c['draft_share']:.0%} |")
    if meta.get("speed_check"):
        out += ["", "## Speed check of each run's server", "",
                "Just before its trace each run's server timed a few of the profile's points; the "
                "run was simulated on the profile with decode times x the decode factor and prefill "
                "chunks x the prefill factor (measured / the profile's price, medians).", "",
                "| policy | run | decode factor | prefill factor |", "|---|---|---|---|"]
        for pol, runs in meta["speed_check"].items():
            out += [f"| {pol} | {k} | x{f['decode']:.3f} | x{f['prefill']:.3f} |" for k, f in enumerate(runs)]
    a = v.agreement
    out += ["", f"Outputs: {a['requests_differing']} of {a['requests']} requests differ between "
            f"the {a['runs']} engine runs (all policies; greedy decoding must give the same tokens).", ""]
    return "\n".join(out)


def write_validation(v: Validation, out_dir, meta: dict[str, Any], ids, engine_written: bool = False) -> list:
    """engine/<policy>/run-<k>/ (unless the engine wrote them itself), sim/<policy>/seed-<k>/,
    validation.json, validation.md, overlay.png."""
    from pathlib import Path

    from ..fileio import write_json_atomic, write_text_atomic
    from ..sim.replay import write_results
    from .engine import write_serve_results
    from .validate_plot import plot_overlays

    out_dir = Path(out_dir)
    for pol, runs in v.engine.items():
        for k, run in enumerate(runs):
            if not engine_written:
                write_serve_results([run], ids, out_dir / "engine" / pol / f"run-{k}")
        for k, res in enumerate(v.sim[pol]):
            write_results([res], out_dir / "sim" / pol / f"seed-{k}")
    doc = {**meta, "table": v.table.to_dict(orient="records"), "iteration_cost": v.cost,
           "outputs": v.agreement,
           "pass": {pol: bool(v.table[(v.table.policy == pol) & v.table.metric.isin(HEADLINE)]["pass"].all())
                    for pol in v.engine}}
    write_json_atomic(out_dir / "validation.json", doc)
    write_text_atomic(out_dir / "validation.md", report_markdown(v, meta))
    plot = plot_overlays(v, out_dir / "overlay.png", title=str(meta.get("trace", "")))
    return [out_dir / "validation.json", out_dir / "validation.md", plot]
