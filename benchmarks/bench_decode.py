"""Speculative (n-gram) vs plain decoding vs transformers' generate on the embedded target.

Runs each built-in prompt of each task with the three decoders back to back (rotating the
order), repeats, and prints median tokens/s per task and the speculative/plain ratio measured
side by side. Usage:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_decode.py [--prompts 4] [--tokens 96] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from dspark_sim.decode.drafters import make_drafter
from dspark_sim.decode.loading import load_target
from dspark_sim.decode.prompts import BUILTIN_TASKS, builtin_prompts, encode_prompt
from dspark_sim.decode.speculate import plain_generate, speculative_generate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4, help="prompts per task")
    ap.add_argument("--tokens", type=int, default=96, help="new tokens per prompt")
    ap.add_argument("--gamma", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("embedded", "cpu")
    ngram = make_drafter("ngram", target)
    model = target.model

    def spec(ids):
        g = speculative_generate(target, ngram, ids, max_new_tokens=args.tokens, gamma=args.gamma)
        return len(g.output_ids), g.wall_s, g.mean_tau

    def plain(ids):
        g = plain_generate(target, ids, max_new_tokens=args.tokens)
        return len(g.output_ids), g.wall_s, 1.0

    def hf(ids):
        x = torch.tensor([ids])
        start = time.perf_counter()
        out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.tokens,
                             do_sample=False)
        return out.shape[1] - len(ids), time.perf_counter() - start, 1.0

    runners = {"ngram": spec, "plain": plain, "hf-generate": hf}
    spec(encode_prompt(target.tokenizer, "Hello"))              # warm-up
    print(f"embedded SmolLM2-135M, CPU fp32, {args.threads} thread(s), {args.tokens} new tokens, "
          f"gamma {args.gamma}, {args.prompts} prompts per task")
    print(f"{'task':6} {'ngram tok/s':>12} {'plain tok/s':>12} {'hf tok/s':>10} {'tau':>6} "
          f"{'median ratio ngram/plain':>26}")
    for task in BUILTIN_TASKS:
        rates = {k: [] for k in runners}
        taus, ratios = [], []
        for i, p in enumerate(builtin_prompts(task)[: args.prompts]):
            ids = encode_prompt(target.tokenizer, p.text)
            order = list(runners)[i % 3:] + list(runners)[: i % 3]
            res = {k: runners[k](ids) for k in order}
            for k, (n, s, _) in res.items():
                rates[k].append(n / s)
            taus.append(res["ngram"][2])
            ratios.append(rates["ngram"][-1] / rates["plain"][-1])
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"{task:6} {med['ngram']:12.1f} {med['plain']:12.1f} {med['hf-generate']:10.1f} "
              f"{statistics.mean(taus):6.2f} {statistics.median(ratios):25.2f}x")


if __name__ == "__main__":
    main()
