"""The simulator's small rules, each defined once, with its scalar (python) and numpy forms side
by side where both are needed: survivals, and the tokens a decode step emits. Every engine and
serve/'s replica use these. The other rules live with the room that owns them, once each: the
prefill room (`Scheduler.prefill_room`), drafts made per step (`Policy.drafts_made`), the lag
(speculation/lag.py). tests/sim/test_layers.py greps the package for twins.
"""
from __future__ import annotations

import numpy as np


def survivals(confidence: np.ndarray) -> np.ndarray:
    """a[..., j] = prod_{i<=j} c[..., i]: probability that drafts 1..j all survive."""
    return np.cumprod(np.asarray(confidence, dtype=float), axis=-1)


def step_tokens(accepted: int, verify: int) -> int:
    """Tokens a decode step emits before the clip: 1 (the bonus or correction token) + the
    accepted drafts among the `verify` verified."""
    return 1 + min(accepted, verify)


def step_tokens_np(accepted: np.ndarray, verify: np.ndarray) -> np.ndarray:
    """`step_tokens` elementwise."""
    return 1 + np.minimum(accepted, verify)


def tokens_emitted(accepted: int, verify: int, owed: int) -> int:
    """Tokens a decode step emits: `step_tokens`, never more than the request still owes."""
    return min(step_tokens(accepted, verify), owed)


def tokens_emitted_np(accepted: np.ndarray, verify: np.ndarray, owed: np.ndarray) -> np.ndarray:
    """`tokens_emitted` elementwise."""
    return np.minimum(step_tokens_np(accepted, verify), owed)
