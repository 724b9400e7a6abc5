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

With a copy bias (decode/drafters/copybias.py) some drafts are copies of an earlier
continuation, which the confidence head cannot see: a copied draft is accepted far more often
than its logit says, and its logit says little about whether it will be. Rollouts then mark
the slots where the bias applied (`copied`), T_k is fitted on the other slots, and a second
temperature and an offset for the copied ones, sigmoid(z_k / Tc_k + d_k), by log loss, with
the same guards.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


DEFAULT_GRID = np.exp(np.linspace(np.log(0.05), np.log(20.0), 241))
COPY_TEMP_GRID = np.exp(np.linspace(np.log(0.25), np.log(20.0), 25))   # Tc_k of copied slots
OFFSET_GRID = np.linspace(-4.0, 8.0, 49)                               # d_k, logit units


@dataclass
class RolloutSteps:
    """Raw confidence logits z [N, gamma], accepted drafts [N] (0..gamma) of N steps, and
    where the copy bias applied [N, gamma] (all False without one)."""

    z: np.ndarray
    accepted: np.ndarray
    copied: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.z = np.asarray(self.z, dtype=np.float64)
        self.accepted = np.asarray(self.accepted, dtype=np.int64)
        if self.z.ndim != 2 or self.z.shape[0] != self.accepted.shape[0]:
            raise ValueError("z must be [N, gamma] and accepted [N]")
        self.copied = (np.zeros(self.z.shape, dtype=bool) if self.copied is None
                       else np.asarray(self.copied, dtype=bool))
        if self.copied.shape != self.z.shape:
            raise ValueError(f"copied must be [N, gamma] like z {self.z.shape}, got {self.copied.shape}")

    @property
    def gamma(self) -> int:
        return self.z.shape[1]

    def prefix_accepted(self) -> np.ndarray:
        """[N, gamma]: 1 where drafts 1..k were all accepted."""
        k = np.arange(1, self.gamma + 1)
        return (self.accepted[:, None] >= k[None, :]).astype(np.float64)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def calibrated_logits(z: np.ndarray, temps: np.ndarray | None = None,
                      copy_cal: np.ndarray | None = None, copied: np.ndarray | None = None
                      ) -> np.ndarray:
    """z_i / T_i, or z_i / Tc_i + d_i where slot i was copied (copy_cal [gamma, 2] = (Tc, d))."""
    t = np.ones(z.shape[1]) if temps is None else np.asarray(temps, dtype=np.float64)
    x = z / t[None, :]
    if copy_cal is not None and copied is not None:
        c = np.asarray(copy_cal, dtype=np.float64)
        x = np.where(copied, z / c[None, :, 0] + c[None, :, 1], x)
    return x


def survival(z: np.ndarray, temps: np.ndarray | None = None, copy_cal: np.ndarray | None = None,
             copied: np.ndarray | None = None) -> np.ndarray:
    """a_k = prod_{i<=k} sigmoid(calibrated logit i) for every row of z [N, gamma]."""
    return np.cumprod(_sigmoid(calibrated_logits(z, temps, copy_cal, copied)), axis=1)


def _ece_curve(prefix: np.ndarray, z: np.ndarray, y: np.ndarray, grid: np.ndarray,
               weights: np.ndarray, n_bins: int) -> np.ndarray:
    """Weighted ECE of prefix * sigmoid(z / T) against y for every T in grid: sum over bins of
    |sum of w (y - p)| / sum of w (equal to the usual ECE when every weight is 1)."""
    return _ece_of_logits(prefix, z[None, :] / grid[:, None], y, n_bins)(weights)


# An objective takes (prefix, logits [G, n], y, n_bins) and returns the function of the weights
# [n] that gives every candidate's (row's) value: what no weight changes (the probabilities,
# their bins or log losses) is computed once for all the bootstrap resamples.
Objective = Callable[[np.ndarray, np.ndarray, np.ndarray, int], Callable[[np.ndarray], np.ndarray]]


