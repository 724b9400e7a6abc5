"""The real serving replica: the simulator's replica with real iterations on a wall clock.

`ServingReplica` subclasses the simulator's `ReplicaBase` and asks its scheduler
(sim/scheduler.py), so admission (FCFS, KV reservation, request cap), the token budget, chunked prefill, the policies and Algorithm 1,
and the per-request accounting are the simulator's own code. Only `advance()` differs: it
runs one real iteration --

1. the real drafter proposes for every decoding request (gamma drafts for the policies that
   read confidences, else the policy's count);
2. the policy decides verify lengths from the real drafts' survivals (the drafter's
   confidence head, or the task's mean acceptance for drafters without one);
3. prefill chunks take the token budget the decode tokens leave, FCFS;
4. one batched target forward (`runner.ModelRunner`) over all decode rows and chunks;
5. each decode row is verified by the decode core's lossless rules (`decode.verify`), its KV
   rolled back to the committed prefix, its tokens and target features committed;
6. the iteration ends at the wall-clock time when all of that is done.

The environment is SimPy's real-time environment in nanoseconds, so arrivals are released
on the trace's clock and every timestamp in requests.csv is wall-clock time since the start.
Requests generate exactly their trace's `output_tokens` (an EOS does not end them early,
like a benchmark's ignore-EOS), so the engine and the simulator serve the same work.

KV is reserved at admission (sim/kv/pool.py's `ReservePool`, the default pool). There is no
prefix cache: each request's KV lives in its own cache and is dropped when it finishes, so no
block outlives its request to be shared; `validate --prefix-caching` refuses the native engine
(the vLLM engine has one: `--vllm-server prefix_caching=on`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..decode.context import Context
from ..decode.sampling import Sampling
from ..decode.verify import verify
from ..sim.core.rules import tokens_emitted
from ..sim.engines.replica import ReplicaBase
from ..sim.speculation.base import PolicyInputs
from .drafting import DraftPool, draft_survival
from .runner import ModelRunner, Segment


@dataclass
class EngineParts:
    """What a serving replica runs with, shared by the replica's requests."""

    runner: ModelRunner
    drafters: DraftPool
    prompts: list[list[int]]                 # prompt token ids of every request of the trace
    gamma: int
    sampling: Sampling = field(default_factory=Sampling)
    generator: torch.Generator | None = None
    outputs: dict[int, list[int]] = field(default_factory=dict)    # generated ids by request
    steps: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)  # (drafted, verified, accepted)
    progress: Callable[[int], None] | None = None       # called with the count of finished requests
    iterations: list[tuple] = field(default_factory=list)   # one ITERATION_COLUMNS row per iteration


ITERATION_COLUMNS = ["start_s", "end_s", "decode_requests", "verified_drafts", "prefill_tokens",
                     "batch_tokens", "context_tokens", "drafts_per_request", "draft_s", "forward_s"]


