"""Fit a hardware profile to observations with the simulator as the model (`dspark-sim profile fit`).

The fitted profile is the one under which the simulator reproduces the observed points. A
closed-loop simulation per observation per trial would make a least-squares search cost
thousands of simulations, so the fit uses defect correction:

1. A steady-state surrogate of the simulator: a closed loop of C users all decoding, each
   verifying w tokens per iteration and accepting tau of them (from the acceptance profile),
   T = step(w C + prefill tokens per iteration, C x context) + draft(C); tok/s/user = tau / T,
   throughput per GPU = C tau / T / GPUs. Direct step points are compared with step(B, X).
2. Least squares (scipy, relative errors) of the surrogate, times one correction factor per
   observed number, against the observations.
3. The simulator runs every load point under the fitted profile; the factors become
   simulated / surrogate at the fitted parameters, and 2-3 repeat (`rounds`). At a fixed point
   the corrected surrogate equals the simulator at every observation, so the simulator
   reproduces the points as well as the family allows. The residuals reported are the
   simulator's own.

Identifiability: the fit refuses (InputError) when fewer observed numbers than parameters are
given, when every load point has the same load, or when the scaled Jacobian at the solution is
(near) rank-deficient; the message names the parameters that trade off and suggests `--fix`.
Uncertainty: bootstrap over observations (resampled with replacement) when there are at least
two more independent loads than parameters, else a parametric bootstrap that perturbs every
observed number by a relative error (`obs_error`); the report says which.

Priors (`priors`, e.g. the roofline's values of the family's parameters): each prior adds the
residual obs_error x log(p / p0) / prior_spread, i.e. a log-normal prior of spread
`prior_spread` against observations of relative error obs_error (maximum a posteriori). A
parameter the observations cannot identify then takes the prior's value instead of being refused,
and every bootstrap draw also draws the prior's centre, so the reported spread covers the prior.
The fit refuses nothing for want of loads when every free parameter has a prior.

The speculative path's own cost: when the load points run two policies or more, one of them
speculative with a drafter whose cost has a source, the fit adds `draft_scale`, a factor on
every draft cost with a log-normal prior centred at 1 (spread `draft_scale_spread`; 0 turns it
off). The contrast between the policies is what separates a speculative iteration's extra cost
from the target forward: one speculative observation beside plain ones moves it to what the
engine's speculative iterations cost beyond their target forward as the step curve prices it.
Observations of one policy (no speculation, or only MTP-1) leave the draft costs as given at
the point estimate; when those costs are priced from a shape (roofline, layer shares), every
bootstrap sample draws `draft_scale` from the pricing's measured band (`draft_band`,
hardware/draft_cost.py: 10th..90th percentiles 1 / band .. band) and is solved with its drafting
so scaled, so the draws, and the intervals made from them, carry what these observations cannot
say about drafting (`draws_draft_scale`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from scipy.optimize import least_squares

from ..errors import InputError
from ..hardware.draft_cost import DraftCosts, band_spread
from ..hardware.observations import LoadPoint, StepPoint
from ..profiles.hardware import HardwareProfile
from .load_replay import FitConfig, Simulated, drafts_and_tau, load_point_trace, simulate_load

RANK_TOL = 1e-6            # singular-value ratio below which parameters count as not identified


@dataclass
class FitResult:
    """Fitted parameters, their spread, the simulator's residuals and the profile."""

    params: dict[str, float]
    profile: HardwareProfile
    points: list[LoadPoint | StepPoint]
    simulated: list[Simulated | None]
    uncertainty: dict[str, dict[str, float]]
    bootstrap_method: str
    bootstrap_kept: int
    singular_values: list[float]
    history: list[dict[str, float]] = field(default_factory=list)
    draws: list[dict[str, float]] = field(default_factory=list)     # full parameter sets, bootstrap
    prior_share: dict[str, float] = field(default_factory=dict)     # posterior / prior log-spread
    observed_range: dict[str, list[float]] = field(default_factory=dict)
    defect_factors: list[list[float]] = field(default_factory=list)   # simulator / surrogate, per point

    def residuals(self) -> list[dict[str, Any]]:
        """Per observation: observed, simulated (or fitted step) and relative errors."""
        rows = []
        for obs, sim in zip(self.points, self.simulated):
            if isinstance(obs, StepPoint):
                fitted = float(self.profile.step_time(obs.batch_tokens, obs.context_tokens))
                rows.append({"where": obs.where, "kind": "step", "label": obs.label,
                             "observed_s": obs.seconds, "fitted_s": fitted,
                             "rel_error": fitted / obs.seconds - 1})
                continue
            rows.append({"where": obs.where, "kind": "load", "label": obs.label, "policy": obs.policy,
                         "users": sim.users, "tps_stat": obs.tps_stat,
                         "observed_tps_user": obs.tps_user, "simulated_tps_user": sim.tps_user,
                         "tps_rel_error": sim.tps_user / obs.tps_user - 1,
                         "observed_throughput": obs.throughput_tok_s_per_gpu,
                         "simulated_throughput": sim.throughput_tok_s_per_gpu,
                         "throughput_rel_error": sim.throughput_tok_s_per_gpu / obs.throughput_tok_s_per_gpu - 1,
                         "observed_ttft_s": obs.ttft_s, "simulated_ttft_s": sim.ttft_s,
                         "window": obs.window, "requests": obs.requests})
        return rows


