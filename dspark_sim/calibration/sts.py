"""Sequential Temperature Scaling (method.md section 3).

Held-out rollouts give, for every verification step with all gamma drafts verified, the raw
confidence logits z_1..z_gamma and the number of drafts accepted. Survival
a_k = prod_{i<=k} sigmoid(z_i / T_i) should match P(drafts 1..k all accepted). For k = 1..gamma
in order, T_k is grid-searched to minimise the ECE of a_k against that event, with the
earlier temperatures fixed. A positive temperature never changes the order of confidences
within a position.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics import auroc, brier, ece

DEFAULT_GRID = np.exp(np.linspace(np.log(0.05), np.log(20.0), 241))


@dataclass
class RolloutSteps:
    """Raw confidence logits z [N, gamma] and accepted drafts [N] (0..gamma) of N steps."""

    z: np.ndarray
    accepted: np.ndarray

    def __post_init__(self) -> None:
        self.z = np.asarray(self.z, dtype=np.float64)
        self.accepted = np.asarray(self.accepted, dtype=np.int64)
        if self.z.ndim != 2 or self.z.shape[0] != self.accepted.shape[0]:
            raise ValueError("z must be [N, gamma] and accepted [N]")

    @property
    def gamma(self) -> int:
        return self.z.shape[1]

    def prefix_accepted(self) -> np.ndarray:
        """[N, gamma]: 1 where drafts 1..k were all accepted."""
        k = np.arange(1, self.gamma + 1)
        return (self.accepted[:, None] >= k[None, :]).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def survival(z: np.ndarray, temps: np.ndarray | None = None) -> np.ndarray:
    """a_k = prod_{i<=k} sigmoid(z_i / T_i) for every row of z [N, gamma]."""
    t = np.ones(z.shape[1]) if temps is None else np.asarray(temps, dtype=np.float64)
    return np.cumprod(_sigmoid(z / t[None, :]), axis=1)


def fit_sts(steps: RolloutSteps, n_bins: int = 20, grid: np.ndarray = DEFAULT_GRID) -> np.ndarray:
    """The temperatures T_1..T_gamma, fitted position by position."""
    y = steps.prefix_accepted()
    temps = np.ones(steps.gamma)
    prefix = np.ones(steps.z.shape[0])
    for k in range(steps.gamma):
        best_t, best_e = 1.0, np.inf
        for t in grid:
            e = ece(prefix * _sigmoid(steps.z[:, k] / t), y[:, k], n_bins)
            if e < best_e - 1e-12:
                best_t, best_e = float(t), e
        temps[k] = best_t
        prefix = prefix * _sigmoid(steps.z[:, k] / best_t)
    return temps


def position_report(steps: RolloutSteps, temps: np.ndarray | None, n_bins: int = 20) -> list[dict]:
    """Per position k: ECE, AUROC and Brier of the survival a_k, base rate and mean a_k."""
    a = survival(steps.z, temps)
    y = steps.prefix_accepted()
    return [{"position": k + 1, "ece": ece(a[:, k], y[:, k], n_bins), "auroc": auroc(a[:, k], y[:, k]),
             "brier": brier(a[:, k], y[:, k]), "mean_survival": float(a[:, k].mean()),
             "accept_rate": float(y[:, k].mean())} for k in range(steps.gamma)]
