"""Load the model the profiler times: the embedded target (through the decode core) or a local folder."""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when a GPU is present, else 'cpu'; other values checked and returned."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise InputError(f"unknown device {device!r} (auto, cpu, cuda)", field="device")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("no CUDA device is available here", field="device")
    return device


def resolve_dtype(dtype: str, device: str):
    """torch dtype for 'auto' (bf16 on CUDA, fp32 on CPU), 'bf16', 'fp16' or 'fp32'."""
    import torch

    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    if dtype not in table:
        raise InputError(f"unknown dtype {dtype!r} (auto, {', '.join(table)})", field="dtype")
    return table[dtype]


def load_profile_target(spec: str, device: str, dtype):
    """The target named by `spec` (`embedded` or a local Hugging Face model folder) as the
    decode core's `HFTarget` on `device` in `dtype`, and a display name for it."""
    from ..decode.target import HFTarget

    if spec == "embedded":
        from ..decode.loading import EMBEDDED_NAME, load_target

        target = load_target("embedded", device=device, quiet=True)
        if target.dtype != dtype:
            target = HFTarget(target.model.to(dtype), target.tokenizer, name=target.name)
        return target, EMBEDDED_NAME
    path = Path(spec)
    if not path.is_dir() or not (path / "config.json").exists():
        raise InputError("not a local Hugging Face model folder (with config.json) or "
                         "'embedded'; hub ids are not fetched by the profiler", file=spec,
                         field="target")
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load the model: {exc}", file=spec, field="target") from None
    return HFTarget(model.to(device).eval(), name=path.name), path.name
