"""Sequential Temperature Scaling (method.md section 3).

Held-out rollouts give, for every verification step with all gamma drafts verified, the raw
confidence logits z_1..z_gamma and the number of drafts accepted. Survival
a_k = prod_{i<=k} sigmoid(z_i / T_i) should match P(drafts 1..k all accepted). For k = 1..gamma
in order, T_k is grid-searched to minimise the ECE of a_k against that event, with the
earlier temperatures fixed. A positive temperature never changes the order of confidences
within a position. On a few thousand real steps the far positions have only a handful of
fully accepted prefixes and a raw ECE fit chases bin noise (it raised held-out ECE on the
embedded target at T = 1), so the search is bagged over requests and guarded by a minimum
number of positives and a cross-validated gain test.
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


def _ece_curve(prefix: np.ndarray, z: np.ndarray, y: np.ndarray, grid: np.ndarray,
               weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Weighted ECE of prefix * sigmoid(z / T) against y for every T in grid: sum over bins of
    |sum of w (y - p)| / sum of w (equal to the usual ECE when every weight is 1)."""
    p = prefix[None, :] * _sigmoid(z[None, :] / grid[:, None])
    idx = np.clip((p * n_bins).astype(np.int64), 0, n_bins - 1) + np.arange(len(grid))[:, None] * n_bins
    err = np.bincount(idx.ravel(), weights=((y[None, :] - p) * weights[None, :]).ravel(),
                      minlength=len(grid) * n_bins)
    return np.abs(err.reshape(len(grid), n_bins)).sum(axis=1) / max(weights.sum(), 1e-12)


def _bagged_curve(prefix, z, y, grid, groups, n_boot, rng, n_bins) -> np.ndarray:
    """ECE(T) averaged over bootstrap resamples of whole groups (requests): a smoother
    objective than one sample's ECE, whose bin noise a 241-point grid would otherwise fit."""
    if n_boot <= 0:
        return _ece_curve(prefix, z, y, grid, np.ones_like(y), n_bins)
    uniq, inv = np.unique(groups, return_inverse=True)
    curves = [_ece_curve(prefix, z, y, grid, rng.multinomial(len(uniq), np.full(len(uniq), 1 / len(uniq)))[inv]
                         .astype(np.float64), n_bins) for _ in range(n_boot)]
    return np.mean(curves, axis=0)


def fit_sts_detail(steps: RolloutSteps, n_bins: int = 20, grid: np.ndarray = DEFAULT_GRID, *,
                   groups: np.ndarray | None = None, min_positives: int = 30, n_boot: int = 32,
                   cv_folds: int = 2, seed: int = 0) -> tuple[np.ndarray, list[dict]]:
    """The temperatures T_1..T_gamma, fitted position by position, and why each was chosen.

    For k = 1..gamma in order (earlier temperatures fixed), T_k minimises the ECE of a_k against
    "drafts 1..k all accepted", averaged over n_boot bootstrap resamples of the requests
    (`groups`: the request of every step). Two guards keep T_k = 1 where a fit would chase noise:
    fewer than `min_positives` fully accepted prefixes (or as few failures) at position k, or no
    gain in a cv_folds-fold cross-validation over requests (T fitted on the other folds must
    lower the summed held-in-fold ECE against T = 1)."""
    n = steps.z.shape[0]
    groups = np.arange(n) if groups is None else np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must have one entry per step ({n}), got {groups.shape}")
    rng = np.random.default_rng(seed)
    y_all = steps.prefix_accepted()
    one = int(np.argmin(np.abs(np.log(grid))))          # grid index of T closest to 1
    fold = np.unique(groups, return_inverse=True)[1].reshape(-1) % max(cv_folds, 1)   # requests alternate
    temps, detail = np.ones(steps.gamma), []
    prefix = np.ones(n)
    for k in range(steps.gamma):
        z, y = steps.z[:, k], y_all[:, k]
        pos, neg = int(y.sum()), int(n - y.sum())
        info = {"position": k + 1, "positives": pos, "negatives": neg}
        if min(pos, neg) < min_positives:
            info.update(temperature=1.0, rule=f"kept 1: fewer than {min_positives} "
                        f"{'accepted prefixes' if pos < neg else 'failures'}")
        else:
            t_fit = float(grid[np.argmin(_bagged_curve(prefix, z, y, grid, groups, n_boot, rng, n_bins))])
            cv_fit = cv_one = 0.0
            if cv_folds >= 2:
                for f in range(cv_folds):
                    tr, te = fold != f, fold == f
                    if not te.any() or not tr.any():
                        continue
                    t_f = grid[np.argmin(_bagged_curve(prefix[tr], z[tr], y[tr], grid, groups[tr],
                                                       n_boot, rng, n_bins))]
                    ones = np.ones(int(te.sum()))
                    pair = _ece_curve(prefix[te], z[te], y[te], np.array([t_f, grid[one]]), ones, n_bins)
                    cv_fit += pair[0] * te.sum()
                    cv_one += pair[1] * te.sum()
            if cv_folds >= 2 and cv_fit >= cv_one:
                info.update(temperature=1.0, rule="kept 1: no cross-validated ECE gain",
                            cv_ece_fitted=cv_fit / n, cv_ece_one=cv_one / n)
            else:
                info.update(temperature=t_fit, rule="fitted", cv_ece_fitted=cv_fit / n, cv_ece_one=cv_one / n)
        temps[k] = info["temperature"]
        prefix = prefix * _sigmoid(z / temps[k])
        detail.append(info)
    return temps, detail


def fit_sts(steps: RolloutSteps, n_bins: int = 20, grid: np.ndarray = DEFAULT_GRID, **kwargs) -> np.ndarray:
    """The temperatures T_1..T_gamma (see fit_sts_detail for the fitting rules)."""
    return fit_sts_detail(steps, n_bins, grid, **kwargs)[0]


def position_report(steps: RolloutSteps, temps: np.ndarray | None, n_bins: int = 20) -> list[dict]:
    """Per position k: ECE, AUROC and Brier of the survival a_k, base rate and mean a_k."""
    a = survival(steps.z, temps)
    y = steps.prefix_accepted()
    return [{"position": k + 1, "ece": ece(a[:, k], y[:, k], n_bins), "auroc": auroc(a[:, k], y[:, k]),
             "brier": brier(a[:, k], y[:, k]), "mean_survival": float(a[:, k].mean()),
             "accept_rate": float(y[:, k].mean())} for k in range(steps.gamma)]
