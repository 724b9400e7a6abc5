"""One replica's KV cache, as the scheduler sees it: `KVPool`, and reservation at admission.

The scheduler asks a pool at admission (`admit`), as a request's KV grows (`grow`: prefill
chunks, and at each boundary the decoding requests' next tokens and scheduled drafts), and when
requests finish or are preempted (`free`). Two implementations:

- `ReservePool` (`--kv-semantics reserve`, the default): a request reserves prompt + output
  tokens at admission and keeps them until it finishes; it never runs short afterwards.
- `PagedPool` (paged.py, `--kv-semantics blocks`): vLLM's blocks, allocated as requests grow;
  the pool can run short, and the scheduler then preempts (`on_demand`).

A prefix cache fits behind the same verbs: `admit` returns the tokens of the request's input
already in the cache (0 here), which the scheduler counts as prefilled.
"""
from __future__ import annotations

import numpy as np

from ..core.requests import RequestTable
from ..core.units import UNLIMITED


class KVPool:
    """What the scheduler asks of a replica's KV cache (request ids index the request table)."""

    on_demand = False     # requests grow as they run and the pool may run short (preemption)
    reads_generated = False   # `grow` reads the table's generated tokens (engines keep it current)

    def admit(self, rid: int, input_tokens: int) -> int | None:  # pragma: no cover
        """Take what admitting `rid` takes, its input (prompt, plus generated tokens to recompute
        after a preemption) being `input_tokens`; None when it does not fit now. Returns the
        tokens of that input already in the cache."""
        raise NotImplementedError

    def grow(self, rid: int, slots: int) -> bool:
        """Hold `slots` KV positions for `rid` if the pool has room (True) or not (False)."""
        return True

    def grow_rows(self, rids, slots, start: int, extra: int) -> int:
        """`grow` rids[k] to slots[k] + extra, k = start, start + 1, ... in order; the index of
        the first that did not fit (len(rids) when all did). One call for a boundary's rows."""
        grow = self.grow
        k, n = start, len(rids)
        while k < n and grow(rids[k], slots[k] + extra):
            k += 1
        return k

    def holds(self, rid: int) -> bool:
        """Does `rid` hold KV (may it be preempted to free some)?"""
        return True

    def pins(self, rid: int) -> bool:
        """Does `rid` hold only the cached blocks it was admitted with (prefix caching)?"""
        return False

    def free(self, rids) -> None:  # pragma: no cover
        """Return the KV of requests `rids` (finished or preempted)."""
        raise NotImplementedError

    def freed_by(self, rids) -> int:  # pragma: no cover
        """What freeing `rids` would return, in the pool's own unit (see `fits_after`)."""
        raise NotImplementedError

    def fits_after(self, rid: int, input_tokens: int, freed: int) -> bool:  # pragma: no cover
        """Would `rid` be admitted once `freed` (from `freed_by`) had been returned?"""
        raise NotImplementedError


class ReservePool(KVPool):
    """Prompt + output tokens reserved at admission, released at finish."""

    def __init__(self, table: RequestTable, capacity_tokens: int | None) -> None:
        self.capacity = capacity_tokens or UNLIMITED
        self.used = 0
        self._need_array = table.kv_need
        self._need = table.as_lists()[2]

    def admit(self, rid: int, input_tokens: int) -> int | None:
        need = self._need[rid]
        if self.used + need > self.capacity:
            return None
        self.used += need
        return 0

    def freed_by(self, rids) -> int:
        if isinstance(rids, np.ndarray):
            return int(self._need_array[rids].sum())
        need = self._need
        return sum([need[rid] for rid in rids])

    def free(self, rids) -> None:
        if isinstance(rids, np.ndarray):
            self.used -= int(self._need_array[rids].sum())
            return
        need = self._need
        for rid in rids:
            self.used -= need[rid]

    def fits_after(self, rid: int, input_tokens: int, freed: int) -> bool:
        return self.used - freed + self._need[rid] <= self.capacity