class Calibration:
    """One fitting problem: observations, family, configuration."""

    def __init__(self, points: list[LoadPoint | StepPoint], cfg: FitConfig) -> None:
        self.points, self.cfg, self.fam = points, cfg, cfg.family
        self.free = self.fam.free
        if not self.free:
            raise InputError("every parameter is fixed: nothing to fit", field="fix")
        self.loads = [p for p in points if isinstance(p, LoadPoint)]
        self.meta = []
        for p in points:
            if isinstance(p, LoadPoint):
                k, tau, kind = drafts_and_tau(p)
                tr = load_point_trace(p)
                ctx = float(np.mean(tr.prompt_tokens + tr.output_tokens / 2.0))
                share = float(np.mean(tr.prompt_tokens) * tau / max(np.mean(tr.output_tokens), 1.0))
                self.meta.append({"k": k, "tau": tau, "kind": kind, "ctx": ctx,
                                  "prefill_per_user": share if p.prefill == "local" else 0.0,
                                  "users": p.users(cfg.gpus)})
            else:
                self.meta.append(None)
        self.priors, self.spreads = dict(cfg.priors), {p: cfg.prior_spread for p in cfg.priors}
        if self.fits_draft_scale:
            self.free = self.free + ("draft_scale",)
            self.priors["draft_scale"], self.spreads["draft_scale"] = 1.0, cfg.draft_scale_spread
        self._check_counts()
        self.scale = self._typical()

    @property
    def fits_draft_scale(self) -> bool:
        """Whether `draft_scale` is fitted: the load points run two policies or more (a contrast
        that separates a speculative iteration's extra cost from the target forward), one of
        them speculative with a priced drafter."""
        costs = self.cfg.draft_costs
        return (self.cfg.draft_scale_spread > 0 and costs.source != "none"
                and len({p.policy for p in self.loads}) >= 2
                and any(costs.seconds(m["kind"], lambda b: b, 1.0, m["k"]) > 0 for m in self._speculative()))

    @property
    def draws_draft_scale(self) -> bool:
        """Whether the bootstrap draws draft_scale from the pricing's band: drafting is priced
        from a shape and the observations do not fit its scale (`fits_draft_scale`)."""
        return self.cfg.draft_band > 1.0 and self.cfg.draft_costs.shape_priced and not self.fits_draft_scale

    def draft_band(self) -> dict[str, Any] | None:
        """What the fit block and the report say about the band (None without one)."""
        if not self.draws_draft_scale:
            return None
        return {"factor": self.cfg.draft_band, "spread_log": round(band_spread(self.cfg.draft_band), 4),
                "why": "these observations cannot see the draft cost (one policy, or no priced drafter "
                       "among them), so every draw takes draft_scale from the shape pricing's measured "
                       "band (10th..90th percentiles 1 / factor .. factor; hardware/draft_cost.py); the "
                       "point estimate keeps 1"}

    @property
    def observations_draft(self) -> bool:
        """Whether some load point drafts (an MTP-1 baseline arm): its cost then depends on the
        draft price, and a draw at another price must be re-solved (`resolve_draw`)."""
        return bool(self._speculative())

    def _speculative(self) -> list[dict]:
        """The meta of the load points that draft (a drafter kind and drafts to verify)."""
        return [m for m in self.meta if m is not None and m["kind"] and m["k"] > 0]

    def full(self, params: dict[str, float]) -> dict[str, float]:
        """Every parameter of the family (`CurveFamily.full`), and draft_scale when fitted."""
        out = self.fam.full(params)
        if "draft_scale" in self.free:
            out["draft_scale"] = float(params["draft_scale"])
        return out

    def draft_costs(self, params: dict[str, float]) -> DraftCosts:
        """The configured draft costs, times `params`' draft_scale (fitted, or a band draw's)."""
        return replace(self.cfg.draft_costs, scale=float(params.get("draft_scale", 1.0)))

    # --- the model -------------------------------------------------------------------------

    def profile(self, params: dict[str, float]) -> HardwareProfile:
        """The candidate profile at `params` (draft tables and limits from the configuration)."""
        cfg = self.cfg
        extra: dict[str, Any] = {}
        prof = self.fam.profile(params, cfg.name, gpus_per_replica=cfg.gpus,
                                kv_capacity_tokens=cfg.kv_capacity_tokens,
                                max_batch_requests=cfg.max_batch_requests, extra=extra)
        self.draft_costs(params).apply(prof)
        return prof

    def surrogate(self, params: dict[str, float], i: int) -> np.ndarray:
        """Steady-state (tps_user, throughput/GPU) of load point i, or (step seconds,)."""
        obs, m = self.points[i], self.meta[i]
        if m is None:
            return np.array([self.fam.step_time(params, obs.batch_tokens, obs.context_tokens)])
        C, k = m["users"], m["k"]
        B = C * (1 + k) + C * m["prefill_per_user"]
        T = float(self.fam.step_time(params, B, C * m["ctx"], C))
        if m["kind"]:
            T += self.draft_costs(params).seconds(m["kind"], lambda b: self.fam.table_time(params, b), C, k)
        return np.array([m["tau"] / T, C * m["tau"] / T / self.cfg.gpus])

    @staticmethod
    def observed(obs: LoadPoint | StepPoint) -> np.ndarray:
        if isinstance(obs, StepPoint):
            return np.array([obs.seconds])
        return np.array([obs.tps_user, obs.throughput_tok_s_per_gpu])

    def simulate(self, params: dict[str, float], progress: Callable[[str], None] | None = None
                 ) -> list[Simulated | None]:
        """Run the simulator for every load point under the profile at `params`."""
        prof = self.profile(params)
        out: list[Simulated | None] = []
        for obs, m in zip(self.points, self.meta):
            out.append(None if m is None else simulate_load(prof, obs, m["users"], self.cfg))
            if progress and m is not None:
                progress(obs.label or obs.where)
        return out

    # --- least squares ---------------------------------------------------------------------

    def _typical(self) -> np.ndarray:
        """A magnitude per free parameter (start values and Jacobian scaling)."""
        steps = []
        for obs, m in zip(self.points, self.meta):
            if m is None:
                steps.append((obs.seconds, obs.batch_tokens, max(obs.context_tokens, 1.0)))
            else:
                steps.append((m["tau"] / obs.tps_user, m["users"] * (1 + m["k"]),
                              m["users"] * m["ctx"]))
        t = np.array(steps)
        t_min = float(t[:, 0].min())
        guess = {"floor_s": 0.5 * t_min, "weight_s": 0.5 * t_min, "expert_s": 0.5 * t_min,
                 "per_token_s": 0.5 * t_min / float(t[:, 1].max()),
                 "per_context_token_s": 0.1 * t_min / float(t[:, 2].max()),
                 "per_request_s": 0.1 * t_min / float(t[:, 1].max()), "draft_scale": 1.0}
        return np.array([guess[p] for p in self.free])

    def _vector(self, x: np.ndarray) -> dict[str, float]:
        return dict(zip(self.free, np.asarray(x, dtype=float) * self.scale))

    @property
    def prior_names(self) -> list[str]:
        """Free parameters with a prior."""
        return [p for p in self.free if p in self.priors]

    def solve(self, factors: list[np.ndarray], observed: list[np.ndarray] | None = None,
              rows: list[int] | None = None, x0: np.ndarray | None = None,
              priors: dict[str, float] | None = None, draft_scale: float = 1.0):
        """Least squares of log(factor x surrogate / observed) over `rows`, plus one row per prior
        (`priors`: the centres, default the configured ones), drafting priced x `draft_scale`
        where draft_scale is not a free parameter (a band draw); returns the scipy result."""
        observed = observed or [self.observed(p) for p in self.points]
        rows = list(range(len(self.points))) if rows is None else rows
        priors = self.priors if priors is None else priors

        def resid(x: np.ndarray) -> np.ndarray:
            params = self._vector(x)
            params.setdefault("draft_scale", draft_scale)
            parts = []
            for i in rows:
                pred = factors[i] * self.surrogate(params, i)
                parts.append(np.log(np.maximum(pred, 1e-30) / observed[i]))
            parts.append(np.array([self.cfg.obs_error / self.spreads[p]
                                   * np.log(max(params[p], 1e-30) / max(priors[p], 1e-30))
                                   for p in self.prior_names]))
            return np.concatenate(parts)

        x0 = np.ones(len(self.free)) if x0 is None else x0
        return least_squares(resid, x0, bounds=(0.0, np.inf), x_scale=1.0, xtol=1e-12,
                             ftol=1e-12, gtol=1e-12, max_nfev=2000)

    def resolve_draw(self, draw: dict[str, float], factors: list[list[float]],
                     draft_scale: float) -> dict[str, float]:
        """`draw` re-solved on the observations with drafting priced x `draft_scale` (a draw set
        to another draft scale than the one it was solved with, where the observations draft
        themselves, MTP-1 arms): the parameters with a prior keep the draw's values as centres, so
        the split the draw stands for stays, and the others move until the observations are met
        again under the new price (`factors`: the fit's defect correction, FitResult.defect_factors)."""
        x0 = np.array([draw[p] for p in self.free]) / self.scale
        priors = {**self.priors, **{p: draw[p] for p in self.prior_names}}
        res = self.solve([np.asarray(f, dtype=float) for f in factors], x0=x0, priors=priors,
                         draft_scale=draft_scale)
        return {**self.full(self._vector(res.x)), "draft_scale": float(draft_scale)}

    def _load_key(self, i: int) -> tuple:
        """What makes two observations the same load (their numbers then say the same thing)."""
        p, m = self.points[i], self.meta[i]
        if m is None:
            return ("step", p.batch_tokens, p.context_tokens)
        return ("load", p.policy, p.acceptance, m["users"], p.trace, p.prompt_tokens,
                p.output_tokens, p.prefill)

    def _check_counts(self) -> None:
        if self.free and all(p in self.priors for p in self.free):
            return                                      # the priors identify what the data cannot
        if len(self.points) == 1:
            raise InputError(f"one observation cannot identify the {len(self.free)} parameters "
                             f"{', '.join(self.free)}; give observations at more loads or --fix "
                             "some parameters", field="observations")
        loads = {self._load_key(i) for i, p in enumerate(self.points) if isinstance(p, LoadPoint)}
        steps = {self._load_key(i) for i, p in enumerate(self.points) if isinstance(p, StepPoint)}
        if len(loads) + len(steps) < 2:
            raise InputError("every observation is at the same load: the step curve's shape "
                             "cannot be identified; measure at least two concurrencies",
                             field="observations")
        # thr ~ C x tps: one number per load; a prior identifies its parameter
        if len(loads) + len(steps) < len(self.free) - len(self.prior_names):
            raise InputError(f"{len(loads) + len(steps)} distinct loads cannot identify the "
                             f"{len(self.free)} parameters {', '.join(self.free)}; give more "
                             "loads or --fix some parameters (e.g. --fix per_context_token_s=0)",
                             field="observations")

    def identifiability(self, result) -> list[float]:
        """Singular values of the scaled Jacobian; InputError naming the trading parameters."""
        J = np.asarray(result.jac, dtype=float)
        norms = np.linalg.norm(J, axis=0)
        J = J / np.where(norms > 0, norms, 1.0)          # unit columns: a scale-free rank test
        s = np.linalg.svd(J, compute_uv=False) if J.size else np.zeros(1)
        if len(s) < len(self.free) or s[-1] <= RANK_TOL * max(s[0], 1e-300) or not norms.all():
            _, _, vt = np.linalg.svd(J)
            null = vt[-1]
            names = [p for p, v in zip(self.free, null) if abs(v) > 0.2]
            raise InputError("the observations cannot identify the parameters "
                             f"{' and '.join(names) or ', '.join(self.free)} separately (they trade "
                             "off against each other at every observation); fix one with "
                             f"--fix {names[-1] if names else self.free[-1]}=VALUE, or add "
                             "observations that separate them (other contexts, policies or step points)",
                             field="observations")
        return s.tolist()

    def fit(self, progress: Callable[[str], None] | None = None) -> FitResult:
        """Defect-corrected least squares, simulator residuals, bootstrap spread."""
        factors = [np.ones(2 if m else 1) for m in self.meta]
        result = self.solve(factors)
        self.identifiability(result)
        history = []
        for _ in range(self.cfg.rounds):
            params = self._vector(result.x)
            history.append(dict(params))
            sims = self.simulate(params, progress)
            factors = [f if s is None else np.array([s.tps_user, s.throughput_tok_s_per_gpu])
                       / self.surrogate(params, i) for i, (f, s) in enumerate(zip(factors, sims))]
            result = self.solve(factors, x0=result.x)
        params = self._vector(result.x)
        history.append(dict(params))
        sims = self.simulate(params, progress)
        svals = self.identifiability(result)
        spread, method, kept, draws = self.bootstrap(factors, result.x)
        return FitResult(params=self.full(params), profile=self.profile(params),
                         points=self.points, simulated=sims, uncertainty=spread,
                         bootstrap_method=method, bootstrap_kept=kept, singular_values=svals,
                         history=history, draws=draws[:self.cfg.keep_draws],
                         prior_share=self._prior_share(draws), observed_range=self.observed_range(),
                         defect_factors=[np.asarray(f, dtype=float).tolist() for f in factors])

    def observed_range(self) -> dict[str, list[float]]:
        """Loads the fit saw: users and batch tokens per iteration (steady state), for flagging
        predictions outside them."""
        users = [m["users"] for m in self.meta if m]
        batch = [m["users"] * (1 + m["k"]) for m in self.meta if m] + \
                [p.batch_tokens for p in self.points if isinstance(p, StepPoint)]
        out = {"batch_tokens": [float(min(batch)), float(max(batch))]}
        if users:
            out["users"] = [float(min(users)), float(max(users))]
        if "draft_scale" in self.free:      # where the speculative path's own cost was measured
            spec = [m["users"] * (1 + m["k"]) for m in self._speculative()]
            out["speculative_batch_tokens"] = [float(min(spec)), float(max(spec))]
        return out

    def _prior_share(self, draws: list[dict[str, float]]) -> dict[str, float]:
        """Per parameter with a prior: spread of log(draws) / the prior's spread (near 1: the
        prior, not the data, sets it)."""
        out = {}
        for p in self.prior_names:
            vals = np.log(np.maximum([d[p] for d in draws], 1e-30)) if draws else np.array([np.nan])
            out[p] = float(np.std(vals) / self.spreads[p])
        return out

    def bootstrap(self, factors: list[np.ndarray], x: np.ndarray) -> tuple[dict, str, int, list]:
        """Spread of the fitted parameters over resampled (or perturbed) observations, and the
        draws themselves (every parameter, fixed ones included)."""
        cfg, rng = self.cfg, np.random.default_rng(self.cfg.seed)
        n = len(self.points)
        distinct = len({self._load_key(i) for i in range(n)})
        nonparametric = distinct >= len(self.free) + 2
        observed = [self.observed(p) for p in self.points]
        draws, scales = [], []
        band = np.random.default_rng([cfg.seed, 1]) if self.draws_draft_scale else None   # own stream:
        spread_band = band_spread(cfg.draft_band)       # the other draws stay as without the band
        for _ in range(cfg.bootstrap):
            priors = {p: v * float(np.exp(rng.normal(0.0, self.spreads[p])))
                      for p, v in self.priors.items()}             # the prior's own uncertainty
            scale = float(np.exp(band.normal(0.0, spread_band))) if band else 1.0
            if nonparametric:
                rows = rng.integers(0, n, n).tolist()
                if len({self._load_key(i) for i in rows}) < len(self.free) and not self.prior_names:
                    continue
                res = self.solve(factors, observed, rows, x0=x, priors=priors, draft_scale=scale)
            else:
                noisy = [o * np.exp(rng.normal(0.0, cfg.obs_error, o.shape)) for o in observed]
                res = self.solve(factors, noisy, x0=x, priors=priors, draft_scale=scale)
            if res.success:
                draws.append(np.asarray(res.x) * self.scale)
                scales.append(scale)
        method = ("bootstrap over observations" if nonparametric else
                  f"parametric bootstrap: every observed number x exp(N(0, {cfg.obs_error:g})) "
                  f"({distinct} distinct loads for {len(self.free)} parameters)")
        if self.prior_names:
            method += "; priors drawn in every sample as centre x exp(N(0, spread)): " + ", ".join(
                f"{p} ({self.spreads[p]:g})" for p in self.prior_names)
        out = {}
        arr = np.array(draws) if draws else np.empty((0, len(self.free)))
        for j, p in enumerate(self.free):
            col = arr[:, j] if len(arr) else np.array([np.nan])
            out[p] = {"std": float(np.std(col)), "p05": float(np.percentile(col, 5)),
                      "p95": float(np.percentile(col, 95))}
        full = [self.full(dict(zip(self.free, row))) for row in arr]
        if band:
            method += (f"; draft_scale drawn in every sample from the shape pricing's band "
                       f"x/÷ {cfg.draft_band:g} (10th..90th percentiles), the fit solved with it")
            full = [{**d, "draft_scale": s} for d, s in zip(full, scales)]
        return out, method, len(draws), full
