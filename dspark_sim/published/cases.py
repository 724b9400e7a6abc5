"""Published GPU speculative-decoding sweeps as data: the format, its provenance rules, the loader.

A case file (YAML, `schema: dspark-sim/published-case/v1`, shipped in
dspark_sim/data/published_cases/) holds one published sweep: a baseline arm (no speculation or
MTP-1) and speculative arms measured at the same loads, with where every number came from.

    name, title
    source: {url, where, license?}           where = table / figure / comment the numbers are in
    setup: {model, hardware, engine, dataset, load, gpus (per replica, the throughput divisor),
            requests?, notes?}
    prompt_tokens / output_tokens: {value, basis, how}     mean lengths the simulated users send
    prefill: local | disaggregated
    loads: [C, ...]                           closed-loop users per replica (concurrency)
    measured_requests?: {values, basis, how, window?}  requests each cell measured (one value, or
                                              one per load): the simulated closed loop runs as
                                              long, requests / users per user (sweep/load_replay.py
                                              `replay_length`); window: whole-run when the
                                              published throughput is every output token over the
                                              run's duration (a benchmark client's figure: the loop
                                              then sends exactly that many requests and is
                                              measured the same way), steady (default) otherwise
    throughput_unit: system | per_gpu         how the published throughput is stated
    fit: {family: linear | buckets | roofline | moe, fix: {PARAM: VALUE},
          moe?: {experts, top_k, basis, how},   the routed experts per layer and per token of
                                              an MoE target (family moe; with where they came from)
          split_prior?: {cost_model, spread, basis, how},   the prior on how the baseline's
                                              per-request slope splits between per-token and
                                              per-request cost (published/predict.py);
                                              cost_model: a shipped cost model's name or a
                                              .cost.yaml file relative to the case file
          roofline?: {model, gpu, tp?, dtype?, spread, basis, how}}   the roofline of the
                                              same model and GPU: the fit's priors and the
                                              draft costs, as `profile fit --roofline` takes them
    draft_costs: {layer_share: {KIND: "D/L[:G]"}, basis, how}   how drafting is priced
    cudagraph?: {max_capture_size, eager?: {...}, eager_range?: {low_s, high_s}, basis, how}
                                              the engine's CUDA-graph capture limit and eager
                                              cost above it (formats.md), with where they came
                                              from; eager_range: the bounds of a flat eager cost
                                              the sources allow (the interval spans them)
    baseline: ARM
    arms: [{name, label, policy, read, throughput: [...], tps_user?: {values, basis, how},
            acceptance?: {...}, budget?: {values, basis, how},
            accept_length?: {loads, values, basis, how},
            ttft_ms?: {values, basis, how}}]  budget: tokens verified per request
                                              per iteration; accept_length: tokens per verify
                                              step (accepted drafts + 1), at the loads given;
                                              ttft_ms: time to first token per load (set beside
                                              the simulated one, never fitted)

Every group of numbers carries a `basis`: `published` (as printed), `read` (read off a figure;
`how` says how), `derived` (computed from published numbers; `how` gives the formula) or
`assumed` (not published; `how` says why this value). An arm's acceptance is `position_accept`
(conditional per position), `position_rates` (unconditional, vLLM's per-position metric) or
`accept_length` (mean tokens per verify step at gamma drafts; a flat per-position rate is solved
from it), plus gamma, drafter_kind, basis, how, source; and optionally `range: {low, high}`, each
one of the three forms with its own basis, how and source: the bounds the sources allow, which
the gain interval spans (published/case_acceptance.py). Numbers stay as published: the loader
derives per-GPU throughput and, where none is published, tok/s/user = throughput x GPUs / users
(Little's law, decode-only), and says so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..fileio import read_yaml
from ..hardware.observations import WINDOWS
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.cudagraph import CudaGraph
from ..profiles.validate import FieldChecker
from ..sim.speculation.registry import check_policy_name
from .case_acceptance import ArmAcceptance, arm_acceptance
from .cost_models import (PUBLISHED_DIR, find_cost_model, load_cost_model, shipped_cost_model_paths,
                          unknown_cost_model)
from .provenance import basis as _basis, text as _text

CASE_SCHEMA = "dspark-sim/published-case/v1"
_SETUP_REQUIRED = ("model", "hardware", "engine", "dataset", "load")


@dataclass(frozen=True)
class Numbers:
    """A group of numbers with its provenance."""

    values: tuple[float, ...]
    basis: str
    how: str


@dataclass
class Arm:
    """One arm of a sweep: a policy measured at every load."""

    name: str
    label: str
    policy: str
    read: str
    throughput: tuple[float, ...]            # as published (system or per GPU, see the case)
    tps_user: Numbers | None = None
    acceptance: AcceptanceProfile | None = None
    acceptance_note: dict[str, str] = field(default_factory=dict)
    acceptance_range: ArmAcceptance | None = None     # sourced bounds (low, high), when given
    budget: Numbers | None = None
    accept_length: dict[int, float] | None = None     # load -> published tokens per verify step
    accept_length_note: str = ""
    ttft_ms: Numbers | None = None                    # published time to first token per load


@dataclass
class Case:
    """One published sweep."""

    name: str
    title: str
    source: dict[str, str]
    setup: dict[str, Any]
    gpus: int
    prompt_tokens: Numbers
    output_tokens: Numbers
    prefill: str
    loads: tuple[int, ...]
    throughput_unit: str
    fit: dict[str, Any]
    draft_costs: dict[str, Any]
    baseline: str
    arms: list[Arm]
    path: str = ""
    cudagraph: CudaGraph | None = None
    cudagraph_note: str = ""
    eager_range: tuple[float, float] | None = None   # bounds of a flat eager cost (seconds)
    measured_requests: Numbers | None = None         # requests each cell measured
    window: str = "steady"                           # how the published throughput was measured

    def requests_at(self, j: int) -> int | None:
        """Requests the cell at load index j measured, if published."""
        if self.measured_requests is None:
            return None
        vals = self.measured_requests.values
        return int(vals[j] if len(vals) > 1 else vals[0])

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def per_gpu(self, arm: Arm) -> np.ndarray:
        """The arm's throughput per GPU (derived when published for the whole system)."""
        thr = np.asarray(arm.throughput, dtype=float)
        return thr / self.gpus if self.throughput_unit == "system" else thr

    def tps_user(self, arm: Arm) -> np.ndarray:
        """Published tok/s/user, else Little's law: throughput per GPU x GPUs / users."""
        if arm.tps_user is not None:
            return np.asarray(arm.tps_user.values, dtype=float)
        return self.per_gpu(arm) * self.gpus / np.asarray(self.loads, dtype=float)