def _ece_of_logits(prefix: np.ndarray, logits: np.ndarray, y: np.ndarray, n_bins: int
                   ) -> Callable[[np.ndarray], np.ndarray]:
    """Weighted ECE of prefix * sigmoid(logits[g]) against y for every row g of logits [G, n]."""
    g = logits.shape[0]
    p = prefix[None, :] * _sigmoid(logits)
    idx = (np.clip((p * n_bins).astype(np.int64), 0, n_bins - 1) + np.arange(g)[:, None] * n_bins).ravel()
    gap = y[None, :] - p

    def of(weights: np.ndarray) -> np.ndarray:
        err = np.bincount(idx, weights=(gap * weights[None, :]).ravel(), minlength=g * n_bins)
        return np.abs(err.reshape(g, n_bins)).sum(axis=1) / max(weights.sum(), 1e-12)
    return of


def _nll_of_logits(prefix: np.ndarray, logits: np.ndarray, y: np.ndarray, n_bins: int
                   ) -> Callable[[np.ndarray], np.ndarray]:
    """Weighted mean log loss of prefix * sigmoid(logits[g]) against y for every row g of logits
    [G, n] (n_bins unused: the signature of _ece_of_logits)."""
    p = np.clip(prefix[None, :] * _sigmoid(logits), 1e-9, 1 - 1e-9)
    loss = -(y[None, :] * np.log(p) + (1 - y[None, :]) * np.log1p(-p))
    return lambda weights: (loss * weights[None, :]).sum(axis=1) / max(weights.sum(), 1e-12)


def _bagged_curve(prefix, logits, y, groups, n_boot, rng, n_bins,
                  objective: Objective = _ece_of_logits) -> np.ndarray:
    """The objective (ECE by default) of every candidate (rows of logits [G, n]) averaged over
    bootstrap resamples of whole groups (requests): a smoother objective than one sample's ECE,
    whose bin noise a 241-point grid would otherwise fit."""
    of = objective(prefix, logits, y, n_bins)
    if n_boot <= 0:
        return of(np.ones_like(y))
    uniq, inv = np.unique(groups, return_inverse=True)
    curves = [of(rng.multinomial(len(uniq), np.full(len(uniq), 1 / len(uniq)))[inv].astype(np.float64))
              for _ in range(n_boot)]
    return np.mean(curves, axis=0)


def _guarded_fit(prefix, logits, y, groups, fold, neutral: int, *, min_positives: int,
                 n_boot: int, cv_folds: int, rng, n_bins: int, objective: Objective = _ece_of_logits,
                 label: str = "ECE", kept: str = "1") -> tuple[int, dict]:
    """The candidate (row of logits [G, n]) whose bagged objective (ECE by default; `label` names
    it in the report) is lowest, or `neutral` (named `kept` in the rule) where a fit would chase
    noise: fewer than min_positives positives (or failures), or no gain in a cv_folds-fold
    cross-validation over requests (the candidate fitted on the other folds must lower the
    summed held-in-fold objective against the neutral one)."""
    n = y.shape[0]
    pos, neg = int(y.sum()), int(n - y.sum())
    info: dict = {"positives": pos, "negatives": neg}
    if min(pos, neg) < min_positives:
        info["rule"] = f"kept {kept}: fewer than {min_positives} " \
                       f"{'accepted prefixes' if pos < neg else 'failures'}"
        return neutral, info
    best = int(np.argmin(_bagged_curve(prefix, logits, y, groups, n_boot, rng, n_bins, objective)))
    cv_fit = cv_one = 0.0
    if cv_folds >= 2:
        for f in range(cv_folds):
            tr, te = fold != f, fold == f
            if not te.any() or not tr.any():
                continue
            b_f = int(np.argmin(_bagged_curve(prefix[tr], logits[:, tr], y[tr], groups[tr],
                                              n_boot, rng, n_bins, objective)))
            pair = objective(prefix[te], logits[[b_f, neutral]][:, te], y[te], n_bins)(np.ones(int(te.sum())))
            cv_fit += pair[0] * te.sum()
            cv_one += pair[1] * te.sum()
        key = "ece" if label == "ECE" else "loss"
        info.update({f"cv_{key}_fitted": cv_fit / n, f"cv_{key}_one": cv_one / n})
        if cv_fit >= cv_one:
            info["rule"] = f"kept {kept}: no cross-validated {label} gain"
            return neutral, info
    info["rule"] = "fitted"
    return best, info


