"""Hardware-aware verification for one request: Algorithm 1 (method.md section 4) at R = 1.

The decode core's loop (`speculative_generate`) drafts gamma tokens and asks a `verify_len`
hook how many of them to verify. Here the hook is DSpark's scheduler with one decoding
request: from the draft's calibrated confidences c_1..c_gamma it admits drafts in order while
the expected tokens per iteration, 1 + a_1 + ... + a_l, times the engine's iterations per
second at 1 + l batch tokens keeps growing. The engine's curve is a hardware profile's step
time plus the drafter's draft step and the attention over the request's current context
(the same view `IterationCost.scheduler_sps` gives the simulator). Verifying fewer drafts never
changes the output: the loop stays lossless.

With `skip_drafting`, the hook is also the loop's draft gate: after a step whose confidences say
drafting does not pay (no k with (1 + a_1 + ... + a_k) / (S(k + 1) + draft) above the plain
step's 1 / S(1), a_k = c_1 ... c_k; this includes every step where the scheduler verified
nothing), the next draft step is skipped (the step is a plain decoding step), and the
skip grows 1, 2, 4, ... up to `max_skip` steps while the scheduler keeps verifying nothing; the
first step that verifies a draft resets it. The gate reads only earlier steps' decisions, never
the current step's drafts, so the output is still exactly the target's; what it saves is the
draft step the scheduler would have thrown away (on this CPU ~12 ms of a ~55-80 ms step).
"""
from __future__ import annotations

import numpy as np

from ..decode.context import Context
from ..decode.drafters.base import Draft
from ..profiles.hardware import HardwareProfile
from ..sim.costs import IterationCost
from ..sim.schedule import prefix_schedule


class ScheduledVerify:
    """A `verify_len` hook: how many drafts one request verifies this step.

    Drafts without confidences (no confidence head) are all verified."""

    def __init__(self, hw: HardwareProfile, drafter_kind: str, gamma: int, *,
                 skip_drafting: bool = False, max_skip: int = 16) -> None:
        if gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {gamma}")
        if max_skip < 1:
            raise ValueError(f"max_skip must be >= 1, got {max_skip}")
        self.skip_drafting, self.max_skip = skip_drafting, max_skip
        self._backoff = 0        # steps skipped after the latest zero decision
        self._skip_left = 0
        cost = IterationCost(hw, drafter_kind, scheduler_drafts=gamma)
        # seconds of one iteration at 0..gamma+1 batch tokens with one request, without context
        self._fixed_s = cost.step_seconds(np.arange(gamma + 2)) + cost.scheduler_fixed_s(1)
        self._plain_s = float(cost.step_seconds(np.array([1]))[0])   # no draft step
        self._per_context_s = cost.per_context
        self.decisions: list[int] = []

    def sps(self, batch_tokens: np.ndarray, context_tokens: int) -> np.ndarray:
        """Iterations per second at `batch_tokens` (1..gamma+1) for a request with that context."""
        return 1.0 / (self._fixed_s[np.asarray(batch_tokens, dtype=np.int64)]
                      + self._per_context_s * context_tokens)

    def __call__(self, draft: Draft, ctx: Context) -> int:
        if draft.confidence is None or len(draft) == 0:
            self.decisions.append(len(draft))
            return len(draft)
        conf = draft.confidence.float().cpu().numpy()
        context = len(ctx.tokens)
        l = int(prefix_schedule(conf[None, :], lambda b: self.sps(b, context))[0])
        self.decisions.append(l)
        if self.skip_drafting:
            pays = self.drafting_pays(conf, context)
            self._backoff = 0 if pays else min(max(1, 2 * self._backoff), self.max_skip)
            self._skip_left = self._backoff
        return l

    def drafting_pays(self, confidence: np.ndarray, context_tokens: int) -> bool:
        """Whether a draft step with these conditional confidences beats a plain step (no draft
        step paid) in expected tokens per second, for the best number of verified drafts."""
        survival = np.cumprod(np.asarray(confidence, dtype=float))
        spec = (1.0 + np.cumsum(survival)) * self.sps(np.arange(2, len(survival) + 2), context_tokens)
        return bool(spec.max(initial=0.0) > 1.0 / (self._plain_s + self._per_context_s * context_tokens))

    def draft_gate(self, ctx: Context) -> bool:
        """Whether the loop should draft this step (`speculative_generate(draft_gate=...)`)."""
        if self._skip_left > 0:
            self._skip_left -= 1
            return False
        return True
