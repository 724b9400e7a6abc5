"""Why a CPU verify step of w tokens costs what it does: torch's default Linear vs oneDNN-packed weights.

The embedded target's decode-loop step curve on CPU is a staircase (on an AVX-512 Xeon, fp32, one
thread: ~55 ms at 1-3 tokens, ~90 ms at 4-6, ~115 ms at 7-8). The steps are the BLAS kernel's, not
the model's: torch's fp32 Linear (MKL sgemm) reads the whole weight matrix once per block of three
rows, so a verify step of 4 tokens streams the 540 MB of weights twice and one of 7 tokens three
times. Weights reordered once into oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`,
what inductor's CPU freezing uses) are read once for any small row count.

This benchmark times the target's forward over w = 1..W new tokens after a prefilled context with
(a) the default Linear layers and (b) every Linear reading its oneDNN-packed weight when it gets 2 or
more rows (1 row keeps the default kernel, the fastest there, so plain decoding is not slowed). It
prints both curves, the packed path's largest logit difference from the default one, and whether
the greedy token of every row agrees. Nothing in the product uses the packed path; this measures
whether it would pay. Usage:

    HF_HUB_OFFLINE=1 taskset -c 1 .venv/bin/python benchmarks/verify_kernels.py [--widths 8]
        [--context 200] [--repeats 15] [--threads 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from dspark_sim.decode.loading import load_target
from dspark_sim.fileio import write_json_atomic
from dspark_sim.hardware.measure import describe_device


class PackedLinear(nn.Module):
    """A frozen Linear that multiplies 2 or more rows against a oneDNN-packed copy of its weight."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_features
        if rows < 2:
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


def time_widths(target, ids: torch.Tensor, context: int, widths: int, repeats: int):
    """Median seconds of a forward over w new tokens after `context` tokens, w = 1..widths, and
    the logits of the widest step."""
    cache = target.new_cache()
    target.forward(ids[:, :context], cache)
    medians, logits = [], None
    for w in range(1, widths + 1):
        times = []
        for _ in range(repeats + 2):                     # two warm-up runs per width
            start = time.perf_counter()
            out = target.forward(ids[:, context:context + w], cache)
            times.append(time.perf_counter() - start)
            target.crop(cache, context)
        medians.append(statistics.median(times[2:]))
        logits = out.logits
    return medians, logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, default=8, help="largest verify width timed, gamma + 1 (default 8)")
    ap.add_argument("--context", type=int, default=200, help="prefilled context tokens (default 200)")
    ap.add_argument("--repeats", type=int, default=15, help="timed runs per width, after 2 warm-up runs; the median counts (default 15)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--json", default="", help="also write the curves to this JSON file")
    args = ap.parse_args()
    for name in ("widths", "context", "repeats", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if not torch.backends.mkldnn.is_available():
        sys.exit("this torch build has no oneDNN (mkldnn): nothing to compare")
    torch.set_num_threads(args.threads)
    target = load_target("embedded", "cpu", quiet=True)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, target.vocab_size, (1, args.context + args.widths), generator=gen)
    def phase(name: str):
        print(f"timing {name} at widths 1..{args.widths} ({args.repeats} runs each)",
              file=sys.stderr, flush=True)
        return time_widths(target, ids, args.context, args.widths, args.repeats)

    default, ref = phase("the default Linear")
    swapped = swap_linears(target.model, PackedLinear)
    packed, new = phase("the packed Linear")
    again, _ = phase("the packed Linear again")
    print(f"embedded SmolLM2-135M, CPU fp32, {args.threads} thread(s), context {args.context}, "
          f"{swapped} Linear layers packed; {describe_device('cpu')}; load {os.getloadavg()[0]:.2f}")
    print(f"{'width':>5} {'default ms':>11} {'packed ms':>10} {'packed again':>13} {'packed/default':>15}")
    for w in range(args.widths):
        best = min(packed[w], again[w])
        print(f"{w + 1:5d} {default[w] * 1e3:11.1f} {packed[w] * 1e3:10.1f} {again[w] * 1e3:13.1f} "
              f"{best / default[w]:14.2f}x")
    diff = float((new - ref).abs().max())
    agree = bool(torch.equal(new.argmax(-1), ref.argmax(-1)))
    print(f"S({args.widths})/S(1): default {default[-1] / default[0]:.2f}, packed "
          f"{min(packed[-1], again[-1]) / default[0]:.2f}; widest step's logits: max |packed - "
          f"default| {diff:.2e}, greedy tokens agree on all {args.widths} rows: {agree}")
    if args.json:
        write_json_atomic(args.json, {"args": vars(args), "device": describe_device("cpu"),
                                      "default_s": default, "packed_s": packed, "packed_again_s": again,
                                      "max_logit_diff": diff, "argmax_agree": agree,
                                      "load_after": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
