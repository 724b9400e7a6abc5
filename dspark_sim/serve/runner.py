"""The engine's batched target forward: ragged requests, one pass, per-request positions and KV.

All tokens of an iteration -- each decoding request's [anchor, drafts..] and each prefill
chunk -- are flattened into one sequence of N tokens. The linear layers (projections, MLP,
LM head) run once over all N tokens, as in a real serving engine; attention runs per request
against that request's own KV region (`kvcache.RequestKV`) with its own positions and a
causal mask over its new tokens (the varlen / paged attention of vLLM, written as one SDPA
call per request and layer). The model's own Hugging Face modules (norms, projections,
rotary embedding, MLP, LM head) do the arithmetic, so the weights and the maths are the
target's; only the attention bookkeeping is the engine's.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..decode.target import HFTarget
from ..errors import InputError
from .kvcache import RequestKV

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


@dataclass
class Segment:
    """One request's tokens in an iteration, appended after its `kv.length` cached positions."""

    kv: RequestKV
    ids: list[int]
    logits: str = "all"       # "all" rows (verification), "last" row (prefill end), "none"


@dataclass
class SegmentOutput:
    """What the forward gives back for one segment."""

    logits: torch.Tensor | None      # (n, V) for "all", (1, V) for "last", None for "none"
    features: torch.Tensor | None    # (n, len(taps), hidden), None without taps


class ModelRunner:
    """Runs one batched forward over ragged segments of a Llama-family target."""

    def __init__(self, target: HFTarget) -> None:
        model = target.model
        config = model.config.get_text_config()
        if config.model_type not in SUPPORTED_MODEL_TYPES:
            raise InputError(f"the serving engine runs {', '.join(SUPPORTED_MODEL_TYPES)} "
                             f"models; {target.name} is {config.model_type!r}", field="--target")
        decoder = model.get_decoder()
        self.target = target
        self.layers = decoder.layers
        self.embed, self.norm, self.rotary = decoder.embed_tokens, decoder.norm, decoder.rotary_emb
        self.lm_head = model.get_output_embeddings()
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.kv_heads = int(config.num_key_value_heads)
        self.scaling = float(attn.scaling)
        self._qk_norm = hasattr(attn, "q_norm")
        self._rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        self.device, self.dtype = target.device, target.dtype

    def new_kv(self, capacity: int) -> RequestKV:
        """An empty KV region for one request holding up to `capacity` positions."""
        return RequestKV(len(self.layers), self.kv_heads, self.head_dim, capacity, self.dtype,
                         self.device)

    @torch.inference_mode()
    def run(self, segments: list[Segment], taps: tuple[int, ...] = ()) -> list[SegmentOutput]:
        """One forward over every segment; each segment's KV grows by its token count."""
        if not segments:
            return []
        taps = self.target.resolve_taps(taps)
        lengths = [len(s.ids) for s in segments]
        starts = [s.kv.length for s in segments]
        ids = torch.tensor([t for s in segments for t in s.ids], dtype=torch.long, device=self.device)
        positions = torch.cat([torch.arange(p, p + n) for p, n in zip(starts, lengths)]).to(self.device)
        n_total = ids.numel()
        x = self.embed(ids)[None]                                           # (1, N, d)
        cos, sin = self.rotary(x, positions[None])
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        masks = [None if n == 1 else _causal(n, p, self.device) for n, p in zip(lengths, starts)]
        captured: dict[int, torch.Tensor] = {}
        for i, layer in enumerate(self.layers):
            h = layer.input_layernorm(x)
            attn = layer.self_attn
            q = attn.q_proj(h).view(1, n_total, -1, self.head_dim)
            k = attn.k_proj(h).view(1, n_total, -1, self.head_dim)
            v = attn.v_proj(h).view(1, n_total, -1, self.head_dim)
            if self._qk_norm:
                q, k = attn.q_norm(q), attn.k_norm(k)
            q, k = self._rope(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
            v = v.transpose(1, 2)
            out = torch.empty_like(q)                                       # (1, H, N, hd)
            for seg, o, n, p, mask in zip(segments, offsets, lengths, starts, masks):
                seg.kv.write(i, p, k[0, :, o:o + n], v[0, :, o:o + n])
                keys, values = seg.kv.keys_values(i, p + n)
                out[:, :, o:o + n] = F.scaled_dot_product_attention(
                    q[:, :, o:o + n], keys[None], values[None], attn_mask=mask,
                    scale=self.scaling, enable_gqa=True)
            x = x + attn.o_proj(out.transpose(1, 2).reshape(1, n_total, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
            if i in taps:
                captured[i] = x[0]
        for seg, p, n in zip(segments, starts, lengths):
            seg.kv.length = p + n
        rows: list[int] = []
        for seg, o, n in zip(segments, offsets, lengths):
            rows += range(o, o + n) if seg.logits == "all" else [o + n - 1] if seg.logits == "last" else []
        logits = self.lm_head(self.norm(x[0, rows])) if rows else None
        feats = torch.stack([captured[t] for t in taps], dim=1) if taps else None
        outs, r = [], 0
        for seg, o, n in zip(segments, offsets, lengths):
            m = n if seg.logits == "all" else 1 if seg.logits == "last" else 0
            outs.append(SegmentOutput(logits[r:r + m] if m else None,
                                      feats[o:o + n] if feats is not None else None))
            r += m
        return outs


def _causal(n: int, start: int, device: torch.device) -> torch.Tensor:
    """(n, start + n) bool: new token i (at position start + i) sees positions <= start + i."""
    keys = torch.arange(start + n, device=device)
    return keys[None, :] <= (start + torch.arange(n, device=device))[:, None]
