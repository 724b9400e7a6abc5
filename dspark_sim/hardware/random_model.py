"""A causal LM of a real configuration with random weights, built on the meta device first.

Timing does not depend on weight values, so an 8B-class model can be profiled on a GPU without
its checkpoint: the module tree is built on `meta` (no memory), materialised on the device in
the target dtype, then initialised in place there (seconds on a GPU, no host copy).
"""
from __future__ import annotations

from typing import Any


def build_random_model(hf_config: dict[str, Any], device: str, dtype, seed: int = 0):
    """transformers causal LM with `hf_config`'s shape, random weights, on `device` in `dtype`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = dict(hf_config)
    model_type = config.pop("model_type")
    config.pop("architectures", None)
    config.pop("torch_dtype", None)
    config = AutoConfig.for_model(model_type, **config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model = model.to_empty(device=device)
    for module in model.modules():        # from_config marked them initialised on meta
        if hasattr(module, "_is_hf_initialized"):
            del module._is_hf_initialized
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model.initialize_weights()        # also recomputes the rotary tables (buffers)
    return model.eval()
