"""Hardware profile (formats.md): what one replica's iteration costs. Load, validate, save."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import LineMap, read_yaml, write_yaml_atomic
from .curve import Curve
from .validate import FieldChecker

HW_SCHEMA = "dspark-sim/hw/v1"
HW_SOURCES = ("measured", "roofline", "constant", "fitted", "estimate")
_KNOWN_KEYS = {"schema", "name", "source", "device", "model", "gpus_per_replica", "step_time",
               "draft_time", "kv_capacity_tokens", "max_batch_tokens", "max_batch_requests",
               "capture_sizes", "kv_block_size"}
DEFAULT_KV_BLOCK_SIZE = 16     # vLLM's default block size (tokens per KV block)


@dataclass
class HardwareProfile:
    """Step time of one replica's target forward as a function of batch tokens, plus draft costs."""

    name: str
    source: str
    step_curve: Curve | None = None          # None when step time is constant
    step_constant_s: float | None = None
    per_context_token_s: float = 0.0
    draft_curves: dict[str, Curve] = field(default_factory=dict)
    per_draft_kinds: frozenset[str] = frozenset()   # drafters whose cost is per sequential draft
    device: str = ""
    model: str = ""
    gpus_per_replica: int = 1
    kv_capacity_tokens: int | None = None
    max_batch_tokens: int | None = None
    max_batch_requests: int | None = None
    capture_sizes: tuple[int, ...] = ()      # CUDA-graph capture sizes (batch tokens), ascending
    kv_block_size: int = DEFAULT_KV_BLOCK_SIZE
    extra: dict[str, Any] = field(default_factory=dict)   # unknown keys, kept on save

    def padded_tokens(self, batch_tokens):
        """Batch tokens a graph-captured engine runs: the smallest capture size >= B at or below
        the largest capture size, B itself above it (or without capture sizes)."""
        b = np.asarray(batch_tokens)
        if not self.capture_sizes:
            return b
        sizes = np.asarray(self.capture_sizes)
        idx = np.minimum(np.searchsorted(sizes, b, side="left"), len(sizes) - 1)
        return np.where((b > 0) & (b <= sizes[-1]), sizes[idx], b)

    def step_time(self, batch_tokens, context_tokens=0.0):
        """Seconds of one target forward over `batch_tokens` tokens attending `context_tokens` KV
        (a step function of the padded size below the largest capture size, smooth above)."""
        base = self.step_constant_s if self.step_curve is None else \
            self.step_curve(self.padded_tokens(batch_tokens))
        if self.step_curve is None and np.ndim(batch_tokens):
            base = np.full(np.shape(batch_tokens), base)
        return base + self.per_context_token_s * np.asarray(context_tokens, dtype=float) \
            if self.per_context_token_s else base

    def sps(self, batch_tokens):
        """Target forward steps per second at `batch_tokens` batch tokens (SPS(B) of method.md)."""
        return 1.0 / self.step_time(batch_tokens)

    def draft_time(self, kind: str | None, requests, drafts=1):
        """Seconds the drafter of `kind` takes per iteration for `requests` decoding requests.

        For a drafter marked `per_draft: true` (autoregressive: one pass per drafted token) the
        table holds the cost of one sequential pass, and an iteration that drafts `drafts`
        tokens per request costs `drafts` passes; parallel drafters ignore `drafts`.
        """
        curve = self.draft_curves.get(kind) if kind else None
        if curve is None:
            return 0.0 if np.ndim(requests) == 0 else np.zeros(np.shape(requests))
        value = curve(requests)
        if kind in self.per_draft_kinds:
            value = value * np.asarray(drafts, dtype=float) if np.ndim(drafts) else value * drafts
        return np.where(np.asarray(requests) > 0, value, 0.0) if np.ndim(requests) else \
            (value if requests > 0 else 0.0)

    # --- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schema": HW_SCHEMA, "name": self.name, "source": self.source}
        if self.device:
            out["device"] = self.device
        if self.model:
            out["model"] = self.model
        out["gpus_per_replica"] = self.gpus_per_replica
        if self.step_curve is None:
            step: dict[str, Any] = {"constant_s": self.step_constant_s}
        else:
            step = {"batch_tokens": _plain(self.step_curve.x), "seconds": _plain(self.step_curve.y)}
        if self.per_context_token_s:
            step["per_context_token_s"] = self.per_context_token_s
        out["step_time"] = step
        if self.draft_curves:
            out["draft_time"] = {}
            for k, c in self.draft_curves.items():
                out["draft_time"][k] = {"requests": _plain(c.x), "seconds": _plain(c.y)}
                if k in self.per_draft_kinds:
                    out["draft_time"][k]["per_draft"] = True
        for key in ("kv_capacity_tokens", "max_batch_tokens", "max_batch_requests"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.capture_sizes:
            out["capture_sizes"] = list(self.capture_sizes)
        if self.kv_block_size != DEFAULT_KV_BLOCK_SIZE:
            out["kv_block_size"] = self.kv_block_size
        out.update(self.extra)
        return out

    def save(self, path: str | Path) -> None:
        """Write the profile as YAML, atomically."""
        write_yaml_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "HardwareProfile":
        """Read and validate a hardware profile; errors name FILE:LINE and the field."""
        data, lines = read_yaml(path)
        return cls.from_dict(data, file=path, lines=lines)

    @classmethod
    def from_dict(cls, data: Any, file: str | Path | None = None,
                  lines: LineMap | None = None) -> "HardwareProfile":
        """Validate a parsed profile document."""
        check = FieldChecker(file, lines)
        data = check.mapping(data, "(document)")
        check.schema(data, HW_SCHEMA)
        name = check.string(check.require(data, "name"), "name")
        source = check.string(check.require(data, "source"), "source")
        if source not in HW_SOURCES:
            raise check.fail("source", f"must be one of {', '.join(HW_SOURCES)}, got {source!r}")
        step = check.mapping(check.require(data, "step_time"), "step_time")
        per_ctx = check.number(step.get("per_context_token_s", 0.0), "step_time.per_context_token_s", 0.0)
        step_curve, step_const = None, None
        if "constant_s" in step:
            step_const = check.number(step["constant_s"], "step_time.constant_s", 0.0, exclusive=True)
        else:
            step_curve = _curve(check, step, "step_time", "batch_tokens")
        drafts, per_draft = {}, set()
        for kind, spec in check.mapping(data.get("draft_time") or {}, "draft_time").items():
            prefix = f"draft_time.{kind}"
            spec = check.mapping(spec, prefix)
            drafts[str(kind)] = _curve(check, spec, prefix, "requests", allow_zero_seconds=True)
            flag = spec.get("per_draft", False)
            if not isinstance(flag, bool):
                raise check.fail(f"{prefix}.per_draft", f"expected true or false, got {flag!r}")
            if flag:
                per_draft.add(str(kind))
        optional = {}
        for key in ("kv_capacity_tokens", "max_batch_tokens", "max_batch_requests"):
            if data.get(key) is not None:
                optional[key] = check.integer(data[key], key, 1)
        if data.get("capture_sizes") is not None:
            sizes = data["capture_sizes"]
            if not isinstance(sizes, list) or not sizes:
                raise check.fail("capture_sizes", "expected a non-empty list of batch-token counts")
            sizes = [check.integer(v, f"capture_sizes[{i}]", 1) for i, v in enumerate(sizes)]
            check.increasing(sizes, "capture_sizes")
            optional["capture_sizes"] = tuple(sizes)
        if data.get("kv_block_size") is not None:
            optional["kv_block_size"] = check.integer(data["kv_block_size"], "kv_block_size", 1)
        gpus = check.integer(data.get("gpus_per_replica", 1), "gpus_per_replica", 1)
        for key in ("device", "model"):
            if key in data and not isinstance(data[key], str):
                raise check.fail(key, "expected a string")
        extra = {k: v for k, v in data.items() if k not in _KNOWN_KEYS}
        return cls(name=name, source=source, step_curve=step_curve, step_constant_s=step_const,
                   per_context_token_s=per_ctx, draft_curves=drafts,
                   per_draft_kinds=frozenset(per_draft),
                   device=data.get("device", ""), model=data.get("model", ""),
                   gpus_per_replica=gpus, extra=extra, **optional)


def _curve(check: FieldChecker, spec: dict, prefix: str, x_key: str,
           allow_zero_seconds: bool = False) -> Curve:
    xs = check.number_list(check.require(spec, x_key, prefix), f"{prefix}.{x_key}", 0.0, exclusive=True)
    ys = check.number_list(check.require(spec, "seconds", prefix), f"{prefix}.seconds", 0.0,
                           exclusive=not allow_zero_seconds)
    check.increasing(xs, f"{prefix}.{x_key}")
    if len(xs) != len(ys):
        raise check.fail(f"{prefix}.seconds",
                         f"has {len(ys)} values but {prefix}.{x_key} has {len(xs)}")
    return Curve.of(xs, ys)


def _plain(values: np.ndarray) -> list:
    return [int(v) if float(v).is_integer() and abs(v) < 2**53 and v >= 1 else float(v)
            for v in np.asarray(values).tolist()]
