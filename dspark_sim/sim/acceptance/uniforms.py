"""The acceptance sampler's stream of uniforms, materialised only where the run reads it.

Row `i` of the stream is the i-th double of `Generator(PCG64(SeedSequence(entropy))).random()`.
A long trace needs one uniform per possible decode step of every request (about 200 per
request, 1.6 kB), so a million requests would hold 1.6 GB of them; the run only reads the
uniforms of requests being decoded. `UniformStream` keeps the stream in blocks of 2**16
doubles, made on first use (PCG64 jumps to any position with `advance`, one 64-bit output per
double) and kept in a bounded LRU cache: values are identical to one big `random(total)` call,
memory is bounded by the blocks the run touches at once. Short streams are simply made whole.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

BLOCK_SHIFT = 16
BLOCK = 1 << BLOCK_SHIFT
WHOLE_LIMIT = 1 << 22        # streams up to 4M doubles (32 MB) are made whole, as before
CACHE_BLOCKS = 96            # 96 x 512 kB = 48 MB at most


def pcg_generator(entropy) -> np.random.Generator:
    """The generator `np.random.default_rng(entropy)` makes (PCG64 from a SeedSequence)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


class UniformStream:
    """`total` uniforms of the generator seeded by `entropy`, indexed like a 1-d array
    (integer arrays of any shape, or a slice with step 1)."""

    def __init__(self, entropy, total: int, whole_limit: int | None = None,
                 cache_blocks: int = CACHE_BLOCKS) -> None:
        self.total = int(total)
        whole_limit = WHOLE_LIMIT if whole_limit is None else whole_limit
        self.whole = pcg_generator(entropy).random(self.total) if self.total <= whole_limit else None
        self._state = pcg_generator(entropy).bit_generator.state
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_blocks = max(2, int(cache_blocks))

    def __len__(self) -> int:
        return self.total

    def _block(self, b: int) -> np.ndarray:
        found = self._cache.get(b)
        if found is not None:
            self._cache.move_to_end(b)
            return found
        bit = np.random.PCG64()
        bit.state = self._state
        bit.advance(b * BLOCK)
        values = np.random.Generator(bit).random(min(BLOCK, self.total - b * BLOCK))
        self._cache[b] = values
        if len(self._cache) > self._cache_blocks:
            self._cache.popitem(last=False)
        return values

    def _span(self, lo: int, hi: int) -> np.ndarray:
        """Elements [lo, hi) (0 <= lo <= hi <= total) as one array."""
        first, last = lo >> BLOCK_SHIFT, (hi - 1) >> BLOCK_SHIFT
        if hi <= lo:
            return np.empty(0)
        if first == last:
            return self._block(first)[lo - (first << BLOCK_SHIFT):hi - (first << BLOCK_SHIFT)]
        parts = [self._block(b) for b in range(first, last + 1)]
        joined = np.concatenate(parts)
        return joined[lo - (first << BLOCK_SHIFT):hi - (first << BLOCK_SHIFT)]

    def __getitem__(self, index):
        if self.whole is not None:
            return self.whole[index]
        if isinstance(index, slice):
            start, stop, step = index.indices(self.total)
            if step != 1:
                raise ValueError("UniformStream slices take step 1")
            return self._span(start, max(start, stop)).copy()
        idx = np.asarray(index, dtype=np.int64)
        if idx.size == 0:
            return np.empty(idx.shape)
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= self.total:
            raise IndexError(f"uniform index out of range [0, {self.total})")
        blk = idx >> BLOCK_SHIFT
        first, last = lo >> BLOCK_SHIFT, hi >> BLOCK_SHIFT
        if first == last:                     # the usual case: nearby requests
            return self._block(first)[idx - (first << BLOCK_SHIFT)]
        out = np.empty(idx.shape)
        offset = idx & (BLOCK - 1)
        for b in np.unique(blk).tolist():
            where = blk == b
            out[where] = self._block(b)[offset[where]]
        return out

    def generator_after(self) -> np.random.Generator:
        """The generator as it stands after drawing the whole stream (for the draws that
        follow it)."""
        bit = np.random.PCG64()
        bit.state = self._state
        bit.advance(self.total)
        return np.random.Generator(bit)
