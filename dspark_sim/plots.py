"""Matplotlib helpers shared by every room: headless figures saved atomically."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .fileio import atomic_path  # noqa: E402


def new_figure(nrows: int = 1, ncols: int = 1, size: tuple[float, float] = (6.4, 4.2)):
    """A figure and its axes, drawn off screen."""
    return plt.subplots(nrows, ncols, figsize=size, constrained_layout=True)


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Save `fig` to `path` (format from the suffix) via a temp file and rename; close it."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path