class ServingReplica(ReplicaBase):
    """One replica of the real engine (constructed by `Cluster` with `parts=` bound)."""

    def __init__(self, *args, parts: EngineParts, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.parts = parts
        self.gamma = parts.gamma
        self._kv: dict = {}
        self._ctx: dict[int, Context] = {}
        self._prompt_feats: dict[int, list[torch.Tensor]] = {}
        self.wall_s = {"draft": 0.0, "forward": 0.0, "verify": 0.0, "total": 0.0}

    def _clock_ns(self) -> int:
        """Wall-clock now in the environment's nanoseconds (at least 1 ns after env.now)."""
        env = self.env
        wall = int((time.monotonic() - env.real_start) / env.factor) + int(env.env_start)
        return max(wall, int(env.now) + 1)

    # --- one iteration ----------------------------------------------------------------------

    def advance(self) -> int:
        t0 = time.perf_counter()
        t = self.table
        rows = list(self.decoders)
        contexts = [self._ctx[rid] for rid in rows]
        context = int((t.prompt[rows] + t.generated[rows]).sum()) if rows else 0
        sched = self.sched
        prefill_max = sched.prefill_room(len(rows))
        # 1-2. drafts and verify lengths (the policy reads the drafts' survivals when it needs them)
        draft_start = self.wall_s["draft"]
        if self.policy.needs_confidence:
            k = self.gamma
            drafts = self._propose(rows, contexts, k)
            lengths = self._decide(rows, drafts, prefill_max)
        else:
            lengths = self._decide(rows, None, prefill_max)
            k = self.policy.drafts_made(lengths)
            drafts = self._propose(rows, contexts, k)
        draft_s = self.wall_s["draft"] - draft_start
        verify_len = [min(l, len(d)) for l, d in zip(lengths, drafts)]
        # 3. prefill chunks take what the decode tokens leave of the budget, FCFS
        decode_tokens = len(rows) + sum(verify_len)
        chunks, prefill_context = sched.take_prefill(sched.prefill_room(decode_tokens))   # <= prefill_max
        # 4. one batched forward over the decode rows and the chunks
        segments = [Segment(self._kv[rid], [ctx.anchor] + d.tokens[:l].tolist(), "all")
                    for rid, ctx, d, l in zip(rows, contexts, drafts, verify_len)]
        segments += [self._chunk_segment(rid, take) for rid, take in chunks]
        t1 = time.perf_counter()
        outs = self.parts.runner.run(segments, self.parts.drafters.taps)
        t2 = time.perf_counter()
        # 5. verify and commit
        finished, keep = self._commit_decodes(rows, contexts, drafts, verify_len, outs)
        self._commit_chunks(chunks, outs[len(rows):])
        t3 = time.perf_counter()
        end = self._clock_ns()
        # 6. the simulator's bookkeeping, stamped with the iteration's end
        sched.finish(np.asarray(finished, dtype=np.int64), np.int64(end))
        completed = sched.apply_prefill(chunks)
        joiners = sched.stamp_prefill(completed, end)
        for rid in finished + [c for c in completed if c not in joiners]:
            self._release(rid)
        self.decoders = keep + joiners
        self.iterations += 1
        prefill = sum(take for _, take in chunks)
        self.parts.iterations.append((int(self.env.now) / 1e9, end / 1e9, len(rows), sum(verify_len),
                                      prefill, decode_tokens + prefill, context + prefill_context,
                                      k if rows else 0, draft_s, t2 - t1))
        if self.parts.progress is not None:
            self.parts.progress(self.finished)
        self.wall_s["forward"] += t2 - t1
        self.wall_s["verify"] += t3 - t2
        self.wall_s["total"] += time.perf_counter() - t0
        return end

    def _propose(self, rows: list[int], contexts: list[Context], k: int):
        """k drafts for every decoding request (timed as the iteration's draft step)."""
        p = self.parts
        start = time.perf_counter()
        drafts = p.drafters.propose(rows, contexts, [k] * len(rows), p.sampling, p.generator)
        self.wall_s["draft"] += time.perf_counter() - start
        return drafts

    def _decide(self, rows: list[int], drafts, prefill_max: int) -> list[int]:
        """The simulator's policy decision for this iteration's decoding rows (also with none:
        dspark-lagged then records a zero budget, as the simulator does)."""
        r, g = len(rows), self.gamma
        idx = np.asarray(rows, dtype=np.int64)
        mean = self.sampler.row_survival(idx) if self.sampler is not None and r else np.zeros((r, g))
        surv = mean if drafts is None or r == 0 else \
            np.stack([draft_survival(d, m) for d, m in zip(drafts, mean)])
        cols = PolicyInputs(surv=surv[None], active=np.ones((1, r), dtype=bool),
                       base=np.array([prefill_max]), cap=np.array([self.sched.drafts_room(r)]),
                       mean_surv=mean)
        lengths, raw = self.policy.decide(cols, self.cost)
        self.policy.commit(raw)
        return [int(v) for v in lengths[0]]

    def _chunk_segment(self, rid: int, take: int) -> Segment:
        """The next `take` prompt tokens of a prefilling request (its KV region made on first use)."""
        t, p = self.table, self.parts
        if rid not in self._kv:
            self._kv[rid] = p.runner.new_kv(int(t.prompt[rid] + t.output[rid]) + self.gamma + 1)
        done = self.sched.prefilled[rid]
        last = done + take == int(t.prompt[rid])
        return Segment(self._kv[rid], p.prompts[rid][done:done + take], "last" if last else "none")

    def _commit_decodes(self, rows, contexts, drafts, verify_len, outs) -> tuple[list[int], list[int]]:
        """Verify each decode row (the decode core's rules), roll its KV back to the committed
        prefix, commit its tokens and features; returns (finished, still decoding)."""
        p, t = self.parts, self.table
        finished, keep = [], []
        for rid, ctx, d, l, out in zip(rows, contexts, drafts, verify_len, outs):
            verdict = verify(d.tokens[:l], out.logits, None if d.q is None else d.q[:l],
                             p.sampling, p.generator)
            n = verdict.accepted
            self._kv[rid].crop(len(ctx.tokens) + n)              # keep s_0..s_t and x_1..x_n
            owed = int(t.output[rid] - t.generated[rid])
            new = (d.tokens[:n].tolist() + [verdict.token])[:tokens_emitted(n, l, owed)]
            ctx.commit(new, None if out.features is None else out.features[:len(new)])
            p.outputs[rid].extend(new)
            p.steps[rid].append((len(d), l, n))
            t.generated[rid] += len(new)
            t.steps[rid] += 1
            t.drafted[rid] += len(d)
            t.verified[rid] += l
            t.accepted[rid] += n
            (finished if t.generated[rid] == t.output[rid] else keep).append(rid)
        return finished, keep

    def _commit_chunks(self, chunks: list[tuple[int, int]], outs) -> None:
        """Keep the chunks' target features; a completed prompt samples its first token and
        starts the request's context and drafter."""
        p = self.parts
        for (rid, _), out in zip(chunks, outs):
            if out.features is not None:
                self._prompt_feats.setdefault(rid, []).append(out.features)
            if out.logits is None:
                continue
            first = int(p.sampling.sample(out.logits[-1], p.generator).item())
            feats = self._prompt_feats.pop(rid, None)
            ctx = Context(tokens=list(p.prompts[rid]), prompt_len=len(p.prompts[rid]),
                          taps=p.drafters.taps)
            ctx.commit([first], torch.cat(feats) if feats else None)
            self._ctx[rid] = ctx
            p.outputs[rid] = [first]
            p.steps[rid] = []
            if int(self.table.output[rid]) > 1:
                p.drafters.begin(rid, ctx)

    def _release(self, rid: int) -> None:
        self._kv.pop(rid, None)
        self._ctx.pop(rid, None)
        self.parts.drafters.end(rid)
