"""DSpark's lightweight sequential heads and its confidence head.

A sequential head adds a bias B_k to the parallel backbone's logits U_k that depends on the
already drafted token x_{k-1} (x_0 = anchor): Markov B = W2 W1[x_{k-1}], or an RNN whose
gated state carries the whole drafted prefix. Heads work in draft-vocabulary rows: W1 has
one row per draftable token plus one shared row for any other previous token (an anchor
can be any token), and W2 maps rank r to a bias over the draft vocabulary.
"""
from __future__ import annotations

import torch
from torch import nn

from .config import DrafterConfig


class MarkovHead(nn.Module):
    """B(x_{k-1}) = W2 W1[x_{k-1}]: a rank-r bigram correction."""

    def __init__(self, cfg: DrafterConfig, n_rows: int) -> None:
        super().__init__()
        self.rank = cfg.seq_rank
        self.w1 = nn.Embedding(n_rows + 1, cfg.seq_rank)
        self.w2 = nn.Linear(cfg.seq_rank, n_rows, bias=False)
        nn.init.normal_(self.w1.weight, std=0.02)
        nn.init.zeros_(self.w2.weight)  # starts as rank 0 = plain DFlash

    def prev_embed(self, prev_rows: torch.Tensor) -> torch.Tensor:
        """W1[x] [..., r] for previous tokens given as draft-vocabulary rows."""
        return self.w1(prev_rows)

    def block_bias(self, prev_rows: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Teacher-forced biases [..., gamma, Vd] for previous-token rows [..., gamma]."""
        return self.w2(self.prev_embed(prev_rows).to(hidden.dtype))

    def init_state(self, batch: int, like: torch.Tensor) -> torch.Tensor | None:
        return None

    def step(self, prev_row: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor | None
             ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Bias [B, Vd] for one position given the sampled previous token; no state."""
        return self.w2(self.prev_embed(prev_row).to(hidden.dtype)), state


class RNNHead(MarkovHead):
    """s_k = sig(g) s_{k-1} + (1 - sig(g)) tanh(c); [g, c, o] = Linear([s; W1[x]; h / sqrt(H)]);
    B = W2 tanh(o). The backbone state h (H wide, RMS-normed) enters scaled by 1/sqrt(H), so
    that a step of the optimiser on its H weights moves g, c and o as much as one on the
    rank-r columns does, not sqrt(H) times more (unscaled, the head diverged: ce 13 -> 30-46,
    gradient norms 60-400 in the first 30 steps on SmolLM2 features)."""

    def __init__(self, cfg: DrafterConfig, n_rows: int) -> None:
        super().__init__(cfg, n_rows)
        self.joint = nn.Linear(2 * cfg.seq_rank + cfg.hidden_size, 3 * cfg.seq_rank)
        self.hidden_scale = float(cfg.hidden_size) ** -0.5

    def init_state(self, batch: int, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(batch, self.rank)

    def step(self, prev_row: torch.Tensor, hidden: torch.Tensor, state: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
        emb = self.prev_embed(prev_row).to(hidden.dtype)
        g, c, o = self.joint(torch.cat([state, emb, hidden * self.hidden_scale], dim=-1)).chunk(3, dim=-1)
        gate = torch.sigmoid(g)
        state = gate * state + (1.0 - gate) * torch.tanh(c)
        return self.w2(torch.tanh(o)), state

    def block_bias(self, prev_rows: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        lead, g = prev_rows.shape[:-1], prev_rows.shape[-1]
        flat_prev = prev_rows.reshape(-1, g)
        flat_h = hidden.reshape(-1, g, hidden.shape[-1])
        state = self.init_state(flat_prev.shape[0], flat_h)
        out = []
        for k in range(g):
            bias, state = self.step(flat_prev[:, k], flat_h[:, k], state)
            out.append(bias)
        return torch.stack(out, dim=1).reshape(*lead, g, -1)


def build_seq_head(cfg: DrafterConfig, n_rows: int) -> MarkovHead | None:
    """The configured sequential head over `n_rows` draft tokens, or None for rank 0 (= DFlash)."""
    if cfg.seq_rank <= 0:
        return None
    if cfg.seq_head == "markov":
        return MarkovHead(cfg, n_rows)
    if cfg.seq_head == "rnn":
        return RNNHead(cfg, n_rows)
    raise ValueError(f"unknown sequential head {cfg.seq_head!r} (markov|rnn)")


class ConfidenceHead(nn.Module):
    """z_k = w . [h_k ; W1[x_{k-1}]] + b; c_k = sigmoid(z_k / T_k) = P(draft k survives | 1..k-1 did)."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        extra = cfg.seq_rank if cfg.seq_rank > 0 else 0
        self.proj = nn.Linear(cfg.hidden_size + extra, 1)

    def forward(self, hidden: torch.Tensor, prev_embed: torch.Tensor | None) -> torch.Tensor:
        """Raw confidence logits [...] (before calibration)."""
        x = hidden if prev_embed is None else torch.cat([hidden, prev_embed.to(hidden.dtype)], -1)
        return self.proj(x).squeeze(-1)
