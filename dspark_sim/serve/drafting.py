"""The engine's draft step: one drafter instance per request, and the survivals a policy sees.

Drafters keep per-request state (their own KV of the request's context), so every request
gets its own shallow copy of the loaded drafter: the weights are shared, `begin` gives the
copy fresh state. Drafting is per request, one after another (the drafter modules work on one
request); its cost per iteration therefore grows with the number of decoding requests, which
is what the profiler times (`draft_time` by request count).
"""
from __future__ import annotations

import copy

import numpy as np
import torch

from ..decode.context import Context
from ..decode.drafters.base import Draft, Drafter
from ..decode.sampling import Sampling
from ..sim.core.rules import survivals


class DraftPool:
    """Per-request drafters made from one prototype."""

    def __init__(self, prototype: Drafter, device: torch.device) -> None:
        self.prototype = prototype
        self.device = device
        self._by_request: dict[int, Drafter] = {}

    @property
    def taps(self) -> tuple[int, ...]:
        return self.prototype.taps

    @property
    def kind(self) -> str:
        return self.prototype.kind

    def begin(self, rid: int, ctx: Context) -> None:
        """Start request `rid` (its context holds the prompt and the first token)."""
        drafter = copy.copy(self.prototype)
        drafter.begin(ctx)
        self._by_request[rid] = drafter

    def end(self, rid: int) -> None:
        """Drop a finished request's drafter state."""
        self._by_request.pop(rid, None)

    def propose(self, rids: list[int], contexts: list[Context], k: list[int], sampling: Sampling,
                generator: torch.Generator | None) -> list[Draft]:
        """Up to k[i] drafts for each request (0: no drafting, an empty draft)."""
        return [self._by_request[rid].propose(ctx, n, sampling, generator) if n > 0
                else Draft.empty(self.device) for rid, ctx, n in zip(rids, contexts, k)]


def draft_survival(draft: Draft, mean: np.ndarray) -> np.ndarray:
    """Survivals a[j] (gamma,) of one request's draft for the scheduler: from the drafter's
    confidences when it has a head, else from the task's mean acceptance (`mean`, survivals);
    0 beyond the drafts actually proposed (they cannot be verified)."""
    gamma = len(mean)
    k = min(len(draft), gamma)
    out = np.zeros(gamma)
    if draft.confidence is not None:
        out[:k] = survivals(draft.confidence[:k].float().cpu().numpy())
    else:
        out[:k] = mean[:k]
    return out
