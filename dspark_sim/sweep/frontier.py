"""Pareto frontiers (throughput per GPU vs tok/s/user) and the SLA table.

Definitions (docs/sweeps.md):
- a point *meets* an SLA of X tok/s/user when its tps_user at the chosen percentile P (or the
  mean over its requests) is >= X;
- a policy's frontier is its non-dominated points (seed means per load): sorted by tps_user
  ascending, throughput strictly descending;
- throughput at SLA X is read off the frontier taken as piecewise linear in (tps_user,
  throughput): between the two frontier points that bracket X, linear interpolation; if even
  the frontier's highest-throughput point meets X, that point's throughput: the policy's
  `peak` when more load was measured and gave less, `before-overload` when the loads above it
  were overloaded, `lower-bound` when that point is the sweep's highest load (more load might
  give more); if no point meets X, unmet (NaN);
- overloaded points (overload.py) never enter a frontier: only the loads below a policy's
  lowest overloaded load do.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError
from .overload import usable_loads

THROUGHPUT = "throughput_tok_s_per_gpu"
POINT_LATENCIES = ["ttft_p50_s", "ttft_p99_s", "tpot_p99_ms"]      # reported at the operating point
MEAN_COLUMNS = [THROUGHPUT, "verify_tokens", "concurrency", "decoding", "mean_tau", *POINT_LATENCIES]


def parse_statistic(value: int | str) -> int | str:
    """An SLA statistic of the requests' tok/s/user: a percentile 0..100 or 'mean'."""
    text = str(value).strip().lower().lstrip("p")
    if text == "mean":
        return "mean"
    if text.isdigit() and 0 <= int(text) <= 100:
        return int(text)
    raise InputError(f"expected a percentile 0..100 or 'mean', got {value!r}", field="sla-percentile")


def stat_label(stat: int | str) -> str:
    """'p50', 'mean'."""
    return "mean" if stat == "mean" else f"p{stat}"


def tps_column(stat: int | str) -> str:
    """Column of tps_user at a percentile of the requests (p50 = median), or their mean."""
    return f"tps_user_{stat_label(stat)}"


def tps_of(metrics: dict, stat: int | str) -> float | None:
    """A point's tok/s/user statistic from its cached metrics."""
    if stat == "mean":
        return metrics.get("tps_user_mean")
    return (metrics.get("tps_user_percentiles") or [None] * 101)[stat]


def aggregate(results: pd.DataFrame, x: str) -> pd.DataFrame:
    """Seed means per (policy, load), with the min and max over seeds of x and throughput."""
    cols = [c for c in dict.fromkeys([x] + MEAN_COLUMNS) if c in results]
    grouped = results.groupby(["policy", "load"], sort=False)
    out = grouped[cols].mean()
    for c in (x, THROUGHPUT):
        out[f"{c}_min"] = grouped[c].min()
        out[f"{c}_max"] = grouped[c].max()
    out["seeds"] = grouped["seed"].nunique()
    if "overloaded" in results:                     # a load is overloaded if any seed was
        out["overloaded"] = grouped["overloaded"].any()
    return out.reset_index().sort_values(["policy", "load"], kind="stable").reset_index(drop=True)


