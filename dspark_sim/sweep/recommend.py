"""`recommend`: the vLLM `--speculative-config` the simulator finds best for a hardware profile,
an acceptance profile, a trace and an SLA.

The candidates are what vLLM 0.32 can be told to run with the profile's drafter: a fixed
`num_speculative_tokens = K` for K = 1..gamma (`static-K`), a batch-size schedule
(`num_speculative_tokens_per_batch_size`, `vllm-schedule`) and, for a DSpark drafter, adaptive
verification (`vllm-adaptive`); MTP-1 with its own acceptance profile is the baseline. Each is
swept over a closed-loop load (sweep/run.py, cached points). The schedule is derived from the
fixed-K sweep: at each load (users ~ the batch size vLLM looks up) the K with the highest
throughput, between loads the boundary at their geometric mean, equal neighbours merged; it is
then swept like the others. Per SLA the fixed K with the highest throughput per GPU at the SLA
wins unless the schedule or adaptive verification beats it by more than `min_gain` (1%: a more
complex setting must pay for itself); the gains over MTP-1 and over the best fixed K are the
justification printed with it.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fileio import write_json_atomic, write_text_atomic
from ..profiles.registry import acceptance_profile_path, load_acceptance_profile
from ..sim.defaults import DEFAULT_ACCEPTANCE, DEFAULT_HW, DEFAULT_MTP1_ACCEPTANCE
from ..sim.speculation.spec_config import BatchSchedule, parse_schedule, speculative_config, vllm_method
from .frontier import THROUGHPUT, aggregate, sla_markdown, sla_table, tps_column
from .run import SweepConfig, run_sweep, write_table

BASELINE = "mtp1"


@dataclass
class RecommendConfig:
    """What to recommend for (see `dspark-sim recommend --help`)."""

    trace: str
    slas: list[float]
    hw: str = DEFAULT_HW
    acceptance: str = DEFAULT_ACCEPTANCE
    mtp1_acceptance: str | None = DEFAULT_MTP1_ACCEPTANCE
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


@dataclass
class Recommendation:
    """Per SLA the winning candidate and its vLLM config; the SLA table of every candidate."""

    config: RecommendConfig
    sla: pd.DataFrame
    results: pd.DataFrame
    schedule: BatchSchedule
    choices: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


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


def _config_of(policy: str, method: str, gamma: int, schedule: BatchSchedule) -> dict[str, Any]:
    if policy == BASELINE:
        return speculative_config("mtp", 1)
    if policy == "vllm-adaptive":
        return speculative_config(method, gamma, adaptive=True)
    if policy == "vllm-schedule":
        top = max(k for _, _, k in schedule.ranges)
        return speculative_config(method, max(top, 1), schedule=schedule)
    return speculative_config(method, int(policy.split("-")[1]))


def _value(sla: pd.DataFrame, policy: str, target: float) -> float:
    row = sla[(sla["policy"] == policy) & (sla["sla_tps_user"] == target)]
    return float(np.nan_to_num(row[THROUGHPUT].iloc[0])) if len(row) else 0.0


def _gain(value: float, base: float) -> float | None:
    """value / base - 1; None when the base is unmet (0 tok/s/GPU at the SLA)."""
    return value / base - 1.0 if base > 0 else None


def recommend(cfg: RecommendConfig, *, cache_dir=None, workers: int = 1, executor: str = "local",
              show_progress: bool = False) -> Recommendation:
    """Sweep every candidate, derive and sweep the batch-size schedule, choose per SLA."""
    if not cfg.slas:
        raise InputError("no SLA given", field="sla")
    if not 0 <= cfg.min_gain < 10:
        raise InputError(f"must be in [0, 10), got {cfg.min_gain}", field="min-gain")
    acc = load_acceptance_profile(acceptance_profile_path(cfg.acceptance))
    gamma, method = acc.gamma, vllm_method(acc.drafter_kind)
    statics = [f"static-{k}" for k in range(1, gamma + 1)]
    policies = ([BASELINE] if cfg.mtp1_acceptance else []) + statics
    if cfg.adaptive and method == "dspark":         # vLLM supports it for method="dspark" only
        policies.append("vllm-adaptive")
    accs = {p: cfg.acceptance for p in policies + ["vllm-schedule"]}
    if cfg.mtp1_acceptance:
        accs[BASELINE] = cfg.mtp1_acceptance
    sweep = SweepConfig(trace=cfg.trace, policies=policies, hw=cfg.hw, acceptance=accs,
                        points=cfg.points, load_range=cfg.load_range, seeds=cfg.seeds,
                        requests_per_user=cfg.requests_per_user, warmup=cfg.warmup,
                        max_requests=cfg.max_requests, slas=cfg.slas, percentile=cfg.percentile,
                        baseline=BASELINE, kv_semantics=cfg.kv_semantics)
    first = run_sweep(sweep, cache_dir=cache_dir, workers=workers, executor=executor,
                      show_progress=show_progress)
    schedule = derive_schedule(first.results, statics, gamma)
    sweep.policies, sweep.schedule = ["vllm-schedule"], json.dumps(schedule.to_json())
    second = run_sweep(sweep, cache_dir=cache_dir, workers=workers, executor=executor,
                       show_progress=show_progress)
    results = pd.concat([first.results, second.results], ignore_index=True)
    table = sla_table(results, cfg.slas, first.config.percentile,
                      BASELINE if cfg.mtp1_acceptance else None)
    candidates = [p for p in policies if p != BASELINE] + ["vllm-schedule"]
    out = Recommendation(cfg, table, results, schedule, wall_s=first.wall_s + second.wall_s)
    for target in cfg.slas:
        values = {p: _value(table, p, target) for p in candidates}
        best_static = max(statics, key=lambda p: values[p])    # first on ties: the shortest K
        best = best_static          # a more complex setting must pay for itself
        for p in candidates[len(statics):]:
            if values[p] > max(values[best], values[best_static] * (1 + cfg.min_gain)):
                best = p
        base = _value(table, BASELINE, target) if cfg.mtp1_acceptance else 0.0
        out.choices.append({
            "sla_tps_user": target, "policy": best if values[best] > 0 else None,
            "speculative_config": _config_of(best, method, gamma, schedule) if values[best] > 0 else None,
            "throughput_tok_s_per_gpu": values[best], "mtp1_tok_s_per_gpu": base,
            "best_fixed": best_static, "best_fixed_tok_s_per_gpu": values[best_static],
            "gain_vs_mtp1": _gain(values[best], base),
            "gain_vs_best_fixed": _gain(values[best], values[best_static]),
            "adaptive_gain_vs_best_fixed": _gain(values["vllm-adaptive"], values[best_static])
            if "vllm-adaptive" in values else None,
        })
    return out


def write_recommendation(rec: Recommendation, out_dir: str | Path) -> list[Path]:
    """recommend.json (choices, schedule, config), sla.md, results.csv."""
    out = Path(out_dir)
    doc = {"config": asdict(rec.config), "schedule": rec.schedule.to_json(), "choices": rec.choices,
           "wall_s": rec.wall_s}
    write_json_atomic(out / "recommend.json", doc)
    write_text_atomic(out / "sla.md", sla_markdown(rec.sla))
    return [out / "recommend.json", out / "sla.md"] + write_table(rec.results, out / "results.csv")
