"""KV cache in fixed-size blocks, allocated on demand (vLLM's paged KV, nano-vllm's BlockManager).

A request holds ceil(slots / block_size) blocks, where slots is the most KV positions it has
needed so far (computed tokens + the tokens scheduled this step, drafts included: vLLM
allocates for every scheduled draft before it knows how many survive, and does not give
blocks back when drafts are rejected). Blocks return to the pool when the request finishes
or is preempted. Admission only checks that the request's whole input fits the free blocks
(vLLM's `scheduler_reserve_full_isl`); its first chunk allocates. Prefix caching and the
watermark (vLLM's default 0) are not modelled.
"""
from __future__ import annotations

from ..core.units import UNLIMITED
from .pool import KVPool


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold `tokens` KV positions."""
    return -(-tokens // block_size)


class PagedPool(KVPool):
    """Free-block pool of one replica and the blocks each request holds."""

    on_demand = True

    def __init__(self, capacity_tokens: int | None, block_size: int) -> None:
        self.block_size = block_size
        self.num_blocks = (capacity_tokens or UNLIMITED) // block_size
        self.free_blocks = self.num_blocks
        self.held: dict[int, int] = {}

    # --- the pool interface ------------------------------------------------------------------

    def admit(self, rid: int, input_tokens: int) -> int | None:
        return 0 if self.can_allocate(input_tokens) else None

    def grow(self, rid: int, slots: int) -> bool:
        return self.grow_rows((rid,), (slots,), 0, 0) == 1

    def grow_rows(self, rids, slots, start: int, extra: int) -> int:
        # the blocks arithmetic inline: every decoding row at every boundary comes here
        held, size, free = self.held, self.block_size, self.free_blocks
        k, n = start, len(rids)
        while k < n:
            rid = rids[k]
            more = -(-(slots[k] + extra) // size) - held.get(rid, 0)
            if more > 0:
                if more > free:
                    break
                free -= more
                held[rid] = held.get(rid, 0) + more
            elif rid not in held:
                held[rid] = 0
            k += 1
        self.free_blocks = free
        return k

    def holds(self, rid: int) -> bool:
        return bool(self.held.get(rid))

    def free(self, rids) -> None:
        for rid in list(rids):
            self.deallocate(int(rid))

    def freed_by(self, rids) -> int:
        return sum(self.held.get(int(rid), 0) for rid in rids)

    def fits_after(self, rid: int, input_tokens: int, freed: int) -> bool:
        return blocks_for(input_tokens, self.block_size) <= self.free_blocks + freed

    # --- blocks (nano-vllm's verbs) -------------------------------------------------------------

    def can_allocate(self, tokens: int) -> bool:
        """Would a new sequence of `tokens` KV positions fit in the free blocks now?"""
        return blocks_for(tokens, self.block_size) <= self.free_blocks

    def needed(self, rid: int, slots: int) -> int:
        """Blocks request `rid` must add to hold `slots` KV positions."""
        return max(0, blocks_for(slots, self.block_size) - self.held.get(rid, 0))

    def room_for(self, rids, slots) -> bool:
        """Could every request rids[k] grow to slots[k] KV positions without preempting anyone?"""
        held, size = self.held, self.block_size
        need = 0
        for rid, n in zip(rids, slots):
            more = -(-n // size) - held.get(rid, 0)         # blocks_for, inlined (hot)
            if more > 0:
                need += more
        return need <= self.free_blocks

    def may_append(self, rid: int, slots: int) -> bool:
        """Can request `rid` grow to `slots` KV positions without preempting anyone?"""
        return self.needed(rid, slots) <= self.free_blocks

    def allocate(self, rid: int, slots: int) -> None:
        """Grow request `rid` to hold `slots` KV positions (call `may_append` first)."""
        if not self.grow(rid, slots):
            raise RuntimeError(f"KV pool exhausted: request {rid} needs {self.needed(rid, slots)} "
                               f"blocks, {self.free_blocks} free")

    def deallocate(self, rid: int) -> None:
        """Return every block of request `rid` to the pool."""
        self.free_blocks += self.held.pop(rid, 0)

    @property
    def used(self) -> int:
        return self.num_blocks - self.free_blocks
