"""Step-time curve families for `profile fit`, as data: parameters and how they make a profile.

A family is a small mapping (built in below, or a YAML file the user writes):

    family: buckets                     # linear | buckets | roofline | moe
    capture_sizes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]   # buckets only
    fixed: {per_context_token_s: 0.0}   # parameters held at a value instead of fitted
    max_batch_tokens: 8192              # top of the written table
    experts: 128                        # moe only: routed experts per layer (E)
    top_k: 4                            # moe only: experts per token (k)

Parameters (seconds), plus `per_context_token_s` x context tokens and `per_request_s` x requests
in every family (per_request_s is held at 0 unless a prior (`--roofline` with a per-request
cost) or `--fix` gives it: a no-speculation arm runs one token per request, so it cannot tell
the per-request cost from the per-token one; observations at several tokens per request can):
- linear: step(B) = floor_s + per_token_s x B.
- buckets: the engine pads the batch to the next CUDA-graph capture size (vLLM, SGLang), so
  step(B) = floor_s + per_token_s x pad(B), pad(B) = smallest capture size >= B; beyond the
  largest size the engine runs eagerly, pad(B) = B.
- roofline: step(B) = floor_s + max(weight_s, per_token_s x B): what a GPU step does (flat while
  streaming the weights bounds it, launch- and memory-bound at small B; compute-bound above the
  knee B* = weight_s / per_token_s), the shape `dspark-sim roofline` computes per component.
  floor_s is what no batch size hides (launches, host round trip, sampling).
- moe: step(B) = floor_s + expert_s x cover(B) + per_token_s x B, cover(B) = 1 - (1 - k/E)^B,
  the expected share of a layer's E routed experts that B tokens routed to k each touch
  (uniform routing): a mixture-of-experts step streams only the experts its tokens use, so at
  small batch each added token brings new experts and the step grows fast, and once B is well
  past E/k every expert is loaded and a token costs only per_token_s. expert_s is the time to
  stream every routed expert once; `experts` (E) and `top_k` (k) come with the family (the
  model's config). A speculative verify's extra tokens then cost what the curve says at its
  own larger B, not the baseline's average slope.
The profile table holds the family's exact values at its knots (linear interpolation between
knots reproduces every family at every integer B; the roofline's knee is a knot).

`cudagraph:` (optional, formats.md's profile field) gives the CUDA-graph capture limit and the
eager cost above it; the family adds that term at B > max_capture_size (never a smooth
continuation) and writes it into the profile.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..fileio import read_yaml
from ..profiles.cudagraph import CudaGraph
from ..profiles.curve import Curve
from ..profiles.hardware import HardwareProfile
from ..profiles.validate import FieldChecker

PARAMS = ("floor_s", "per_token_s", "per_context_token_s", "per_request_s")   # linear and buckets
ROOFLINE_PARAMS = ("floor_s", "weight_s", "per_token_s", "per_context_token_s", "per_request_s")
MOE_PARAMS = ("floor_s", "expert_s", "per_token_s", "per_context_token_s", "per_request_s")
HELD = {"per_request_s": 0.0}       # held unless a prior or --fix says otherwise
FAMILY_PARAMS = {"linear": PARAMS, "buckets": PARAMS, "roofline": ROOFLINE_PARAMS, "moe": MOE_PARAMS}
FAMILIES = tuple(FAMILY_PARAMS)
# vLLM's default CUDA-graph capture sizes for decode: 1, 2, 4 and then every 8 up to 512.
VLLM_CAPTURE_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))


@dataclass(frozen=True)
class CurveFamily:
    """A step-time family, the parameters held fixed, and the table it writes."""

    family: str = "linear"
    capture_sizes: tuple[int, ...] = ()
    fixed: dict[str, float] = field(default_factory=dict)
    max_batch_tokens: int = 8192
    cudagraph: CudaGraph | None = None
    freed: tuple[str, ...] = ()          # held parameters (HELD) the fit estimates after all
    experts: int = 0                     # moe: routed experts per layer
    top_k: int = 0                       # moe: experts per token

    @property
    def params(self) -> tuple[str, ...]:
        """The family's parameters."""
        return FAMILY_PARAMS[self.family]

    def cover(self, batch_tokens) -> np.ndarray:
        """moe: expected share of the routed experts B tokens touch, 1 - (1 - k/E)^B."""
        B = np.asarray(batch_tokens, dtype=float)
        return 1.0 - np.power(1.0 - self.top_k / self.experts, B)

    @property
    def free(self) -> tuple[str, ...]:
        """Parameters the fit estimates (a held one only when freed)."""
        return tuple(p for p in self.params if p not in self.fixed and (p not in HELD or p in self.freed))

    def full(self, values: dict[str, float]) -> dict[str, float]:
        """Every parameter: the fitted ones from `values`, the fixed ones from the family, the
        held ones at their held value."""
        free = self.free
        return {p: float(values[p] if p in free else self.fixed.get(p, HELD.get(p, 0.0)))
                for p in self.params}

    def padded(self, batch_tokens) -> np.ndarray:
        """Batch tokens the engine actually runs (capture-size padding for `buckets`)."""
        B = np.asarray(batch_tokens, dtype=float)
        if self.family != "buckets" or not self.capture_sizes:
            return B
        sizes = np.asarray(self.capture_sizes, dtype=float)
        idx = np.searchsorted(sizes, B, side="left")
        return np.where(idx < len(sizes), sizes[np.minimum(idx, len(sizes) - 1)], B)

    def table_time(self, params: dict[str, float], batch_tokens) -> np.ndarray:
        """The family's step table at B (no context, request or eager terms)."""
        p = self.full(params)
        tokens = p["per_token_s"] * self.padded(batch_tokens)
        if self.family == "roofline":
            tokens = np.maximum(p["weight_s"], tokens)
        elif self.family == "moe":
            tokens = tokens + p["expert_s"] * self.cover(batch_tokens)
        return p["floor_s"] + tokens

    def step_time(self, params: dict[str, float], batch_tokens, context_tokens=0.0,
                  requests=0.0) -> np.ndarray:
        """Seconds of one target forward under the family at `params` (with the eager term above
        the capture limit and the per-request term)."""
        p = self.full(params)
        out = self.table_time(p, batch_tokens) + p["per_context_token_s"] * np.asarray(context_tokens, dtype=float)
        if p["per_request_s"]:
            out = out + p["per_request_s"] * np.asarray(requests, dtype=float)
        if self.cudagraph is not None and self.cudagraph.has_eager:
            out = out + self.cudagraph.eager_seconds(batch_tokens)
        return out

    def knots(self, params: dict[str, float] | None = None) -> np.ndarray:
        """Batch sizes of the written table (the roofline's knee at `params` among them)."""
        top = self.max_batch_tokens
        if self.family == "roofline":
            p = self.full(params or {})
            knee = p["weight_s"] / p["per_token_s"] if p["per_token_s"] > 0 else top
            pts = {1.0, float(top)} | {v for v in (np.floor(knee), knee, np.ceil(knee)) if 1 < v < top}
            return np.array(sorted(pts))
        if self.family == "moe":
            # every batch size while the experts still fill (cover within 1% of 1 beyond), then
            # log-spaced: linear interpolation follows the concave part to ~0.1%
            dense = min(top, int(np.ceil(np.log(0.01) / np.log(1.0 - self.top_k / self.experts))))
            pts = set(np.arange(1.0, dense + 1.0)) | set(np.rint(np.geomspace(dense, top, 24)))
            return np.array(sorted(p for p in pts if p <= top))
        if self.family != "buckets" or not self.capture_sizes:
            return np.array([1.0, float(top)])
        sizes = [s for s in self.capture_sizes if s < top]
        pts = {1.0, float(top)}
        prev = 0
        for s in sizes:
            pts.update({float(prev + 1), float(s)})    # flat from prev+1 to s at t(s)
            prev = s
        pts.add(float(prev + 1))                      # eager from the largest size on
        return np.array(sorted(p for p in pts if p <= top))

    def profile(self, params: dict[str, float], name: str, **meta: Any) -> HardwareProfile:
        """The hardware profile (source: fitted) that the family gives at `params`."""
        p = self.full(params)
        x = self.knots(p)
        y = self.table_time(p, x)
        if np.any(y <= 0) or not np.all(np.isfinite(y)):
            raise InputError(f"the fitted step times are not positive ({p})", field="fit")
        return HardwareProfile(name=name, source="fitted", step_curve=Curve.of(x, y),
                               per_context_token_s=p["per_context_token_s"],
                               per_request_s=p["per_request_s"], cudagraph=self.cudagraph,
                               max_batch_tokens=self.max_batch_tokens, **meta)

    def as_dict(self) -> dict[str, Any]:
        """The family as data, for the profile's `fit` block."""
        out: dict[str, Any] = {"family": self.family, "parameters": list(self.params),
                               "fixed": dict(self.fixed), "max_batch_tokens": self.max_batch_tokens}
        if self.family == "buckets":
            out["capture_sizes"] = list(self.capture_sizes)
        if self.family == "moe":
            out.update(experts=self.experts, top_k=self.top_k)
        if self.freed:
            out["freed"] = list(self.freed)
        if self.cudagraph is not None:
            out["cudagraph"] = self.cudagraph.to_dict()
        return out


