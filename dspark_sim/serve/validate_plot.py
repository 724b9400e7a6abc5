"""Overlay plots of the per-request distributions: the real engine's runs against the simulator."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..plots import new_figure, save_figure

PANELS = [("tps_user", "tok/s/user"), ("ttft_s", "TTFT (s)"), ("latency_s", "request latency (s)")]


def _values(frame, column: str) -> np.ndarray:
    if column == "latency_s":
        v = frame["finish_s"] - frame["arrival_s"]
    else:
        v = frame[column]
    return np.sort(v.dropna().to_numpy(dtype=float))


def _cdf(ax, values: np.ndarray, **style) -> None:
    if len(values):
        x = np.concatenate([[values[0]], values])
        y = np.concatenate([[0.0], np.arange(1, len(values) + 1) / len(values)])
        ax.step(x, y, where="post", **style)


def plot_overlays(validation, path: str | Path, title: str = "") -> Path:
    """One row per policy: CDFs of tok/s/user, TTFT and latency; every engine run (grey) and
    every simulator seed (orange)."""
    policies = list(validation.engine)
    fig, axes = new_figure(len(policies), len(PANELS), size=(4.0 * len(PANELS), 2.8 * len(policies)))
    axes = np.atleast_2d(axes)
    for row, pol in enumerate(policies):
        for col, (column, label) in enumerate(PANELS):
            ax = axes[row, col]
            for k, run in enumerate(validation.engine[pol]):
                _cdf(ax, _values(run.requests, column), color="0.35", lw=1.2,
                     label="real engine" if k == 0 else None)
            for k, run in enumerate(validation.sim[pol]):
                _cdf(ax, _values(run.requests, column), color="C1", lw=1.0, ls="--",
                     label="simulator" if k == 0 else None)
            ax.set(xlabel=label, ylabel="fraction of requests" if col == 0 else None, ylim=(0, 1.02))
            ax.set_title(f"{pol}: {label}", fontsize=9)
            ax.grid(True, alpha=0.3)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)
