"""What every speculation policy is: the inputs it sees (`PolicyInputs`), the `Policy` base, and
per-composition `Plan`s (the loop and block engines' fast path).

Every policy decides for C iterations at once (vectorised) given the same R rows:
`verify(inputs, cost) -> (C, R)` verify lengths, 0 for rows not in an iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost.iteration import IterationCost
from .lag import LaggedBudgets

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class PolicyInputs:
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


def scheduler_sps(cols: "PolicyInputs", cost: IterationCost):
    """SPS callable for the scheduler over C iterations: batch tokens (C, n) -> iterations per
    second, each iteration at its own number of decoding requests."""
    requests = cols.active.sum(axis=1)[:, None]
    return lambda b: cost.scheduler_sps(b, requests)


def cap_in_order(lengths: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Trim verify lengths so each iteration's total fits `cap`; earlier rows keep theirs first."""
    before = np.cumsum(lengths, axis=1) - lengths
    return np.clip(cap[:, None] - before, 0, lengths)


def cap_in_order_list(lengths: list[int], cap: int) -> list[int]:
    """`cap_in_order` of one iteration in plain python (the loop engine's form)."""
    out = []
    for length in lengths:
        take = min(length, max(cap, 0))
        out.append(take)
        cap -= take
    return out


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
    lagged: LaggedBudgets | None = None      # a lagged policy's budget history (lag.py)
    stateful = False
    reserves_drafts = False
    drafts: int | None = 0

    def verify(self, cols: PolicyInputs, cost: IterationCost) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def decide(self, cols: PolicyInputs, cost: IterationCost,
               history: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Verify lengths (C, R) and, for a lagged policy, the raw budgets (C,) of consecutive
        iterations; `history`: the lagged policy's raw budgets before them (default: committed,
        see `commit`)."""
        c, r = cols.active.shape
        if r == 0:
            return np.zeros((c, 0), dtype=np.int64), np.zeros(c if self.lag else 0, dtype=np.int64)
        raw = _EMPTY
        if self.lag:
            raw = self.raw_budget(cols, cost)
            cols.budget = self.lagged.budgets(raw, history)
        return self.verify(cols, cost), raw

    def commit(self, raw: np.ndarray) -> None:
        """Iterations whose raw budgets are `raw` (from `decide`) ran: a lagged policy records them."""
        if self.lag:
            self.lagged.commit(raw)

    def plan(self, surv: np.ndarray, cap: int, cost: IterationCost) -> "Plan | None":
        """For an iteration whose rows have fixed survivals `surv` (R, gamma), an object giving
        the verify lengths at any prefill base; None when the decision needs more (per-step
        confidences, accepted runs, lagged budgets). Must agree exactly with `verify`."""
        return None

    def plans_apply(self, cost: IterationCost, gamma: int, static_confidence: bool) -> bool:
        """Do per-composition plans give this policy's verify lengths, i.e. does its decision
        depend only on who is in the batch? Not when it reads per-step confidences (unless the
        acceptance profile's confidences are static, `static_confidence`)."""
        return (static_confidence or not self.needs_confidence) and \
            self.plan(np.zeros((1, gamma)), 1, cost) is not None

    def raw_budget(self, cols: PolicyInputs, cost: IterationCost) -> np.ndarray:
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
        return self.most_drafts(gamma)

    def most_drafts(self, gamma: int) -> int:
        """Sequential drafts per decoding request an iteration makes at most: the policy's fixed
        number, or the drafter's depth when it varies (the scheduler's cost view assumes it)."""
        return self.drafts if self.drafts is not None else gamma

    def drafts_made(self, lengths) -> int:
        """Sequential drafts each decoding request makes in an iteration verifying `lengths`: the
        policy's fixed number, or (drafts None) the iteration's largest verify length."""
        if self.drafts is None:
            return max(lengths, default=0)
        return self.drafts

    def drafts_per_iteration(self, lengths: np.ndarray) -> np.ndarray:
        """`drafts_made` of C iterations at once: lengths (C, R) -> (C,)."""
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