def family_from_dict(data: Any, file: str | Path | None = None, lines=None) -> CurveFamily:
    """Validate a family mapping (see the module docstring)."""
    check = FieldChecker(file, lines)
    data = check.mapping(data, "(document)")
    name = check.string(data.get("family", "linear"), "family")
    if name not in FAMILIES:
        raise check.fail("family", f"must be one of {', '.join(FAMILIES)}, got {name!r}")
    sizes: tuple[int, ...] = ()
    if name == "buckets":
        raw = data.get("capture_sizes", list(VLLM_CAPTURE_SIZES))
        if not isinstance(raw, list) or not raw:
            raise check.fail("capture_sizes", "expected a non-empty list of integers")
        sizes = tuple(check.integer(v, f"capture_sizes[{i}]", 1) for i, v in enumerate(raw))
        check.increasing(list(sizes), "capture_sizes")
    experts = top_k = 0
    if name == "moe":
        for key in ("experts", "top_k"):
            if data.get(key) is None:
                raise check.fail(key, "the moe family needs the model's routed experts per layer "
                                 "(experts, --experts) and per token (top_k, --top-k)")
        experts = check.integer(check.require(data, "experts"), "experts", 2)
        top_k = check.integer(check.require(data, "top_k"), "top_k", 1)
        if top_k >= experts:
            raise check.fail("top_k", f"must be below experts ({experts}), got {top_k}")
    fixed = {}
    allowed = FAMILY_PARAMS[name]
    for key, value in check.mapping(data.get("fixed") or {}, "fixed").items():
        if key not in allowed:
            raise check.fail(f"fixed.{key}", f"unknown parameter of the {name} family; one of "
                                             f"{', '.join(allowed)}")
        fixed[key] = check.number(value, f"fixed.{key}", 0.0)
    freed = data.get("freed") or []
    if not isinstance(freed, list) or any(k not in HELD for k in freed):
        raise check.fail("freed", f"expected a list of held parameters ({', '.join(HELD)}), got {freed!r}")
    top = check.integer(data.get("max_batch_tokens", 8192), "max_batch_tokens", 2)
    graph = CudaGraph.from_dict(data["cudagraph"], check) if data.get("cudagraph") is not None else None
    return CurveFamily(name, sizes, fixed, top, graph, tuple(freed), experts=experts, top_k=top_k)


