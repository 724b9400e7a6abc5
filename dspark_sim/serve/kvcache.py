"""Per-request KV storage of the serving engine: one preallocated region per request.

A request reserves `prompt + output + gamma + 1` positions at admission (the most it can
ever hold: its committed tokens plus one verification in flight), as the simulator's KV
accounting reserves prompt + output. The region is written in place by the batched forward
(`runner.py`) and rolled back after verification by moving `length` -- no copies. This is
the engine's equivalent of one shared paged KV cache: each request attends only its own
region, and the linear layers run over all requests' tokens at once.
"""
from __future__ import annotations

import torch


class RequestKV:
    """Keys and values of one request for every layer: (layers, 2, kv_heads, capacity, head_dim)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        self.data = torch.empty((layers, 2, kv_heads, capacity, head_dim), dtype=dtype, device=device)
        self.length = 0          # positions holding committed (or in-flight) tokens

    @property
    def capacity(self) -> int:
        return self.data.shape[3]

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v (kv_heads, n, head_dim) at positions start .. start + n - 1 of `layer`."""
        n = k.shape[1]
        if start + n > self.capacity:
            raise RuntimeError(f"KV region overflow: {start + n} > {self.capacity} positions")
        self.data[layer, 0, :, start:start + n] = k
        self.data[layer, 1, :, start:start + n] = v

    def keys_values(self, layer: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of positions 0 .. end - 1 of `layer`: (kv_heads, end, head_dim) each."""
        return self.data[layer, 0, :, :end], self.data[layer, 1, :, :end]

    def crop(self, length: int) -> None:
        """Forget every position from `length` on (rejected drafts)."""
        if length > self.length:
            raise ValueError(f"cannot crop {self.length} positions up to {length}")
        self.length = length
