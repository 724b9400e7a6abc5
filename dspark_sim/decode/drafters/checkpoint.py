"""Drafter checkpoints: `model.safetensors` (the drafter's own weights only; the frozen
embedding and LM head stay with the target) + `config.json` (a DrafterConfig)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import InputError
from ...fileio import LineMap, atomic_path, read_json, write_json_atomic
from ...profiles.validate import FieldChecker
from .config import KINDS, DrafterConfig

WEIGHTS = "model.safetensors"
CONFIG = "config.json"


def build_module(cfg: DrafterConfig) -> nn.Module:
    """An untrained drafter module of the configured kind."""
    from .dflash import BlockDrafter
    from .dspark import DSparkDrafter
    from .eagle3 import Eagle3Drafter
    from .mtp1 import MTP1Drafter

    return {"mtp1": MTP1Drafter, "eagle3": Eagle3Drafter, "dflash": BlockDrafter,
            "dspark": DSparkDrafter}[cfg.kind](cfg)


def save_drafter(module: nn.Module, out_dir: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Write weights (cast to `dtype`, floats only) and config atomically into `out_dir`."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().to(dtype) if v.is_floating_point() else v.detach()).contiguous().cpu()
             for k, v in module.state_dict().items()}
    with atomic_path(out_dir / WEIGHTS) as tmp:
        save_file(state, str(tmp), metadata={"kind": module.cfg.kind})
    write_json_atomic(out_dir / CONFIG, module.cfg.to_dict())
    return out_dir


def read_config(path: str | Path) -> DrafterConfig:
    """The DrafterConfig of a checkpoint directory; a bad file raises InputError naming
    config.json, the line and the field."""
    cfg_path = Path(path) / CONFIG
    if not cfg_path.is_file():
        raise InputError("drafter checkpoint has no config.json", file=cfg_path)
    data, lines = read_json(cfg_path)
    try:
        return config_from_dict(data, cfg_path, lines)
    except InputError as exc:
        raise InputError(f"bad drafter config: {exc.message}", exc.file, exc.line, exc.field) from None


# field -> (type, minimum) of a DrafterConfig; floats accept integers
_INT_FIELDS = {"hidden_size": 1, "num_heads": 1, "num_kv_heads": 1, "head_dim": 1,
               "intermediate_size": 1, "vocab_size": 1, "num_target_layers": 1, "num_layers": 1,
               "gamma": 1, "draft_vocab": 0, "seq_rank": 0, "copy_slots": 0}
_CHOICES = {"kind": KINDS, "seq_head": ("markov", "rnn")}


def config_from_dict(data: Any, file: str | Path | None = None,
                     lines: LineMap | None = None) -> DrafterConfig:
    """Validate a parsed config.json (types and ranges of every field) into a DrafterConfig."""
    check = FieldChecker(file, lines)
    data = check.mapping(data, "(document)")
    known = {f.name: f for f in dataclasses.fields(DrafterConfig)}
    for key in data:
        if key not in known:
            raise check.fail(str(key), f"unknown drafter config field (known: {', '.join(known)})")
    for name, f in known.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise check.fail(name, f"missing required field '{name}'")
            continue
        value = data[name]
        if name in _INT_FIELDS:
            check.integer(value, name, _INT_FIELDS[name])
        elif name in ("rms_norm_eps", "rope_theta"):
            check.number(value, name, 0.0, exclusive=True)
        elif name in _CHOICES:
            if value not in _CHOICES[name] or not isinstance(value, str):
                raise check.fail(name, f"must be one of {', '.join(_CHOICES[name])}, got {value!r}")
        elif name in ("confidence", "draft_confidence"):
            if not isinstance(value, bool):
                raise check.fail(name, f"expected true or false, got {value!r}")
        elif name == "taps":
            if not isinstance(value, list):
                raise check.fail(name, "expected a list of target layer indices")
            for i, tap in enumerate(value):
                check.integer(tap, f"taps[{i}]", 0)
        elif name == "sts":
            for key, temps in check.mapping(value, name).items():
                check.number_list(temps, f"sts.{key}", 0.0, exclusive=True)
        elif name == "sts_copy":
            for key, pairs in check.mapping(value, name).items():
                if not isinstance(pairs, list) or not pairs:
                    raise check.fail(f"sts_copy.{key}", "expected a list of [temperature, offset] pairs")
                for i, pair in enumerate(pairs):
                    if not isinstance(pair, list) or len(pair) != 2:
                        raise check.fail(f"sts_copy.{key}[{i}]", f"expected [temperature, offset], got {pair!r}")
                    check.number(pair[0], f"sts_copy.{key}[{i}][0]", 0.0, exclusive=True)
                    check.number(pair[1], f"sts_copy.{key}[{i}][1]")
        elif name == "copy_bias":
            if value != []:
                check.number_list(value, name, 0.0)
            if len(value) > 2:
                raise check.fail(name, f"expected [bigram, unigram], got {len(value)} numbers")
        elif not isinstance(value, str):
            raise check.fail(name, f"expected a string, got {value!r}")
    return DrafterConfig(**data)


def load_module(path: str | Path) -> nn.Module:
    """Rebuild a drafter module from a checkpoint directory (float32, on the CPU)."""
    from safetensors.torch import load_file

    path = Path(path)
    cfg = read_config(path)
    module = build_module(cfg)
    weights = path / WEIGHTS
    if not weights.is_file():
        raise InputError("drafter checkpoint has no model.safetensors", file=weights)
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(weights)).items()}
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise InputError(f"weights do not match the config (missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]})", file=weights)
    return module
