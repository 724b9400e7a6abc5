"""Hardware-aware verification for one request: Algorithm 1 (method.md section 4) at R = 1.

The decode core's loop (`speculative_generate`) drafts gamma tokens and asks a `verify_len`
hook how many of them to verify. Here the hook is DSpark's scheduler with one decoding
request: from the draft's calibrated confidences c_1..c_gamma it admits drafts in order while
the expected tokens per iteration, 1 + a_1 + ... + a_l, times the engine's iterations per
second at 1 + l batch tokens keeps growing. The engine's curve is a hardware profile's step
time plus the drafter's draft step and the attention over the request's current context
(the same view `IterationCost.scheduler_sps` gives the simulator). Verifying fewer drafts never
changes the output: the loop stays lossless.

The hook also sets the loop's draft budget (`draft_budget`): how many drafts to propose. It is
the depth the scheduler could ever admit on this curve, the l at which its early-stopping search
stops when every confidence is 1 (on this CPU's decode loop the 4th token of a verify step costs
far more than the 3rd, so at short contexts that depth is 2 of gamma 7), capped at one more than
the most drafts it verified in its last `RECENT` draft steps. Drafts beyond it would not be
verified, and a block drafter asked for fewer drafts runs a shorter block, at a fraction of the
cost; every step is priced with the draft step of the drafts it made.

With `skip_drafting`, the budget is also the loop's draft gate. Each draft step's gain of
drafting over a plain step that skips it, g = max over k of (1 + a_1 + ... + a_k) S(1) /
(S(k + 1) + draft) - 1 (a_k = c_1 ... c_k), enters a running mean G <- (1 - s) G + s g
(`smoothing` s). While G < 0 the next draft step is skipped (budget 0: a plain decoding step),
the skip growing 1, 2, 4, ... up to `max_skip` steps while the probes keep G below 0; a probe
that lifts it resets the back-off. With s = 1 the latest step alone decides. The gate reads only
earlier steps, never the current step's drafts, so the output is still exactly the target's;
what it saves is draft steps the scheduler would have thrown away (on this CPU 7-16 ms of a
68-150 ms step).

With `lagged`, the hook is method.md's production variant for jagged step curves: the number of
drafts a step verifies is the budget K that an unconstrained search (global maximum over l of
(1 + a_1 + ... + a_l) x SPS(1 + l), no early stop) found on the previous draft step's
confidences; the first draft step uses Algorithm 1 on its own. K never reads the current
step's drafts, so the output is still exactly the target's, at any temperature. Algorithm 1's
early stop ends the search at the first l that does not pay, so on a curve where 4 tokens cost
less than 2 or 3 (an AVX-512 EPYC's decode loop: 39 / 63 / 80 / 59 ms at 1 / 2 / 3 / 4) it can
never reach l = 3; the lagged budget can. Its draft budget is the unconstrained depth (the l
that maximises (1 + l) x SPS(1 + l)), so the confidences that size the next K go that deep.
"""
from __future__ import annotations

import numpy as np

from ..decode.context import Context
from ..decode.drafters.base import Draft
from ..profiles.hardware import HardwareProfile
from ..sim.cost.iteration import IterationCost
from ..sim.speculation.prefix_schedule import prefix_schedule


RECENT = 8        # draft steps whose verified counts cap the next draft budget
SMOOTHING = 0.3   # weight of the latest step in the gate's running gain (chosen by replay, below)


