"""The frozen target model: one forward over new tokens returns logits and tapped features.

`Target` is the interface the speculative loop and the drafters use; `HFTarget` wraps any
Hugging Face causal LM. Drafters declare which decoder layers they read (`taps`); the
target captures only those, with forward hooks, so plain decoding pays nothing for them.
Tap i is the output of decoder layer i (0-based; negative counts from the top), so tap -1
is the pre-norm last hidden state.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class TargetOutput:
    """Result of one target forward over n new positions."""

    logits: torch.Tensor                 # (n, V), or (1, V) when only the last row was asked for
    features: torch.Tensor | None        # (n, len(taps), hidden) tapped states, None without taps


def default_taps(num_layers: int, count: int = 5) -> tuple[int, ...]:
    """`count` layers spread from layer 1 to three below the top (DSpark's [1, 9, .., 33] for 36)."""
    if num_layers < 4:
        return tuple(range(num_layers))[:count]
    lo, hi = 1, num_layers - 3
    count = min(count, hi - lo + 1)
    if count == 1:
        return (lo,)
    return tuple(round(lo + i * (hi - lo) / (count - 1)) for i in range(count))


class Target:
    """A frozen causal LM the speculative loop can prefill, extend, verify and roll back."""

    name: str
    device: torch.device
    dtype: torch.dtype
    vocab_size: int
    num_layers: int
    hidden_size: int
    eos_token_ids: frozenset[int]
    tokenizer: Any = None
    embed_tokens: nn.Module | None = None   # frozen, shared with the drafters
    lm_head: nn.Module | None = None        # frozen, shared with the drafters
    final_norm: nn.Module | None = None     # the norm applied before lm_head

    def new_cache(self) -> Any:
        """An empty KV cache for one request."""
        raise NotImplementedError

    def cache_len(self, cache: Any) -> int:
        """Number of positions held in `cache`."""
        raise NotImplementedError

    def crop(self, cache: Any, length: int) -> None:
        """Roll `cache` back to its first `length` positions."""
        raise NotImplementedError

    def forward(self, ids: torch.Tensor, cache: Any, taps: tuple[int, ...] = (),
                last_only: bool = False) -> TargetOutput:
        """Process `ids` (n,) after the cached positions, appending them to `cache`."""
        raise NotImplementedError

    def resolve_taps(self, taps: tuple[int, ...]) -> tuple[int, ...]:
        """Taps as non-negative layer indices; ValueError when one is out of range."""
        out = []
        for t in taps:
            if not -self.num_layers <= t < self.num_layers:
                raise ValueError(f"tap {t} is outside the target's {self.num_layers} layers")
            out.append(t % self.num_layers)
        return tuple(out)


def _decoder_layers(model: nn.Module) -> nn.ModuleList | None:
    """The list of decoder blocks of a Hugging Face causal LM, when it has a recognisable one."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    for owner in (decoder, getattr(model, "model", None), getattr(model, "transformer", None)):
        for attr in ("layers", "h", "blocks"):
            layers = getattr(owner, attr, None) if owner is not None else None
            if isinstance(layers, nn.ModuleList):
                return layers
    return None


class HFTarget(Target):
    """A Hugging Face causal LM (AutoModelForCausalLM) as a frozen target, batch size one."""

    def __init__(self, model: nn.Module, tokenizer: Any = None, name: str = "") -> None:
        from transformers import DynamicCache

        self._cache_cls = DynamicCache
        self.model = model.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        config = model.config
        self.name = name or getattr(config, "_name_or_path", "") or type(model).__name__
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.hidden_size = config.hidden_size
        self._layers = _decoder_layers(model)
        self.num_layers = len(self._layers) if self._layers is not None else config.num_hidden_layers
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self.embed_tokens = model.get_input_embeddings()
        self.lm_head = model.get_output_embeddings()
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        self.final_norm = getattr(decoder, "norm", None)
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._supports_keep = "logits_to_keep" in params

    def new_cache(self) -> Any:
        return self._cache_cls(config=self.model.config)

    def cache_len(self, cache: Any) -> int:
        return int(cache.get_seq_length())

    def crop(self, cache: Any, length: int) -> None:
        extra = self.cache_len(cache) - length
        if extra > 0:
            cache.crop(-extra)          # transformers >= 5: a negative count removes positions

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, cache: Any, taps: tuple[int, ...] = (),
                last_only: bool = False) -> TargetOutput:
        taps = self.resolve_taps(taps)
        if taps and self._layers is None:
            raise ValueError(f"cannot tap the layers of {type(self.model).__name__}: "
                             "no decoder layer list found")
        captured: dict[int, torch.Tensor] = {}
        hooks = [self._layers[t].register_forward_hook(_capture(captured, t)) for t in set(taps)]
        kwargs: dict[str, Any] = {self._cache_kw: cache, "use_cache": True}
        if last_only and self._supports_keep:
            kwargs["logits_to_keep"] = 1
        try:
            out = self.model(input_ids=ids.to(self.device).view(1, -1), **kwargs)
        finally:
            for h in hooks:
                h.remove()
        logits = out.logits[0, -1:] if last_only else out.logits[0]
        features = torch.stack([captured[t][0] for t in taps], dim=1) if taps else None
        return TargetOutput(logits=logits, features=features)


def _capture(store: dict[int, torch.Tensor], index: int):
    def hook(_module: nn.Module, _inputs: Any, output: Any) -> None:
        store[index] = output[0] if isinstance(output, tuple) else output
    return hook


def _eos_ids(model: nn.Module, tokenizer: Any) -> frozenset[int]:
    """End-of-sequence ids as `generate` uses them: the generation config's when the model has
    one, else the model config's, else the tokenizer's."""
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        eos = gen.eos_token_id
    else:
        eos = getattr(model.config, "eos_token_id", None)
        if eos is None and tokenizer is not None:
            eos = tokenizer.eos_token_id
    if eos is None:
        return frozenset()
    return frozenset([int(eos)] if isinstance(eos, int) else (int(e) for e in eos))
