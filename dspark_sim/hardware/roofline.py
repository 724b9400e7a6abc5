"""Analytic step and draft times of one serving replica: roofline per component, plus comms.

Each weight-bearing component c (attention projections, dense FFN, shared experts, routed
experts, LM head) costs max(FLOPs_c / (peak x compute_eff), bytes_c / (HBM x bandwidth_eff)) on
the busiest GPU; components run one after another, so their times add. Latency floors come on
top: communication (TP all-reduce, EP all-to-all) as bandwidth + per-call latency, a per-layer
launch/sync cost and a fixed per-step overhead. Attention over the KV cache is the profile's
per-context-token term, at the attention kernels' own efficiency. Settings and their sources:
roofline_settings.py; docs/hardware.md writes out every formula.
"""
from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from ..errors import InputError
from .gpus import DTYPE_BYTES, GPU
from .models import ModelShape
from .roofline_settings import RooflineSettings, settings_sources

__all__ = ["Roofline", "RooflineSettings", "DRAFTER_KINDS"]

PARALLEL_DRAFTERS = ("mtp1", "dflash", "dspark")   # one pass per iteration
SEQUENTIAL_DRAFTERS = ("eagle3",)                  # one pass per drafted token (per_draft: true)
DRAFTER_KINDS = PARALLEL_DRAFTERS + SEQUENTIAL_DRAFTERS


