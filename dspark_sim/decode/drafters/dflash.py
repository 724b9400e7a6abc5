"""DFlash: a parallel block drafter with KV injection of target features.

Block input = [anchor, MASK x (gamma-1)] at positions anchor..anchor+gamma-1. Queries come
from the block; keys/values of every layer = [its k/v projections of the projected target
features of the context strictly before the anchor ; of the block]. Attention inside the
block is bidirectional. One pass gives gamma logits U_1..U_gamma through the frozen LM head;
output slot k (0-based) drafts the token at position anchor+k+1.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .config import DrafterConfig
from .layers import DecoderLayer, FeatureProjection
from .module import DrafterModule


@dataclass
class BlockState:
    """Per-request drafter cache: per layer, rotated context keys and values so far."""

    kv: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    n_ctx: int = 0


class BlockDrafter(DrafterModule):
    """The DFlash backbone (also the backbone of DSpark)."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__(cfg)
        self.proj = FeatureProjection(cfg)
        self.mask_embedding = nn.Parameter(torch.randn(cfg.hidden_size) * 0.02)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    # ---- shared by training and inference ------------------------------------------------
    def block_inputs(self, anchor_tokens: torch.Tensor, size: int | None = None) -> torch.Tensor:
        """[..., size, d]: the anchor's embedding followed by size-1 mask embeddings (size
        defaults to the trained gamma)."""
        g = self.cfg.gamma if size is None else size
        first = self.frozen.embed(anchor_tokens).unsqueeze(-2)
        masks = self.mask_embedding.to(first.dtype).expand(*anchor_tokens.shape, g - 1, -1)
        return torch.cat([first, masks], dim=-2)

    def run_layers(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None,
                   ctx_kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        for layer, kv in zip(self.layers, ctx_kv):
            x = layer(x, pos, mask, kv)
        return self.norm(x)

    def context_kv(self, feats: torch.Tensor, pos: torch.Tensor
                   ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer keys/values [B, n_kv, n, hd] of projected target features [B, n, F]."""
        ctx = self.proj(feats)
        return [layer.attn.keys_values(ctx, pos) for layer in self.layers]

    def output_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits U of (already normed) backbone outputs."""
        return self.head_logits(h)

    # ---- training: many anchors per sequence in one pass ---------------------------------
    def forward_blocks(self, feats: torch.Tensor, tokens: torch.Tensor, segment: torch.Tensor,
                       anchors: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Backbone outputs h [B, N, gamma, d] for N anchors per packed row.

        feats [B, L, F] target taps, tokens [B, L], segment [B, L] document id of each
        position (packed rows), anchors [B, N] positions, valid [B, N] real anchors.
        A block sees the context of its own document strictly before its anchor, and itself.
        """
        b, n_ctx = tokens.shape
        g = self.cfg.gamma
        n = anchors.shape[1]
        pos_ctx = torch.arange(n_ctx, device=tokens.device).expand(b, n_ctx)
        ctx_kv = self.context_kv(feats, pos_ctx)
        anchor_tok = tokens.gather(1, anchors)
        x = self.block_inputs(anchor_tok).reshape(b, n * g, -1)
        pos_blk = (anchors.unsqueeze(-1) + torch.arange(g, device=tokens.device)).reshape(b, n * g)
        seg_a = segment.gather(1, anchors)
        ctx_ok = (segment.unsqueeze(1) == seg_a.unsqueeze(2)) & \
                 (pos_ctx.unsqueeze(1) < anchors.unsqueeze(2)) & valid.unsqueeze(2)   # [B, N, L]
        for layer, kv in zip(self.layers, ctx_kv):
            x = layer.block_forward(x, pos_blk, kv, ctx_ok, g)
        return self.norm(x).reshape(b, n, g, -1)

    # ---- inference ------------------------------------------------------------------------
    def new_state(self) -> BlockState:
        return BlockState()

    def extend(self, state: BlockState, feats: torch.Tensor) -> None:
        """Add the target features [n, F] of newly committed positions to the cache."""
        if feats.shape[0] == 0:
            return
        pos = torch.arange(state.n_ctx, state.n_ctx + feats.shape[0], device=feats.device)
        new = self.context_kv(feats.unsqueeze(0).to(self.proj.fc.weight.dtype), pos.unsqueeze(0))
        if not state.kv:
            state.kv = new
        else:
            state.kv = [(torch.cat([k0, k1], 2), torch.cat([v0, v1], 2))
                        for (k0, v0), (k1, v1) in zip(state.kv, new)]
        state.n_ctx += feats.shape[0]

    def block_hidden(self, state: BlockState, anchor: int, size: int | None = None) -> torch.Tensor:
        """Backbone outputs [size, d] for a block of `size` slots (default: the trained gamma)
        after `anchor` (at position n_ctx). A shorter block is the anchor and fewer masks: its
        slots attend to fewer mask slots than in training, and cost less."""
        g = self.cfg.gamma if size is None else min(size, self.cfg.gamma)
        dev = self.mask_embedding.device
        x = self.block_inputs(torch.tensor([anchor], device=dev), g).to(self.proj.fc.weight.dtype)
        pos = (state.n_ctx + torch.arange(g, device=dev)).unsqueeze(0)
        kv = state.kv if state.kv else [None] * len(self.layers)
        return self.run_layers(x, pos, None, kv)[0]
