"""Overloaded load points: where the queue grows without bound (docs/sweeps.md, "Overload").

A point is *overloaded* when either
- its waiting time grows through the run (rate load only): the median TTFT of the last quarter
  of the requests (by arrival) exceeds that of the first quarter by more than
  `QUEUE_GROWTH_LIMIT` seconds per second of trace between the two quarters (a stable queue
  keeps its median TTFT level; one that cannot keep up adds waiting time at the rate arrivals
  outpace service, 0.05 = arrivals 5% faster than the replicas drain them), or
- its TTFT p99 exceeds the stated bound (`--overload-ttft-p99`, default 30 s; any load mode).

An overloaded point is drawn apart and never enters a frontier: a policy's frontier and SLA
values use only the loads below its lowest overloaded load (per seed for the seed spread), so
no SLA is interpolated across the saturation knee.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

QUEUE_GROWTH_LIMIT = 0.05          # s of median TTFT added per s of trace
DEFAULT_TTFT_P99_BOUND_S = 30.0
_MIN_REQUESTS = 8                  # fewer requests: no trend is read


def queue_growth(arrival_s: np.ndarray, ttft_s: np.ndarray) -> float | None:
    """(median TTFT of the last quarter - of the first quarter) / (seconds between the two
    quarters' median arrivals), requests ordered by arrival; None for fewer than 8 requests or
    arrivals all at one instant."""
    n = len(arrival_s)
    if n < _MIN_REQUESTS:
        return None
    order = np.argsort(arrival_s, kind="stable")
    q = n // 4
    first, last = order[:q], order[-q:]
    span = float(np.median(arrival_s[last]) - np.median(arrival_s[first]))
    if span <= 0:
        return None
    return float(np.median(ttft_s[last]) - np.median(ttft_s[first])) / span


def overload_reason(metrics: dict[str, Any], ttft_p99_bound_s: float | None) -> str:
    """Why a point is overloaded ('' when it is not)."""
    growth = metrics.get("queue_growth")
    if growth is not None and np.isfinite(growth) and growth > QUEUE_GROWTH_LIMIT:
        return f"queue grows: median TTFT +{growth:.2f} s per s of trace"
    p99 = metrics.get("ttft_p99_s")
    if ttft_p99_bound_s is not None and p99 is not None and p99 > ttft_p99_bound_s:
        return f"TTFT p99 {p99:.1f} s > {ttft_p99_bound_s:g} s"
    return ""


def usable_loads(frame: pd.DataFrame) -> np.ndarray:
    """Mask of the rows (one policy, one seed or seed means) below the lowest overloaded load."""
    if "overloaded" not in frame or not frame["overloaded"].any():
        return np.ones(len(frame), dtype=bool)
    knee = float(frame.loc[frame["overloaded"].astype(bool), "load"].min())
    return (frame["load"] < knee).to_numpy()
