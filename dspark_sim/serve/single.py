"""Hardware-aware verification for one request: Algorithm 1 (method.md section 4) at R = 1.

The decode core's loop (`speculative_generate`) drafts gamma tokens and asks a `verify_len`
hook how many of them to verify. Here the hook is DSpark's scheduler with one decoding
request: from the draft's calibrated confidences c_1..c_gamma it admits drafts in order while
the expected tokens per iteration, 1 + a_1 + ... + a_l, times the engine's iterations per
second at 1 + l batch tokens keeps growing. The engine's curve is a hardware profile's step
time plus the drafter's draft step and the attention over the request's current context
(the same view `IterationCost.scheduler_sps` gives the simulator). Verifying fewer drafts never
changes the output: the loop stays lossless.
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

    def __init__(self, hw: HardwareProfile, drafter_kind: str, gamma: int) -> None:
        if gamma < 1:
            raise ValueError(f"gamma must be >= 1, got {gamma}")
        cost = IterationCost(hw, drafter_kind, scheduler_drafts=gamma)
        # seconds of one iteration at 0..gamma+1 batch tokens with one request, without context
        self._fixed_s = cost.step_seconds(np.arange(gamma + 2)) + cost.scheduler_fixed_s(1)
        self._per_context_s = cost.per_context
        self.decisions: list[int] = []

    def sps(self, batch_tokens: np.ndarray, context_tokens: int) -> np.ndarray:
        """Iterations per second at `batch_tokens` (1..gamma+1) for a request with that context."""
        return 1.0 / (self._fixed_s[np.asarray(batch_tokens, dtype=np.int64)]
                      + self._per_context_s * context_tokens)

    def __call__(self, draft: Draft, ctx: Context) -> int:
        if draft.confidence is None or len(draft) == 0:
            l = len(draft)
        else:
            conf = draft.confidence.float().cpu().numpy()[None, :]
            context = len(ctx.tokens)
            l = int(prefix_schedule(conf, lambda b: self.sps(b, context))[0])
        self.decisions.append(l)
        return l
