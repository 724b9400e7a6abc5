"""Prefix caching as vLLM does it (`--prefix-caching`, on paged KV): full blocks are known by a
hash chain, freed blocks stay cached, a request reuses the cached blocks of its prefix at
admission, and a free cached block is evicted, least recently freed first, when a block is needed.

What a token is. The simulator has no token ids; a request's content is named by its trace fields
(formats.md): token i of a request's stream (prompt, then output) is
- `(hash id h, i mod S)` while i < len(hash_ids) * S, h = hash_ids[i // S] (Mooncake's blocks,
  S = `hash_block_tokens`, default 512): equal ids are equal content;
- else, in the prompt, `(conversation c, i)`: the turns of a conversation are one stream, a
  turn's prompt extends the last turn's prompt (its answer's positions included);
- else the request's own token i: the rest of its prompt and every generated token (nothing else
  shares it; its own recompute after a preemption does). A later turn's copy of an answer is not
  taken to match the blocks the answer was generated into (a client's re-tokenised answer and
  chat template need not reproduce them, and the vLLM replays here send the answer's positions
  as fixed prompt tokens): a turn hits at most its predecessor's prompt.

The chain. Block j of a request (tokens j*b .. j*b + b - 1, b = `kv_block_size`) is known by
(block j-1's chain id, the identities of its tokens), interned: equal chains get equal ids, exact
and the same on every run (vLLM hashes the same pair with SHA-256 or Python's hash). `BlockChains`
is the one place the chain is made.

The pool (`PrefixPool`, vLLM's `BlockPool` + `KVCacheManager`, read in vllm/v1/core/):
- admission: the longest run of the request's leading full blocks whose ids are cached, at most
  input - 1 tokens (one token is always computed, for its logits: `max_cache_hit_length`); the
  hit blocks are taken (a free one leaves the free queue) and count as prefilled; the whole input
  must still fit: new blocks + free hit blocks <= free blocks;
- a block is cached when it is full of known tokens (prompt, and generated tokens; not drafts),
  at the allocation that covers it (vLLM's `cache_full_blocks` at schedule time); a block whose id
  another block already holds stays uncached;
- free: a request's blocks return in reverse order to the tail of the free queue (its last blocks
  are evicted first) and keep their ids; a new block comes from the head: never-used blocks first
  (they lead vLLM's initial queue), then the least recently freed, whose id is evicted.
"""
from __future__ import annotations

from collections import OrderedDict

from ..core.requests import RequestTable
from ...traces.schema import HASH_BLOCK_TOKENS
from .paged import PagedPool, blocks_for
from .pool import KVPool


class BlockChains:
    """Chain ids of requests' full blocks, from the trace's shared-content fields (interned)."""

    def __init__(self, table: RequestTable, block_size: int) -> None:
        self.block_size = block_size
        fields = table.content
        self._conv = fields.get("conversation")
        self._hash_ids = fields.get("hash_ids")
        self._hash_block = fields.get("hash_block_tokens")
        self._conv_code: dict[str, int] = {}
        self._intern: dict[tuple, int] = {}
        self._chains: dict[int, list[int]] = {}
        self._prompt = table.as_lists()[0]

    def _segments(self, rid: int, lo: int, hi: int) -> tuple:
        """Identities of tokens lo..hi-1 of request rid, as (source, first offset, last offset + 1)
        runs."""
        out = []
        ids = self._hash_ids[rid] if self._hash_ids is not None else None
        if ids:
            size = int(self._hash_block[rid]) or HASH_BLOCK_TOKENS
            end = len(ids) * size
            while lo < hi and lo < end:
                k = lo // size
                stop = min(hi, (k + 1) * size, end)
                out.append((0, ids[k], lo - k * size, stop - k * size))
                lo = stop
        prompt = self._prompt[rid]
        if lo < hi and lo < prompt:
            conv = self._conv[rid] if self._conv is not None else None
            if conv is not None:
                stop = min(hi, prompt)
                out.append((1, self._conv_code.setdefault(conv, len(self._conv_code)), lo, stop))
                lo = stop
        if lo < hi:
            out.append((2, rid, lo, hi))
        return tuple(out)

    def chain(self, rid: int, blocks: int) -> list[int]:
        """Chain ids of request rid's first `blocks` full blocks (extended as asked)."""
        ids = self._chains.get(rid)
        if ids is None:
            ids = self._chains[rid] = []
        b, intern = self.block_size, self._intern
        while len(ids) < blocks:
            j = len(ids)
            key = (ids[-1] if ids else -1, self._segments(rid, j * b, j * b + b))
            ids.append(intern.setdefault(key, len(intern)))
        return ids

    def forget(self, rid: int) -> None:
        """Drop rid's chain (built again, to the same ids, if asked)."""
        self._chains.pop(rid, None)


