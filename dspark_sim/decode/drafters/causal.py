"""Causal self-attention caches for the autoregressive drafters (MTP-1, Eagle3)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CausalState:
    """Keys/values of the drafter's own entries for committed positions 0..n-1."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    n: int = 0
    last_hidden: torch.Tensor | None = None   # drafter output at the last committed entry

    def kv(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None if self.k is None else (self.k, self.v)

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        self.n += k.shape[2]


def causal_segment_mask(segment: torch.Tensor) -> torch.Tensor:
    """[B, L, L] True where key j <= query i and both lie in the same packed document."""
    L = segment.shape[1]
    idx = torch.arange(L, device=segment.device)
    same = segment.unsqueeze(2) == segment.unsqueeze(1)
    return same & (idx.unsqueeze(1) >= idx.unsqueeze(0))


def extend_mask(n_cached: int, n_new: int, device: torch.device) -> torch.Tensor:
    """[1, n_new, n_cached + n_new]: new entries see the whole cache and earlier new entries."""
    own = torch.ones(n_new, n_new, dtype=torch.bool, device=device).tril()
    cache = torch.ones(n_new, n_cached, dtype=torch.bool, device=device)
    return torch.cat([cache, own], dim=1).unsqueeze(0)