def _numbers(check: FieldChecker, spec: Any, key: str, count: int | None = None) -> Numbers:
    spec = check.mapping(spec, key)
    raw = spec.get("values", spec.get("value"))
    if raw is None:
        raise check.fail(f"{key}.values", "required (the numbers)")
    vals = check.number_list(raw if isinstance(raw, list) else [raw], f"{key}.values", 0.0, exclusive=True)
    if count is not None and len(vals) != count:
        raise check.fail(f"{key}.values", f"has {len(vals)} values but the case has {count} loads")
    return Numbers(tuple(vals), _basis(check, spec, key), _text(check, spec, "how", key))


def _at_loads(check: FieldChecker, spec: Any, key: str, loads: list[int]) -> tuple[dict[int, float], str]:
    """{loads, values, basis, how}: numbers published at some of the case's loads."""
    spec = check.mapping(spec, key)
    at = check.number_list(check.require(spec, "loads", key), f"{key}.loads", 0.0, exclusive=True)
    nums = _numbers(check, spec, key, len(at))
    for u in at:
        if u not in loads:
            raise check.fail(f"{key}.loads", f"{u:g} is not one of the case's loads {loads}")
    return {int(u): v for u, v in zip(at, nums.values)}, f"{nums.basis}: {nums.how}"


def _split_prior(check: FieldChecker, spec: Any) -> dict[str, Any]:
    """fit.split_prior: a published cost model (shipped, by name, or a .cost.yaml file, relative to
    the case file) whose per-request / per-token split is the prior's centre, the prior's
    log-normal spread, and where that choice came from."""
    spec = check.mapping(spec, "fit.split_prior")
    name = _text(check, spec, "cost_model", "fit.split_prior")
    base = Path(check.file).parent if check.file is not None else None
    path = find_cost_model(name, base)
    if path is None:
        raise check.fail("fit.split_prior.cost_model", unknown_cost_model(name, base))
    if name not in shipped_cost_model_paths():
        load_cost_model(path)                     # checked here: its errors name its own lines
        name = str(path.resolve())
    spread = check.number(check.require(spec, "spread", "fit.split_prior"), "fit.split_prior.spread",
                          0.0, exclusive=True)
    return {"cost_model": name, "spread": spread, "basis": _basis(check, spec, "fit.split_prior"),
            "how": _text(check, spec, "how", "fit.split_prior")}


