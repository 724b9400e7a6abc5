"""Speculation policies: how many drafts each decoding request verifies in an iteration.

Every policy decides for C iterations at once (vectorised) given the same R rows:
`verify(cols, cost) -> (C, R)` verify lengths, 0 for rows not in an iteration.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...errors import InputError
from ..cost.iteration import IterationCost
from .prefix_schedule import RankedBatch, budget_batch, schedule_batch, top_k_batch

POLICY_HELP = ("ar (no speculation), mtp1 (verify 1 draft), static-K (verify K drafts), "
               "dspark (Algorithm 1 with early stop, every iteration), dspark-lagged (budget from "
               "the confidences of two iterations earlier, top-K admission), goodput (one k per "
               "iteration maximising expected tokens/s, SmartSpec-style), oracle (verify exactly "
               "the drafts that will be accepted; an upper bound), vllm-schedule (vLLM's "
               "num_speculative_tokens_per_batch_size, given with --bs-schedule), vllm-adaptive "
               "(vLLM's DSpark adaptive verification: budget from the previous step's "
               "confidences, top-budget admission)")


@dataclass
class Columns:
    """What a policy sees for C iterations over the same R rows (requests in batch order)."""

    surv: np.ndarray                   # (C, R, gamma) survivals a[r, j] (scheduler confidences)
    active: np.ndarray                 # (C, R) bool: row decodes in that iteration
    base: np.ndarray                   # (C,) batch tokens besides the anchors (prefill chunk)
    cap: np.ndarray                    # (C,) most drafts the iteration may verify (token budget)
    mean_surv: np.ndarray              # (R, gamma) survivals from each row's mean acceptance
    accepted: np.ndarray | None = None  # (C, R) accepted runs (oracle only)
    budget: np.ndarray | None = None    # (C,) lagged budgets (dspark-lagged only)
    rows: np.ndarray | None = None      # (R,) request ids (stateful policies only)
    others: np.ndarray | None = None    # (C,) requests with a prefill chunk in the iteration
    others_sampling: np.ndarray | None = None   # (C,) of those, the ones that finish their prefill


def scheduler_sps(cols: "Columns", cost: IterationCost):
    """SPS callable for the scheduler over C iterations: batch tokens (C, n) -> iterations per
    second, each iteration at its own number of decoding requests."""
    requests = cols.active.sum(axis=1)[:, None]
    return lambda b: cost.scheduler_sps(b, requests)


def cap_in_order(lengths: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Trim verify lengths so each iteration's total fits `cap`; earlier rows keep theirs first."""
    before = np.cumsum(lengths, axis=1) - lengths
    return np.clip(cap[:, None] - before, 0, lengths)


class Policy:
    """Base: `name`; `drafts` sequential drafts per decoding request per iteration (None: the
    iteration's largest verify length); `needs_confidence`: uses per-step survivals;
    `independent`: a row's verify length does not depend on the other rows (while the token
    cap does not bind); `lag`: iterations between a budget's confidences and its use;
    `stateful`: keeps state across iterations (`observe`), so only the per-iteration engines
    (reference, paged) run it, one iteration at a time (C = 1); `reserves_drafts` (stateful
    policies only): as vLLM, the token budget holds every scheduled draft before prefill
    chunks are cut, whatever is verified in the end."""

    name = "policy"
    speculative = True
    needs_confidence = False
    needs_accepted = False
    independent = False
    lag = 0
    stateful = False
    reserves_drafts = False
    drafts: int | None = 0

    def verify(self, cols: Columns, cost: IterationCost) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def plan(self, surv: np.ndarray, cap: int, cost: IterationCost) -> "Plan | None":
        """For an iteration whose rows have fixed survivals `surv` (R, gamma), an object giving
        the verify lengths at any prefill base; None when the decision needs more (per-step
        confidences, accepted runs, lagged budgets). Must agree exactly with `verify`."""
        return None

    def raw_budget(self, cols: Columns, cost: IterationCost) -> np.ndarray:
        """Per-iteration draft budget computed now and used `lag` iterations later."""
        return np.zeros(len(cols.base), dtype=np.int64)

    def observe(self, rows: np.ndarray, surv: np.ndarray, scheduled: int) -> None:
        """After an iteration (stateful policies): its decoding rows, their survivals (R, gamma)
        and the requests scheduled in it (decoding + prefill chunks)."""

    def scheduled_drafts(self, gamma: int) -> int:
        """Drafts each decoding request is scheduled to verify next iteration, before any
        trimming: the KV slots a paged engine allocates for them."""
        if not self.speculative:
            return 0
        return self.drafts if self.drafts is not None else gamma

    def drafts_per_iteration(self, lengths: np.ndarray) -> np.ndarray:
        """(C,) sequential drafts each decoding request makes in each iteration."""
        if self.drafts is None:
            return lengths.max(axis=1, initial=0)
        return np.full(lengths.shape[0], self.drafts, dtype=np.int64)