def fit_sts_detail(steps: RolloutSteps, n_bins: int = 20, grid: np.ndarray = DEFAULT_GRID, *,
                   groups: np.ndarray | None = None, min_positives: int = 30, n_boot: int = 32,
                   cv_folds: int = 2, seed: int = 0, copy_temp_grid: np.ndarray = COPY_TEMP_GRID,
                   offset_grid: np.ndarray = OFFSET_GRID) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """The temperatures T_1..T_gamma, the copied slots' (Tc_k, d_k) [gamma, 2], fitted position
    by position, and why each was chosen.

    For k = 1..gamma in order (earlier positions fixed), T_k minimises the ECE of a_k against
    "drafts 1..k all accepted" over the slots the copy bias did not touch (all of them without
    a bias), averaged over n_boot bootstrap resamples of the requests (`groups`: the request of
    every step); then (Tc_k, d_k) minimises the bagged log loss over the copied slots, on the
    grid of copy_temp_grid and T_k by offset_grid (two parameters: ECE, blind to sharpness,
    would flatten them to a constant). Two guards keep the neutral choice (T_k = 1; for
    copied slots (T_k, 0), i.e. no different treatment) where a fit would chase noise: fewer than
    `min_positives` fully accepted prefixes (or as few failures) at position k, or no gain in a
    cv_folds-fold cross-validation over requests."""
    n = steps.z.shape[0]
    groups = np.arange(n) if groups is None else np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must have one entry per step ({n}), got {groups.shape}")
    rng = np.random.default_rng(seed)
    y_all = steps.prefix_accepted()
    one = int(np.argmin(np.abs(np.log(grid))))          # grid index of T closest to 1
    fold = np.unique(groups, return_inverse=True)[1].reshape(-1) % max(cv_folds, 1)   # requests alternate
    temps, detail = np.ones(steps.gamma), []
    copy_cal = np.column_stack([temps, np.zeros(steps.gamma)])
    prefix = np.ones(n)
    opts = dict(min_positives=min_positives, n_boot=n_boot, cv_folds=cv_folds, rng=rng, n_bins=n_bins)
    for k in range(steps.gamma):
        z, y, cp = steps.z[:, k], y_all[:, k], steps.copied[:, k]
        m = ~cp
        i, info = _guarded_fit(prefix[m], z[m][None, :] / grid[:, None], y[m], groups[m], fold[m],
                               one, **opts)
        temps[k] = float(grid[i])
        info = {"position": k + 1, "temperature": temps[k], **info}
        copy_cal[k] = temps[k], 0.0
        if cp.any():
            # Every (Tc, d) of the grid (Tc also T_k), then the neutral choice (T_k, 0) last.
            tcs = np.append(copy_temp_grid, temps[k])
            pairs = np.array([(tc, d) for tc in tcs for d in offset_grid] + [(temps[k], 0.0)])
            j, cinfo = _guarded_fit(prefix[cp], z[cp][None, :] / pairs[:, :1] + pairs[:, 1:],
                                    y[cp], groups[cp], fold[cp], len(pairs) - 1,
                                    objective=_nll_of_logits, label="log-loss",
                                    kept="as the others", **opts)
            copy_cal[k] = pairs[j]
            info["copied"] = {"temperature": float(pairs[j, 0]), "offset": float(pairs[j, 1]), **cinfo}
        prefix = prefix * _sigmoid(np.where(cp, z / copy_cal[k, 0] + copy_cal[k, 1], z / temps[k]))
        detail.append(info)
    return temps, copy_cal, detail


def fit_sts(steps: RolloutSteps, n_bins: int = 20, grid: np.ndarray = DEFAULT_GRID, **kwargs) -> np.ndarray:
    """The temperatures T_1..T_gamma (see fit_sts_detail for the fitting rules)."""
    return fit_sts_detail(steps, n_bins, grid, **kwargs)[0]


def position_report(steps: RolloutSteps, temps: np.ndarray | None, n_bins: int = 20,
                    copy_cal: np.ndarray | None = None) -> list[dict]:
    """Per position k: ECE, AUROC and Brier of the survival a_k, base rate and mean a_k (the
    survival view of positions.survival_calibration, over every step)."""
    from .positions import survival_calibration

    c = _sigmoid(calibrated_logits(steps.z, temps, copy_cal, steps.copied))
    rows = survival_calibration(c, steps.accepted, np.full(len(steps.accepted), steps.gamma),
                                n_bins=n_bins)
    return [{"position": r["position"], "ece": r["ece"], "auroc": r["auroc"], "brier": r["brier"],
             "mean_survival": r["mean_survival"], "accept_rate": r["rate"]} for r in rows]
