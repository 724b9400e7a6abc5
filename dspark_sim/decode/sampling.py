"""Logit warping shared by the target and every drafter: temperature, top-k, top-p.

Speculative sampling is exact only if the target's p and the drafter's q are warped by the
same function, so both sides call `Sampling.probs` and nothing else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import InputError


@dataclass(frozen=True)
class Sampling:
    """How a token is chosen from logits. temperature 0 = greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0          # keep the k most likely tokens; 0 = off
    top_p: float = 1.0      # keep the smallest set whose probability reaches top_p; 1 = off

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise InputError(f"must be a number >= 0 (0 = greedy), got {self.temperature}",
                             field="--temperature")
        if self.top_k < 0:
            raise InputError(f"must be >= 0 (0 = off), got {self.top_k}", field="--top-k")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"must lie in (0, 1] (1 = off), got {self.top_p}", field="--top-p")

    @property
    def greedy(self) -> bool:
        """True when tokens are chosen by argmax."""
        return self.temperature == 0.0

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped float32 logits over the last dimension (removed tokens get -inf)."""
        logits = logits.float()
        if self.greedy:
            return logits
        logits = logits / self.temperature
        vocab = logits.shape[-1]
        if 0 < self.top_k < vocab:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            sorted_probs = torch.softmax(sorted_logits, dim=-1)
            # Drop a token when the tokens before it already reach top_p (the first is always kept).
            drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= self.top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return logits

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Token probabilities after warping; one-hot on the argmax when greedy."""
        if self.greedy:
            top = logits.argmax(dim=-1, keepdim=True)
            return torch.zeros_like(logits, dtype=torch.float32).scatter(-1, top, 1.0)
        return torch.softmax(self.warp(logits), dim=-1)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One token per row of `logits` (..., V) -> (...): argmax when greedy, else a draw."""
        if self.greedy:
            return logits.argmax(dim=-1)
        return sample_from(self.probs(logits), generator)


def sample_from(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One draw per row of a (..., V) probability tensor -> (...) token ids.

    Exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) picks i with probability p_i
    (the Gumbel-max trick in ratio form); zero-probability tokens are never picked.
    """
    race = torch.empty_like(probs, dtype=torch.float32).exponential_(generator=generator)
    race.clamp_min_(torch.finfo(torch.float32).tiny)      # 0 / 0 would be NaN, which argmax picks
    return (probs.float() / race).argmax(dim=-1)