def memo(cache: dict, key, compute, limit: int = 64):
    """cache[key], computed on a miss; the cache is emptied when it grows past `limit`."""
    out = cache.get(key)
    if out is None:
        if len(cache) > limit:
            cache.clear()
        out = cache[key] = compute()
    return out


class Plan:
    """Verify lengths of one fixed batch composition as a function of the prefill base."""

    def lengths(self, base: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def lengths_list(self, base: int) -> list[int]:
        """`lengths` as a python list (the per-iteration engine's form); same values."""
        return self.lengths(base).tolist()


class FixedPlan(Plan):
    def __init__(self, lengths: np.ndarray) -> None:
        self._lengths = lengths
        self._list = lengths.tolist()

    def lengths(self, base: int) -> np.ndarray:
        return self._lengths

    def lengths_list(self, base: int) -> list[int]:
        return self._list


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
    lag = 2

    def __init__(self, gamma: int) -> None:
        self.drafts = gamma

    def raw_budget(self, cols, cost):
        return budget_batch(cols.surv, cols.active, cols.base, cols.cap, scheduler_sps(cols, cost))

    def verify(self, cols, cost):
        return top_k_batch(cols.surv, cols.active, np.minimum(cols.budget, np.maximum(cols.cap, 0)))

    def plan(self, surv, cap, cost):
        return LaggedPlan(RankedBatch(surv, cap), cap, cost)


class LaggedPlan(Plan):
    """dspark-lagged for one composition: the raw budget at a prefill base, and the verify
    lengths for a (lagged) budget. Used by the python loop engine, which keeps the history."""

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
        seconds = cost.step_seconds(batch) + cost.draft_seconds(np.broadcast_to(n[:, None], batch.shape),
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

    def lengths(self, base: int) -> np.ndarray:
        def compute() -> np.ndarray:
            k = self.policy._best_k(self.gain, np.array([self.r]), np.array([base]),
                                    np.array([self.cap]), self.cost)
            return np.full(self.r, int(k[0]), dtype=np.int64)
        return memo(self._by_base, base, compute)

    def lengths_list(self, base: int) -> list[int]:
        """`lengths` in plain python: the same float operations, so the same k."""
        r, cost = self.r, self.cost
        step, draft = cost.seconds_lists(r, base + r * (self.policy.gamma + 1))
        d = draft[r]
        slope = cost.slope_list(r)[r] if cost.linear else 0.0
        best_k, best = 0, -np.inf
        for k, tokens in enumerate(self._tokens):
            if r * k > self.cap:
                continue
            part = d * k if cost.per_draft else ((d + k * slope if cost.linear else d) if k > 0 else 0.0)
            rate = tokens / (step[base + r + r * k] + part)
            if rate > best:
                best, best_k = rate, k
        return [best_k] * r


_STATIC = re.compile(r"^static-(\d+)$")
_NAMED = ("ar", "mtp1", "dspark", "dspark-lagged", "goodput", "oracle", "vllm-schedule", "vllm-adaptive")
POLICY_NAMES = ("ar", "mtp1", "static-K", "dspark", "dspark-lagged", "goodput", "oracle",
                "vllm-schedule", "vllm-adaptive")


def check_policy_name(name: str) -> str:
    """Validate a policy name; raises InputError (field 'policy') when unknown."""
    if name in _NAMED:
        return name
    m = _STATIC.match(name)
    if m and int(m.group(1)) >= 1:
        return name
    raise InputError(f"unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)} "
                     f"(K >= 1)", field="policy")


def make_policy(name: str, gamma: int, schedule=None, hw=None) -> Policy:
    """A fresh policy instance (policies may keep per-replica state) for drafter depth `gamma`.
    `schedule` (a spec_config.BatchSchedule) is vllm-schedule's; `hw` gives vllm-adaptive the
    engine limits its cost tables cover."""
    check_policy_name(name)
    if name.startswith("vllm-"):
        from .vllm_policies import AdaptiveVerification, BatchSizeSchedule
        if name == "vllm-adaptive":
            return AdaptiveVerification(gamma, getattr(hw, "max_batch_requests", None) or 256,
                                        getattr(hw, "max_batch_tokens", None) or 8192)
        if schedule is None:
            raise InputError("vllm-schedule needs a batch-size schedule (--bs-schedule)",
                             field="bs-schedule")
        return BatchSizeSchedule(schedule)
    if name == "ar":
        return NoSpeculation()
    if name == "mtp1":
        return StaticK(1, "mtp1")
    if name.startswith("static-"):
        k = int(name.split("-")[1])
        if k > gamma:
            raise InputError(f"{name} verifies {k} drafts but the acceptance profile drafts "
                             f"only gamma = {gamma}", field="policy")
        return StaticK(k, name)
    return {"dspark": DSpark, "dspark-lagged": DSparkLagged, "goodput": Goodput,
            "oracle": Oracle}[name](gamma)