def pareto(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the non-dominated points (larger x and larger y are better), by x ascending."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.flatnonzero(np.isfinite(x) & np.isfinite(y))
    order = ok[np.lexsort((-y[ok], -x[ok]))]          # x descending, ties: y descending
    keep, best = [], -np.inf
    for i in order:
        if y[i] > best:
            keep.append(i)
            best = y[i]
    return np.array(keep[::-1], dtype=int)


def operating_point(x: np.ndarray, y: np.ndarray, sla: float, load: np.ndarray | None = None,
                    overloaded_above: bool = False) -> tuple[float, str, int | None]:
    """Throughput at an SLA on the frontier of (x = tps_user, y = throughput): (value, status,
    index of the measured point that meets the SLA nearest to it: the operating point whose
    latencies the table reports). Status 'interpolated', 'measured', 'peak', 'lower-bound',
    'before-overload' (the frontier's top is the last load before the overloaded ones) or
    'unmet' (`load`: the points' loads, to tell a peak from a sweep that stopped short)."""
    idx = pareto(x, y)
    if len(idx) == 0:
        return float("nan"), "unmet", None
    fx, fy = np.asarray(x, dtype=float)[idx], np.asarray(y, dtype=float)[idx]
    if sla > fx[-1]:
        return float("nan"), "unmet", None
    if sla <= fx[0]:
        loads = None if load is None else np.asarray(load, dtype=float)
        peak = loads is not None and loads[idx[0]] < loads.max()
        status = "peak" if peak else "before-overload" if overloaded_above else "lower-bound"
        return float(fy[0]), status, int(idx[0])
    i = int(np.searchsorted(fx, sla, side="left"))      # fx[i-1] < sla <= fx[i]
    if fx[i] == sla:
        return float(fy[i]), "measured", int(idx[i])
    w = (sla - fx[i - 1]) / (fx[i] - fx[i - 1])
    return float(fy[i - 1] + w * (fy[i] - fy[i - 1])), "interpolated", int(idx[i])


def throughput_at(x: np.ndarray, y: np.ndarray, sla: float,
                  load: np.ndarray | None = None) -> tuple[float, str]:
    """(value, status) of `operating_point`."""
    value, status, _ = operating_point(x, y, sla, load)
    return value, status


def sla_table(results: pd.DataFrame, slas: list[float], percentile: int | str,
              baseline: str | None = "ar") -> pd.DataFrame:
    """Max throughput per GPU meeting each SLA, per policy (seed means; min/max over seeds),
    read off the loads below the policy's first overloaded one (overload.py); the latencies at
    the operating point; the best speed reached; the gain over the baseline policy."""
    x = tps_column(percentile)
    agg = aggregate(results, x)
    rows = []
    for policy in results["policy"].unique():         # in the order the policies were swept
        mean = agg[agg["policy"] == policy]
        ok = usable_loads(mean)
        use = mean[ok]
        per_seed = results[results["policy"] == policy]
        drafter = per_seed["drafter"].iloc[0] if "drafter" in per_seed else None
        for sla in slas:
            value, status, i = operating_point(use[x].to_numpy(), use[THROUGHPUT].to_numpy(), sla,
                                               use["load"].to_numpy(), bool((~ok).any()))
            # per seed, an unmet SLA counts as 0 tok/s/GPU (nothing can be served at it)
            seeds = []
            for _, g in per_seed.groupby("seed"):
                g = g.sort_values("load")[usable_loads(g.sort_values("load"))]
                seeds.append(np.nan_to_num(throughput_at(g[x].to_numpy(), g[THROUGHPUT].to_numpy(), sla)[0]))
            point = use.iloc[i] if i is not None else None
            rows.append({"policy": policy, "drafter": drafter, "sla_tps_user": sla,
                         "percentile": percentile, "throughput_tok_s_per_gpu": value, "status": status,
                         "seed_min": float(np.min(seeds)), "seed_max": float(np.max(seeds)),
                         "seeds": len(seeds),
                         "load_at_sla": float(point["load"]) if point is not None else np.nan,
                         **{c: float(point[c]) if point is not None and c in point else np.nan
                            for c in POINT_LATENCIES},
                         "best_tps_user": float(use[x].max()) if len(use) else np.nan,
                         "overloaded_loads": int((~ok).sum())})
    table = pd.DataFrame(rows)
    table["gain_vs_baseline"] = np.nan
    if baseline is not None and baseline in set(table["policy"]):
        base = table[table["policy"] == baseline].set_index("sla_tps_user")["throughput_tok_s_per_gpu"]
        # an unmet SLA is 0 tok/s/GPU: a policy that cannot meet it gains -100%, and one that
        # meets it where the baseline cannot gains +inf
        b = np.nan_to_num(table["sla_tps_user"].map(base).to_numpy(dtype=float))
        v = np.nan_to_num(table["throughput_tok_s_per_gpu"].to_numpy(dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(b > 0, v / b - 1.0, np.where(v > 0, np.inf, np.nan))
        table["gain_vs_baseline"] = gain
    table["baseline"] = baseline if baseline in set(table["policy"]) else None
    return table


def format_gain(gain: float) -> str:
    """+51% / -3% / 'baseline unmet' / '-'."""
    if gain is None or (isinstance(gain, float) and np.isnan(gain)):
        return "-"
    if np.isinf(gain):
        return "baseline unmet"
    return f"{gain * 100:+.0f}%"
