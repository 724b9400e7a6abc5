"""Descriptive statistics of a trace: volume, rate, burstiness, lengths, task mix."""
from __future__ import annotations

from typing import Any

import numpy as np

from .schema import Trace


def _dist(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Count, span, rate, CV of inter-arrival gaps, prompt/output distributions, per-task counts."""
    n = len(trace)
    span = float(trace.arrival_s[-1] - trace.arrival_s[0])
    gaps = np.diff(trace.arrival_s)
    cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else float("nan")
    names, counts = np.unique(trace.task.astype(str), return_counts=True)
    return {"name": trace.name, "requests": n, "span_s": span,
            "rate_per_s": n / span if span > 0 else float("nan"), "cv_gaps": cv,
            "prompt_tokens": _dist(trace.prompt_tokens), "output_tokens": _dist(trace.output_tokens),
            "tasks": {str(k): int(c) for k, c in zip(names, counts)}}


STAT_ROWS = [("requests", "requests", "{:,.0f}"), ("span (min)", "span_min", "{:.1f}"),
             ("rate (req/s)", "rate_per_s", "{:.2f}"), ("CV of gaps", "cv_gaps", "{:.2f}")] + [
    (f"{label} {k}", f"{key}.{k}", "{:,.0f}")
    for key, label in (("prompt_tokens", "prompt"), ("output_tokens", "output"))
    for k in ("mean", "p50", "p90", "p99")]


def stat_value(stats: dict[str, Any], key: str) -> float:
    """Look up a flattened key of trace_stats() ('prompt_tokens.p90', 'span_min')."""
    if key == "span_min":
        return stats["span_s"] / 60.0
    value: Any = stats
    for part in key.split("."):
        value = value[part]
    return value