class ScheduledVerify:
    """A `verify_len` hook: how many drafts one request verifies this step; `draft_budget` is
    the loop's matching draft hook.

    Drafts without confidences (no confidence head) are all verified."""

    def __init__(self, hw: HardwareProfile, drafter_kind: str, gamma: int, *,
                 skip_drafting: bool = False, max_skip: int = 16, smoothing: float = SMOOTHING,
                 lagged: bool = False, recent: int = RECENT) -> None:
        if gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {gamma}")
        if max_skip < 1:
            raise ValueError(f"max_skip must be >= 1, got {max_skip}")
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if recent < 1:
            raise ValueError(f"recent must be >= 1, got {recent}")
        self.gamma = gamma
        self.skip_drafting, self.max_skip, self.smoothing = skip_drafting, max_skip, smoothing
        self.lagged, self.recent = lagged, recent
        self._lagged_k: int | None = None   # budget found on the previous draft step's confidences
        self._gain: float | None = None   # smoothed relative gain of drafting over a plain step
        self._backoff = 0        # steps skipped after the latest zero decision
        self._skip_left = 0
        cost = IterationCost(hw, drafter_kind, scheduler_drafts=gamma)
        step = cost.step_seconds(np.arange(gamma + 2))
        # seconds of one iteration at 0..gamma+1 batch tokens with one request, without context,
        # by the drafts made (a block drafter's draft step costs less with fewer drafts)
        self._fixed_s = {d: step + float(cost.requests_seconds(np.array([1]), np.array([d]))[0])
                         for d in range(1, gamma + 1)}
        self._plain_s = float(step[1])                      # no draft step
        self._per_context_s = cost.per_context
        self.decisions: list[int] = []

    def sps(self, batch_tokens: np.ndarray, context_tokens: int, drafts: int | None = None
            ) -> np.ndarray:
        """Iterations per second at `batch_tokens` (1..gamma+1) for a request with that context,
        after a draft step that made `drafts` drafts (default gamma)."""
        fixed = self._fixed_s[min(drafts or self.gamma, self.gamma)]
        return 1.0 / (fixed[np.asarray(batch_tokens, dtype=np.int64)] + self._per_context_s * context_tokens)

    def step_seconds(self, width: int, context_tokens: int, drafts: int) -> float:
        """Seconds of a step that verifies width - 1 drafts after a draft step of `drafts` drafts
        (0: a plain step of one token, no draft step), as the scheduler prices it."""
        if drafts == 0:
            return self._plain_s + self._per_context_s * context_tokens
        return float(1.0 / self.sps(np.array([width]), context_tokens, drafts)[0])

    def depth(self, context_tokens: int) -> int:
        """The most drafts the scheduler could admit at this context: where its early-stopping
        search over tau x SPS stops when every survival is 1 (tau = 1 + l at 1 + l tokens)."""
        widths = np.arange(1, self.gamma + 2)
        value = widths * self.sps(widths, context_tokens)
        if self.lagged:                  # the unconstrained search's depth: the global maximum
            return max(1, int(value.argmax()))
        worse = value[1:] <= value[:-1]
        return max(1, int(worse.argmax())) if worse.any() else self.gamma

    def __call__(self, draft: Draft, ctx: Context) -> int:
        if draft.confidence is None or len(draft) == 0:
            self.decisions.append(len(draft))
            return len(draft)
        conf = draft.confidence.float().cpu().numpy()
        context = len(ctx.tokens)
        def schedule(early_stop: bool) -> int:
            return int(prefix_schedule(conf[None, :], lambda b: self.sps(b, context, len(conf)),
                                       early_stop=early_stop)[0])
        if self.lagged:
            l = schedule(True) if self._lagged_k is None else min(self._lagged_k, len(conf))
            self._lagged_k = schedule(False)      # sized now, used by the next draft step
        else:
            l = schedule(True)
        self.decisions.append(l)
        if self.skip_drafting:
            gain = self.drafting_gain(conf, context)
            self._gain = gain if self._gain is None else \
                (1.0 - self.smoothing) * self._gain + self.smoothing * gain
            pays = self._gain > 0.0
            self._backoff = 0 if pays else min(max(1, 2 * self._backoff), self.max_skip)
            self._skip_left = self._backoff
        return l

    def drafting_gain(self, confidence: np.ndarray, context_tokens: int) -> float:
        """Expected tokens per second of a draft step with these conditional confidences, for the
        best number of verified drafts, over a plain step's (no draft step paid), minus 1."""
        survival = np.cumprod(np.asarray(confidence, dtype=float))
        spec = (1.0 + np.cumsum(survival)) * self.sps(np.arange(2, len(survival) + 2), context_tokens,
                                                      len(survival))
        plain = 1.0 / (self._plain_s + self._per_context_s * context_tokens)
        return float(spec.max(initial=0.0) / plain - 1.0)

    def draft_budget(self, ctx: Context) -> int:
        """Drafts the loop should propose this step (`speculative_generate(draft_budget=...)`):
        0 while the skip-drafting back-off lasts; else the scheduler's `depth`, capped at one
        more than the most drafts it verified in the last `recent` draft steps (so the budget
        can grow by one a step while the drafts keep being verified in full; not capped when
        `lagged`, whose next budget needs the deep confidences)."""
        if self._skip_left > 0:
            self._skip_left -= 1
            return 0
        budget = self.depth(len(ctx.tokens))
        if self.decisions and not self.lagged:
            budget = min(budget, 1 + max(self.decisions[-self.recent:]))
        return budget
