"""The one cost entry of the simulator: what an iteration and its drafting cost, tabulated on
integer inputs in integer nanoseconds (core/units.py).

`IterationCost` owns the formula; the engines take its tables and its functions and do not
re-derive them: the reference and block engines `iteration_ns` / `iteration_ns_fixed` (numpy,
many iterations), the loop engine `iteration_ns_one` (plain python, one iteration, the same
arithmetic) and, for its stretches without prefill, `stretch_base` + `context_ns`, which the
compiled kernel (engines/stretch_kernel.pyx) combines as `iteration_ns_one` does. Drafting is
`drafting` (numpy) and `drafting_one` (python) side by side. New cost terms go here.
"""
from __future__ import annotations

import numpy as np

from ...profiles.hardware import HardwareProfile
from ..core.units import NS, UNLIMITED, to_ns
from .vllm_tables import build_cost_tables, profile_sizes

# Tables start this large (or at the profile's limit, if smaller) and grow on demand to what
# the run reaches, never past the limit: memory follows the work, not max_batch_tokens.
INITIAL_TOKENS = 4096
INITIAL_REQUESTS = 256


class IterationCost:
    """Seconds of one iteration: draft_time(kind, R, drafts) + per_request_s x R +
    step_time(B, context, P), where the step table at B includes the eager term above the
    profile's CUDA-graph capture limit (`HardwareProfile.table_time`).

    Drafting by request count R and drafts k per request is fixed(R) + k x slope(R) for k > 0
    (0 at k = 0): a `per_draft` drafter has fixed 0 and its table as slope, a block drafter with
    `per_draft_seconds` both, other drafters only fixed. With a prefill curve an iteration with
    P prefill-chunk tokens adds prefill(P) - step(P) (`prefill_ns`, 0 at P = 0).

    The request-count part of an iteration (drafting + per_request_s x R, R = decoding
    requests) is what the engines pass as `fixed_ns` (`fixed_drafts`, `draft_ns_one`); the
    requests with a prefill chunk count as one more request, charged in `prefill_ns` (an
    iteration's chunks are counted as one request's: the engines pass the chunk tokens, not how
    many requests they belong to). With per_request_s = 0 and no eager term every table is
    today's to the bit.

    It also gives the speculation scheduler its view of the engine, `scheduler_sps(B, R)`:
    iterations per second at B batch tokens with R decoding requests, counting the drafting
    (`scheduler_drafts` sequential drafts) and the attention over a typical context of
    `scheduler_context` KV tokens per request, as an engine's profiled SPS curve would. The
    exact per-iteration context is not used by the scheduler, so a decision depends only on
    the batch composition (which keeps the engines' per-composition plans exact).
    """

    def __init__(self, hw: HardwareProfile, drafter_kind: str | None,
                 scheduler_drafts: int = 0, scheduler_context: float = 0.0) -> None:
        """Tables by batch tokens and by request count start small and grow (doubling, capped at
        the profile's limits) to the largest values the run looks up."""
        self.hw = hw
        self.scheduler_drafts = scheduler_drafts
        self.scheduler_context = float(scheduler_context)
        self._sched_tables: dict[int, np.ndarray] = {}
        self._sched_lists: dict[int, list[float]] = {}
        self.kind = drafter_kind if drafter_kind in hw.draft_curves else None
        self.per_draft = self.kind in hw.per_draft_kinds
        self._slope = hw.draft_slopes.get(self.kind) if self.kind else None
        self.linear = self._slope is not None       # block drafter priced by drafts made
        self.per_request = float(hw.per_request_s)
        self._request_ns = self.per_request * NS
        self.has_prefill = hw.prefill_curve is not None or bool(self.per_request)
        self._slope_s = self._slope_ns = np.zeros(0)
        self.prefill_ns: np.ndarray | None = None    # by prefill tokens, when has_prefill
        self.per_context = float(hw.per_context_token_s)
        self._context_ns = self.per_context * NS
        self.context_ns = self._context_ns if self.per_context else 0.0   # ns per KV token attended
        self._py_step: list[float] | None = None       # python mirrors of the tables (one iteration
        self._py_prefill: list[float] | None = None    # at a time), rebuilt after they grow
        self._py_draft: tuple[list[float], list[float]] | None = None
        self._seconds_lists: tuple[list[float], list[float]] | None = None
        self._step = np.zeros(0)
        self._draft = np.zeros(0)
        self._token_cap = (hw.max_batch_tokens or UNLIMITED) + 1
        self._request_cap = min(hw.max_batch_requests or UNLIMITED, hw.max_batch_tokens or UNLIMITED) + 1
        self._grow_step(min(INITIAL_TOKENS, self._token_cap))
        self._grow_draft(min(INITIAL_REQUESTS, self._request_cap))
        lowest = hw.step_constant_s if hw.step_curve is None else float(hw.step_curve.y.min())
        self.min_step_ns = max(1, int(to_ns(lowest)))   # lower bound of any iteration's duration

    def _step_base(self, b: np.ndarray) -> np.ndarray:
        if self.hw.step_curve is None and self.hw.cudagraph is None:
            return np.full(len(b), float(self.hw.step_constant_s))
        return np.asarray(self.hw.table_time(b), dtype=float)

    def _grow_step(self, n: int) -> None:
        size = max(n, min(2 * len(self._step), self._token_cap))
        self._step = self._step_base(np.arange(size, dtype=float))
        self._step_ns = np.maximum(self._step * NS, 1.0)      # an iteration lasts >= 1 ns
        if self.has_prefill:
            p = np.arange(size)
            self.prefill_ns = np.asarray(self.hw.prefill_adjustment(p), dtype=float) * NS
            if self.per_request:      # the requests with a prefill chunk, counted as one
                self.prefill_ns = self.prefill_ns + np.where(p > 0, self._request_ns, 0.0)

    def _grow_draft(self, n: int) -> None:
        size = max(n, min(2 * len(self._draft), self._request_cap))
        reqs = np.arange(size, dtype=float)
        if self.kind is None:
            self._draft = np.zeros(size)
        else:
            self._draft = np.where(reqs > 0, np.asarray(self.hw.draft_curves[self.kind](reqs), dtype=float), 0.0)
        if self.linear:      # the table was measured at slope.drafts drafts: keep the fixed part
            self._slope_s = np.where(reqs > 0, np.asarray(self._slope.per_draft(reqs), dtype=float), 0.0)
            self._draft = np.maximum(self._draft - self._slope.drafts * self._slope_s, 0.0)
            self._slope_ns = self._slope_s * NS
        self._draft_ns = self._draft * NS

    def drafting(self, fixed: np.ndarray, slope: np.ndarray, drafts) -> np.ndarray:
        """Drafting cost from fixed and slope values (seconds or ns, gathered by request count)
        at `drafts` drafts per request (scalar or broadcast): fixed + drafts x slope, 0 at 0."""
        if self.per_draft:
            return fixed * drafts
        if self.linear:
            return np.where(np.asarray(drafts) > 0, fixed + drafts * slope, 0.0)
        return np.where(np.asarray(drafts) > 0, fixed, 0.0)

    def drafting_one(self, fixed: float, slope: float, drafts: int) -> float:
        """`drafting` for one request count in plain python (the same arithmetic)."""
        if self.per_draft:
            return fixed * drafts
        if drafts <= 0:
            return 0.0
        return fixed + drafts * slope if self.linear else fixed

    def draft_ns_one(self, requests: int, drafts: int) -> float:
        """Request-count nanoseconds of one iteration (drafting + per_request_s x R): `requests`
        decoding requests making `drafts` sequential drafts each (for policies whose drafts
        vary; the others index `fixed_drafts`)."""
        if requests >= len(self._draft_ns):
            self._fit(requests, 0)
        if self._py_draft is None or len(self._py_draft[0]) != len(self._draft_ns):
            self._py_draft = (self._draft_ns.tolist(),
                              self._slope_ns.tolist() if self.linear else [0.0] * len(self._draft_ns))
        draft, slope = self._py_draft
        ns = self.drafting_one(draft[requests], slope[requests], drafts)
        return ns + self._request_ns * requests if self.per_request else ns

    def iteration_ns_one(self, fixed_ns: float, batch_tokens: int, prefill_tokens: int,
                         context: int) -> int:
        """`iteration_ns` of one iteration in plain python (the same arithmetic): `fixed_ns` is its
        drafting (`fixed_drafts` or `draft_ns_one`), then the step at B batch tokens, the prefill
        curve's adjustment for its P prefill-chunk tokens, and the attention over `context` KV
        tokens; rounded half to even, at least 1 ns with a prefill curve."""
        step, prefill = self._py_step, self._py_prefill
        if step is None or batch_tokens >= len(step):
            self._fit(0, batch_tokens)
            step, prefill = self._mirror_step()
        ns = fixed_ns + step[batch_tokens]
        if prefill is not None and prefill_tokens:
            ns = ns + prefill[prefill_tokens]
        if self.context_ns:
            ns = ns + self.context_ns * context
        return round(ns) if prefill is None else max(1, round(ns))

    def stretch_base(self, fixed_ns: float, batch_tokens: int) -> float:
        """Nanoseconds of an iteration without prefill before its attention term: the loop
        engine's stretch kernel ends each iteration at round(base + context_ns x context), which
        is `iteration_ns_one` without prefill."""
        step = self._py_step
        if step is None or batch_tokens >= len(step):
            self._fit(0, batch_tokens)
            step, _ = self._mirror_step()
        return fixed_ns + step[batch_tokens]

    def _mirror_step(self) -> tuple[list[float], list[float] | None]:
        if self._py_step is None or len(self._py_step) != len(self._step_ns):
            self._py_step = self._step_ns.tolist()
            self._py_prefill = self.prefill_ns.tolist() if self.prefill_ns is not None else None
        return self._py_step, self._py_prefill

    def scheduler_fixed_s(self, requests) -> np.ndarray:
        """Seconds of an iteration with R decoding requests that do not depend on its batch
        tokens, as the scheduler sees them: drafting + per-request term + attention over the
        typical context."""
        r = np.asarray(requests, dtype=np.int64)
        self._fit(int(r.max(initial=0)), 0)
        return self.requests_seconds(r, self.scheduler_drafts) + \
            self.per_context * self.scheduler_context * r

    def scheduler_sps(self, batch_tokens, requests) -> np.ndarray:
        """Iterations per second the scheduler expects at B batch tokens and R decoding
        requests (broadcast): 1 / (step_time(B) + scheduler_fixed_s(R))."""
        b = np.asarray(batch_tokens, dtype=np.int64)
        self._fit(0, int(b.max(initial=0)))
        return 1.0 / (self._step[b] + self.scheduler_fixed_s(requests))

    def scheduler_sps_table(self, requests: int, max_batch_tokens: int) -> np.ndarray:
        """`scheduler_sps` for R requests by integer batch tokens, covering 0..max_batch_tokens
        (and, grown by doubling, often more: a table is as long as the largest look-up yet)."""
        table = self._sched_tables.get(requests)
        if table is None or max_batch_tokens >= len(table):
            self._fit(requests, max_batch_tokens)
            if len(self._sched_tables) > 256:
                self._sched_tables.clear()
                self._sched_lists.clear()
            size = min(len(self._step), max(max_batch_tokens + 1, 2 * len(table) if table is not None
                                            else INITIAL_TOKENS))
            table = self._sched_tables[requests] = \
                1.0 / (self._step[:size] + self.scheduler_fixed_s(requests))
            self._sched_lists.pop(requests, None)
        return table

    def scheduler_sps_list(self, requests: int, max_batch_tokens: int) -> list[float]:
        """`scheduler_sps_table` as a python list (for per-iteration python code)."""
        out = self._sched_lists.get(requests)
        if out is not None and max_batch_tokens < len(out):      # (the table it mirrors covers it)
            return out
        table = self.scheduler_sps_table(requests, max_batch_tokens)
        out = self._sched_lists.get(requests)
        if out is None or len(out) != len(table):
            out = self._sched_lists[requests] = table.tolist()
        return out

    def seconds_lists(self, max_requests: int, max_batch_tokens: int) -> tuple[list[float], list[float]]:
        """Step seconds (by batch tokens) and draft seconds (by requests) as python lists."""
        if self._seconds_lists is None or max_batch_tokens >= len(self._seconds_lists[0]) \
                or max_requests >= len(self._seconds_lists[1]):
            self._fit(max_requests, max_batch_tokens)
            self._seconds_lists = (self._step.tolist(), self._draft.tolist())
        return self._seconds_lists

    def step_seconds(self, batch_tokens: np.ndarray) -> np.ndarray:
        """Target step seconds at integer batch tokens, without the context term."""
        b = np.asarray(batch_tokens, dtype=np.int64)
        self._fit(0, int(b.max(initial=0)))
        return self._step[b]

    def draft_seconds(self, requests: np.ndarray, drafts: np.ndarray) -> np.ndarray:
        """Drafting seconds for `requests` decoding requests making `drafts` sequential drafts."""
        r = np.asarray(requests, dtype=np.int64)
        self._fit(int(r.max(initial=0)), 0)
        return self.drafting(self._draft[r], self._slope_s[r] if self.linear else None, drafts)

    def requests_seconds(self, requests, drafts) -> np.ndarray:
        """Seconds of an iteration that depend on its decoding requests alone: `draft_seconds`
        + per_request_s x R (what a policy comparing verify lengths adds to `step_seconds`)."""
        draft = self.draft_seconds(requests, drafts)
        return draft + self.per_request * np.asarray(requests, dtype=np.int64) \
            if self.per_request else draft

    def iteration_ns(self, requests: np.ndarray, batch_tokens: np.ndarray, context: np.ndarray,
                     drafts, prefill_first: int = 0) -> np.ndarray:
        """Nanoseconds of each iteration (vectorised), as integer-valued floats (>= 1):
        rint(draft + step(B) [+ prefill_ns(P) in the first] + per-context x context), all in
        nanoseconds; `prefill_first` is the first iteration's prefill-chunk tokens (the others
        have none)."""
        requests = np.asarray(requests, dtype=np.int64)
        batch_tokens = np.asarray(batch_tokens, dtype=np.int64)
        self._fit(int(requests.max(initial=0)), int(batch_tokens.max(initial=0)))
        draft = self.drafting(self._draft_ns[requests], self._slope_ns[requests] if self.linear else None,
                              drafts)
        if self.per_request:
            draft = draft + self._request_ns * requests
        return self._finish_ns(draft, batch_tokens, context, prefill_first)

    def fixed_drafts(self, drafts: int) -> np.ndarray:
        """Request-count nanoseconds (drafting + per_request_s x R) by request count for a
        policy that always makes `drafts` drafts (same arithmetic as `iteration_ns`)."""
        table = self.drafting(self._draft_ns, self._slope_ns if self.linear else None, drafts)
        if self.per_request:
            table = table + self._request_ns * np.arange(len(table), dtype=np.int64)
        return table

    def fixed_drafts_list(self, drafts: int, requests: int) -> list[float]:
        """`fixed_drafts` as a python list covering 0..requests (for per-iteration python code)."""
        self._fit(requests, 0)
        return self.fixed_drafts(drafts).tolist()

    def iteration_ns_fixed(self, draft_table: np.ndarray, requests: np.ndarray,
                           batch_tokens: np.ndarray, context: np.ndarray,
                           prefill_first: int = 0) -> np.ndarray:
        """`iteration_ns` with a `fixed_drafts` table; IndexError when the requests or batch
        tokens reach past the tables (then `_fit` them and take a new `fixed_drafts` table;
        the prefill table grows with the step table, so `prefill_first` <= the first batch
        tokens is covered whenever they are)."""
        return self._finish_ns(draft_table[requests], batch_tokens, context, prefill_first)

    def _finish_ns(self, draft: np.ndarray, batch_tokens: np.ndarray, context,
                   prefill_first: int = 0) -> np.ndarray:
        ns = draft + self._step_ns[batch_tokens]
        if prefill_first and self.prefill_ns is not None:
            ns[0] = ns[0] + self.prefill_ns[prefill_first]
        if self.per_context:
            ns = ns + self._context_ns * context
        return np.maximum(np.rint(ns), 1.0) if self.prefill_ns is not None else np.rint(ns)

    def vllm_tables(self, max_requests: int, max_batch_tokens: int, reach_requests: int | None = None,
                    reach_tokens: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The adaptive-verification policy's cost model: (draft ms by requests, verify ms by
        batch tokens), built as vLLM builds them (cost_tables.py) from this profile's costs at
        the sizes vLLM would profile for these limits. Without capture sizes (an engine without
        graphs) the tables are the simulated costs themselves. Attention over the KV is left out
        (vLLM profiles at one fixed context length). The dense tables cover at least
        0..reach_requests and 0..reach_tokens (default: the limits), grown by doubling up to the
        limits as larger values are asked for; their values do not depend on how far they reach."""
        reach = (max_requests if reach_requests is None else min(reach_requests, max_requests),
                 max_batch_tokens if reach_tokens is None else min(reach_tokens, max_batch_tokens))
        key = (max_requests, max_batch_tokens)
        built = getattr(self, "_vllm_reach", (-1, -1)) if getattr(self, "_vllm_key", None) == key else (-1, -1)
        if reach[0] > built[0] or reach[1] > built[1]:
            size_r = min(max_requests, max(reach[0], 2 * built[0], INITIAL_REQUESTS))
            size_t = min(max_batch_tokens, max(reach[1], 2 * built[1], INITIAL_TOKENS))
            self._vllm_key, self._vllm_reach = key, (size_r, size_t)
            self._vllm = self._vllm_build(max_requests, max_batch_tokens, size_r, size_t)
        return self._vllm

    def _vllm_build(self, max_requests: int, max_batch_tokens: int, size_r: int,
                    size_t: int) -> tuple[np.ndarray, np.ndarray]:
        """`vllm_tables` for these limits, dense over 0..size_r and 0..size_t."""
        d = self.scheduler_drafts
        sizes = self.hw.capture_sizes
        if not sizes:
            self._fit(size_r, size_t)
            draft = self.requests_seconds(np.arange(size_r + 1), d)
            return 1e3 * draft, 1e3 * self._step[:size_t + 1]
        verify_sizes = profile_sizes(sizes, max_batch_tokens)
        request_sizes = sorted({min(s, max_requests) for s in sizes})
        self._fit(max(request_sizes), 0)
        draft = self.requests_seconds(np.asarray(request_sizes), d)
        # the step cost at each profiled size, however large, without a dense table up to it
        verify = self._step_base(np.asarray(verify_sizes, dtype=float))
        return build_cost_tables(list(zip(request_sizes, 1e3 * draft)),
                                 list(zip(verify_sizes, 1e3 * verify)), size_r, size_t, sizes[-1])

    def _fit(self, requests: int, batch_tokens: int) -> None:
        if batch_tokens >= len(self._step):
            self._grow_step(batch_tokens + 1)
        if requests >= len(self._draft):
            self._grow_draft(requests + 1)
