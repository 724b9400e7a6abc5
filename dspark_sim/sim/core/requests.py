"""Request state: one array per field over every request of the trace (struct of arrays), with
each request's phase as a column of its own."""
from __future__ import annotations

import numpy as np

from ...traces.schema import Trace
from .units import NS

# A request's phase (`RequestTable.phase`). WAITING from the start: queued at its replica once
# routed (`replica` >= 0), or not yet arrived. The scheduler moves it on.
WAITING, PREFILLING, DECODING, PREEMPTED, DONE = range(5)
PHASES = ("waiting", "prefilling", "decoding", "preempted", "done")


class RequestTable:
    """Static request fields (from the trace) and what the simulation records about each one.

    Times are integer nanoseconds; -1 means "not yet".
    """

    def __init__(self, trace: Trace) -> None:
        n = len(trace)
        self.n = n
        self.ids = trace.ids
        self.task = trace.task
        self.arrival_ns = np.rint(np.asarray(trace.arrival_s, dtype=float) * NS).astype(np.int64)
        self.prompt = np.asarray(trace.prompt_tokens, dtype=np.int64)
        self.output = np.asarray(trace.output_tokens, dtype=np.int64)
        self.kv_need = self.prompt + self.output          # KV tokens reserved at admission
        self.content = trace.prefix_fields()              # shared-content columns (kv/prefix.py)
        self.replica = np.full(n, -1, dtype=np.int64)
        self.first_token_ns = np.full(n, -1, dtype=np.int64)
        self.finish_ns = np.full(n, -1, dtype=np.int64)
        self.prefilled = np.zeros(n, dtype=np.int64)      # prompt tokens in the KV cache
        self.generated = np.zeros(n, dtype=np.int64)      # output tokens emitted so far
        self.steps = np.zeros(n, dtype=np.int64)          # decode iterations (after prefill)
        self.drafted = np.zeros(n, dtype=np.int64)
        self.verified = np.zeros(n, dtype=np.int64)
        self.accepted = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)    # times preempted (paged KV only)
        self.phase = np.full(n, WAITING, dtype=np.int8)   # WAITING .. DONE (above)
        self._lists: tuple[list[int], list[int], list[int]] | None = None

    def as_lists(self) -> tuple[list[int], list[int], list[int]]:
        """Prompt, output and KV need as python lists (fast scalar access), built once."""
        if self._lists is None:
            self._lists = (self.prompt.tolist(), self.output.tolist(), self.kv_need.tolist())
        return self._lists

    def owed(self, rows: np.ndarray) -> np.ndarray:
        """Output tokens still to emit."""
        return self.output[rows] - self.generated[rows]
