"""The simulator's own speculation policies: ar, static-K (mtp1 is K = 1), oracle, dspark
(Algorithm 1 every iteration), dspark-lagged (the paper's production variant) and goodput
(SmartSpec-style). vLLM's are in vllm_policies.py; registry.py names them all.
"""
from __future__ import annotations

import numpy as np

from ..cost.iteration import IterationCost
from .base import FixedPlan, Plan, Policy, cap_in_order, memo, scheduler_sps
from .lag import LAG, LaggedBudgets
from .prefix_schedule import RankedBatch, budget_batch, schedule_batch, top_k_batch


class NoSpeculation(Policy):
    name = "ar"
    speculative = False
    independent = True
    drafts = 0

    def verify(self, cols, cost):
        return np.zeros(cols.active.shape, dtype=np.int64)

    def plan(self, surv, cap, cost):
        return FixedPlan(np.zeros(len(surv), dtype=np.int64))


class StaticK(Policy):
    """Verify K drafts for every decoding request (mtp1 is K = 1 with an MTP-1 drafter)."""

    independent = True

    def __init__(self, k: int, name: str) -> None:
        self.k = self.drafts = k
        self.name = name

    def verify(self, cols, cost):
        return cap_in_order(np.where(cols.active, self.k, 0), cols.cap)

    def plan(self, surv, cap, cost):
        return FixedPlan(cap_in_order(np.full((1, len(surv)), self.k), np.array([cap]))[0])


class Oracle(Policy):
    """Verify exactly the drafts that will be accepted (needs the future): an upper bound."""

    name = "oracle"
    needs_accepted = True
    independent = True

    def __init__(self, gamma: int) -> None:
        self.drafts = gamma

    def verify(self, cols, cost):
        return cap_in_order(np.where(cols.active, cols.accepted, 0), cols.cap)


class DSpark(Policy):
    """Algorithm 1 with the early stop, every iteration."""

    name = "dspark"
    needs_confidence = True

    def __init__(self, gamma: int) -> None:
        self.drafts = gamma

    def verify(self, cols, cost):
        return schedule_batch(cols.surv, cols.active, cols.base, cols.cap, scheduler_sps(cols, cost))

    def plan(self, surv, cap, cost):
        return _SchedulePlan(RankedBatch(surv, cap), cost)


class _SchedulePlan(Plan):
    def __init__(self, ranked: RankedBatch, cost: IterationCost) -> None:
        self.ranked, self.cost = ranked, cost
        self._by_base: dict[int, np.ndarray] = {}
        self._list0: list[int] | None = None

    def lengths(self, base: int) -> np.ndarray:
        return memo(self._by_base, base, lambda: self.ranked.lengths(
            base, self.cost.scheduler_sps_table(self.ranked.n, base + self.ranked.max_batch)))

    def lengths_list(self, base: int) -> list[int]:
        if base == 0 and self._list0 is not None:
            return self._list0
        if self.ranked.limit > 48:        # numpy wins on long candidate lists
            out = self.lengths(base).tolist()
        else:
            out = self.ranked.lengths_py(
                base, self.cost.scheduler_sps_list(self.ranked.n, base + self.ranked.max_batch))
        if base == 0:
            self._list0 = out
        return out


class DSparkLagged(Policy):
    """Budget K from an unconstrained search over the confidences of two iterations earlier;
    the current iteration verifies the top-K current survivals (lossless: K does not depend
    on the current tokens)."""

    name = "dspark-lagged"
    needs_confidence = True
    lag = LAG

    def __init__(self, gamma: int) -> None:
        self.drafts = gamma
        self.lagged = LaggedBudgets(LAG)

    def raw_budget(self, cols, cost):
        return budget_batch(cols.surv, cols.active, cols.base, cols.cap, scheduler_sps(cols, cost))

    def verify(self, cols, cost):
        return top_k_batch(cols.surv, cols.active, np.minimum(cols.budget, np.maximum(cols.cap, 0)))

    def plan(self, surv, cap, cost):
        return LaggedPlan(RankedBatch(surv, cap), cap, cost)


