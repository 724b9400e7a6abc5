"""Synthetic production-like traffic: task mix, length models and arrival processes, seeded."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .schema import Trace


class LengthModel:
    """Draws token counts >= 1."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError


@dataclass(frozen=True)
class LognormalLengths(LengthModel):
    """Lognormal token counts with the given mean and coefficient of variation, clipped."""

    mean: float
    cv: float
    minimum: int = 1
    maximum: int | None = None

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        sigma2 = math.log1p(self.cv ** 2)
        mu = math.log(self.mean) - sigma2 / 2
        x = np.rint(rng.lognormal(mu, math.sqrt(sigma2), n))
        return np.clip(x, self.minimum, self.maximum if self.maximum else None).astype(np.int64)


@dataclass(frozen=True)
class EmpiricalLengths(LengthModel):
    """Inverse-CDF sampling through the quantiles of observed lengths.

    Draws u ~ U(0, 1) and interpolates linearly between the source's quantiles at
    `knots` evenly spaced levels, so samples follow the source distribution without
    reproducing its rows.
    """

    quantiles: np.ndarray    # (knots,) non-decreasing token counts at levels linspace(0, 1)

    @classmethod
    def fit(cls, values: np.ndarray, knots: int = 201) -> "EmpiricalLengths":
        """Quantiles of `values` at `knots` evenly spaced levels."""
        return cls(np.quantile(np.asarray(values, dtype=float), np.linspace(0.0, 1.0, knots)))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        levels = np.linspace(0.0, 1.0, len(self.quantiles))
        x = np.interp(rng.random(n), levels, self.quantiles)
        return np.maximum(np.rint(x), 1).astype(np.int64)


@dataclass(frozen=True)
class ArrivalModel:
    """Renewal arrivals (Poisson or Gamma with a chosen CV of gaps), optionally rate-modulated.

    The diurnal modulation multiplies the rate by 1 + amplitude * sin(2 pi (t + phase) / period);
    it is applied by time-warping the renewal process (its gaps are drawn in operational time).
    """

    rate: float                       # mean requests per second
    kind: str = "poisson"             # "poisson" | "gamma"
    cv: float = 1.0                   # CV of the gaps (gamma only)
    diurnal_amplitude: float = 0.0    # 0 <= amplitude < 1
    diurnal_period_s: float = 86400.0
    diurnal_phase_s: float = 0.0

    def _cumulative_rate(self, t: np.ndarray) -> np.ndarray:
        """Lambda(t) = integral of rate from 0 to t (expected arrivals by time t)."""
        a, p = self.diurnal_amplitude, self.diurnal_period_s
        w = 2 * math.pi / p
        return self.rate * (t - a / w * (np.cos(w * (t + self.diurnal_phase_s))
                                         - math.cos(w * self.diurnal_phase_s)))

    def _gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "poisson":
            return rng.exponential(1.0, n)
        shape = 1.0 / self.cv ** 2
        return rng.gamma(shape, 1.0 / shape, n)

    def sample(self, rng: np.random.Generator, count: int | None = None,
               duration_s: float | None = None) -> np.ndarray:
        """Arrival times (s, from 0): `count` of them, or all before `duration_s`."""
        if count is not None:
            ops = np.cumsum(self._gaps(rng, count))
        else:
            chunks, total = [], 0.0
            target = self.rate * duration_s
            while total <= target:
                n = max(1024, int(1.2 * (target - total)) + 64)
                gaps = self._gaps(rng, n)
                gaps[0] += total
                part = np.cumsum(gaps)
                chunks.append(part)
                total = float(part[-1])
            ops = np.concatenate(chunks)
        ops = ops - ops[0]        # the first request arrives at t = 0
        if self.diurnal_amplitude == 0.0:
            times = ops / self.rate
        else:
            horizon = ops[-1] / (self.rate * (1 - self.diurnal_amplitude)) + 1.0
            grid = np.linspace(0.0, horizon, max(10_000, int(horizon * 20)))
            times = np.interp(ops, self._cumulative_rate(grid), grid)
        if duration_s is not None:
            times = times[times < duration_s]
        return times


def parse_task_mix(text: str) -> dict[str, float]:
    """'chat=0.8,code=0.2' -> normalised probabilities; a bare name means weight 1."""
    mix: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, weight = part.partition("=")
        name = name.strip()
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise InputError(f"bad weight in {part!r}", field="tasks") from None
        if not name or not math.isfinite(w) or w < 0:
            raise InputError(f"bad task entry {part!r} (expected NAME=WEIGHT)", field="tasks")
        mix[name] = mix.get(name, 0.0) + w
    total = sum(mix.values())
    if not mix or total <= 0:
        raise InputError(f"no task with positive weight in {text!r}", field="tasks")
    return {k: v / total for k, v in mix.items()}


def generate_trace(arrivals: ArrivalModel, prompt: LengthModel, output: LengthModel,
                   tasks: dict[str, float], seed: int, count: int | None = None,
                   duration_s: float | None = None, name: str = "generated") -> Trace:
    """A seeded synthetic trace with `count` requests or all arrivals within `duration_s`."""
    if (count is None) == (duration_s is None):
        raise InputError("give exactly one of count and duration", field="count")
    rng = np.random.default_rng(seed)
    times = arrivals.sample(rng, count=count, duration_s=duration_s)
    n = len(times)
    if n == 0:
        raise InputError("no request arrives within the duration", field="duration")
    names = np.array(sorted(tasks), dtype=object)
    task = names[rng.choice(len(names), size=n, p=[tasks[k] for k in names])]
    return Trace(ids=np.array([f"r{i}" for i in range(n)], dtype=object), arrival_s=times,
                 prompt_tokens=prompt.sample(rng, n), output_tokens=output.sample(rng, n),
                 task=task, name=name)