def _eager_range(check: FieldChecker, spec: Any) -> tuple[float, float] | None:
    if spec is None:
        return None
    spec = check.mapping(spec, "cudagraph.eager_range")
    low = check.number(check.require(spec, "low_s", "cudagraph.eager_range"), "cudagraph.eager_range.low_s", 0.0)
    high = check.number(check.require(spec, "high_s", "cudagraph.eager_range"), "cudagraph.eager_range.high_s", low)
    return low, high


def _roofline_prior(check: FieldChecker, spec: Any) -> dict[str, Any]:
    """fit.roofline: a built-in model and GPU of `dspark-sim roofline`, checked here."""
    from ..hardware.gpus import get_gpu
    from ..hardware.models import load_model_shape

    spec = check.mapping(spec, "fit.roofline")
    out = {"model": _text(check, spec, "model", "fit.roofline"), "gpu": _text(check, spec, "gpu", "fit.roofline"),
           "tp": check.integer(spec.get("tp", 1), "fit.roofline.tp", 1),
           "dtype": check.string(spec.get("dtype", "bf16"), "fit.roofline.dtype"),
           "spread": check.number(check.require(spec, "spread", "fit.roofline"), "fit.roofline.spread",
                                  0.0, exclusive=True),
           "basis": _basis(check, spec, "fit.roofline"), "how": _text(check, spec, "how", "fit.roofline")}
    for key, load in (("model", load_model_shape), ("gpu", get_gpu)):
        try:
            load(out[key])
        except InputError as exc:
            raise check.fail(f"fit.roofline.{key}", exc.message) from None
    return out


