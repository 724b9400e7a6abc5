"""Reliability diagrams of the conditional confidences per draft position, raw and after STS.

Position k's panel holds the steps that reached k (drafts 1..k-1 accepted): per confidence bin,
the observed acceptance of draft k against the mean confidence, with a 95% Wilson interval of
that frequency and the bin's sample count written beside the point; the panel's title gives n and,
when the report's figures are passed, the position's ECE raw and after STS with its bootstrap
interval. Bins without samples draw nothing; a position no step reached says so instead of drawing
a point at 0.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .metrics import reliability
from .sts import RolloutSteps, calibrated_logits


def wilson_interval(successes: np.ndarray, n: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """95% Wilson score interval of a binomial proportion (n > 0)."""
    n = np.asarray(n, dtype=float)
    p = np.asarray(successes, dtype=float) / n
    den = 1 + z ** 2 / n
    mid = (p + z ** 2 / (2 * n)) / den
    half = z * np.sqrt(p * (1 - p) / n + z ** 2 / (4 * n ** 2)) / den
    return mid - half, mid + half


def _ece_line(figures: dict[str, list[dict]] | None, k: int) -> str:
    """'\nECE raw 8.5% [2.1, 10.5], STS 8.6% [3.7, 9.5]' for position k+1 (empty without figures)."""
    if not figures:
        return ""
    parts = []
    for label, key in (("raw", "raw"), ("STS", "sts")):
        row = next((r for r in figures.get(key, []) if r["position"] == k + 1), None)
        if row is None or row.get("ece") is None:
            continue
        ci = row.get("ece_ci95")
        band = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else ""
        parts.append(f"{label} {100 * row['ece']:.1f}%{band}")
    return ("\nECE " + ", ".join(parts)) if parts else ""


def reliability_diagram(steps: RolloutSteps, temps: np.ndarray, path: str | Path,
                        title: str = "", n_bins: int = 20, copy_cal: np.ndarray | None = None,
                        figures: dict[str, list[dict]] | None = None) -> Path:
    """One panel per position k: observed P(draft k accepted | 1..k-1 accepted) vs the
    confidence c_k, raw and after STS, with counts and intervals. `figures`: the report's
    per-position rows ({"raw": [...], "sts": [...]}, positions.position_calibration) whose ECE and
    interval go into each panel's title."""
    from ..plots import save_figure

    return save_figure(reliability_figure(steps, temps, title, n_bins, copy_cal, figures), path)


def reliability_figure(steps: RolloutSteps, temps: np.ndarray, title: str = "", n_bins: int = 20,
                       copy_cal: np.ndarray | None = None,
                       figures: dict[str, list[dict]] | None = None):
    """The reliability diagram's matplotlib figure (reliability_diagram saves it)."""
    from ..plots import new_figure

    g = steps.gamma
    cols = min(4, g)
    rows = (g + cols - 1) // cols
    fig, axes = new_figure(rows, cols, size=(3.4 * cols, 3.2 * rows))
    axes = np.atleast_1d(axes).ravel()
    variants = (("raw", None, None, "o", "tab:orange"), ("STS", temps, copy_cal, "s", "tab:blue"))
    for k in range(g):
        ax = axes[k]
        reached = steps.accepted >= k
        y = (steps.accepted[reached] > k).astype(float)
        n = int(reached.sum())
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set(xlim=(0, 1), ylim=(0, 1))
        ax.set_xlabel(f"confidence c_{k + 1}", fontsize=8)
        ax.set_ylabel(f"observed P(draft {k + 1} accepted)", fontsize=8)
        if n == 0:
            ax.set_title(f"position {k + 1}: n = 0", fontsize=9)
            ax.text(0.5, 0.5, "no step reached\nthis position", ha="center", va="center",
                    fontsize=8, color="grey")
            continue
        for label, t, cc, marker, color in variants:
            c = 1.0 / (1.0 + np.exp(-calibrated_logits(steps.z, t, cc, steps.copied)[reached, k]))
            conf, freq, count = reliability(c, y, n_bins)
            ok = count > 0
            lo, hi = wilson_interval(freq[ok] * count[ok], count[ok])
            err = np.clip([freq[ok] - lo, hi - freq[ok]], 0.0, None)     # rounding at 0 and 1
            ax.errorbar(conf[ok], freq[ok], yerr=err, fmt=marker,
                        ms=3, lw=0.8, capsize=1.5, color=color, label=label)
            if label == "STS":
                for x, f, m in zip(conf[ok], freq[ok], count[ok]):
                    ax.annotate(f"{int(m)}", (x, f), textcoords="offset points", xytext=(3, -8),
                                fontsize=5.5, color="dimgrey")
        ax.set_title(f"position {k + 1}: n = {n} steps" + _ece_line(figures, k), fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[g:]:
        ax.axis("off")
    fig.suptitle((title + "\n" if title else "") + "bars: 95% Wilson interval of the bin's "
                 "observed frequency; numbers: steps in the bin (STS)", fontsize=9)
    return fig
