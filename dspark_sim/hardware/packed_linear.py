"""A frozen Linear that multiplies several rows against a oneDNN-packed copy of its weight.

On CPU, torch's fp32 Linear (MKL sgemm) reads the whole weight matrix once per block of three
rows, so a verify step of w tokens costs a staircase in w; a weight reordered once into oneDNN's
blocked layout (`torch.ops.mkldnn._reorder_linear_weight`, what inductor's CPU freezing uses) is
read once for any small row count. benchmarks/verify_kernels.py times the embedded target with
these layers swapped in (docs/drafters.md); nothing in the product uses them by default.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class PackedLinear(nn.Module):
    """A frozen Linear that, while `packed_on`, multiplies 2 or more rows against a oneDNN-packed
    copy of its weight (1 row, or `packed_on` False: torch's default kernel)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())
        self.packed_on = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows < 2 or not self.packed_on:
            return F.linear(x, self.weight, self.bias)
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, self.in_features), self.packed,
                                               self.bias, "none", [], "")
        return y.view(*x.shape[:-1], self.out_features)


def swap_linears(module: nn.Module, make) -> int:
    """Replace every nn.Linear under `module` by make(linear); the number replaced."""
    count = 0
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, make(child))
            count += 1
        else:
            count += swap_linears(child, make)
    return count


def use_packed(module: nn.Module, on: bool) -> None:
    """Switch every PackedLinear under `module` to its packed weight (on) or the default kernel."""
    for m in module.modules():
        if isinstance(m, PackedLinear):
            m.packed_on = on
