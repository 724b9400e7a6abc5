"""Reliability diagrams of survival probabilities, per draft position, before/after STS."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .metrics import reliability
from .sts import RolloutSteps, survival


def reliability_diagram(steps: RolloutSteps, temps: np.ndarray, path: str | Path,
                        title: str = "", n_bins: int = 20, copy_cal: np.ndarray | None = None) -> Path:
    """One panel per position k: observed P(drafts 1..k accepted) vs predicted a_k."""
    from ..plots import new_figure, save_figure

    g = steps.gamma
    cols = min(4, g)
    rows = (g + cols - 1) // cols
    fig, axes = new_figure(rows, cols, size=(3.0 * cols, 3.0 * rows))
    axes = np.atleast_1d(axes).ravel()
    y = steps.prefix_accepted()
    for label, a, style in (("raw", survival(steps.z), "o--"), ("STS", survival(steps.z, temps, copy_cal, steps.copied), "s-")):
        for k in range(g):
            conf, freq, count = reliability(a[:, k], y[:, k], n_bins)
            ok = count > 0
            axes[k].plot(conf[ok], freq[ok], style, ms=3, label=label)
    for k, ax in enumerate(axes):
        if k >= g:
            ax.axis("off")
            continue
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(f"position {k + 1}", fontsize=9)
        ax.set_xlabel("predicted survival a_k", fontsize=8)
        ax.set_ylabel("observed prefix acceptance", fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)
