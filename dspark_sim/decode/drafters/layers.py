"""Transformer pieces shared by the trained drafters: rotary embedding, attention that can
take extra keys/values (KV injection of target features), SwiGLU MLP, a pre-norm decoder
layer, and the feature projection of concatenated target taps."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import DrafterConfig


def rotary_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                   dtype: torch.dtype, inv_freq: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [..., n, head_dim] for integer positions: Llama's "default" rope, or the
    given inverse frequencies [head_dim / 2] (a scaled rope, e.g. Llama 3's)."""
    inv = inv_freq.to(device=positions.device, dtype=torch.float32) if inv_freq is not None else \
        1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device,
                                      dtype=torch.float32) / head_dim))
    ang = positions.to(torch.float32).unsqueeze(-1) * inv
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, n, hd] by cos/sin [B or 1, n, hd]."""
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.unsqueeze(1) + rot * sin.unsqueeze(1)


class FeatureProjection(nn.Module):
    """Concatenated target taps [.., n_taps*d] -> RMSNorm(Linear(n_taps*d -> d, no bias))."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(len(cfg.taps) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.norm(self.fc(feats))


class Attention(nn.Module):
    """Multi-head attention with grouped KV heads, q/k RMSNorm and rotary positions.

    `forward` takes optional extra keys/values that are prepended to the keys/values of
    its own input (DFlash-style KV injection, or a drafter's own KV cache).
    """

    def __init__(self, cfg: DrafterConfig, in_dim: int | None = None) -> None:
        super().__init__()
        d_in = in_dim or cfg.hidden_size
        self.n_heads, self.n_kv, self.hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.theta = cfg.rope_theta
        self.q_proj = nn.Linear(d_in, self.n_heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d_in, self.n_kv * self.hd, bias=False)
        self.v_proj = nn.Linear(d_in, self.n_kv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.hd, cfg.hidden_size, bias=False)
        self.q_norm = nn.RMSNorm(self.hd, eps=cfg.rms_norm_eps)
        self.k_norm = nn.RMSNorm(self.hd, eps=cfg.rms_norm_eps)
        self.inv_freq: torch.Tensor | None = None      # a scaled rope's frequencies (else default)

    def keys_values(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated keys and values [B, n_kv, n, hd] of inputs x [B, n, d_in] at positions pos."""
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, self.n_kv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.n_kv, self.hd).transpose(1, 2)
        cos, sin = rotary_cos_sin(pos, self.hd, self.theta, k.dtype, self.inv_freq)
        return apply_rotary(k, cos, sin), v

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None,
                extra_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Attend from x [B, n, d_in]; mask [B or 1, n, n_extra + n] (True = may attend).

        Returns the output [B, n, d] and this input's own (k, v) for caching.
        """
        b, n, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, n, self.n_heads, self.hd)).transpose(1, 2)
        cos, sin = rotary_cos_sin(pos, self.hd, self.theta, q.dtype, self.inv_freq)
        q = apply_rotary(q, cos, sin)
        k_own, v_own = self.keys_values(x, pos)
        if extra_kv is not None:
            k = torch.cat([extra_kv[0].to(k_own.dtype), k_own], dim=2)
            v = torch.cat([extra_kv[1].to(v_own.dtype), v_own], dim=2)
        else:
            k, v = k_own, v_own
        attn_mask = None if mask is None else mask.unsqueeze(1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                             enable_gqa=self.n_heads != self.n_kv)
        out = out.transpose(1, 2).reshape(b, n, self.n_heads * self.hd)
        return self.o_proj(out), (k_own, v_own)


    def block_forward(self, x: torch.Tensor, pos: torch.Tensor, ctx_kv: tuple[torch.Tensor, torch.Tensor],
                      ctx_ok: torch.Tensor, block: int) -> torch.Tensor:
        """Training path of block drafters: x [B, N*block, d] holds N blocks; every block
        attends to the context keys allowed by ctx_ok [B, N, L] and to all of its own block.

        Same result as `forward` with the equivalent dense mask, without scoring every
        block against every other block's keys.
        """
        b, nq, _ = x.shape
        n = nq // block
        q = self.q_norm(self.q_proj(x).view(b, nq, self.n_heads, self.hd)).transpose(1, 2)
        cos, sin = rotary_cos_sin(pos, self.hd, self.theta, q.dtype, self.inv_freq)
        q = apply_rotary(q, cos, sin)
        k_own, v_own = self.keys_values(x, pos)
        rep = self.n_heads // self.n_kv
        k_ctx, v_ctx = (t.repeat_interleave(rep, dim=1) for t in ctx_kv)
        k_own, v_own = (t.repeat_interleave(rep, dim=1) for t in (k_own, v_own))
        scale = self.hd ** -0.5
        s_ctx = (q @ k_ctx.transpose(-1, -2)) * scale                      # [B, H, N*g, L]
        s_ctx = s_ctx.view(b, self.n_heads, n, block, -1)
        s_ctx = s_ctx.masked_fill(~ctx_ok[:, None, :, None, :], float("-inf"))
        qb = q.view(b, self.n_heads, n, block, self.hd)
        kb = k_own.view(b, self.n_heads, n, block, self.hd)
        s_blk = (qb @ kb.transpose(-1, -2)) * scale                        # [B, H, N, g, g]
        p = torch.softmax(torch.cat([s_ctx, s_blk], dim=-1), dim=-1)
        L = s_ctx.shape[-1]
        out = (p[..., :L].reshape(b, self.n_heads, nq, L) @ v_ctx).view(b, self.n_heads, n, block, self.hd)
        out = out + p[..., L:] @ v_own.view(b, self.n_heads, n, block, self.hd)
        out = out.reshape(b, self.n_heads, nq, self.hd).transpose(1, 2).reshape(b, nq, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    """SwiGLU feed-forward block."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class DecoderLayer(nn.Module):
    """Pre-norm transformer layer: x + attn(norm(x) [+ extra kv]); x + mlp(norm(x))."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None,
                extra_kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        return self.forward_kv(x, pos, mask, extra_kv)[0]

    def forward_kv(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None,
                   extra_kv: tuple[torch.Tensor, torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Like forward, also returning this input's own keys/values (for a KV cache)."""
        h, kv = self.attn(self.attn_norm(x), pos, mask, extra_kv)
        x = x + h
        return x + self.mlp(self.mlp_norm(x)), kv

    def block_forward(self, x: torch.Tensor, pos: torch.Tensor,
                      ctx_kv: tuple[torch.Tensor, torch.Tensor], ctx_ok: torch.Tensor,
                      block: int) -> torch.Tensor:
        """The layer with `Attention.block_forward` (training path of block drafters)."""
        x = x + self.attn.block_forward(self.attn_norm(x), pos, ctx_kv, ctx_ok, block)
        return x + self.mlp(self.mlp_norm(x))
