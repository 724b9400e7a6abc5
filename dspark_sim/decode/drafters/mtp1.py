"""MTP-1 (DeepSeek-V3 style multi-token prediction, depth 1).

Entry i reads M[norm(embed(x_{i+1})) ; norm(h_last_i)] (h_last = the target's pre-norm last
hidden state), runs one causal transformer layer over the drafter's own entries, and
predicts x_{i+2} through the frozen LM head. It drafts one token per step.
"""
from __future__ import annotations

import torch
from torch import nn

from .causal import CausalState, causal_segment_mask, extend_mask
from .config import DrafterConfig
from .layers import DecoderLayer
from .module import DrafterModule


class MTP1Drafter(DrafterModule):
    """One-token drafter on the target's last hidden state."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__(cfg)
        d = cfg.hidden_size
        self.embed_norm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.fuse = nn.Linear(2 * d, d, bias=False)
        self.layer = DecoderLayer(cfg)
        self.norm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)

    def inputs(self, next_tokens: torch.Tensor, last_hidden: torch.Tensor) -> torch.Tensor:
        emb = self.frozen.embed(next_tokens).to(self.fuse.weight.dtype)
        hid = last_hidden.to(self.fuse.weight.dtype)
        return self.fuse(torch.cat([self.embed_norm(emb), self.hidden_norm(hid)], dim=-1))

    def output_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits through the final norm and the frozen LM head."""
        return self.head_logits(self.norm(h))

    # ---- training ---------------------------------------------------------------------------
    def forward_train(self, last_hidden: torch.Tensor, tokens: torch.Tensor,
                      segment: torch.Tensor) -> torch.Tensor:
        """Outputs h [B, L, d]; entry i predicts x_{i+2} (its last entry has no next token)."""
        b, L = tokens.shape
        nxt = torch.zeros_like(tokens)
        nxt[:, :-1] = tokens[:, 1:]
        pos = torch.arange(L, device=tokens.device).expand(b, L)
        return self.layer(self.inputs(nxt, last_hidden), pos, causal_segment_mask(segment))

    # ---- inference ---------------------------------------------------------------------------
    def new_state(self) -> CausalState:
        return CausalState()

    def extend(self, state: CausalState, last_hidden: torch.Tensor, next_tokens: torch.Tensor) -> None:
        """Add entries for new positions: target last hidden [n, d] and the token after each."""
        n = last_hidden.shape[0]
        if n == 0:
            return
        dev = last_hidden.device
        x = self.inputs(next_tokens.unsqueeze(0), last_hidden.unsqueeze(0))
        pos = torch.arange(state.n, state.n + n, device=dev).unsqueeze(0)
        h, (k, v) = self.layer.forward_kv(x, pos, extend_mask(state.n, n, dev), state.kv())
        state.append(k, v)
        state.last_hidden = h[0, -1]
