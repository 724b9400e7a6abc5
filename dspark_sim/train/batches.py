"""Training batches from the feature cache: sequences packed into fixed-length rows.

A row holds whole sequences back to back; `segment` names the sequence of every position
(-1 = padding) so attention never crosses sequences, and `loss_mask` marks positions that
hold response tokens (the tokens a drafter is trained to predict). The order of sequences
is a seeded shuffle per epoch, so a resumed run sees exactly the rows it would have seen.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from .featcache import FeatureCache


@dataclass
class Batch:
    """Packed rows: tokens/segment/loss_mask/lse/top [B, L]; taps [B, L, F]; last [B, L, d]."""

    tokens: torch.Tensor
    segment: torch.Tensor
    loss_mask: torch.Tensor
    taps: torch.Tensor
    last: torch.Tensor
    lse: torch.Tensor          # log-sum-exp of the target logits at each position
    top: torch.Tensor          # the target's argmax token at each position

    def to(self, device: torch.device | str, dtype: torch.dtype = torch.float32) -> "Batch":
        return Batch(self.tokens.to(device), self.segment.to(device), self.loss_mask.to(device),
                     self.taps.to(device, dtype), self.last.to(device, dtype),
                     self.lse.to(device), self.top.to(device))


def split_entries(cache: FeatureCache, val_fraction: float) -> tuple[list[int], list[int]]:
    """Deterministic train/validation split of cache entries by a hash of their id."""
    train, val = [], []
    for i, e in enumerate(cache.entries):
        h = int(hashlib.sha256(e.id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        (val if h < val_fraction else train).append(i)
    return train, val


def pack_rows(lengths: list[int], order: list[int], row_len: int) -> list[list[int]]:
    """Greedy first-fit of sequences (in `order`) into rows of at most `row_len` tokens."""
    rows: list[list[int]] = []
    used: list[int] = []
    for i in order:
        n = min(lengths[i], row_len)
        for r, u in enumerate(used):
            if u + n <= row_len:
                rows[r].append(i)
                used[r] += n
                break
        else:
            rows.append([i])
            used.append(n)
    return rows


def epoch_rows(cache: FeatureCache, entries: list[int], row_len: int, seed: int,
               epoch: int) -> list[list[int]]:
    """The packed rows of one epoch (seeded shuffle, then first-fit packing)."""
    rng = np.random.default_rng([seed, epoch])
    order = [entries[i] for i in rng.permutation(len(entries))]
    lengths = {i: cache.entries[i].length for i in entries}
    rows = pack_rows([lengths.get(i, 0) for i in range(len(cache.entries))], order, row_len)
    return [rows[i] for i in rng.permutation(len(rows))]


def make_batch(cache: FeatureCache, rows: list[list[int]], row_len: int) -> Batch:
    """Assemble packed rows of cache entries into tensors."""
    b = len(rows)
    width = cache.feats.shape[1]
    d = cache.last.shape[1]
    tokens = np.zeros((b, row_len), dtype=np.int64)
    segment = np.full((b, row_len), -1, dtype=np.int64)
    loss_mask = np.zeros((b, row_len), dtype=bool)
    taps = np.zeros((b, row_len, width), dtype=np.float16)
    last = np.zeros((b, row_len, d), dtype=np.float16)
    lse = np.zeros((b, row_len), dtype=np.float32)
    top = np.zeros((b, row_len), dtype=np.int64)
    for r, row in enumerate(rows):
        pos = 0
        for seg, i in enumerate(row):
            arrays = cache.sequence(i)
            n = min(len(arrays["tokens"]), row_len - pos)
            sl = slice(pos, pos + n)
            tokens[r, sl] = arrays["tokens"][:n]
            segment[r, sl] = seg
            loss_mask[r, pos + cache.entries[i].prompt_len:pos + n] = True
            taps[r, sl] = arrays["taps"][:n]
            last[r, sl] = arrays["last"][:n]
            lse[r, sl] = arrays["lse"][:n]
            top[r, sl] = arrays["top"][:n]
            pos += n
    return Batch(torch.from_numpy(tokens), torch.from_numpy(segment), torch.from_numpy(loss_mask),
                 torch.from_numpy(taps).float(), torch.from_numpy(last).float(),
                 torch.from_numpy(lse), torch.from_numpy(top))
