"""Published EAGLE-3 drafters (the Hugging Face layout vLLM and SGLang load) behind the
product's drafter interface.

The layout, as vLLM 0.32's loader reads it (model_executor/models/llama_eagle3.py, the EAGLE
proposer in v1/spec_decode/llm_base_proposer.py):

- config.json: a Llama config whose `architectures` names the Llama EAGLE-3 model
  (`LlamaForCausalLMEagle3`, the name SGLang registers and EAGLE's own checkpoints use, or
  `Eagle3LlamaForCausalLM`), `num_hidden_layers: 1`, `draft_vocab_size` (default: the target's
  `vocab_size`), `target_hidden_size` (default `hidden_size`), optionally
  `eagle_aux_hidden_state_layer_ids` (or `eagle_config.eagle_aux_hidden_state_layer_ids`) naming
  the three target layers whose hidden states are fused; without it vLLM takes
  (2, N // 2, N - 3) of an N-layer target. Aux id L is the residual stream entering target layer
  L, i.e. the output of layer L - 1: this product's tap L - 1.
- weights (model.safetensors or pytorch_model.bin): `fc.weight` [hidden, 3 x target hidden]
  (the fusion, no norm after it), one decoder layer `midlayer.*` (`input_layernorm` on the token
  embedding, `hidden_norm` on the fused / previous hidden, q/k/v/o projections reading both
  concatenated, 2 x hidden wide, Llama attention without q/k norms, `post_attention_layernorm`,
  a SwiGLU `mlp.gate_proj/up_proj/down_proj`), the final `norm`, `lm_head.weight` [draft vocab,
  hidden], `d2t` [draft vocab] (target id = draft id + d2t[draft id]) and `t2d` [vocab] (bool:
  which target tokens are draftable); `embed_tokens.weight` only where the drafter has its own
  embedding (otherwise the target's is shared).
- Drafting: the entry at position i reads the embedding of token i + 1 and the fused target
  state at i; each later draft step reads the drafted token and the layer's own pre-norm output
  (residual included), one position further, attending to the committed entries and its own
  earlier steps. Exactly the product's Eagle3 (`eagle3.py`) with these differences, made here:
  no q/k norms, no norm after the fusion, its own LM head over the draft vocabulary.

Such a drafter has no confidence head; its confidences are its own probability of each drafted
token (`draft_confidence`), which `calibrate` calibrates by STS like a head's.
Variants the product does not implement (more than one layer, `norm_before_fc`, `fc_norm`,
`norm_output`, no auxiliary states, parallel drafting, a rope whose scale depends on the length)
are refused naming the field.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import InputError
from ..target import Target
from .base import CheckpointFormat, register_checkpoint_format
from .config import DrafterConfig
from .eagle3 import Eagle3Drafter

FORMAT = "eagle3-published"
ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
GAMMA_CAP = 64                   # autoregressive: no block size; drafts per step are capped here
_UNSUPPORTED = {"norm_before_fc": False, "fc_norm": False, "norm_output": False,
                "use_aux_hidden_state": True, "parallel_drafting": False}
_SUPPORTED_ROPE = ("default", "linear", "llama3")


def matches(config: dict) -> bool:
    arch = config.get("architectures")
    return isinstance(arch, list) and any(a in ARCHITECTURES for a in arch)


def _weight_file(path: Path) -> Path:
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return path / name
    raise InputError("EAGLE-3 checkpoint has no model.safetensors or pytorch_model.bin", file=path)


def read_published_config(path: str | Path) -> tuple[dict, Any]:
    """The parsed config.json and its FieldChecker, validated for the supported layout."""
    from ...fileio import read_json
    from ...profiles.validate import FieldChecker

    cfg_path = Path(path) / "config.json"
    data, lines = read_json(cfg_path)
    check = FieldChecker(cfg_path, lines)
    data = check.mapping(data, "(document)")
    for key in ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"):
        check.integer(check.require(data, key), key, 1)
    layers = check.integer(data.get("num_hidden_layers", 1), "num_hidden_layers", 1)
    if layers != 1:
        raise check.fail("num_hidden_layers", f"only one-layer EAGLE-3 drafters (the published "
                         f"layout) are supported, found {layers}")
    eagle = data.get("eagle_config") or {}
    for key, default in _UNSUPPORTED.items():
        value = eagle.get(key, data.get(key, default))
        if bool(value) != default:
            raise check.fail(key, f"the EAGLE-3 variant with {key} = {value!r} is not supported "
                             f"(supported: {default})")
    if data.get("hidden_act", "silu") != "silu":
        raise check.fail("hidden_act", f"expected silu, found {data['hidden_act']!r}")
    if float(data.get("logit_scale", 1.0)) != 1.0:
        raise check.fail("logit_scale", f"expected 1.0, found {data['logit_scale']!r}")
    rope = data.get("rope_scaling") or data.get("rope_parameters") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else rope
    if kind not in _SUPPORTED_ROPE:
        raise check.fail("rope_scaling", f"rope type {kind!r} is not supported "
                         f"(supported: {', '.join(_SUPPORTED_ROPE)})")
    draft_vocab = check.integer(data.get("draft_vocab_size") or data["vocab_size"],
                                "draft_vocab_size", 1)
    if draft_vocab > data["vocab_size"]:
        raise check.fail("draft_vocab_size", f"exceeds vocab_size {data['vocab_size']}")
    return data, check


def aux_layer_ids(data: dict, num_target_layers: int) -> list[int]:
    """The target layers (vLLM's aux hidden-state ids) whose states the fusion reads."""
    ids = data.get("eagle_aux_hidden_state_layer_ids") or \
        (data.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        n = num_target_layers
        ids = [2, n // 2, n - 3]
    return [int(i) for i in ids]


def published_config(data: dict, check: Any, target: Target) -> DrafterConfig:
    """The product's DrafterConfig of a published EAGLE-3 config for `target` (field errors
    name the config's own fields)."""
    hidden = int(data["hidden_size"])
    target_hidden = int(data.get("target_hidden_size") or hidden)
    if target_hidden != hidden:
        raise check.fail("target_hidden_size", f"a drafter narrower than its target is not "
                         f"supported: hidden_size {hidden}, target_hidden_size {target_hidden}")
    aux = aux_layer_ids(data, target.num_layers)
    bad = [i for i in aux if not 1 <= i <= target.num_layers]
    if bad:
        raise check.fail("eagle_aux_hidden_state_layer_ids", f"aux layer ids must lie in "
                         f"1..{target.num_layers} (the target's layers), found {bad}")
    heads = int(data["num_attention_heads"])
    rope = data.get("rope_parameters") or {}
    return DrafterConfig(
        kind="eagle3", hidden_size=hidden, num_heads=heads,
        num_kv_heads=int(data.get("num_key_value_heads") or heads),
        head_dim=int(data.get("head_dim") or hidden // heads),
        intermediate_size=int(data["intermediate_size"]), vocab_size=int(data["vocab_size"]),
        num_target_layers=target.num_layers, rms_norm_eps=float(data.get("rms_norm_eps", 1e-5)),
        rope_theta=float(data.get("rope_theta", rope.get("rope_theta", 10000.0))), num_layers=1,
        taps=[i - 1 for i in aux], gamma=GAMMA_CAP,
        draft_vocab=int(data.get("draft_vocab_size") or data["vocab_size"]), seq_rank=0,
        confidence=False, target=target.name, draft_confidence=True)


class PublishedEagle3Module(Eagle3Drafter):
    """The product's Eagle3 module in the published layout's variant: plain fusion, attention
    without q/k norms (optionally with biases), a rope from the config, its own LM head over the
    draft vocabulary and, where the checkpoint has one, its own embedding."""

    def __init__(self, cfg: DrafterConfig, data: dict) -> None:
        super().__init__(cfg)
        self.proj.norm = nn.Identity()
        attn = self.layer.attn
        attn.q_norm, attn.k_norm = nn.Identity(), nn.Identity()
        if data.get("attention_bias", False):
            for name in ("q_proj", "k_proj", "v_proj"):
                old = getattr(attn, name)
                setattr(attn, name, nn.Linear(old.in_features, old.out_features, bias=True))
        attn.inv_freq = _rope_frequencies(data)
        self.layer.norm_before_residual = bool((data.get("eagle_config") or {}).get(
            "norm_before_residual", data.get("norm_before_residual", False)))
        self.lm_head = nn.Linear(cfg.hidden_size, self.vocab.size, bias=False)
        self.embed: nn.Embedding | None = None

    def use_own_embedding(self) -> None:
        self.embed = nn.Embedding(self.cfg.vocab_size, self.cfg.hidden_size)

    def bind_target(self, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        """Share the target's embedding (or use the checkpoint's own); the target's LM-head rows
        of the draft vocabulary stay bound for training objectives."""
        own = self.embed.weight if self.embed is not None else embed_weight
        super().bind_target(own, lm_head_weight)

    def output_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits through the final norm and the drafter's own LM head."""
        return self.lm_head(self.norm(h))


def _rope_frequencies(data: dict) -> torch.Tensor | None:
    """Inverse rope frequencies of a scaled rope (transformers' own rope initialisation), or
    None for the default rope (computed from rope_theta)."""
    rope = data.get("rope_scaling") or data.get("rope_parameters") or {}
    if not rope or rope.get("rope_type", rope.get("type", "default")) == "default":
        return None
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    keys = ("hidden_size", "num_attention_heads", "head_dim", "rope_theta", "rope_scaling",
            "rope_parameters", "max_position_embeddings")
    emb = LlamaRotaryEmbedding(LlamaConfig(**{k: data[k] for k in keys if k in data}))
    if float(emb.attention_scaling) != 1.0:
        raise InputError(f"a rope with attention scaling {emb.attention_scaling} is not supported",
                         field="rope_scaling")
    return emb.inv_freq.detach().float().clone()


# checkpoint name -> module name (the published layout's midlayer is the product's `layer`)
_NAMES = {
    "fc.weight": "proj.fc.weight", "norm.weight": "norm.weight", "lm_head.weight": "lm_head.weight",
    "midlayer.input_layernorm.weight": "layer.embed_norm.weight",
    "midlayer.hidden_norm.weight": "layer.hidden_norm.weight",
    "midlayer.post_attention_layernorm.weight": "layer.mlp_norm.weight",
    "midlayer.mlp.gate_proj.weight": "layer.mlp.gate.weight",
    "midlayer.mlp.up_proj.weight": "layer.mlp.up.weight",
    "midlayer.mlp.down_proj.weight": "layer.mlp.down.weight",
    "embed_tokens.weight": "embed.weight",
    **{f"midlayer.self_attn.{p}_proj.{w}": f"layer.attn.{p}_proj.{w}"
       for p in "qkvo" for w in ("weight", "bias")},
}


def _read_weights(file: Path) -> dict[str, torch.Tensor]:
    if file.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(str(file))
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:                              # noqa: BLE001 - any unreadable pickle
        raise InputError(f"cannot read the weights ({exc})", file=file) from None


def load_published(path: str | Path, target: Target, name: str | None = None):
    """A published EAGLE-3 checkpoint directory as the product's drafter for `target`."""
    from .trained import TrainedDrafter, apply_calibration_file, check_fits_target

    path = Path(path)
    data, check = read_published_config(path)
    cfg = published_config(data, check, target)
    check_fits_target(cfg, target, path / "config.json")
    file = _weight_file(path)
    raw = _read_weights(file)
    module = PublishedEagle3Module(cfg, data)
    if "embed_tokens.weight" in raw:
        module.use_own_embedding()
    vd = cfg.draft_vocab
    if "d2t" in raw:
        d2t = raw.pop("d2t").long().reshape(-1)
        if d2t.numel() != vd:
            raise InputError(f"d2t has {d2t.numel()} entries, draft_vocab_size is {vd}", file=file,
                             field="d2t")
        ids = torch.arange(vd) + d2t
    elif vd == cfg.vocab_size:
        ids = torch.arange(vd)
    else:
        raise InputError(f"no d2t map, but draft_vocab_size {vd} < vocab_size {cfg.vocab_size}",
                         file=file, field="d2t")
    if ids.min() < 0 or ids.max() >= cfg.vocab_size or ids.unique().numel() != vd:
        raise InputError("d2t maps draft ids outside the vocabulary or twice onto one token",
                         file=file, field="d2t")
    t2d = raw.pop("t2d", None)
    if t2d is not None and (t2d.numel() != cfg.vocab_size or int(t2d.bool().sum()) != vd
                            or not bool(t2d.bool()[ids].all())):
        raise InputError("t2d does not mark exactly the tokens d2t maps to", file=file, field="t2d")
    raw = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v
           for k, v in raw.items()}              # some exports name the layer layers.0
    state = {}
    unknown = [k for k in raw if k not in _NAMES]
    if unknown:
        raise InputError(f"unexpected weights for the EAGLE-3 layout: {', '.join(sorted(unknown)[:4])}",
                         file=file)
    for key, tensor in raw.items():
        state[_NAMES[key]] = tensor.float() if tensor.is_floating_point() else tensor
    if "lm_head.weight" not in state and vd == cfg.vocab_size:
        state["lm_head.weight"] = target.lm_head.weight.detach().float().cpu()
    expected = {k: v.shape for k, v in module.state_dict().items() if not k.startswith("vocab.")}
    missing = sorted(set(expected) - set(state))
    if missing:
        inverse = {v: k for k, v in _NAMES.items()}
        raise InputError(f"missing weights: {', '.join(inverse.get(m, m) for m in missing[:4])}",
                         file=file)
    inverse = {v: k for k, v in _NAMES.items()}
    for key, shape in expected.items():
        if tuple(state[key].shape) != tuple(shape):
            raise InputError(f"expected shape {tuple(shape)}, found {tuple(state[key].shape)}",
                             file=file, field=inverse.get(key, key))
    module.load_state_dict(state, strict=False)
    module.vocab.set_ids(ids)
    apply_calibration_file(cfg, path)
    return TrainedDrafter(module, target, name or str(path))


def check_published(path: str | Path) -> None:
    """Validate a published EAGLE-3 checkpoint's config and weight file without a target."""
    read_published_config(path)
    _weight_file(Path(path))


def register() -> None:
    register_checkpoint_format(CheckpointFormat(
        name=FORMAT,
        description=("published EAGLE-3 drafters, the Hugging Face layout vLLM and SGLang load "
                     f"(config.json architectures {' or '.join(ARCHITECTURES)})"),
        matches=matches, loader=load_published, check=check_published))
