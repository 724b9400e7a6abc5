"""The SLA table as Markdown (sla-P.md, printed by `sweep` and `recommend`): per SLA a row per
policy with its drafter, throughput per GPU, the gain over the named baseline and the latencies
at the operating point; unmet SLAs with the best speed reached; the overloaded points."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .frontier import THROUGHPUT, format_gain, stat_label

_MARKS = {"lower-bound": " (>=, highest load)", "peak": " (peak)",
          "before-overload": " (max before overload)"}


def baseline_label(policy: str | None) -> str:
    """'ar (no speculation)', 'mtp1', ..."""
    return "ar (no speculation)" if policy == "ar" else str(policy)


def _load_text(load: float, mode: str | None) -> str:
    if not np.isfinite(load):
        return ""
    return f"x{load:.3g} rate" if mode == "rate" else f"{load:g} users"


def _throughput_cell(r: pd.Series) -> str:
    v = r["throughput_tok_s_per_gpu"]
    if not np.isfinite(v):
        best = r.get("best_tps_user", np.nan)
        return f"unmet (best {best:,.1f} tok/s/user)" if np.isfinite(best) else "unmet (every load overloaded)"
    spread = f" ({r['seed_min']:,.0f}-{r['seed_max']:,.0f})" if r["seeds"] > 1 else ""
    return f"{v:,.0f}{spread}{_MARKS.get(r['status'], '')}{interval_cell(r, THROUGHPUT)}"


def interval_cell(r: pd.Series, column: str) -> str:
    """' [low-high]' over the fit's draws (intervals.py), '' without them; gains as percents."""
    low, high = r.get(f"{column}_low", np.nan), r.get(f"{column}_high", np.nan)
    if low is None or high is None or not (np.isfinite(low) or np.isfinite(high)):
        return ""
    if column.startswith("gain") or column.startswith("gpus_saved"):
        lo, hi = format_gain(low), format_gain(high)
        return f" [{lo}]" if lo == hi else f" [{lo}..{hi}]"
    return f" [{low:,.0f}-{high:,.0f}]"


def seconds_text(value: float) -> str:
    """'12 ms', '1.25 s', '' for NaN."""
    if not np.isfinite(value):
        return ""
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:,.2f} s"


def _latency_cells(r: pd.Series) -> list[str]:
    tpot = r.get("tpot_p99_ms", np.nan)
    return [seconds_text(r.get("ttft_p50_s", np.nan)), seconds_text(r.get("ttft_p99_s", np.nan)),
            f"{tpot:,.1f} ms" if np.isfinite(tpot) else ""]


def fastest_reached(table: pd.DataFrame, sla: float) -> tuple[str, float] | None:
    """(policy, tok/s/user) of the fastest speed any policy reached below overload at this SLA's
    statistic; None when every load of every policy was overloaded."""
    sub = table[table["sla_tps_user"] == sla]
    best = sub["best_tps_user"].to_numpy(dtype=float) if "best_tps_user" in sub else np.array([np.nan])
    if not np.isfinite(best).any():
        return None
    i = int(np.nanargmax(best))
    return str(sub["policy"].iloc[i]), float(best[i])


def unmet_text(table: pd.DataFrame, sla: float) -> str:
    """'SLA 120 tok/s/user: unmet by every policy; the fastest reached is 96.3 tok/s/user (dspark).'"""
    top = fastest_reached(table, sla)
    if top is None:
        return f"SLA {sla:g} tok/s/user: unmet; every load of every policy was overloaded."
    return (f"SLA {sla:g} tok/s/user: unmet by every policy; the fastest reached is "
            f"{top[1]:,.1f} tok/s/user ({top[0]}).")


def unreachable_lines(table: pd.DataFrame) -> list[str]:
    """One line per SLA that no policy meets: the best tok/s/user reached and by which policy."""
    return [unmet_text(table, sla) for sla in dict.fromkeys(table["sla_tps_user"])
            if not np.isfinite(table.loc[table["sla_tps_user"] == sla,
                                         "throughput_tok_s_per_gpu"].to_numpy(dtype=float)).any()]


def sla_markdown(table: pd.DataFrame, results: pd.DataFrame | None = None,
                 load_mode: str | None = None) -> str:
    """Per SLA a Markdown table (policy, drafter, tok/s/GPU, gain vs baseline, load and
    latencies at the operating point), then the unreachable SLAs and the overloaded points."""
    p = stat_label(table["percentile"].iloc[0])
    base = table["baseline"].iloc[0]
    out = []
    for sla in dict.fromkeys(table["sla_tps_user"]):
        ranged = "_low" if f"{THROUGHPUT}_low" in table else ""
        head = ["policy", "drafter", "tok/s/GPU (seed range)" + (" [fit interval]" if ranged else "")]
        head += [f"gain vs {baseline_label(base)}"] if base else []
        head += ["load at the point", "TTFT p50", "TTFT p99", "TPOT p99"]
        out += [f"**At {sla:g} tok/s/user ({p} of requests)**", "",
                "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for _, r in table[table["sla_tps_user"] == sla].iterrows():
            cells = [r["policy"], str(r.get("drafter") or "-"), _throughput_cell(r)]
            if base:
                cells.append("-" if r["policy"] == base else
                             format_gain(r["gain_vs_baseline"]) + interval_cell(r, "gain_vs_baseline"))
            met = np.isfinite(r["throughput_tok_s_per_gpu"])
            cells.append(_load_text(r.get("load_at_sla", np.nan), load_mode) if met else "")
            cells += _latency_cells(r) if met else ["", "", ""]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out += unreachable_lines(table)
    if "outside_observed" in table:
        flagged = [f"{r.policy} at {r.sla_tps_user:g} tok/s/user ({r.outside_observed})"
                   for r in table.itertuples() if r.outside_observed]
        out += [f"Outside the loads the profile was fitted on ({len(flagged)}): " + "; ".join(flagged)
                + "."] if flagged else []
    if results is not None and "overloaded" in results and results["overloaded"].any():
        bad = results[results["overloaded"].astype(bool)]
        items = [f"{r.policy} at {_load_text(r.load, load_mode)} seed {r.seed} ({r.overload_reason})"
                 for r in bad.itertuples()]
        out += ["", f"Overloaded, left out of every frontier ({len(items)}): " + "; ".join(items) + "."]
    out += ["", "The operating point is the measured load nearest the SLA that meets it; TPOT p99 is "
            "the 99th percentile over requests of the time per output token (1 / tok/s/user)."]
    return "\n".join(out).rstrip() + "\n"