def load_family(spec: str, fixed: dict[str, float] | None = None,
                max_batch_tokens: int | None = None, routing: dict[str, int] | None = None) -> CurveFamily:
    """A built-in family name ('linear', 'buckets', 'roofline', 'moe' with `routing`: experts and
    top_k) or a family YAML file, plus overrides."""
    if spec in FAMILIES:
        fam = family_from_dict({"family": spec, **(routing or {})})
    else:
        data, lines = read_yaml(spec)
        fam = family_from_dict(data, spec, lines)
    merged = {**fam.fixed, **(fixed or {})}
    for key in merged:
        if key not in fam.params:
            raise InputError(f"unknown parameter {key!r} of the {fam.family} family; one of "
                             f"{', '.join(fam.params)}", field="fix")
    return replace(fam, fixed=merged, max_batch_tokens=max_batch_tokens or fam.max_batch_tokens)


def with_prior_freed(fam: CurveFamily, priors: dict[str, float], given: dict[str, float]) -> CurveFamily:
    """The family with a held parameter (per_request_s) freed where a prior > 0 exists for it
    and the user did not --fix it."""
    free = tuple(k for k in HELD if priors.get(k, 0.0) > 0 and k not in given and k not in fam.fixed)
    return replace(fam, freed=tuple(dict.fromkeys(fam.freed + free))) if free else fam


def family_values_of(fam: CurveFamily, prof: HardwareProfile) -> dict[str, float]:
    """The family's parameters closest to a profile's step curve (e.g. a roofline's): least
    squares on relative error over batch sizes 1 .. max_batch_tokens (64 log-spaced points), the
    context term taken from the profile. Used as the fit's priors (`--roofline`)."""
    from scipy.optimize import least_squares

    B = np.unique(np.rint(np.geomspace(1, fam.max_batch_tokens, 64)))
    target = np.asarray(prof.table_time(B), dtype=float)      # the table, without the eager term
    if prof.cudagraph is not None:
        target = target - np.asarray(prof.cudagraph.eager_seconds(B))
    names = [p for p in fam.params if p not in ("per_context_token_s", "per_request_s")]
    scale = {"floor_s": target[0] / 2, "weight_s": target[0] / 2, "expert_s": target[0] / 2,
             "per_token_s": target[-1] / B[-1]}

    def resid(x: np.ndarray) -> np.ndarray:
        vals = {n: v * scale[n] for n, v in zip(names, x)}
        vals["per_context_token_s"] = prof.per_context_token_s
        vals["per_request_s"] = 0.0
        free = replace(fam, fixed={}, cudagraph=None, freed=())
        return np.log(np.maximum(free.table_time(vals, B), 1e-30) / target)

    res = least_squares(resid, np.ones(len(names)), bounds=(1e-6, np.inf))
    out = {n: float(v * scale[n]) for n, v in zip(names, res.x)}
    out["per_context_token_s"] = float(prof.per_context_token_s)
    out["per_request_s"] = float(prof.per_request_s)
    return out
