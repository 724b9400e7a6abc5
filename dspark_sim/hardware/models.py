"""Model shapes for the roofline: read from a Hugging Face config.json or a built-in preset.

Counts are of matrix-multiply parameters (2 FLOPs per parameter per token); norms, biases and
rotary tables are left out (well under 0.1% of the weights of the models here).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import LineMap, read_json
from ..profiles.validate import FieldChecker

PRESET_DIR = Path(__file__).resolve().parent.parent / "data" / "model_configs"


def preset_names() -> list[str]:
    """Names of the built-in model presets (their config.json files ship with the package)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.json"))


@dataclass(frozen=True)
class ModelShape:
    """The parts of a decoder-only transformer that decide its cost per token."""

    name: str
    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int                 # dense FFN width (SwiGLU: gate, up, down)
    tie_embeddings: bool = False
    # mixture of experts (routed_experts == 0: dense model)
    routed_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0         # width of one routed expert
    shared_intermediate: int = 0      # total width of the shared experts of one MoE layer
    dense_layers: int = 0             # leading dense layers before the MoE layers (first_k_dense_replace)
    # multi-head latent attention (kv_lora_rank == 0: ordinary multi-head / grouped-query attention)
    q_lora_rank: int = 0              # 0: queries projected directly from the hidden state
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0

    # --- structure ------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def dense_ffn_layers(self) -> int:
        return self.dense_layers if self.is_moe else self.layers

    # --- parameters -----------------------------------------------------------------------

    @property
    def attention_params(self) -> int:
        """Projection parameters of one attention block."""
        d = self.hidden
        if not self.is_mla:
            return d * self.heads * self.head_dim * 2 + d * self.kv_heads * self.head_dim * 2
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        q = (d * self.q_lora_rank + self.q_lora_rank * self.heads * qk) if self.q_lora_rank \
            else d * self.heads * qk
        kv = d * (self.kv_lora_rank + self.qk_rope_head_dim) \
            + self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv + self.heads * self.v_head_dim * d

    @property
    def dense_ffn_params(self) -> int:
        """One dense SwiGLU FFN block."""
        return 3 * self.hidden * self.intermediate

    @property
    def expert_params(self) -> int:
        """One routed expert."""
        return 3 * self.hidden * self.moe_intermediate

    @property
    def shared_params(self) -> int:
        """Shared experts plus router of one MoE layer."""
        return 3 * self.hidden * self.shared_intermediate + self.hidden * self.routed_experts

    @property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def embedding_params(self) -> int:
        """Input embedding table (read by row lookup, not a matmul); 0 extra when tied."""
        return 0 if self.tie_embeddings else self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        """All weights held in memory."""
        return (self.layers * self.attention_params + self.dense_ffn_layers * self.dense_ffn_params
                + self.moe_layers * (self.routed_experts * self.expert_params + self.shared_params)
                + self.lm_head_params + self.embedding_params)

    @property
    def active_params(self) -> int:
        """Matmul parameters one token goes through (routed experts: top-k only; with LM head)."""
        return (self.layers * self.attention_params + self.dense_ffn_layers * self.dense_ffn_params
                + self.moe_layers * (self.experts_per_token * self.expert_params + self.shared_params)
                + self.lm_head_params)

    # --- attention over the context -------------------------------------------------------

    def kv_bytes_per_token(self, kv_dtype_bytes: float) -> float:
        """KV-cache bytes one context token occupies, all layers together.

        Grouped-query attention stores K and V per KV head; MLA stores the compressed latent
        (kv_lora_rank) plus the decoupled rotary key (qk_rope_head_dim), shared by all heads.
        """
        if self.is_mla:
            per_layer = self.kv_lora_rank + self.qk_rope_head_dim
        else:
            per_layer = 2 * self.kv_heads * self.head_dim
        return self.layers * per_layer * kv_dtype_bytes

    @property
    def attention_flops_per_query_context(self) -> float:
        """FLOPs for one query token attending one context token, all layers (scores + values).

        GQA: 2*H*d_head for q.k plus 2*H*d_head for p.v. MLA with absorbed projections (the
        decode path of FlashMLA): scores over the latent and rotary key, 2*H*(r_kv + d_rope),
        and values over the latent, 2*H*r_kv.
        """
        if self.is_mla:
            per_layer = 2 * self.heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        else:
            per_layer = 4 * self.heads * self.head_dim
        return float(self.layers * per_layer)

    def summary(self) -> dict[str, Any]:
        """Shape plus derived counts, written into profiles as the model assumption."""
        out = asdict(self)
        out.update(total_params=self.total_params, active_params=self.active_params,
                   attention_kind="MLA" if self.is_mla else "GQA")
        return out


