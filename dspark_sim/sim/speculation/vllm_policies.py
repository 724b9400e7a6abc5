"""vLLM 0.32's own speculation policies, each owning its state across iterations.

- `vllm-schedule`: the batch-size schedule (`num_speculative_tokens_per_batch_size`). vLLM's
  scheduler looks K up at the number of requests it schedules in step n and the drafter
  proposes K drafts, which step n+1 verifies (`vllm/v1/core/sched/scheduler.py`): a row
  verifies K(batch size of the previous iteration), trimmed to the token budget.
- `vllm-adaptive`: DSpark adaptive verification
  (`vllm/v1/worker/gpu/spec_decode/adaptive_verification.py`, `get_num_tokens` and
  `reallocate_drafts`). The draft budget is chosen from *stale* survivals, those of the drafts
  the previous iteration verified (all 1.0 for a request that did not decode then): the
  scores are sorted descending, and with S requests sampling this step, N scheduled requests
  and T non-draft tokens, budget = argmax_n (S + sum of the n best scores) /
  (draft_ms[N] + verify_ms[T + n]) (first maximum). The step then admits the `budget` best
  *current* survivals (top-k). The cost tables are vLLM's (cost_tables.py).

Both are `stateful`: they run in the per-iteration engines only (reference, paged). Both
`reserves_drafts`, as vLLM's scheduler does: decoding requests are given 1 + their scheduled
drafts of the token budget before prefill chunks take the rest, so drafts that adaptive
verification trims afterwards do not go to prefill; the policy then sees the prefill exactly.
`static-K` is vLLM's fixed `num_speculative_tokens = K` (policies.py; registry.py names every policy).
"""
from __future__ import annotations

import numpy as np

from ..cost.iteration import IterationCost
from .base import Policy, PolicyInputs, cap_in_order
from .prefix_schedule import top_k_batch
from .spec_config import BatchSchedule


class BatchSizeSchedule(Policy):
    """Verify K(previous iteration's scheduled requests) drafts per decoding request."""

    name = "vllm-schedule"
    stateful = True
    reserves_drafts = True
    drafts = None              # drafts proposed = the scheduled K (the iteration's largest length)

    def __init__(self, schedule: BatchSchedule) -> None:
        self.schedule = schedule
        self.last_batch = 0     # requests scheduled in the previous iteration (0: none yet)

    def verify(self, cols: PolicyInputs, cost: IterationCost) -> np.ndarray:
        batch = self.last_batch or int(cols.active[0].sum() + cols.others[0])
        k = self.schedule.k_at(batch)
        return cap_in_order(np.where(cols.active, k, 0), cols.cap)

    def observe(self, rows, surv, scheduled: int) -> None:
        self.last_batch = scheduled

    def scheduled_drafts(self, gamma: int) -> int:
        if not self.last_batch:
            return self.schedule.num_speculative_tokens
        return self.schedule.k_at(self.last_batch)


class AdaptiveVerification(Policy):
    """vLLM's DSpark adaptive verification: budget from stale survivals, top-budget admission."""

    name = "vllm-adaptive"
    stateful = True
    reserves_drafts = True
    needs_confidence = True

    def __init__(self, gamma: int, max_requests: int, max_batch_tokens: int) -> None:
        self.drafts = self.gamma = gamma
        self.max_requests, self.max_batch_tokens = max_requests, max_batch_tokens
        self.stale: dict[int, np.ndarray] = {}     # rid -> survivals the previous iteration verified

    def budget(self, cols: PolicyInputs, cost: IterationCost) -> int:
        """The draft budget of the (single) iteration in `cols`."""
        rows = cols.rows
        r = len(rows)
        ones = np.ones(self.gamma)
        stale = np.stack([self.stale.get(int(rid), ones) for rid in rows]) if r else np.zeros((0, self.gamma))
        scores = np.sort(stale.ravel())[::-1]
        max_budget = int(min(r * self.gamma, max(int(cols.cap[0]), 0)))
        scores = scores[:max_budget]
        sampling = r + int(cols.others_sampling[0])
        requests = r + int(cols.others[0])
        non_draft = r + int(cols.base[0])
        draft_ms, verify_ms = cost.vllm_tables(max(self.max_requests, requests),
                                               max(self.max_batch_tokens, non_draft + max_budget),
                                               requests, non_draft + max_budget)
        tokens = np.concatenate(([sampling], sampling + np.cumsum(scores)))
        costs = draft_ms[requests] + verify_ms[non_draft:non_draft + max_budget + 1]
        return int(np.argmax(tokens / costs))

    def verify(self, cols: PolicyInputs, cost: IterationCost) -> np.ndarray:
        if cols.active.shape[0] != 1:
            raise ValueError("vllm-adaptive decides one iteration at a time")
        return top_k_batch(cols.surv, cols.active, np.array([self.budget(cols, cost)]))

    def observe(self, rows, surv, scheduled: int) -> None:
        self.stale = {int(rid): surv[k] for k, rid in enumerate(np.asarray(rows).tolist())}
