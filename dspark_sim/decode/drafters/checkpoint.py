"""Drafter checkpoints: `model.safetensors` (the drafter's own weights only; the frozen
embedding and LM head stay with the target) + `config.json` (a DrafterConfig)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from ...errors import InputError
from ...fileio import atomic_path, write_json_atomic
from .config import DrafterConfig

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
    """The DrafterConfig of a checkpoint directory; bad files raise InputError."""
    cfg_path = Path(path) / CONFIG
    try:
        return DrafterConfig.from_dict(json.loads(cfg_path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise InputError("drafter checkpoint has no config.json", file=cfg_path) from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"bad drafter config: {exc}", file=cfg_path) from None


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