class LaggedPlan(Plan):
    """dspark-lagged for one composition: the raw budget at a prefill base, and the verify
    lengths for a (lagged) budget (the python loop engine's form; the policy keeps the history)."""

    def __init__(self, ranked: RankedBatch, cap: int, cost: IterationCost) -> None:
        self.ranked, self.cap, self.cost = ranked, max(cap, 0), cost
        self._raw: dict[int, int] = {}
        self._by_k: dict[int, list[int]] = {}

    def raw(self, base: int) -> int:
        return memo(self._raw, base, lambda: self.ranked.budget_py(
            base, self.cost.scheduler_sps_list(self.ranked.n, base + self.ranked.max_batch)))

    def lengths_for(self, budget: int) -> list[int]:
        k = min(budget, self.cap)
        out = self._by_k.get(k)
        if out is None:
            out = self._by_k[k] = self.ranked.top_k_py(k)
        return out

    def lengths(self, base: int) -> np.ndarray:
        """Steady state: the budget this composition itself would produce."""
        return np.asarray(self.lengths_for(self.raw(base)), dtype=np.int64)


class Goodput(Policy):
    """One k for every request per iteration, maximising expected tokens per second from each
    request's mean acceptance (SmartSpec-style); ignores the context term of the step time."""

    name = "goodput"
    drafts = None

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def verify(self, cols, cost):
        n = cols.active.sum(axis=1)                                   # (C,)
        best = self._best_k(cols.active.astype(float) @ cols.mean_surv, n, cols.base, cols.cap, cost)
        return np.where(cols.active, best[:, None], 0)

    def _best_k(self, gain: np.ndarray, n: np.ndarray, base: np.ndarray, cap: np.ndarray,
                cost: IterationCost) -> np.ndarray:
        """k maximising expected tokens / seconds; gain (C, g) = sum over rows of survivals."""
        tokens = n[:, None] + np.concatenate([np.zeros((len(n), 1)), np.cumsum(gain, axis=1)], axis=1)
        k = np.arange(self.gamma + 1)
        batch = (base + n)[:, None] + n[:, None] * k[None, :]
        seconds = cost.step_seconds(batch) + cost.requests_seconds(np.broadcast_to(n[:, None], batch.shape),
                                                                np.broadcast_to(k, batch.shape))
        rate = np.where(n[:, None] * k[None, :] <= cap[:, None], tokens / seconds, -np.inf)
        return rate.argmax(axis=1)

    def plan(self, surv, cap, cost):
        return _GoodputPlan(self, np.ones((1, len(surv))) @ surv, len(surv), cap, cost)


class _GoodputPlan(Plan):
    def __init__(self, policy: Goodput, gain: np.ndarray, r: int, cap: int, cost: IterationCost) -> None:
        self.policy, self.gain, self.r, self.cap, self.cost = policy, gain, r, cap, cost
        self._by_base: dict[int, np.ndarray] = {}
        # expected tokens for k = 0..gamma, as `_best_k` computes them
        self._tokens = (r + np.concatenate([[0.0], np.cumsum(gain[0])])).tolist()
        self._drafting: list[float] | None = None

    def lengths(self, base: int) -> np.ndarray:
        def compute() -> np.ndarray:
            k = self.policy._best_k(self.gain, np.array([self.r]), np.array([base]),
                                    np.array([self.cap]), self.cost)
            return np.full(self.r, int(k[0]), dtype=np.int64)
        return memo(self._by_base, base, compute)

    def lengths_list(self, base: int) -> list[int]:
        """`lengths` in plain python: the same float operations, so the same k."""
        r, cost = self.r, self.cost
        step, _ = cost.seconds_lists(r, base + r * (self.policy.gamma + 1))
        if self._drafting is None:         # seconds of drafting k = 0..gamma at this r
            ks = np.arange(len(self._tokens))
            self._drafting = cost.requests_seconds(np.full(len(ks), r), ks).tolist()
        drafting = self._drafting
        best_k, best = 0, -np.inf
        for k, tokens in enumerate(self._tokens):
            if r * k > self.cap:
                continue
            rate = tokens / (step[base + r + r * k] + drafting[k])
            if rate > best:
                best, best_k = rate, k
        return [best_k] * r
