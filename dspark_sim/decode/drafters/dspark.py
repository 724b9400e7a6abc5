"""DSpark: the DFlash backbone + a sequential head (Markov or RNN) + a confidence head.

Draft distribution at slot k: softmax(U_k + B_k(x_{k-1})), sampled left to right with
x_0 = anchor; the confidence head predicts, from [h_k ; W1[x_{k-1}]], the conditional
probability that draft k survives verification given drafts 1..k-1 did.
"""
from __future__ import annotations

import torch

from .config import DrafterConfig
from .dflash import BlockDrafter
from .seqheads import ConfidenceHead, build_seq_head


class DSparkDrafter(BlockDrafter):
    """Semi-autoregressive block drafter."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__(cfg)
        self.seq_head = build_seq_head(cfg, self.vocab.size)
        self.conf_head = ConfidenceHead(cfg) if cfg.confidence else None

    def prev_embed(self, prev_tokens: torch.Tensor, like: torch.Tensor) -> torch.Tensor | None:
        """W1[x_{k-1}] of previous tokens (token ids), or None without a sequential head."""
        if self.seq_head is None:
            return None
        return self.seq_head.prev_embed(self.vocab.index(prev_tokens)).to(like.dtype)

    def block_bias(self, h: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor | None:
        """Teacher-forced sequential biases B [..., gamma, Vd] (training), None without a head."""
        if self.seq_head is None:
            return None
        return self.seq_head.block_bias(self.vocab.index(prev_tokens), h)

    def confidence_logits(self, h: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor | None:
        """Raw confidence logits [..., gamma] given the previous tokens of every slot."""
        if self.conf_head is None:
            return None
        return self.conf_head(h, self.prev_embed(prev_tokens, h))
