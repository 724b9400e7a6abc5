"""Multi-turn traffic (`trace generate --multi-turn chat|agent`): conversations whose turns extend
one another, behind a system prompt every conversation shares.

A conversation starts at each arrival of the arrival model; it has 1 + Poisson(turns - 1) turns.
Turn k's prompt is the system prompt, then every earlier turn's message and answer, then its own
user message: prompt_k = prompt_{k-1} + output_{k-1} + message_k. Turn k+1 arrives an exponential
think time (mean `think_s`) after turn k. Requests carry `conversation` (the turns' shared stream)
and `hash_ids` + `hash_block_tokens` for the system prompt (one block of its length, id 0), the
formats.md fields prefix caching reads. `chat`: a short system prompt, a few long turns; `agent`:
a long tool/system prefix and many short turns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .schema import MAX_TOKENS, Trace


@dataclass(frozen=True)
class MultiTurn:
    """Shape of the conversations."""

    turns: float = 5.0            # mean turns per conversation (>= 1)
    think_s: float = 20.0         # mean seconds between a turn's arrival and the next's
    system_tokens: int = 300      # shared system prompt (0: none)
    message_mean: float = 150.0   # mean tokens of a user message (lognormal, CV 1)
    output_mean: float = 150.0    # mean tokens of an answer (lognormal, CV 1)
    max_prompt: int = 4096        # a conversation ends before a turn's prompt would pass this

    def __post_init__(self) -> None:
        for name in ("turns", "think_s", "message_mean", "output_mean"):
            if not getattr(self, name) > 0:
                raise InputError(f"must be > 0, got {getattr(self, name)}", field=name.replace("_", "-"))
        if self.turns < 1:
            raise InputError(f"must be >= 1, got {self.turns}", field="turns")
        if not 0 <= self.system_tokens < self.max_prompt <= MAX_TOKENS:
            raise InputError(f"need 0 <= system tokens < max prompt, got {self.system_tokens} "
                             f"and {self.max_prompt}", field="system-tokens")


PRESETS = {
    "chat": MultiTurn(turns=5, think_s=20.0, system_tokens=300, message_mean=150, output_mean=150),
    "agent": MultiTurn(turns=20, think_s=2.0, system_tokens=2000, message_mean=40, output_mean=60),
}


def _lognormal(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    sigma2 = np.log(2.0)                       # CV 1
    x = rng.lognormal(np.log(mean) - sigma2 / 2, np.sqrt(sigma2), n)
    return np.maximum(np.rint(x), 1).astype(np.int64)


def generate_conversations(starts: np.ndarray, shape: MultiTurn, task: str, seed: int,
                           name: str = "multi-turn") -> Trace:
    """Turns of conversations starting at `starts` (seconds), sorted by arrival."""
    rng = np.random.default_rng([seed, 0x7C0])
    rows: list[tuple[float, int, int, int]] = []     # (arrival, prompt, output, conversation)
    for c, start in enumerate(np.asarray(starts, dtype=float)):
        turns = 1 + int(rng.poisson(shape.turns - 1))
        messages = _lognormal(rng, shape.message_mean, turns)
        outputs = _lognormal(rng, shape.output_mean, turns)
        gaps = rng.exponential(shape.think_s, turns)
        t, prompt = float(start), shape.system_tokens
        for k in range(turns):
            prompt += int(messages[k])
            if prompt > shape.max_prompt:
                break
            rows.append((t, prompt, int(outputs[k]), c))
            prompt += int(outputs[k])
            t += float(gaps[k])
    if not rows:
        raise InputError("no turn fits --max-prompt", field="max-prompt")
    order = sorted(range(len(rows)), key=lambda i: (rows[i][0], i))
    arrival = np.array([rows[i][0] for i in order])
    conv = np.empty(len(order), dtype=object)
    conv[:] = [f"c{rows[i][3]}" for i in order]
    hashes = np.empty(len(order), dtype=object)
    if shape.system_tokens:
        hashes[:] = [(0,)] * len(order)
    return Trace(ids=np.array([f"c{rows[i][3]}.{i}" for i in order], dtype=object),
                 arrival_s=arrival - arrival[0],
                 prompt_tokens=np.array([rows[i][1] for i in order], dtype=np.int64),
                 output_tokens=np.array([rows[i][2] for i in order], dtype=np.int64),
                 task=np.full(len(order), task, dtype=object), name=name, conversation=conv,
                 hash_ids=hashes if shape.system_tokens else None,
                 hash_block_tokens=np.full(len(order), shape.system_tokens, dtype=np.int64)
                 if shape.system_tokens else None)
