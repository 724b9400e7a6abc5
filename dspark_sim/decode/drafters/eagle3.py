"""Eagle3: one decoder layer, autoregressive, fed the fused target features and the
embedding of the next token; trained with a "training-time test" unroll of gamma steps.

Entry i (step 0) reads [embed(x_{i+1}) ; proj(target taps at i)] and predicts x_{i+2}.
Unroll step j reads [embed(x_{i+1+j}) ; its own step-(j-1) output at i], at position i+j,
and attends to step-0 entries <= i plus its own earlier steps at i (the keys it would
see at inference). Step j's soft cross-entropy is weighted 0.8^j.
"""
from __future__ import annotations

import torch
from torch import nn

from .causal import CausalState, causal_segment_mask, extend_mask
from .config import DrafterConfig
from .module import DrafterModule
from .layers import MLP, Attention, FeatureProjection


class Eagle3Layer(nn.Module):
    """Decoder layer whose attention reads [norm(embedding) ; norm(hidden)] (2d wide)."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.embed_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.attn = Attention(cfg, in_dim=2 * cfg.hidden_size)
        self.mlp_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        self.norm_before_residual = False     # True: the residual is the normed hidden (a variant
                                              # of published EAGLE-3 checkpoints)

    def forward(self, emb: torch.Tensor, hidden: torch.Tensor, pos: torch.Tensor,
                mask: torch.Tensor | None, extra_kv: tuple[torch.Tensor, torch.Tensor] | None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        normed = self.hidden_norm(hidden)
        x = torch.cat([self.embed_norm(emb), normed], dim=-1)
        a, kv = self.attn(x, pos, mask, extra_kv)
        h = (normed if self.norm_before_residual else hidden) + a
        return h + self.mlp(self.mlp_norm(h)), kv


class Eagle3Drafter(DrafterModule):
    """Autoregressive feature-level drafter."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__(cfg)
        self.proj = FeatureProjection(cfg)
        self.layer = Eagle3Layer(cfg)
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def output_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits through the final norm and the frozen LM head."""
        return self.head_logits(self.norm(h))

    # ---- training ---------------------------------------------------------------------------
    def forward_ttt(self, feats: torch.Tensor, tokens: torch.Tensor, segment: torch.Tensor,
                    steps: int) -> list[torch.Tensor]:
        """Outputs h_j [B, L, d] of unroll steps j = 0..steps-1 (entry i predicts x_{i+2+j})."""
        b, L = tokens.shape
        dev = tokens.device
        pos0 = torch.arange(L, device=dev).expand(b, L)
        causal = causal_segment_mask(segment)
        diag = torch.eye(L, dtype=torch.bool, device=dev).expand(b, L, L)
        hidden = self.proj(feats)
        ks: list[torch.Tensor] = []
        vs: list[torch.Tensor] = []
        outs = []
        for j in range(steps):
            nxt = torch.zeros_like(tokens)
            if 1 + j < L:
                nxt[:, :L - 1 - j] = tokens[:, 1 + j:]
            emb = self.frozen.embed(nxt).to(hidden.dtype)
            own = causal if j == 0 else diag
            mask = torch.cat([causal] + [diag] * (j - 1) + [own], dim=2) if j else causal
            extra = (torch.cat(ks, 2), torch.cat(vs, 2)) if ks else None
            hidden, (k, v) = self.layer(emb, hidden, pos0 + j, mask, extra)
            ks.append(k)
            vs.append(v)
            outs.append(hidden)
        return outs

    # ---- inference ---------------------------------------------------------------------------
    def new_state(self) -> CausalState:
        return CausalState()

    def extend(self, state: CausalState, feats: torch.Tensor, next_tokens: torch.Tensor) -> None:
        """Add step-0 entries for new positions: target taps [n, F] and the token after each."""
        n = feats.shape[0]
        if n == 0:
            return
        dev = feats.device
        hidden = self.proj(feats.unsqueeze(0).to(self.proj.fc.weight.dtype))
        emb = self.frozen.embed(next_tokens.unsqueeze(0)).to(hidden.dtype)
        pos = torch.arange(state.n, state.n + n, device=dev).unsqueeze(0)
        h, (k, v) = self.layer(emb, hidden, pos, extend_mask(state.n, n, dev), state.kv())
        state.append(k, v)
        state.last_hidden = h[0, -1]

    def step(self, state: CausalState, prev_hidden: torch.Tensor, token: torch.Tensor, j: int,
             extra: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Draft step j >= 1 at position n-1+j: returns the new hidden; appends its k/v to `extra`."""
        dev = prev_hidden.device
        emb = self.frozen.embed(token.view(1, 1)).to(prev_hidden.dtype)
        pos = torch.tensor([[state.n - 1 + j]], device=dev)
        kv = state.kv()
        if extra:
            kv = (torch.cat([kv[0]] + [e[0] for e in extra], 2), torch.cat([kv[1]] + [e[1] for e in extra], 2))
        h, own = self.layer(emb, prev_hidden.view(1, 1, -1), pos, None, kv)
        extra.append(own)
        return h[0, 0]
