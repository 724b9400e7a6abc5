"""`dspark-sim profile --engine vllm`: vLLM's iteration cost, measured through vLLM itself.

A vLLM server (loopback, `--enable-logging-iteration-details`) is given bursts of R requests
of C prompt tokens each (token-id prompts), which then decode `decode_steps` iterations
together. vLLM's own log gives every iteration's prefill/decode requests and tokens and its
model-execution time; the client sees the burst's span. For each point the steady decode
iterations (no prefill, all R requests decoding) are kept, grouped by the iteration's
generation tokens (R + the drafts scheduled), and timed as model time + the burst's engine
overhead per iteration (span minus summed model time, over its iterations), so a profile step
is what one iteration costs on the serving clock. Prefill points are one request's
prompt of L tokens (one iteration). With a speculative config a speculative server runs beside
the plain one, and each decode point is timed on both in turn (same prompts, seconds apart, the
order alternating), so the proposer's cost, their difference, is not a drift of the machine's
speed between two grids timed many minutes apart. The speculative server's bursts alternate
random prompts (the n-gram drafter rarely matches: 1 token per request) and prompts made of one
repeated random block (it matches: 1 + K), so both widths are measured on the same server.
The profile is then fitted exactly as `dspark-sim profile` fits our own engine (hardware/fit.py).
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..errors import InputError
from ..hardware.profiler import Timing
from .client import run_schedule
from .iterations import LogCursor, parse_iterations
from .runtime import EngineError, VLLMServer
from .settings import ServerLimits, server_spec

if TYPE_CHECKING:
    from ..hardware.fit import StepFit
    from ..profiles.hardware import HardwareProfile


SPECULATIVE = "speculative"     # the label of a timer whose server drafts (BurstTimer)


@dataclass(frozen=True)
class VLLMGrid:
    """Where to time vLLM: decode bursts of R requests at C context tokens; prefill prompts."""

    batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    contexts: tuple[int, ...] = (128, 512)
    prefill_chunks: tuple[int, ...] = (64, 128, 256, 512)
    decode_steps: int = 24
    repeats: int = 2
    warmup: int = 1

    def points(self, speculative: bool) -> int:
        """Bursts of a plain server and, with speculation, of a speculative one after it."""
        decode = len(self.batches) * len(self.contexts)
        return (decode + len(self.prefill_chunks) + (2 * decode if speculative else 0)) * self.repeats


def _prompt(rng: np.random.Generator, vocab: int, length: int, repeated: bool) -> list[int]:
    """Random token ids (an n-gram drafter rarely matches) or one random 16-token block repeated
    (it matches)."""
    if not repeated:
        return rng.integers(100, vocab, size=length).tolist()
    block = rng.integers(100, vocab, size=16)
    return np.resize(block, length).tolist()


def _burst(server: VLLMServer, prompts: list[list[int]], max_tokens: int, cursor: LogCursor):
    recs = run_schedule(server.url, server.spec.served_name, prompts, [max_tokens] * len(prompts),
                        [0.0] * len(prompts), timeout_s=300)
    bad = [r for r in recs if r.error]
    if bad or not server.alive():
        raise EngineError(f"vLLM failed a profiling request: {bad[0].error if bad else 'server exited'}\n"
                          f"{server.log_tail()}")
    time.sleep(0.3)                      # the stats logger writes after the outputs
    return recs, parse_iterations(cursor.read_new())


def _overhead(recs, iterations) -> float:
    """The engine's time per iteration outside model execution over one burst: the burst's span
    as the client saw it (first send to last chunk) minus vLLM's summed model time, per
    iteration (>= 0). Chunk gaps are no measure of it: the API server merges chunks."""
    span = max(r.finish_s for r in recs) - min(r.sent_s for r in recs)
    return max((span - float(iterations.elapsed_ms.sum()) / 1e3) / len(iterations), 0.0)


@dataclass
class PointRecord:
    """One measured burst: where, vLLM's model time, the client's period, their difference."""

    op: str
    requests: int
    context: int
    prompt: str
    model_s: float
    period_s: float          # model_s + the burst's overhead per iteration
    iterations: int

    def as_dict(self) -> dict:
        return {"op": self.op, "requests": self.requests, "context": self.context,
                "prompt": self.prompt, "model_median_s": self.model_s,
                "period_median_s": self.period_s, "overhead_s": self.period_s - self.model_s,
                "iterations": self.iterations}


# A burst whose R requests never decoded together without a prefill (their sends or prefills
# staggered on a busy machine, or the iteration log written late) measured nothing at R: it is
# sent again, at most this many times in all.
DECODE_ATTEMPTS = 3


class BurstTimer:
    """One server's bursts and what they measured: its log cursor, its samples per point (decode
    keys hold the iteration's tokens, R requests some of which draft; prefill keys the width)
    and a record of every decode burst."""

    def __init__(self, server: VLLMServer, grid: VLLMGrid, label: str) -> None:
        self.server, self.grid, self.label = server, grid, label
        self.cursor = LogCursor(server.log_path)
        self.samples: dict[tuple, list[float]] = {}
        self.records: list[PointRecord] = []

    def burst(self, prompts: list[list[int]], max_tokens: int):
        return _burst(self.server, prompts, max_tokens, self.cursor)

    def decode(self, context: int, prompts: list[list[int]], kind: str) -> None:
        """R = len(prompts) requests of `context` tokens decoding together: the steady
        iterations (no prefill, all R decoding) grouped by their tokens, each + the burst's
        overhead per iteration; a burst with no such iteration is sent again (DECODE_ATTEMPTS)."""
        r, steps = len(prompts), self.grid.decode_steps
        for _ in range(DECODE_ATTEMPTS):
            recs, it = self.burst(prompts, steps + 1)
            steady = it[(it.ctx_requests == 0) & (it.gen_requests == r)] if len(it) else it
            if not steady.empty:
                break
        else:
            return
        overhead = _overhead(recs, it)
        model = float(np.median(steady.elapsed_ms)) / 1e3
        self.records.append(PointRecord("decode", r, context, kind, model, model + overhead, len(steady)))
        for tokens, group in steady.groupby("gen_tokens"):
            key = ("decode", r, int(tokens), context + steps // 2)
            self.samples.setdefault(key, []).extend((group.elapsed_ms.to_numpy() / 1e3 + overhead).tolist())

    def prefill(self, prompt: list[int]) -> None:
        """One request's prompt in one iteration, + the median overhead of one-request bursts."""
        one = [p for p in self.records if p.requests == 1]
        overhead1 = float(np.median([p.period_s - p.model_s for p in one])) if one else 0.0
        _, it = self.burst([prompt], 1)
        pre = it[(it.ctx_requests == 1) & (it.ctx_tokens == len(prompt))]
        if not pre.empty:
            key = ("prefill", 1, len(prompt), 0)
            self.samples.setdefault(key, []).extend((pre.elapsed_ms.to_numpy() / 1e3 + max(overhead1, 0.0)).tolist())

    def timings(self) -> list[Timing]:
        timings = [Timing(op, r, max(n // r, 1), c, s, tokens=n) if op == "decode" else Timing(op, r, n, c, s)
                   for (op, r, n, c), s in sorted(self.samples.items())]
        if not timings:
            raise EngineError(f"no iteration details in the vLLM log; was it started with "
                              f"--enable-logging-iteration-details?\n{self.server.log_tail()}")
        return timings


def profile_side_by_side(timers: list[BurstTimer], grid: VLLMGrid, vocab: int, seed: int = 0,
                         progress: Callable[[], None] | None = None) -> None:
    """Time every decode point on each server in turn (the plain server first at even points of
    the walk, last at odd ones), so the servers are compared on the same prompts within seconds
    of each other, not one whole grid apart while the machine's speed drifts; then the prefill
    prompts on the first. A speculative server (labelled SPECULATIVE) also decodes prompts made
    of one repeated block, where its n-gram drafter matches; any other server random ones only."""
    rng = np.random.default_rng(seed)
    tick = progress or (lambda: None)
    for timer in timers:
        for _ in range(grid.warmup):                               # first calls pay set-up
            timer.burst([_prompt(rng, vocab, 64, False) for _ in range(2)], 8)
    walk, speculative = 0, any(t.label == SPECULATIVE for t in timers)
    for _ in range(grid.repeats):
        for c in grid.contexts:
            for r in grid.batches:
                random = [_prompt(rng, vocab, c, False) for _ in range(r)]
                repeated = [_prompt(rng, vocab, c, True) for _ in range(r)] if speculative else []
                for timer in (timers if walk % 2 == 0 else timers[::-1]):
                    timer.decode(c, random, "random")
                    tick()
                    if timer.label == SPECULATIVE:
                        timer.decode(c, repeated, "repeated")
                        tick()
                walk += 1
        for length in grid.prefill_chunks:
            timers[0].prefill(_prompt(rng, vocab, length, False))
            tick()


def split_proposer(plain: list[Timing], spec: list[Timing], kind: str) -> tuple[list[Timing], list[Timing]]:
    """Step timings for the fit and the drafter's draft timings, from a plain server's bursts and
    a speculative server's. The speculative server pays its proposer every iteration: at each
    (R, context) its iterations without drafts (R tokens) minus the plain server's are the draft
    cost (>= 0; interpolated over R where every iteration drafted), which is taken off its
    verify iterations before they join the plain ones in the step fit; the simulator adds it
    back as `draft_time` when a policy drafts."""
    base = {(t.requests, t.context): t.median_s for t in plain
            if t.op == "decode" and t.batch_tokens == t.requests}
    extra = {(t.requests, t.context): max(t.median_s - base[(t.requests, t.context)], 0.0)
             for t in spec if t.op == "decode" and t.batch_tokens == t.requests
             and (t.requests, t.context) in base}
    draft = [Timing(f"draft:{kind}", r, 1, c, [d]) for (r, c), d in sorted(extra.items())]
    rs = sorted({r for r, _ in extra})
    per_r = [float(np.median([d for (r2, _), d in extra.items() if r2 == r])) for r in rs]

    def proposer(r: int) -> float:
        return float(np.interp(r, rs, per_r)) if rs else 0.0

    verify = [Timing(t.op, t.requests, t.width, t.context,
                     [max(x - proposer(t.requests), 1e-6) for x in t.samples_s], tokens=t.batch_tokens)
              for t in spec if t.op == "decode" and t.batch_tokens > t.requests]
    return list(plain) + verify, draft


def check_grid(grid: VLLMGrid, limits: ServerLimits) -> None:
    """A grid the server settings can hold (InputError naming the option otherwise)."""
    if max(grid.prefill_chunks, default=0) > limits.max_num_batched_tokens:
        raise InputError(f"a prefill chunk is longer than max_num_batched_tokens "
                         f"({limits.max_num_batched_tokens})", field="--prefill-chunks")
    if max(grid.batches) > limits.max_num_seqs:
        raise InputError(f"more requests than max_num_seqs ({limits.max_num_seqs})", field="--batches")
    if max(grid.contexts) + grid.decode_steps + 2 > limits.max_model_len:
        raise InputError(f"contexts + decode steps exceed max_model_len ({limits.max_model_len})",
                         field="--contexts")


@dataclass
class VLLMProfileRun:
    """A measured hardware profile of vLLM serving a target, with its fit and the engine
    overhead of every timed burst (seconds per iteration outside the model)."""

    profile: "HardwareProfile"
    fit: "StepFit"
    overheads_s: list[float]


def measure_vllm_profile(target: str, speculative: str | None, drafter: str, grid: VLLMGrid,
                         name: str | None, seed: int, vllm_python: str | None, limits: ServerLimits,
                         note: Callable[[str], None] = lambda s: None,
                         progress: Callable[[str, int, int], None] | None = None) -> VLLMProfileRun:
    """`profile --engine vllm`: start a plain vLLM server (and a speculative one beside it when
    `speculative` names a policy), time them side by side over `grid`, split the proposer's cost off,
    fit the profile as `dspark-sim profile` fits ours. `note` gets one line per server
    started and ready; `progress(label, done, total)` one call per timed point."""
    import tempfile

    from ..hardware.measure import measured_profile
    from ..hardware.profiler import ProfileGrid
    from .iterations import kv_capacity_tokens, vllm_version
    from .runtime import (drafter_kind, model_vocab, parse_drafter, resolve_model,
                          speculative_config, vllm_python as find_python)

    python = find_python(vllm_python)
    spec_cfg = speculative_config(speculative, parse_drafter(drafter)) if speculative else None
    check_grid(grid, limits)
    model, model_name = resolve_model(target)
    vocab = model_vocab(model)
    runs = [("plain", None)] + ([(SPECULATIVE, spec_cfg)] if spec_cfg else [])
    timed, records_all, log_texts, starts = {}, [], [], []
    total, done = grid.points(spec_cfg is not None), [0]

    def tick() -> None:
        done[0] += 1
        if progress:
            progress("timing vLLM", done[0], total)
    if progress:
        progress("timing vLLM", 0, total)
    with ExitStack() as stack:
        timers = []
        for label, cfg in runs:
            log = Path(tempfile.mkdtemp(prefix=f"vllm-profile-{label}-")) / "vllm.log"
            note(f"starting a {label} vLLM server ({python}) on 127.0.0.1; log {log}")
            server = stack.enter_context(VLLMServer(server_spec(model, cfg, limits), python, log))
            note(f"vLLM ready after {server.start_s:.0f} s")
            starts.append(round(server.start_s, 1))
            timers.append(BurstTimer(server, grid, label))
        profile_side_by_side(timers, grid, vocab, seed, tick)
        for timer in timers:
            timed[timer.label] = timer.timings()
            records_all += [{"server": timer.label, **r.as_dict()} for r in timer.records]
            log_texts.append(timer.server.log_path.read_text(errors="replace"))
    timings, draft_timings = timed["plain"], []
    if spec_cfg:
        timings, draft_timings = split_proposer(timed["plain"], timed[SPECULATIVE],
                                                drafter_kind(spec_cfg))
    log_text = log_texts[0]
    pgrid = ProfileGrid(grid.batches, tuple(sorted({t.width for t in timings if t.op == "decode"})),
                        grid.contexts, grid.prefill_chunks, grid.repeats, grid.warmup)
    dtype, threads = limits.dtype, limits.threads
    prof, fit = measured_profile(timings, pgrid, "cpu" if dtype == "float32" else "cuda",
                                 name or f"vllm-{model_name.lower()}", model_name, seed,
                                 draft_timings=draft_timings, runner="vllm")
    prof.max_batch_requests = limits.max_num_seqs
    prof.max_batch_tokens = limits.max_num_batched_tokens
    prof.kv_capacity_tokens = kv_capacity_tokens(log_text)
    prof.device = f"vLLM {vllm_version(log_text) or '?'} ({'CPU' if dtype == 'float32' else dtype}), " \
                  f"{threads} OpenMP thread(s)"
    prof.extra["vllm"] = {"version": vllm_version(log_text), "python": str(python),
                          "server_args": server_spec(model, spec_cfg, limits).args(0)[2:],
                          "speculative_config": spec_cfg, "startup_s": starts,
                          "decode_steps": grid.decode_steps, "bursts": records_all}
    return VLLMProfileRun(prof, fit, sorted(r["overhead_s"] for r in records_all))
