"""summary.json from the per-request columns, fed in chunks (formats.md, docs/simulator.md).

Counts, token sums, the first arrival and the last finish are streaming and exact. The latency
distributions (`ttft_s`, `tpot_s`, `tps_user`: mean and percentiles) are
- `exact` (default): the chunks' values are kept (8 bytes per request and metric, far less
  than the simulator's own per-request state) and reduced as one array, so the figures equal
  numpy's on the whole column (linear-interpolated percentiles);
- `sketch`: a relative-error sketch per metric (sketch.py): each percentile is within a
  relative 0.5% of the value of rank floor(q (n-1)); the mean is the exact streaming sum / n
  (up to float rounding of summing chunk by chunk). Memory does not grow with the requests.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .sketch import DEFAULT_ACCURACY, QuantileSketch

QUANTILE_MODES = ("exact", "sketch")
DISTRIBUTIONS = {"ttft_s": False, "tpot_s": False, "tps_user": True}   # name -> has p10
_SUMS = ("output_tokens", "steps", "verified_tokens", "accepted_tokens")


class _Exact:
    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, v: np.ndarray) -> None:
        self.parts.append(v)

    def dist(self, low: bool) -> dict[str, float | None]:
        v = np.concatenate(self.parts) if self.parts else np.zeros(0)
        if len(v) == 0:
            return _empty(low)
        out = {"mean": float(v.mean())}
        if low:
            out["p10"] = float(np.percentile(v, 10))
        for q in (50, 90, 99):
            out[f"p{q}"] = float(np.percentile(v, q))
        return out


class _Sketched:
    def __init__(self, accuracy: float) -> None:
        self.sketch = QuantileSketch(accuracy)
        self.total = 0.0

    def add(self, v: np.ndarray) -> None:
        self.sketch.add(v)
        self.total += float(v.sum())

    def dist(self, low: bool) -> dict[str, float | None]:
        if self.sketch.count == 0:
            return _empty(low)
        out = {"mean": self.total / self.sketch.count}
        for q in ((10,) if low else ()) + (50, 90, 99):
            out[f"p{q}"] = self.sketch.quantile(q / 100)
        return out


def _empty(low: bool) -> dict[str, None]:
    keys = ["mean", "p10", "p50", "p90", "p99"] if low else ["mean", "p50", "p90", "p99"]
    return {k: None for k in keys}


class SummaryAccumulator:
    """Feed `add(columns)` chunk by chunk (a DataFrame or a dict of arrays with the
    requests.csv columns), then `summary(...)`."""

    def __init__(self, quantiles: str = "exact", accuracy: float = DEFAULT_ACCURACY) -> None:
        if quantiles not in QUANTILE_MODES:
            raise ValueError(f"quantiles must be one of {QUANTILE_MODES}, got {quantiles!r}")
        self.quantiles = quantiles
        self.accuracy = accuracy
        self.requests = 0
        self.completed = 0
        self.sums = dict.fromkeys(_SUMS, 0)
        self.start = math.inf
        self.end = -math.inf
        self.dists = {name: _Exact() if quantiles == "exact" else _Sketched(accuracy)
                      for name in DISTRIBUTIONS}

    def add(self, columns: Mapping[str, Any]) -> None:
        arrival = np.asarray(columns["arrival_s"], dtype=float)
        finish = np.asarray(columns["finish_s"], dtype=float)
        if len(arrival) == 0:
            return
        self.requests += len(arrival)
        done = ~np.isnan(finish)
        self.completed += int(done.sum())
        self.start = min(self.start, float(np.nanmin(arrival)))
        if done.any():
            self.end = max(self.end, float(finish[done].max()))
        for name in _SUMS:
            self.sums[name] += int(np.asarray(columns[name], dtype=np.int64).sum())
        for name, acc in self.dists.items():
            v = np.asarray(columns[name], dtype=float)
            acc.add(v[~np.isnan(v)])

    def summary(self, *, policy: str, trace: str, hw: str, acceptance: str | None, seed: int,
                gpus: int, iterations: int, sim_wall_s: float) -> dict[str, Any]:
        """summary.json: throughput (per GPU too), latency distributions, speculation statistics."""
        duration = self.end - self.start
        output, steps = self.sums["output_tokens"], self.sums["steps"]
        throughput = output / duration if duration > 0 else float("nan")
        out = {
            "policy": policy, "trace": trace, "hw": hw, "acceptance": acceptance, "seed": seed,
            "requests": self.requests, "completed": self.completed, "output_tokens": output,
            "duration_s": duration, "throughput_tok_s": throughput,
            "throughput_tok_s_per_gpu": throughput / gpus,
            **{name: acc.dist(DISTRIBUTIONS[name]) for name, acc in self.dists.items()},
            "mean_verify_len": self.sums["verified_tokens"] / steps if steps else 0.0,
            "mean_tau": (self.sums["accepted_tokens"] + steps) / steps if steps else 1.0,
            "iterations": iterations, "sim_wall_s": sim_wall_s,
        }
        if self.quantiles == "sketch":
            out["quantiles"] = {"method": "sketch", "relative_accuracy": self.accuracy}
        return out