class PrefixPool(PagedPool):
    """Paged KV with a prefix cache: blocks by number, reference counts, an LRU free queue."""

    def __init__(self, table: RequestTable, capacity_tokens: int | None, block_size: int,
                 chains: BlockChains | None = None) -> None:
        super().__init__(capacity_tokens, block_size)
        self.table = table
        self._prompt = table.as_lists()[0]
        self.chains = chains if chains is not None else BlockChains(table, block_size)
        self._fresh = self.num_blocks                        # never-used blocks left
        self._next_block = 0
        self._lru: OrderedDict[int, None] = OrderedDict()   # freed blocks, head = evicted first
        self._ref: dict[int, int] = {}                       # held blocks -> requests holding them
        self._blocks: dict[int, list[int]] = {}              # request -> its blocks, in order
        self._registered: dict[int, int] = {}                # request -> leading blocks cached
        self._hit: dict[int, int] = {}                       # request -> blocks it was admitted with
        self._cached: dict[int, int] = {}                    # chain id -> block
        self._chain_of: dict[int, int] = {}                  # cached block -> chain id
        self.hit_tokens = 0                                  # tokens found cached at admissions

    # --- the pool interface ------------------------------------------------------------------

    def hits(self, rid: int, input_tokens: int) -> list[int]:
        """Cached blocks of rid's input prefix (at most input - 1 tokens)."""
        cached, out = self._cached, []
        for cid in self.chains.chain(rid, (input_tokens - 1) // self.block_size):
            blk = cached.get(cid)
            if blk is None:
                break
            out.append(blk)
        return out

    def admit(self, rid: int, input_tokens: int) -> int | None:
        hit = self.hits(rid, input_tokens)
        free_hits = sum(1 for blk in hit if blk not in self._ref)
        if blocks_for(input_tokens, self.block_size) - len(hit) + free_hits > self.free_blocks:
            return None
        for blk in hit:
            self._take(blk)
        self._blocks[rid] = list(hit)
        self._registered[rid] = self._hit[rid] = len(hit)
        self.held[rid] = len(hit)
        self.hit_tokens += len(hit) * self.block_size
        return len(hit) * self.block_size

    def holds(self, rid: int) -> bool:
        # blocks of its own: one admitted with cached blocks only is still waiting in vLLM's terms
        # (vLLM takes the hit blocks with the first chunk's), so it is no victim
        return self.held.get(rid, 0) > self._hit.get(rid, 0)

    def pins(self, rid: int) -> bool:
        return bool(self._hit.get(rid)) and self.held.get(rid, 0) == self._hit[rid]

    def fits_after(self, rid: int, input_tokens: int, freed: int) -> bool:
        hit = self.hits(rid, input_tokens)
        return blocks_for(input_tokens, self.block_size) - len(hit) <= self.free_blocks + freed

    reads_generated = True      # blocks full of known tokens are registered in the cache

    def grow(self, rid: int, slots: int) -> bool:
        if not self.may_append(rid, slots):
            return False
        self.allocate(rid, slots)          # blocks by number, and the cache to register
        return True

    grow_rows = KVPool.grow_rows           # each row through `grow` (PagedPool inlines its own)

    def allocate(self, rid: int, slots: int) -> None:
        extra = self.needed(rid, slots)
        if extra > self.free_blocks:
            raise RuntimeError(f"KV pool exhausted: request {rid} needs {extra} blocks, "
                               f"{self.free_blocks} free")
        mine = self._blocks.setdefault(rid, [])
        for _ in range(extra):
            mine.append(self._new_block())
        self.held[rid] = len(mine)
        # cache the blocks now full of known tokens (prompt and generated, not drafts)
        known = min(slots, self._prompt[rid] + int(self.table.generated[rid]))
        full = known // self.block_size
        done = self._registered.get(rid, 0)
        if full > done:
            cached, chain_of = self._cached, self._chain_of
            for j, cid in enumerate(self.chains.chain(rid, full)[done:full], start=done):
                if cid not in cached:
                    cached[cid] = mine[j]
                    chain_of[mine[j]] = cid
            self._registered[rid] = full

    def deallocate(self, rid: int) -> None:
        self.held.pop(rid, None)
        self._registered.pop(rid, None)
        self._hit.pop(rid, None)
        self.chains.forget(rid)
        ref, lru = self._ref, self._lru
        for blk in reversed(self._blocks.pop(rid, ())):
            count = ref[blk] - 1
            if count:
                ref[blk] = count
            else:
                del ref[blk]
                lru[blk] = None
                self.free_blocks += 1

    # --- blocks ----------------------------------------------------------------------------------

    def _take(self, blk: int) -> None:
        """A hit: one more request holds cached block `blk` (a free one leaves the free queue)."""
        if blk in self._ref:
            self._ref[blk] += 1
        else:
            del self._lru[blk]
            self._ref[blk] = 1
            self.free_blocks -= 1

    def _new_block(self) -> int:
        """A block for new tokens: a never-used one, else the least recently freed (its chain id,
        if cached, is evicted)."""
        if self._fresh:
            self._fresh -= 1
            blk = self._next_block
            self._next_block += 1
        else:
            blk, _ = self._lru.popitem(last=False)
            cid = self._chain_of.pop(blk, None)
            if cid is not None:
                del self._cached[cid]
        self._ref[blk] = 1
        self.free_blocks -= 1
        return blk

    def cached_blocks(self) -> int:
        """Blocks whose content is cached (held or free)."""
        return len(self._cached)
