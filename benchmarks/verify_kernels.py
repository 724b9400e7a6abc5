"""Why a CPU verify step of w tokens costs what it does: torch's default Linear vs oneDNN-packed weights.

The embedded target's decode-loop step curve on CPU is a staircase (on an AVX-512 Xeon, fp32, one
thread: ~55 ms at 1-3 tokens, ~90 ms at 4-6, ~115 ms at 7-8). The steps are the BLAS kernel's, not
the model's: torch's fp32 Linear (MKL sgemm) reads the whole weight matrix once per block of three
rows, so a verify step of 4 tokens streams the 540 MB of weights twice and one of 7 tokens three
times. Weights reordered once into oneDNN's blocked layout (`torch.ops.mkldnn._reorder_linear_weight`,
what inductor's CPU freezing uses) are read once for any small row count.

This benchmark times the target's verify step over w = 1..W new tokens after a prefilled context
with the decode loop's own timer (`profile_decode_loop`: round-robin over the widths), with (a) the
default Linear kernel and (b) every Linear reading its oneDNN-packed weight when it gets 2 or more
rows (1 row keeps the default kernel, the fastest there, so plain decoding is not slowed), in four
passes ordered default, packed, packed, default. It prints both curves (medians of each kernel's
samples), the packed path's largest logit difference from the default one, and whether
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

import torch

from dspark_sim.decode.loading import load_target
from dspark_sim.decode.loop_profile import profile_decode_loop
from dspark_sim.fileio import write_json_atomic
from dspark_sim.hardware.measure import describe_device
from dspark_sim.hardware.packed_linear import PackedLinear, swap_linears, use_packed
from dspark_sim.hardware.profiler import ProfileGrid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", type=int, default=8, help="largest verify width timed, gamma + 1 (default 8)")
    ap.add_argument("--context", type=int, default=200, help="prefilled context tokens (default 200)")
    ap.add_argument("--repeats", type=int, default=15,
                    help="timed rounds over the widths per pass, after 2 warm-up rounds; four passes "
                         "(default, packed, packed, default), the median of each kernel's samples counts "
                         "(default 15)")
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
    swapped = swap_linears(target.model, PackedLinear)
    widths = tuple(range(1, args.widths + 1))
    grid = ProfileGrid((1,), widths, (args.context,), (), repeats=args.repeats, warmup=2)
    samples = {False: [[] for _ in widths], True: [[] for _ in widths]}
    for on in (False, True, True, False):        # ABBA: a slow spell falls on both kernels alike
        print(f"timing the {'packed' if on else 'default'} Linear at widths 1..{args.widths}",
              file=sys.stderr, flush=True)
        use_packed(target.model, on)
        timings, _ = profile_decode_loop(target, None, grid, args.widths)   # the decode loop's own timer
        for i, t in enumerate(timings):
            samples[on][i] += t.samples_s
    default = [statistics.median(v) for v in samples[False]]
    packed = [statistics.median(v) for v in samples[True]]
    logits = {}
    for on in (False, True):                     # the widest step after the same context, each kernel
        use_packed(target.model, on)
        ids = torch.randint(0, target.vocab_size, (args.context + args.widths,),
                            generator=torch.Generator().manual_seed(0))
        cache = target.new_cache()
        target.forward(ids[:args.context], cache)
        logits[on] = target.forward(ids[args.context:], cache).logits
    diff = float((logits[True] - logits[False]).abs().max())
    agree = bool(torch.equal(logits[True].argmax(-1), logits[False].argmax(-1)))
    print(f"embedded SmolLM2-135M, CPU fp32, {args.threads} thread(s), context {args.context}, "
          f"{swapped} Linear layers packed; {describe_device('cpu')}; load {os.getloadavg()[0]:.2f}")
    print(f"{'width':>5} {'default ms':>11} {'packed ms':>10} {'packed/default':>15}")
    for w in range(args.widths):
        print(f"{w + 1:5d} {default[w] * 1e3:11.1f} {packed[w] * 1e3:10.1f} {packed[w] / default[w]:14.2f}x")
    print(f"S({args.widths})/S(1): default {default[-1] / default[0]:.2f}, packed "
          f"{packed[-1] / default[0]:.2f}; widest step's logits: max |packed - default| {diff:.2e}, "
          f"greedy tokens agree on all {args.widths} rows: {agree}")
    if args.json:
        write_json_atomic(args.json, {"args": vars(args), "device": describe_device("cpu"),
                                      "default_s": default, "packed_s": packed,
                                      "max_logit_diff": diff, "argmax_agree": agree,
                                      "load_after": os.getloadavg()[0]})


if __name__ == "__main__":
    main()
