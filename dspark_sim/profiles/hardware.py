"""Hardware profile (formats.md): what one replica's iteration costs. Load, validate, save."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import LineMap, read_yaml, write_yaml_atomic
from .cudagraph import CudaGraph
from .curve import Curve
from .validate import FieldChecker

HW_SCHEMA = "dspark-sim/hw/v1"
HW_SOURCES = ("measured", "roofline", "constant", "fitted", "estimate")
_KNOWN_KEYS = {"schema", "name", "source", "device", "model", "gpus_per_replica", "step_time",
               "draft_time", "kv_capacity_tokens", "max_batch_tokens", "max_batch_requests",
               "capture_sizes", "kv_block_size", "prefill_time", "cudagraph", "machine"}
DEFAULT_KV_BLOCK_SIZE = 16     # vLLM's default block size (tokens per KV block)


@dataclass(frozen=True)
class DraftSlope:
    """How a block drafter's iteration cost moves with the drafts made per request: the table's
    `seconds` were measured at `drafts` drafts, and each draft more (fewer) adds (saves)
    `per_draft(requests)` seconds."""

    drafts: int
    per_draft: Curve


@dataclass
class HardwareProfile:
    """Step time of one replica's target forward as a function of batch tokens, plus draft costs."""

    name: str
    source: str
    step_curve: Curve | None = None          # None when step time is constant
    step_constant_s: float | None = None
    per_context_token_s: float = 0.0
    per_request_s: float = 0.0               # seconds per request in the iteration
    draft_curves: dict[str, Curve] = field(default_factory=dict)
    per_draft_kinds: frozenset[str] = frozenset()   # drafters whose cost is per sequential draft
    draft_slopes: dict[str, DraftSlope] = field(default_factory=dict)   # block drafters' cost by drafts
    prefill_curve: Curve | None = None       # optional: a forward of prefill-chunk tokens only
    device: str = ""
    model: str = ""
    gpus_per_replica: int = 1
    kv_capacity_tokens: int | None = None
    max_batch_tokens: int | None = None
    max_batch_requests: int | None = None
    capture_sizes: tuple[int, ...] = ()      # CUDA-graph capture sizes (batch tokens), ascending
    kv_block_size: int = DEFAULT_KV_BLOCK_SIZE
    cudagraph: CudaGraph | None = None       # capture limit and the eager term above it
    machine: dict[str, Any] = field(default_factory=dict)   # where a measured profile was taken
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

    def table_time(self, batch_tokens):
        """Seconds of the step table at B batch tokens: the curve at the padded size (a step
        function below the largest capture size, smooth above), plus the eager term above the
        CUDA-graph capture limit (`cudagraph`); no context, request or prefill terms."""
        base = self.step_constant_s if self.step_curve is None else \
            self.step_curve(self.padded_tokens(batch_tokens))
        if self.step_curve is None and np.ndim(batch_tokens):
            base = np.full(np.shape(batch_tokens), base)
        if self.cudagraph is not None and self.cudagraph.has_eager:
            base = base + self.cudagraph.eager_seconds(batch_tokens)
        return base

    def step_time(self, batch_tokens, context_tokens=0.0, prefill_tokens=0, requests=0):
        """Seconds of one target forward over `batch_tokens` tokens attending `context_tokens` KV
        for `requests` requests (`table_time` + per_context_token_s x context + per_request_s x
        requests).

        With a `prefill_time` curve, `prefill_tokens` of the batch tokens are prefill-chunk
        tokens: the forward costs step(B) - step(P) + prefill(P) (the decode curve prices the
        decode tokens on top of the chunks, the prefill curve the chunks themselves)."""
        base = self.table_time(batch_tokens)
        if self.prefill_curve is not None and np.any(np.asarray(prefill_tokens) > 0):
            base = base + self.prefill_adjustment(prefill_tokens)
        if self.per_request_s:
            base = base + self.per_request_s * np.asarray(requests, dtype=float)
        return base + self.per_context_token_s * np.asarray(context_tokens, dtype=float) \
            if self.per_context_token_s else base

    def prefill_adjustment(self, prefill_tokens):
        """prefill(P) - step(P) for P > 0 prefill tokens (0 at P = 0 or without a prefill curve):
        what pricing P chunk tokens on the prefill curve changes against the decode curve."""
        p = np.asarray(prefill_tokens)
        if self.prefill_curve is None:
            return np.zeros(np.shape(p)) if np.ndim(p) else 0.0
        decode = self.step_constant_s if self.step_curve is None else \
            self.step_curve(self.padded_tokens(p))
        out = np.where(p > 0, np.asarray(self.prefill_curve(p)) - decode, 0.0)
        return out if np.ndim(p) else float(out)

    def sps(self, batch_tokens):
        """Target forward steps per second at `batch_tokens` batch tokens (SPS(B) of method.md)."""
        return 1.0 / self.step_time(batch_tokens)

    def draft_time(self, kind: str | None, requests, drafts=1):
        """Seconds the drafter of `kind` takes per iteration for `requests` decoding requests.

        For a drafter marked `per_draft: true` (autoregressive: one pass per drafted token) the
        table holds the cost of one sequential pass, and an iteration that drafts `drafts`
        tokens per request costs `drafts` passes. A block drafter with `per_draft_seconds`
        costs seconds(R) + (drafts - measured drafts) x per_draft_seconds(R); other parallel
        drafters ignore `drafts` (callers charge nothing at 0 drafts).
        """
        curve = self.draft_curves.get(kind) if kind else None
        if curve is None:
            return 0.0 if np.ndim(requests) == 0 else np.zeros(np.shape(requests))
        value = curve(requests)
        slope = self.draft_slopes.get(kind)
        if kind in self.per_draft_kinds:
            value = value * np.asarray(drafts, dtype=float) if np.ndim(drafts) else value * drafts
        elif slope is not None:
            value = value + (np.asarray(drafts, dtype=float) - slope.drafts) * slope.per_draft(requests)
            value = value if np.ndim(value) else float(value)
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
        if self.per_request_s:
            step["per_request_s"] = self.per_request_s
        out["step_time"] = step
        if self.prefill_curve is not None:
            out["prefill_time"] = {"prefill_tokens": _plain(self.prefill_curve.x),
                                   "seconds": _plain(self.prefill_curve.y)}
        if self.draft_curves:
            out["draft_time"] = {}
            for k, c in self.draft_curves.items():
                out["draft_time"][k] = {"requests": _plain(c.x), "seconds": _plain(c.y)}
                if k in self.per_draft_kinds:
                    out["draft_time"][k]["per_draft"] = True
                if k in self.draft_slopes:
                    out["draft_time"][k]["drafts"] = self.draft_slopes[k].drafts
                    out["draft_time"][k]["per_draft_seconds"] = _plain(self.draft_slopes[k].per_draft.y)
        for key in ("kv_capacity_tokens", "max_batch_tokens", "max_batch_requests"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.capture_sizes:
            out["capture_sizes"] = list(self.capture_sizes)
        if self.cudagraph is not None:
            out["cudagraph"] = self.cudagraph.to_dict()
        if self.machine:
            out["machine"] = dict(self.machine)
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
        per_req = check.number(step.get("per_request_s", 0.0), "step_time.per_request_s", 0.0)
        step_curve, step_const = None, None
        if "constant_s" in step:
            step_const = check.number(step["constant_s"], "step_time.constant_s", 0.0, exclusive=True)
        else:
            step_curve = _curve(check, step, "step_time", "batch_tokens")
        drafts, per_draft, slopes = {}, set(), {}
        for kind, spec in check.mapping(data.get("draft_time") or {}, "draft_time").items():
            prefix = f"draft_time.{kind}"
            spec = check.mapping(spec, prefix)
            drafts[str(kind)] = _curve(check, spec, prefix, "requests", allow_zero_seconds=True)
            flag = spec.get("per_draft", False)
            if not isinstance(flag, bool):
                raise check.fail(f"{prefix}.per_draft", f"expected true or false, got {flag!r}")
            if flag:
                per_draft.add(str(kind))
            if "per_draft_seconds" in spec or "drafts" in spec:
                slopes[str(kind)] = _draft_slope(check, spec, prefix, drafts[str(kind)], flag)
        optional: dict[str, Any] = {}
        if data.get("prefill_time") is not None:
            spec = check.mapping(data["prefill_time"], "prefill_time")
            optional["prefill_curve"] = _curve(check, spec, "prefill_time", "prefill_tokens")
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
        if data.get("cudagraph") is not None:
            graph = CudaGraph.from_dict(data["cudagraph"], check)
            sizes = optional.get("capture_sizes")
            if sizes and sizes[-1] != graph.max_capture_size:
                raise check.fail("cudagraph.max_capture_size",
                                 f"{graph.max_capture_size} differs from the largest capture_sizes "
                                 f"entry {sizes[-1]} (vLLM requires them equal)")
            optional["cudagraph"] = graph
        if data.get("machine") is not None:
            optional["machine"] = check.mapping(data["machine"], "machine")
        if data.get("kv_block_size") is not None:
            optional["kv_block_size"] = check.integer(data["kv_block_size"], "kv_block_size", 1)
        gpus = check.integer(data.get("gpus_per_replica", 1), "gpus_per_replica", 1)
        for key in ("device", "model"):
            if key in data and not isinstance(data[key], str):
                raise check.fail(key, "expected a string")
        extra = {k: v for k, v in data.items() if k not in _KNOWN_KEYS}
        return cls(name=name, source=source, step_curve=step_curve, step_constant_s=step_const,
                   per_context_token_s=per_ctx, per_request_s=per_req, draft_curves=drafts,
                   per_draft_kinds=frozenset(per_draft), draft_slopes=slopes,
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


def _draft_slope(check: FieldChecker, spec: dict, prefix: str, curve: Curve,
                 per_draft: bool) -> DraftSlope:
    """`drafts` + `per_draft_seconds` of a block drafter (both or neither; not with per_draft)."""
    if per_draft:
        raise check.fail(f"{prefix}.per_draft_seconds",
                         "a per_draft: true drafter already scales with the drafts; "
                         "per_draft_seconds is for block drafters")
    depth = check.integer(check.require(spec, "drafts", prefix), f"{prefix}.drafts", 1)
    slope = check.number_list(check.require(spec, "per_draft_seconds", prefix),
                              f"{prefix}.per_draft_seconds", 0.0)
    if len(slope) != len(curve.x):
        raise check.fail(f"{prefix}.per_draft_seconds",
                         f"has {len(slope)} values but {prefix}.requests has {len(curve.x)}")
    for i, (s, d) in enumerate(zip(curve.y, slope)):
        if s - depth * d < -1e-12 * max(s, 1e-300):
            raise check.fail(f"{prefix}.per_draft_seconds[{i}]",
                             f"{d!r} s per draft x {depth} drafts exceeds seconds[{i}] = {s!r} "
                             "(the cost without drafts would be negative)")
    return DraftSlope(depth, Curve.of(curve.x, slope))


def _plain(values: np.ndarray) -> list:
    return [int(v) if float(v).is_integer() and abs(v) < 2**53 and v >= 1 else float(v)
            for v in np.asarray(values).tolist()]
