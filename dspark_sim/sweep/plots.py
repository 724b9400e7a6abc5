"""Sweep figures: the throughput / tok/s/user frontier with SLA anchors (the shape of the DSpark
paper's Fig. 7) and throughput and verification budget against concurrency (its Fig. 8).
Seed spread (min to max) is drawn as error bars / bands."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..plots import new_figure, save_figure
from .frontier import THROUGHPUT, aggregate, format_gain, pareto, stat_label, tps_column
from .overload import usable_loads


def _colors(policies: list[str]) -> dict[str, tuple]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {p: cmap(i % 10) for i, p in enumerate(policies)}


def legend_labels(results: pd.DataFrame) -> dict[str, str]:
    """'static-2 · eagle3-llama31-8b-g7', 'ar · no speculation': the policy and its drafter."""
    if "drafter" not in results:
        return {p: p for p in results["policy"].unique()}
    first = results.drop_duplicates("policy").set_index("policy")["drafter"]
    return {p: f"{p} · {'no speculation' if d == 'none' else d}" for p, d in first.items()}


def frontier_plot(results: pd.DataFrame, sla: pd.DataFrame, percentile: int | str, path: str | Path,
                  title: str = "") -> Path:
    """Throughput per GPU vs tok/s/user (percentile P), one curve per policy (labelled with its
    drafter) through its points below the first overloaded load; overloaded points drawn apart
    (grey crosses); SLA anchors marked with each policy's gain over the baseline."""
    x = tps_column(percentile)
    agg = aggregate(results, x)
    policies = list(dict.fromkeys(results["policy"]))   # in the order swept
    colors, labels = _colors(policies), legend_labels(results)
    fig, ax = new_figure(size=(7.4, 5.0))
    marked = False
    for policy in policies:
        g = agg[agg["policy"] == policy].sort_values("load")
        ok = usable_loads(g)
        bad, g = g[~ok], g[ok].sort_values(x)
        c = colors[policy]
        xerr = np.vstack([g[x] - g[f"{x}_min"], g[f"{x}_max"] - g[x]])
        yerr = np.vstack([g[THROUGHPUT] - g[f"{THROUGHPUT}_min"], g[f"{THROUGHPUT}_max"] - g[THROUGHPUT]])
        ax.errorbar(g[x], g[THROUGHPUT], xerr=xerr, yerr=yerr, fmt="o", ms=3, color=c, alpha=0.45,
                    elinewidth=0.8, capsize=2)
        front = pareto(g[x].to_numpy(), g[THROUGHPUT].to_numpy())
        ax.plot(g[x].to_numpy()[front], g[THROUGHPUT].to_numpy()[front], "-", color=c, lw=1.8,
                label=labels.get(policy, policy))
        if len(bad):
            ax.plot(bad[x], bad[THROUGHPUT], "x", ms=6, mew=1.5, color=c, alpha=0.6,
                    label=None if marked else "overloaded (left out)")
            marked = True
    for value in dict.fromkeys(sla["sla_tps_user"]):
        ax.axvline(value, color="0.5", ls=":", lw=1)
        ax.text(value, 0.98, f"SLA {value:g} ", transform=ax.get_xaxis_transform(), rotation=90,
                va="top", ha="right", fontsize=8, color="0.35")
    order = {p: i for i, p in enumerate(policies)}
    for _, row in sla.iterrows():
        v = row["throughput_tok_s_per_gpu"]
        if not np.isfinite(v):
            continue
        c = colors.get(row["policy"], "k")
        ax.plot([row["sla_tps_user"]], [v], marker="D", ms=7, mfc="white", mec=c, mew=2, zorder=5)
        gain = row["gain_vs_baseline"]
        if row["policy"] != row["baseline"] and isinstance(gain, float) and not np.isnan(gain):
            ax.annotate(format_gain(gain), (row["sla_tps_user"], v), textcoords="offset points",
                        xytext=(7, 10 - 11 * order.get(row["policy"], 0)), fontsize=8, color=c,
                        fontweight="bold")
    ax.set_xlabel(f"tokens/s/user ({stat_label(percentile)} of requests)")
    ax.set_ylabel("throughput (output tok/s per GPU)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Throughput per GPU vs per-user speed", fontsize=9)
    return save_figure(fig, path)


def concurrency_plot(results: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Throughput per GPU and verification budget (tokens verified per request per iteration)
    against concurrent requests per replica; bands = min..max over seeds."""
    agg = aggregate(results, THROUGHPUT)
    spread = results.groupby(["policy", "load"], sort=False)["verify_tokens"].agg(["min", "max"])
    policies = list(dict.fromkeys(results["policy"]))   # in the order swept
    colors, labels = _colors(policies), legend_labels(results)
    fig, (left, right) = new_figure(1, 2, size=(11.0, 4.4))
    for policy in policies:
        g = agg[agg["policy"] == policy].sort_values("concurrency")
        c = colors[policy]
        conc = g["concurrency"].to_numpy()
        left.plot(conc, g[THROUGHPUT], "o-", ms=3, color=c, label=labels.get(policy, policy))
        left.fill_between(conc, g[f"{THROUGHPUT}_min"], g[f"{THROUGHPUT}_max"], color=c, alpha=0.15)
        band = spread.loc[policy].reindex(g["load"])
        right.plot(conc, g["verify_tokens"], "o-", ms=3, color=c, label=labels.get(policy, policy))
        right.fill_between(conc, band["min"], band["max"], color=c, alpha=0.15)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("concurrent requests per replica")
        ax.grid(alpha=0.3)
    left.set_ylabel("throughput (output tok/s per GPU)")
    left.set_ylim(bottom=0)
    right.set_ylabel("verification budget (tokens / request / iteration)")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    fig.suptitle(title or "Throughput and verification budget vs concurrency", fontsize=9)
    return save_figure(fig, path)
