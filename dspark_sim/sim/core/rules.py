"""The simulator's small rules, each defined once, with its scalar (python) and numpy forms side
by side where both are needed. Every engine, the scheduler and serve/'s replica use these;
tests/sim/test_layers.py greps the package for twins.
"""
from __future__ import annotations

import numpy as np


def survivals(confidence: np.ndarray) -> np.ndarray:
    """a[..., j] = prod_{i<=j} c[..., i]: probability that drafts 1..j all survive."""
    return np.cumprod(np.asarray(confidence, dtype=float), axis=-1)


def prefill_room(pending: int, budget: int, decode_tokens: int) -> int:
    """Prefill tokens an iteration may take: what `decode_tokens` leave of the token budget,
    at most the `pending` prompt tokens of the admitted requests."""
    return min(pending, max(0, budget - decode_tokens))


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
