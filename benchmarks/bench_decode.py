"""Speculative vs plain decoding on the embedded target, wall clock, side by side per prompt.

For every prompt the decoders run back to back in a rotating order: plain decoding, the
drafter verifying all gamma drafts ("full"), optionally the drafter with DSpark's one-request
hardware-aware scheduler choosing how many drafts to verify ("scheduled", needs a confidence
head; the curve comes from --hw) and transformers' generate(). Prints, per task, median
tokens/s of each decoder, mean tau and drafts verified per step, the median per-prompt ratio to
plain decoding, and whether greedy outputs equal plain decoding's. The scheduled decoder skips
draft steps while the previous steps' confidences say drafting does not pay (`--skip-drafting`;
`both` also runs it without). Beside the measured ratio it prints the bound that the step curve
and the measured acceptance allow, max over k of tau(k) x S(1) / (S(k + 1) + draft(k))
(draft(k): the draft step making k drafts), with
tau(k) from the full-gamma run's steps (decode/loop_profile.py). `--hw measure` times this decode
loop's own step curve first (`dspark-sim profile --runner decode-loop` writes the same thing to a
file). Usage:

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_decode.py [--drafter dspark --scheduled]
        [--hw measure] [--tasks math=../shared/prompts/gsm8k/test.jsonl,...] [--prompts 4]
        [--tokens 96] [--repeats 3] [--threads 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from dspark_sim.decode.drafters import make_drafter
from dspark_sim.decode.loading import load_target
from dspark_sim.decode.prompts import BUILTIN_TASKS, builtin_prompts, encode_prompt, parse_tasks
from dspark_sim.decode.speculate import plain_generate, speculative_generate
from dspark_sim.fileio import write_json_atomic
from dspark_sim.hardware.measure import describe_device


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafter", default="ngram", help="drafter name or checkpoint (default ngram)")
    ap.add_argument("--tasks", default="", help="NAME=FILE,... prompt sets (default: built-in prompts)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per task")
    ap.add_argument("--tokens", type=int, default=96, help="new tokens per prompt")
    ap.add_argument("--gamma", type=int, default=7)
    ap.add_argument("--scheduled", action="store_true", help="also run the one-request scheduler")
    ap.add_argument("--hw", default="measure",
                    help="hardware profile for --scheduled and the bound (a name or .yaml), or "
                         "'measure' (default): time this decode loop's step curve first, in this run")
    ap.add_argument("--skip-drafting", choices=("on", "off", "both"), default="on",
                    help="the scheduled decoder's draft gate (both: run it with and without)")
    ap.add_argument("--lagged", action="store_true",
                    help="also run the lagged scheduler (budget from the previous draft step's "
                         "confidences by an unconstrained search; skip-drafting unless --skip-drafting off)")
    ap.add_argument("--hf", action="store_true", help="also time transformers' generate()")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of every decoder per prompt, interleaved in rotated order; each "
                         "decoder's median-time run counts (default 1)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="", help="write per-prompt results to this JSON file")
    args = ap.parse_args()
    for name in ("prompts", "tokens", "gamma", "repeats", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    target = load_target("embedded", "cpu")
    drafter = make_drafter(args.drafter, target)
    sets = parse_tasks(args.tasks, args.prompts) if args.tasks else \
        {t: builtin_prompts(t)[: args.prompts] for t in BUILTIN_TASKS}

    def run(ids, hook=None):
        g = speculative_generate(target, drafter, ids, max_new_tokens=args.tokens, gamma=args.gamma,
                                 verify_len=hook)
        verified = sum(g.verified) / len(g.verified) if g.verified else 0.0
        return g.output_ids, g.wall_s, g.mean_tau, verified, 0.0, g.accepted, g.verified, \
            len(ids) + len(g.output_ids) / 2

    def plain(ids):
        g = plain_generate(target, ids, max_new_tokens=args.tokens)
        return g.output_ids, g.wall_s, 1.0, 0.0, 0.0

    curve = hardware_curve(args, target, drafter)

    def scheduled(ids, skip=True, lagged=False):
        from dspark_sim.serve.single import ScheduledVerify
        hook = ScheduledVerify(curve, drafter.kind, args.gamma, skip_drafting=skip, lagged=lagged)
        g = speculative_generate(target, drafter, ids, max_new_tokens=args.tokens, gamma=args.gamma,
                                 verify_len=hook, draft_budget=hook.draft_budget)
        verified = sum(g.verified) / len(g.verified) if g.verified else 0.0
        return g.output_ids, g.wall_s, g.mean_tau, verified, g.skipped / max(g.steps, 1)

    def hf(ids):
        x = torch.tensor([ids])
        start = time.perf_counter()
        out = target.model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=args.tokens,
                                    do_sample=False)
        return out[0, len(ids):].tolist(), time.perf_counter() - start, 1.0, 0.0, 0.0

    runners = {"plain": plain, "full": run}
    if args.scheduled and args.skip_drafting in ("on", "both"):
        runners["scheduled"] = scheduled
    if args.scheduled and args.skip_drafting in ("off", "both"):
        runners["sched-noskip"] = lambda ids: scheduled(ids, skip=False)
    if args.lagged:
        runners["lagged"] = lambda ids: scheduled(ids, skip=args.skip_drafting != "off", lagged=True)
    if args.hf:
        runners["hf-generate"] = hf
    run(encode_prompt(target.tokenizer, "Hello"))              # warm-up
    plain(encode_prompt(target.tokenizer, "Hello"))
    print(f"embedded SmolLM2-135M, CPU fp32, {args.threads} thread(s), drafter {args.drafter}, "
          f"{args.tokens} new tokens, gamma {args.gamma}, {args.prompts} prompts per task, "
          f"{args.repeats} interleaved run(s) of each decoder per prompt (median)"
          + f", step curve {curve.name}; load {os.getloadavg()[0]:.2f}")
    head = " ".join(f"{k + ' tok/s':>16}" for k in runners)
    ratios_head = " ".join(f"{k + '/plain':>16}" for k in runners if k != "plain")
    print(f"{'task':6} {head} {'tau full':>9} {'tau sched':>9} {'verified':>9} {'skipped':>8} "
          f"{ratios_head} {'bound':>7} identical")
    records, bounds = [], {}
    for task, prompts in sets.items():
        rows = []
        for i, p in enumerate(prompts):
            ids = encode_prompt(target.tokenizer, p.text)
            names = list(runners)
            runs: dict[str, list] = {k: [] for k in names}
            for rep in range(args.repeats):          # each round in a rotated order
                shift = (i + rep) % len(names)
                for k in names[shift:] + names[:shift]:
                    runs[k].append(runners[k](ids))
            # per decoder, the run with the median wall time (outputs are the same every round)
            res = {k: sorted(v, key=lambda r: r[1])[len(v) // 2] for k, v in runs.items()}
            row = {"task": task, "source": p.source, **{k: {"tokens": len(v[0]), "wall_s": v[1], "tau": v[2],
                                                   "verified": v[3], "skipped": v[4]} for k, v in res.items()},
                   "identical": all(r[0] == res["plain"][0] for v in runs.values() for r in v),
                   "full_steps": {"accepted": res["full"][5], "verified": res["full"][6],
                                  "mean_context": res["full"][7]}}
            rows.append(row)
            print(f"  {p.source}: " + ", ".join(f"{k} {v['tokens'] / v['wall_s']:.1f} tok/s"
                                                 for k, v in row.items() if k in runners)
                  + f", identical {row['identical']}", file=sys.stderr, flush=True)
        records += rows
        med = {k: statistics.median(r[k]["tokens"] / r[k]["wall_s"] for r in rows) for k in runners}
        ratio = {k: statistics.median((r[k]["tokens"] / r[k]["wall_s"]) / (r["plain"]["tokens"] / r["plain"]["wall_s"])
                                      for r in rows) for k in runners if k != "plain"}
        tau = {k: statistics.mean(r[k]["tau"] for r in rows) for k in runners}
        sched = "scheduled" if "scheduled" in runners else "sched-noskip"
        ver = statistics.mean(r[sched]["verified"] for r in rows) if args.scheduled else float("nan")
        skipped = statistics.mean(r[sched]["skipped"] for r in rows) if args.scheduled else float("nan")
        bound, best_k = task_bound(rows, curve, drafter.kind, args.gamma)
        bounds[task] = {"bound": bound, "best_k": best_k}
        print(f"{task:6} " + " ".join(f"{med[k]:16.1f}" for k in runners)
              + f" {tau['full']:9.2f} {tau.get(sched, float('nan')):9.2f} {ver:9.2f} {skipped:8.2f} "
              + " ".join(f"{ratio[k]:15.2f}x" for k in ratio)
              + f" {bound:6.2f}x {sum(r['identical'] for r in rows)}/{len(rows)}")
    print(f"bound: max over k of tau(k) x S(1) / (S(k + 1) + draft(k)), S and draft from {curve.name} "
          f"at each task's mean context, tau(k) from the full-gamma steps; best k per task: "
          + ", ".join(f"{t} {b['best_k']}" for t, b in bounds.items()))
    if args.json:
        write_json_atomic(args.json, {"args": vars(args), "records": records, "bounds": bounds,
                                      "curve": curve.name, "device": describe_device("cpu"),
                                      "load_after": os.getloadavg()[0]})


def hardware_curve(args, target, drafter):
    """The step curve the scheduler and the bound read: a profile by name/path, or this decode
    loop's own curve timed now (`--hw measure`, widths 1..gamma+1 at 128- and 512-token contexts,
    so the fit can tell the step from the attention over the context)."""
    if args.hw != "measure":
        from dspark_sim.profiles.registry import load_hw_profile
        return load_hw_profile(args.hw)
    from dspark_sim.decode.local_curve import measure_local_curve

    prof = measure_local_curve(target, drafter, args.gamma)
    steps = ", ".join(f"{x}: {y * 1e3:.1f}" for x, y in zip(prof.step_curve.x, prof.step_curve.y))
    print(f"decode-loop step curve (ms at w tokens): {steps}; draft "
          f"{prof.draft_time(drafter.kind, 1) * 1e3:.1f} ms", file=sys.stderr)
    return prof


def task_bound(rows, curve, kind: str, gamma: int) -> tuple[float, int]:
    """The speedup bound of one task from its full-gamma steps and the curve."""
    from dspark_sim.decode.loop_profile import speedup_bound, survival_from_tau_histogram
    from dspark_sim.sim.cost.iteration import IterationCost

    accepted = [a for r in rows for a in r["full_steps"]["accepted"]]
    verified = [v for r in rows for v in r["full_steps"]["verified"]]
    context = statistics.mean(r["full_steps"]["mean_context"] for r in rows)
    cost = IterationCost(curve, kind, scheduler_drafts=gamma)
    steps = cost.step_seconds(list(range(gamma + 2)))
    ctx_s = cost.per_context * context
    return speedup_bound(lambda w: float(steps[w]) + ctx_s,
                         lambda k: float(cost.draft_seconds([1], [k])[0]),
                         survival_from_tau_histogram(accepted, verified, gamma))


if __name__ == "__main__":
    main()