class Roofline:
    """Analytic cost model of one replica: `model` on `gpus_per_replica` x `gpu`."""

    def __init__(self, model: ModelShape, gpu: GPU, settings: RooflineSettings | None = None) -> None:
        self.model, self.gpu = model, gpu
        self.s = (settings or RooflineSettings()).validated()
        tp, ep = self.s.tp, self.s.ep
        if ep > 1 and not model.is_moe:
            raise InputError(f"{model.name} is a dense model; expert parallelism needs experts",
                             field="ep")
        if model.is_moe and ep > model.routed_experts:
            raise InputError(f"more EP ranks than the {model.routed_experts} routed experts", field="ep")
        self.gpus = max(tp, ep)
        if self.gpus % tp or self.gpus % ep:
            raise InputError(f"tp={tp} and ep={ep} must divide each other", field="tp")
        if tp > gpu.node_gpus:
            raise InputError(f"tensor parallelism beyond one NVLink domain ({gpu.node_gpus} "
                             f"{gpu.name}) is not modelled", field="tp")
        self.dp = self.gpus // tp           # data-parallel attention groups inside the replica
        self.flops = gpu.peak_flops(self.s.dtype) * self.s.compute_efficiency
        self.bandwidth = gpu.hbm_gb_s * 1e9 * self.s.bandwidth_efficiency
        att = self.s.attention_efficiency     # decode attention's own efficiency (None: the GEMMs')
        self.attention_flops = self.flops if att is None else gpu.peak_flops(self.s.dtype) * att
        self.attention_bandwidth = self.bandwidth if att is None else gpu.hbm_gb_s * 1e9 * att
        self.weight_bytes = DTYPE_BYTES[self.s.dtype]
        self.kv_shards = 1 if model.is_mla else min(tp, model.kv_heads)   # MLA latent: replicated
        self.head_shards = min(tp, model.heads)

    # --- building blocks ------------------------------------------------------------------

    def _roof(self, flops, bytes_):
        return np.maximum(np.asarray(flops, dtype=float) / self.flops,
                          np.asarray(bytes_, dtype=float) / self.bandwidth)

    def _dense(self, params: float, tokens):
        """A TP-sharded matmul block over `tokens` replica tokens split across the DP groups."""
        tp = self.s.tp
        return self._roof(2 * params * np.asarray(tokens, dtype=float) / self.dp / tp,
                          params * self.weight_bytes / tp)

    def distinct_experts(self, tokens):
        """Expected routed experts touched in one MoE layer by `tokens` tokens, top-k of E each.

        E * (1 - (1 - k/E)^B): each expert is missed by one token with probability 1 - k/E
        (uniform routing assumed, as balanced routing makes it on average).
        """
        m = self.model
        return m.routed_experts * (1.0 - (1.0 - m.experts_per_token / m.routed_experts)
                                   ** np.asarray(tokens, dtype=float))

    def _routed(self, tokens):
        """Routed experts of one MoE layer: FLOPs of top-k per token, bytes of experts touched."""
        m, g = self.model, self.gpus
        tokens = np.asarray(tokens, dtype=float)
        return self._roof(2 * m.experts_per_token * m.expert_params * tokens / g,
                          self.distinct_experts(tokens) * m.expert_params * self.weight_bytes / g)

    def _layer(self, tokens, moe: bool) -> dict[str, np.ndarray]:
        m = self.model
        parts = {"attention_proj": self._dense(m.attention_params, tokens)}
        if moe:
            parts["shared_experts"] = self._dense(m.shared_params, tokens)
            parts["routed_experts"] = self._routed(tokens)
        else:
            parts["dense_ffn"] = self._dense(m.dense_ffn_params, tokens)
        return parts

    def comm_time(self, tokens, dense_layers: int, moe_layers: int):
        """TP all-reduce (2 per layer, ring) plus EP dispatch/combine all-to-all (per MoE layer),
        each a bandwidth term plus a per-call latency (collective_latency_s, a2a_latency_s)."""
        s, m, gpu = self.s, self.model, self.gpu
        tokens = np.asarray(tokens, dtype=float)
        link = gpu.nvlink_unidir_bytes_s * s.comm_efficiency
        t = np.zeros_like(tokens)
        if s.tp > 1:
            message = tokens / self.dp * m.hidden * s.activation_bytes
            traffic = 2 * (s.tp - 1) / s.tp * message
            t = t + 2 * (dense_layers + moe_layers) * (traffic / link + s.collective_latency_s)
        if m.is_moe and self.gpus > 1 and moe_layers:
            # dispatch in the weight dtype (fp8 dispatch as DeepEP does), combine in bf16
            per_token = m.experts_per_token * m.hidden * (self.weight_bytes + s.activation_bytes)
            volume = tokens / self.gpus * per_token
            in_node = min(self.gpus, gpu.node_gpus)
            intra = volume * (in_node - 1) / self.gpus / link
            inter = volume * (self.gpus - in_node) / self.gpus / (gpu.internode_gb_s * 1e9 * s.comm_efficiency)
            t = t + moe_layers * (np.maximum(intra, inter) + 2 * s.a2a_latency_s)
        return t

    def _exposed(self, comm, gemm):
        """Communication left on the critical path: comm - min(comm_overlap x comm, GEMM time)."""
        return comm - np.minimum(self.s.comm_overlap * comm, gemm)

    # --- the target's step ----------------------------------------------------------------

    def step_breakdown(self, batch_tokens) -> dict[str, np.ndarray]:
        """Seconds per component of one target forward over `batch_tokens` (no KV attention)."""
        m = self.model
        B = np.asarray(batch_tokens, dtype=float)
        parts: dict[str, np.ndarray] = {}
        for count, moe in ((m.dense_ffn_layers, False), (m.moe_layers, True)):
            if count:
                for key, value in self._layer(B, moe).items():
                    parts[key] = parts.get(key, 0.0) + count * value
        parts["lm_head"] = self._dense(m.lm_head_params, B)
        parts["communication"] = self._exposed(self.comm_time(B, m.dense_ffn_layers, m.moe_layers),
                                               sum(parts.values()))
        parts["layer_launch"] = np.full_like(B, m.layers * self.s.layer_overhead_s)
        parts["overhead"] = np.full_like(B, self.s.overhead_s)
        return parts

    def step_time(self, batch_tokens):
        """Seconds of one target forward over `batch_tokens`, KV attention excluded."""
        return sum(self.step_breakdown(batch_tokens).values())

    def context_token_time(self, width: float) -> float:
        """Seconds per context token of one request that verifies `width` query tokens.

        max(KV bytes read once per request, width x attention FLOPs) at the attention kernels'
        efficiency, on the request's GPU group; requests spread over the dp groups, which run
        in parallel.
        """
        m = self.model
        kv = m.kv_bytes_per_token(DTYPE_BYTES[self.s.kv_dtype]) / self.kv_shards
        flops = width * m.attention_flops_per_query_context / self.head_shards
        return float(max(kv / self.attention_bandwidth, flops / self.attention_flops)) / self.dp

    @property
    def per_context_token_s(self) -> float:
        """The profile's per_context_token_s, at the stated reference verify width."""
        return self.context_token_time(self.s.verify_width)

    def decode_time(self, requests: int, width: int, context: int) -> float:
        """Predicted seconds of a step of `requests` x `width` tokens at `context` KV tokens each."""
        return float(self.step_time(requests * width)) + requests * context * self.context_token_time(width)

    def prefill_time(self, tokens: int, context: int = 0) -> float:
        """Predicted seconds of one request's prefill chunk of `tokens` after `context` tokens."""
        m = self.model
        pairs = tokens * context + tokens * (tokens + 1) / 2
        kv = (context + tokens) * m.kv_bytes_per_token(DTYPE_BYTES[self.s.kv_dtype]) / self.kv_shards
        attention = max(pairs * m.attention_flops_per_query_context / self.head_shards / self.flops,
                        kv / self.attention_bandwidth)
        return float(self.step_time(tokens)) + attention

    # --- drafters -------------------------------------------------------------------------

    def draft_time(self, kind: str, requests):
        """Seconds of one drafter pass for `requests` decoding requests.

        mtp1: one layer (MoE if the target is) + LM head over R tokens; dflash/dspark: their
        layers and the LM head over the R x gamma block in one pass (dspark adds its Markov head);
        eagle3: one layer + LM head over R tokens per sequential draft (per_draft: true).
        Drafter attention over the context is not included (see the profile's assumptions).
        """
        if kind not in DRAFTER_KINDS:
            raise InputError(f"unknown drafter kind {kind!r} ({', '.join(DRAFTER_KINDS)})",
                             field="drafters")
        m, s = self.model, self.s
        if s.draft_tp and s.draft_tp != s.tp:
            # the drafter whole on draft_tp GPUs (vLLM's draft_tensor_parallel_size), its own
            # all-reduces only; an MoE target's MTP layer is sharded like the target's
            if kind == "mtp1" and m.is_moe:
                raise InputError("an MoE target's MTP layer runs with the target's parallelism; "
                                 "--draft-tp is for drafters with dense layers", field="draft_tp")
            return Roofline(m, self.gpu, replace(s, tp=s.draft_tp, ep=1, draft_tp=0)).draft_time(kind, requests)
        R = np.asarray(requests, dtype=float)
        tokens = R * s.gamma if kind in ("dflash", "dspark") else R
        layers = s.draft_layers.get(kind, 1)
        moe_layer = kind == "mtp1" and m.is_moe
        t = sum(self._layer(tokens, moe_layer).values()) * layers
        fused_inputs = {"mtp1": 2, "eagle3": 3, "dflash": 5, "dspark": 5}[kind]
        t = t + self._dense(fused_inputs * m.hidden * m.hidden, tokens)
        t = t + self._dense(m.lm_head_params, tokens)
        if kind == "dspark":
            t = t + self._dense(s.markov_rank * m.vocab, tokens)
        t = t + self._exposed(self.comm_time(tokens, 0 if moe_layer else layers,
                                             layers if moe_layer else 0), t)
        return t + s.draft_pass_overhead_s + layers * s.layer_overhead_s

    # --- memory ---------------------------------------------------------------------------

    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weights one GPU holds: attention/dense/shared/head/embedding over TP, experts over all."""
        m = self.model
        experts = m.moe_layers * m.routed_experts * m.expert_params
        return ((m.total_params - experts) / self.s.tp + experts / self.gpus) * self.weight_bytes

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens the replica holds in the HBM left after the weights."""
        free = self.gpu.hbm_gb * 1e9 * self.s.memory_utilization - self.weight_bytes_per_gpu
        if free <= 0:
            raise InputError(f"{self.model.name} in {self.s.dtype} needs "
                             f"{self.weight_bytes_per_gpu / 1e9:.0f} GB of weights per GPU, more than "
                             f"{self.s.memory_utilization:.0%} of the {self.gpu.hbm_gb:g} GB of a "
                             f"{self.gpu.name}; raise --tp/--ep or use --dtype fp8", field="model")
        per_token = self.model.kv_bytes_per_token(DTYPE_BYTES[self.s.kv_dtype]) / self.kv_shards
        return int(free / per_token) * self.dp

    def crossover_batch_tokens(self) -> float | None:
        """Smallest batch at which the GEMMs turn compute-bound overall (None: not below 1e6)."""
        grid = np.unique(np.round(np.geomspace(1, 1e6, 400)))
        flops = np.asarray(2 * self.model.active_params * grid / self.gpus / self.flops)
        parts = self.step_breakdown(grid)
        bound = sum(np.asarray(v) for k, v in parts.items()
                    if k not in ("communication", "overhead", "layer_launch"))
        hit = np.nonzero(flops >= 0.999 * bound)[0]
        return float(grid[hit[0]]) if len(hit) else None

    def assumptions(self) -> dict:
        """Everything the numbers rest on, for the profile's `assumptions` block."""
        m = self.model
        return {
            "gpu": self.gpu.as_dict(),
            "model": m.summary(),
            "settings": asdict(self.s),
            "sources": settings_sources(),
            "derived": {
                "gpus_per_replica": self.gpus, "data_parallel_attention_groups": self.dp,
                "peak_flops_used": self.flops, "hbm_bytes_s_used": self.bandwidth,
                "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
                "kv_bytes_per_token": m.kv_bytes_per_token(DTYPE_BYTES[self.s.kv_dtype]),
                "attention_flops_per_query_context_token": m.attention_flops_per_query_context,
                "compute_bound_from_batch_tokens": self.crossover_batch_tokens(),
            },
        }
