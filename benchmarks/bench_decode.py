"""Speculative vs plain decoding on the embedded target, wall clock, side by side per prompt.

For every prompt the decoders run back to back in a rotating order: plain decoding, the
drafter verifying all gamma drafts ("full"), optionally the drafter with DSpark's one-request
hardware-aware scheduler choosing how many drafts to verify ("scheduled", needs a confidence
head; the curve comes from --hw) and transformers' generate(). Prints, per task, median
tokens/s of each decoder, mean tau and drafts verified per step, the median per-prompt ratio to
plain decoding, and whether greedy outputs equal plain decoding's. Usage:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_decode.py [--drafter dspark --scheduled]
        [--tasks math=../shared/prompts/gsm8k/test.jsonl,...] [--prompts 4] [--tokens 96]
        [--threads 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from dspark_sim.decode.drafters import make_drafter
from dspark_sim.decode.loading import load_target
from dspark_sim.decode.prompts import BUILTIN_TASKS, builtin_prompts, encode_prompt, parse_tasks
from dspark_sim.decode.speculate import plain_generate, speculative_generate
from dspark_sim.fileio import write_json_atomic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", default="ngram", help="drafter name or checkpoint (default ngram)")
    ap.add_argument("--tasks", default="", help="NAME=FILE,... prompt sets (default: built-in prompts)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per task")
    ap.add_argument("--tokens", type=int, default=96, help="new tokens per prompt")
    ap.add_argument("--gamma", type=int, default=7)
    ap.add_argument("--scheduled", action="store_true", help="also run the one-request scheduler")
    ap.add_argument("--hw", default="cpu-2core-smollm2-135m", help="hardware profile for --scheduled")
    ap.add_argument("--hf", action="store_true", help="also time transformers' generate()")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="", help="write per-prompt results to this JSON file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("embedded", "cpu")
    drafter = make_drafter(args.drafter, target)
    sets = parse_tasks(args.tasks, args.prompts) if args.tasks else \
        {t: builtin_prompts(t)[: args.prompts] for t in BUILTIN_TASKS}

    def run(ids, hook=None):
        g = speculative_generate(target, drafter, ids, max_new_tokens=args.tokens, gamma=args.gamma,
                                 verify_len=hook)
        verified = sum(g.verified) / len(g.verified) if g.verified else 0.0
        return g.output_ids, g.wall_s, g.mean_tau, verified

    def plain(ids):
        g = plain_generate(target, ids, max_new_tokens=args.tokens)
        return g.output_ids, g.wall_s, 1.0, 0.0

    if args.scheduled:
        from dspark_sim.profiles.registry import load_hw_profile
        from dspark_sim.serve.single import ScheduledVerify
        curve = load_hw_profile(args.hw)

    def scheduled(ids):
        return run(ids, ScheduledVerify(curve, drafter.kind, args.gamma))

    def hf(ids):
        x = torch.tensor([ids])
        start = time.perf_counter()
        out = target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.tokens,
                                    do_sample=False)
        return out[0, len(ids):].tolist(), time.perf_counter() - start, 1.0, 0.0

    runners = {"plain": plain, "full": run}
    if args.scheduled:
        runners["scheduled"] = scheduled
    if args.hf:
        runners["hf-generate"] = hf
    run(encode_prompt(target.tokenizer, "Hello"))              # warm-up
    plain(encode_prompt(target.tokenizer, "Hello"))
    print(f"embedded SmolLM2-135M, CPU fp32, {args.threads} thread(s), drafter {args.drafter}, "
          f"{args.tokens} new tokens, gamma {args.gamma}, {args.prompts} prompts per task"
          + (f", scheduler curve {args.hw}" if args.scheduled else ""))
    head = " ".join(f"{k + ' tok/s':>16}" for k in runners)
    ratios_head = " ".join(f"{k + '/plain':>16}" for k in runners if k != "plain")
    print(f"{'task':6} {head} {'tau full':>9} {'tau sched':>9} {'verified':>9} {ratios_head} identical")
    records = []
    for task, prompts in sets.items():
        rows = []
        for i, p in enumerate(prompts):
            ids = encode_prompt(target.tokenizer, p.text)
            names = list(runners)
            order = names[i % len(names):] + names[: i % len(names)]
            res = {k: runners[k](ids) for k in order}
            row = {"task": task, "source": p.source, **{k: {"tokens": len(v[0]), "wall_s": v[1], "tau": v[2],
                                                   "verified": v[3]} for k, v in res.items()},
                   "identical": all(v[0] == res["plain"][0] for v in res.values())}
            rows.append(row)
            print(f"  {p.source}: " + ", ".join(f"{k} {v['tokens'] / v['wall_s']:.1f} tok/s"
                                                 for k, v in row.items() if isinstance(v, dict))
                  + f", identical {row['identical']}", file=sys.stderr, flush=True)
        records += rows
        med = {k: statistics.median(r[k]["tokens"] / r[k]["wall_s"] for r in rows) for k in runners}
        ratio = {k: statistics.median((r[k]["tokens"] / r[k]["wall_s"]) / (r["plain"]["tokens"] / r["plain"]["wall_s"])
                                      for r in rows) for k in runners if k != "plain"}
        tau = {k: statistics.mean(r[k]["tau"] for r in rows) for k in runners}
        ver = statistics.mean(r["scheduled"]["verified"] for r in rows) if args.scheduled else float("nan")
        print(f"{task:6} " + " ".join(f"{med[k]:16.1f}" for k in runners)
              + f" {tau['full']:9.2f} {tau.get('scheduled', float('nan')):9.2f} {ver:9.2f} "
              + " ".join(f"{ratio[k]:15.2f}x" for k in ratio)
              + f" {sum(r['identical'] for r in rows)}/{len(rows)}")
    if args.json:
        write_json_atomic(args.json, {"args": vars(args), "records": records})


if __name__ == "__main__":
    main()