def config_path(config_or_preset: str | Path) -> Path:
    """The config.json behind a preset name, a config.json path, or a model folder."""
    path = Path(config_or_preset)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists() and not (PRESET_DIR / f"{config_or_preset}.json").exists():
        raise InputError(f"no such config.json, and no built-in model preset of that name "
                         f"(presets: {', '.join(preset_names())})", file=str(config_or_preset))
    return path if path.exists() else PRESET_DIR / f"{config_or_preset}.json"


def load_model_shape(config_or_preset: str | Path) -> ModelShape:
    """Model shape from a preset name, a config.json path, or a folder holding config.json."""
    path = config_path(config_or_preset)
    data, lines = read_json(path)
    return shape_from_hf_config(data, name=_model_name(path, data), file=path, lines=lines)


def load_hf_config_dict(config_or_preset: str | Path) -> dict[str, Any]:
    """The raw config.json mapping of a preset or path (keys starting with '_' removed)."""
    data = json.loads(config_path(config_or_preset).read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _model_name(path: Path, data: dict) -> str:
    if path.parent == PRESET_DIR:
        return path.stem
    name = data.get("_name_or_path") if isinstance(data, dict) else None
    return str(name) if name else (path.parent.name or path.stem)


def shape_from_hf_config(data: Any, name: str = "model", file: str | Path | None = None,
                         lines: LineMap | None = None) -> ModelShape:
    """Parse a Hugging Face config mapping (Llama/Qwen/Mistral dense, DeepSeek-V3/Qwen-MoE/Mixtral)."""
    check = FieldChecker(file, lines)
    data = check.mapping(data, "(document)")
    if isinstance(data.get("text_config"), dict):   # multimodal wrappers keep the LM inside
        data = data["text_config"]

    def need(key: str) -> int:
        return check.integer(check.require(data, key), key, 1)

    def opt(key: str, default: int = 0) -> int:
        value = data.get(key)
        return default if value is None else check.integer(value, key, 0)

    hidden, layers, vocab, heads = (need("hidden_size"), need("num_hidden_layers"),
                                    need("vocab_size"), need("num_attention_heads"))
    kv_heads = opt("num_key_value_heads", heads) or heads
    head_dim = opt("head_dim", hidden // heads) or hidden // heads
    intermediate = need("intermediate_size")
    tie = data.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise check.fail("tie_word_embeddings", f"expected true or false, got {tie!r}")

    experts_key = next((k for k in ("n_routed_experts", "num_experts", "num_local_experts")
                        if data.get(k)), None)
    moe: dict[str, int] = {}
    if experts_key:
        experts = check.integer(data[experts_key], experts_key, 1)
        top_k = need("num_experts_per_tok")
        if top_k > experts:
            raise check.fail("num_experts_per_tok", f"exceeds the {experts} routed experts")
        width = opt("moe_intermediate_size", intermediate) or intermediate
        shared = opt("n_shared_experts") * width + opt("shared_expert_intermediate_size")
        dense_layers = opt("first_k_dense_replace")
        if dense_layers > layers:
            raise check.fail("first_k_dense_replace", f"exceeds num_hidden_layers ({layers})")
        if data.get("moe_layer_freq", 1) not in (1, None) or data.get("decoder_sparse_step", 1) not in (1, None):
            raise check.fail("moe_layer_freq", "only every-layer MoE (frequency 1) is modelled")
        moe = dict(routed_experts=experts, experts_per_token=top_k, moe_intermediate=width,
                   shared_intermediate=shared, dense_layers=dense_layers)

    mla: dict[str, int] = {}
    if data.get("kv_lora_rank"):
        mla = dict(kv_lora_rank=need("kv_lora_rank"), q_lora_rank=opt("q_lora_rank"),
                   qk_nope_head_dim=need("qk_nope_head_dim"), qk_rope_head_dim=need("qk_rope_head_dim"),
                   v_head_dim=need("v_head_dim"))
    return ModelShape(name=name, hidden=hidden, layers=layers, vocab=vocab, heads=heads,
                      kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate,
                      tie_embeddings=tie, **moe, **mla)