def load_case(path: str | Path) -> Case:
    """Read and check one case file; errors name FILE:LINE and the field (exit 2 in the CLI)."""
    data, lines = read_yaml(path)
    check = FieldChecker(path, lines)
    data = check.mapping(data, "(document)")
    check.schema(data, CASE_SCHEMA)
    name = _text(check, data, "name", "(document)")
    title = _text(check, data, "title", "(document)")
    source = check.mapping(check.require(data, "source"), "source")
    src = {k: _text(check, source, k, "source") for k in ("url", "where")}
    if "license" in source:
        src["license"] = _text(check, source, "license", "source")
    setup = check.mapping(check.require(data, "setup"), "setup")
    for key in _SETUP_REQUIRED:
        _text(check, setup, key, "setup")
    gpus = check.integer(check.require(setup, "gpus", "setup"), "setup.gpus", 1)
    loads = [check.integer(v, f"loads[{i}]", 1) for i, v in enumerate(check.require(data, "loads") or [])]
    if len(loads) < 2:
        raise check.fail("loads", "expected at least two loads (concurrencies)")
    check.increasing(loads, "loads")
    unit = check.string(check.require(data, "throughput_unit"), "throughput_unit")
    if unit not in ("system", "per_gpu"):
        raise check.fail("throughput_unit", f"must be system or per_gpu, got {unit!r}")
    prefill = check.string(data.get("prefill", "local"), "prefill")
    if prefill not in ("local", "disaggregated"):
        raise check.fail("prefill", f"must be local or disaggregated, got {prefill!r}")
    fit = check.mapping(data.get("fit") or {}, "fit")
    if fit.get("split_prior") is not None:
        fit["split_prior"] = _split_prior(check, fit["split_prior"])
    if fit.get("roofline") is not None:
        fit["roofline"] = _roofline_prior(check, fit["roofline"])
    if fit.get("family") == "moe" or fit.get("moe") is not None:
        moe = check.mapping(check.require(fit, "moe", "fit"), "fit.moe")
        fit["moe"] = {"experts": check.integer(check.require(moe, "experts", "fit.moe"), "fit.moe.experts", 2),
                      "top_k": check.integer(check.require(moe, "top_k", "fit.moe"), "fit.moe.top_k", 1),
                      "basis": _basis(check, moe, "fit.moe"), "how": _text(check, moe, "how", "fit.moe")}
    if fit.get("roofline") and fit.get("split_prior"):
        raise check.fail("fit.split_prior", "give a roofline or a split prior, not both (the "
                         "roofline's priors already split the cost)")
    drafts = check.mapping(check.require(data, "draft_costs"), "draft_costs")
    if "layer_share" in drafts:
        check.mapping(drafts["layer_share"], "draft_costs.layer_share")
    _basis(check, drafts, "draft_costs")
    _text(check, drafts, "how", "draft_costs")
    graph, graph_note, eager_range = None, "", None
    if data.get("cudagraph") is not None:
        spec = check.mapping(data["cudagraph"], "cudagraph")
        eager_range = _eager_range(check, spec.pop("eager_range", None))
        graph = CudaGraph.from_dict(spec, check)
        graph_note = f"{_basis(check, spec, 'cudagraph')}: {_text(check, spec, 'how', 'cudagraph')}"
        if eager_range is not None:
            point = float(graph.eager_seconds(graph.max_capture_size + 1))
            if not eager_range[0] <= point <= eager_range[1]:
                raise check.fail("cudagraph.eager", f"{point:g} s above the limit lies outside "
                                 f"eager_range {eager_range[0]:g}..{eager_range[1]:g} s")
    arms = []
    for i, spec in enumerate(check.require(data, "arms") or []):
        key = f"arms[{i}]"
        spec = check.mapping(spec, key)
        arm_name = _text(check, spec, "name", key)
        policy = _text(check, spec, "policy", key)
        try:
            check_policy_name(policy)
        except InputError as exc:
            raise check.fail(f"{key}.policy", exc.message) from None
        thr = check.number_list(check.require(spec, "throughput", key), f"{key}.throughput", 0.0, exclusive=True)
        if len(thr) != len(loads):
            raise check.fail(f"{key}.throughput", f"has {len(thr)} values but the case has {len(loads)} loads")
        arm = Arm(arm_name, _text(check, spec, "label", key), policy, _text(check, spec, "read", key), tuple(thr))
        if "tps_user" in spec:
            arm.tps_user = _numbers(check, spec["tps_user"], f"{key}.tps_user", len(loads))
        if "budget" in spec:
            arm.budget = _numbers(check, spec["budget"], f"{key}.budget", len(loads))
        if "ttft_ms" in spec:
            arm.ttft_ms = _numbers(check, spec["ttft_ms"], f"{key}.ttft_ms", len(loads))
        if "accept_length" in spec:
            arm.accept_length, arm.accept_length_note = _at_loads(check, spec["accept_length"],
                                                                  f"{key}.accept_length", loads)
        if policy != "ar":
            if "acceptance" not in spec:
                raise check.fail(f"{key}.acceptance", f"a speculative arm ({policy}) needs its acceptance")
            acc = arm_acceptance(check, spec["acceptance"], f"{arm_name}.acceptance", f"{name}-{arm_name}")
            arm.acceptance, arm.acceptance_note = acc.point, acc.note
            arm.acceptance_range = acc if acc.low is not None else None
        arms.append(arm)
    if len({a.name for a in arms}) != len(arms) or len(arms) < 2:
        raise check.fail("arms", "expected at least two arms with distinct names")
    requests, window = None, "steady"
    if data.get("measured_requests") is not None:
        requests = _numbers(check, data["measured_requests"], "measured_requests")
        if len(requests.values) not in (1, len(loads)):
            raise check.fail("measured_requests.values", f"has {len(requests.values)} values: give one, "
                             f"or one per load ({len(loads)})")
        for v in requests.values:
            if not float(v).is_integer():
                raise check.fail("measured_requests.values", f"expected whole numbers of requests, got {v:g}")
        window = str(data["measured_requests"].get("window") or "steady")
        if window not in WINDOWS:
            raise check.fail("measured_requests.window", f"must be one of {', '.join(WINDOWS)}, got {window!r}")
    baseline = _text(check, data, "baseline", "(document)")
    if baseline not in {a.name for a in arms}:
        raise check.fail("baseline", f"{baseline!r} is not one of the arms")
    return Case(name=name, title=title, source=src, setup=dict(setup), gpus=gpus,
                prompt_tokens=_numbers(check, check.require(data, "prompt_tokens"), "prompt_tokens"),
                output_tokens=_numbers(check, check.require(data, "output_tokens"), "output_tokens"),
                prefill=prefill, loads=tuple(loads), throughput_unit=unit, fit=dict(fit),
                draft_costs=dict(drafts), baseline=baseline, arms=arms, path=str(path),
                cudagraph=graph, cudagraph_note=graph_note, eager_range=eager_range,
                measured_requests=requests, window=window)


def shipped_cases() -> dict[str, Path]:
    """Case name (file stem) -> path of every shipped case."""
    return {p.name[:-len(".case.yaml")]: p for p in sorted(PUBLISHED_DIR.glob("*.case.yaml"))}


def resolve_cases(names: list[str]) -> list[Case]:
    """Shipped case names or case files; none = every shipped case."""
    shipped = shipped_cases()
    out = []
    for n in names or list(shipped):
        path = shipped.get(n) or Path(n)
        if not path.exists():
            raise InputError(f"unknown case {n!r}; shipped: {', '.join(shipped)} (or a case file)",
                             field="CASE")
        out.append(load_case(path))
    return out
