"""Draft-gate policies replayed exactly, without timing noise: record once, replay any policy.

`record` decodes each prompt greedily with the target alone, then, at every anchor of that
output, asks the drafter for k = 1..gamma drafts (a block drafter runs a k-slot block) and keeps
how many of them equal the greedy continuation and their calibrated confidences. Under greedy
decoding that is everything a speculative step at that anchor can do: verifying l of the k
drafts accepts min(n, l) of them, plus one token. `replay` walks each output with a policy and
prices every step on a hardware profile (step(1 + l) + attention over the context + the draft
step of k drafts; a plain step has no draft step), so policies are compared on the same drafts
and the same costs:

- `plain`: never drafts;
- `scheduled`: DSpark's one-request scheduler (`serve/single.py`), drafting every step;
- `gated`: the same with `skip_drafting` (the shipped `generate --verify scheduled`, with its
  default `smoothing` and `max_skip`; `--smoothing A B ..` and `--max-skip M N ..` add the gate
  with other values);
- `oracle`: the best any gate could do with these drafts (dynamic programming over anchors:
  at each anchor either a plain step or k drafts with the best l, knowing the outcome).

Ratios are tokens/s over `plain` per prompt, median (mean) per task. Usage:

    HF_HUB_OFFLINE=1 .venv/bin/python -m dspark_sim.decode.gate_replay record --drafter dspark \\
        --skip 4 --prompts 10 --out runs/gate/record.json
    .venv/bin/python -m dspark_sim.decode.gate_replay replay runs/gate/record.json \\
        [--hw hw_profiles/cpu-1thread-smollm2-135m-decode-loop.yaml]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

DEFAULT_HW = "cpu-1thread-smollm2-135m-decode-loop"   # shipped (hw_profiles/)


def record(args) -> None:
    import torch
    from tqdm import tqdm

    from dspark_sim.decode.context import Context
    from dspark_sim.decode.drafters import make_drafter
    from dspark_sim.decode.loading import load_target
    from dspark_sim.decode.prompts import BUILTIN_TASKS, builtin_prompts, encode_prompt, parse_tasks
    from dspark_sim.decode.sampling import Sampling
    from dspark_sim.decode.speculate import plain_generate
    from dspark_sim.fileio import write_json_atomic

    torch.set_num_threads(args.threads)
    target = load_target("embedded", "cpu")
    drafter = make_drafter(args.drafter, target)
    n_sets = args.skip + args.prompts
    sets = parse_tasks(args.tasks, n_sets) if args.tasks else \
        {t: builtin_prompts(t)[:n_sets] for t in BUILTIN_TASKS}
    prompts = [p for ps in sets.values() for p in ps[args.skip:]]
    out = []
    for p in tqdm(prompts, desc="prompts", file=sys.stderr):
        ids = encode_prompt(target.tokenizer, p.text)
        output = plain_generate(target, ids, max_new_tokens=args.tokens + args.gamma).output_ids
        with torch.inference_mode():
            feats = target.forward(torch.tensor(ids + output), target.new_cache(), drafter.taps).features
        ctx = Context(tokens=list(ids), prompt_len=len(ids), taps=drafter.taps)
        ctx.commit([output[0]], None if feats is None else feats[: len(ids)])
        drafter.begin(ctx)
        anchors = []
        for t in range(min(len(output), args.tokens)):
            if t > 0:
                ctx.commit([output[t]], None if feats is None else feats[len(ids) + t - 1: len(ids) + t])
            cont = output[t + 1: t + 1 + args.gamma]
            by_k = {}
            for k in range(1, args.gamma + 1):
                d = drafter.propose(ctx, k, Sampling())
                toks = d.tokens.tolist()
                n = next((i for i, (a, b) in enumerate(zip(toks, cont)) if a != b), min(len(toks), len(cont)))
                by_k[k] = {"n": n, "c": None if d.confidence is None else
                           [round(float(c), 5) for c in d.confidence.tolist()]}
            anchors.append(by_k)
        out.append({"task": p.task, "source": p.source, "prompt_len": len(ids), "anchors": anchors})
    write_json_atomic(args.out, {"drafter": args.drafter, "kind": drafter.kind, "gamma": args.gamma,
                                 "tokens": args.tokens, "prompts": out})
    print(f"wrote {args.out} ({len(out)} prompts)")


class _Ctx:
    """What the scheduler reads of a context: its length."""

    def __init__(self, n: int) -> None:
        self.tokens = range(n)


def _walk(rec: dict, kind: str, gamma: int, hw, skip: bool | None, gate: dict | None = None,
          fixed: int = 0) -> float:
    """Tokens/s of one recorded output under the scheduler (skip None: plain decoding); `gate`
    holds ScheduledVerify's settings (smoothing, max_skip, recent) where they differ from its
    own; `fixed` k > 0 drafts and verifies k every step (the speedup bound's policy)."""
    import torch

    from dspark_sim.decode.drafters.base import Draft
    from dspark_sim.serve.single import ScheduledVerify

    hook = ScheduledVerify(hw, kind, gamma, skip_drafting=bool(skip), **(gate or {}))
    anchors, base = rec["anchors"], rec["prompt_len"]
    pos, seconds = 0, 0.0
    while pos < len(anchors):
        context = base + pos
        if fixed:
            k = fixed
        else:
            k = 0 if skip is None else min(gamma, hook.draft_budget(_Ctx(context)))
        if k == 0:
            seconds += hook.step_seconds(1, context, 0)
            pos += 1
            continue
        step = anchors[pos][str(k)]
        conf = step["c"]
        draft = Draft(torch.zeros(k, dtype=torch.long),
                      confidence=None if conf is None else torch.tensor(conf))
        l = k if fixed else hook(draft, _Ctx(context))
        seconds += hook.step_seconds(1 + l, context, k)
        pos += min(step["n"], l) + 1
    return len(anchors) / seconds


def _oracle(rec: dict, kind: str, gamma: int, hw) -> float:
    from dspark_sim.serve.single import ScheduledVerify

    hook = ScheduledVerify(hw, kind, gamma)
    anchors, base = rec["anchors"], rec["prompt_len"]
    n = len(anchors)
    best = np.zeros(n + gamma + 2)
    for pos in range(n - 1, -1, -1):
        context = base + pos
        b = hook.step_seconds(1, context, 0) + best[pos + 1]
        for k in range(1, gamma + 1):
            acc = anchors[pos][str(k)]["n"]
            for l in range(1, k + 1):
                b = min(b, hook.step_seconds(1 + l, context, k) + best[min(pos + min(acc, l) + 1, n)])
        best[pos] = b
    return n / best[0]


def replay(args) -> None:
    from dspark_sim.profiles.registry import load_hw_profile

    data = args.data
    hw = load_hw_profile(args.hw)
    kind, gamma = data["kind"], data["gamma"]
    policies = {"scheduled": dict(skip=False), "gated": dict(skip=True),   # _walk's keywords
                **{f"gated-s{a}": dict(skip=True, gate={"smoothing": a}) for a in args.smoothing},
                **{f"gated-m{m}": dict(skip=True, gate={"max_skip": m}) for m in args.max_skip},
                **{f"gated-r{r}": dict(skip=True, gate={"recent": r}) for r in args.recent},
                **{f"fixed-{k}": dict(skip=True, fixed=k) for k in args.fixed}}
    print(f"{data['drafter']} on {hw.name}: tokens/s over plain decoding per prompt, median (mean)")
    print(f"{'task':6} {'prompts':>7} " + " ".join(f"{k:>15}" for k in (*policies, "oracle")))
    for task in dict.fromkeys(r["task"] for r in data["prompts"]):
        recs = [r for r in data["prompts"] if r["task"] == task]
        plain = np.array([_walk(r, kind, gamma, hw, None) for r in recs])
        cols = []
        for policy in policies.values():
            cols.append(np.array([_walk(r, kind, gamma, hw, **policy) for r in recs]) / plain)
        cols.append(np.array([_oracle(r, kind, gamma, hw) for r in recs]) / plain)
        print(f"{task:6} {len(recs):7d} " + " ".join(
            f"{statistics.median(c):7.3f} ({c.mean():.3f})" for c in cols))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="decode prompts and record every anchor's drafts")
    r.add_argument("--drafter", default="dspark", help="drafter name or checkpoint (default dspark)")
    r.add_argument("--tasks", default="", help="NAME=FILE,... prompt sets (default: built-in prompts)")
    r.add_argument("--skip", type=int, default=0, help="leading prompts per task to leave out")
    r.add_argument("--prompts", type=int, default=10, help="prompts per task")
    r.add_argument("--tokens", type=int, default=128, help="anchors (new tokens) per prompt")
    r.add_argument("--gamma", type=int, default=7, help="most drafts per step")
    r.add_argument("--threads", type=int, default=1)
    r.add_argument("--out", required=True, help="JSON file to write")
    p = sub.add_parser("replay", help="replay policies over a record")
    p.add_argument("record", help="JSON file written by `record`")
    p.add_argument("--smoothing", type=float, nargs="*", default=[],
                   help="also replay the gate with these `smoothing` factors (1 = the latest step alone)")
    p.add_argument("--max-skip", type=int, nargs="*", default=[],
                   help="also replay the gate with these longest back-offs (steps; the hook's default is 16)")
    p.add_argument("--recent", type=int, nargs="*", default=[],
                   help="also replay the gate with these budget windows (draft steps whose most "
                        "verified drafts, plus one, cap the next budget; the hook's default is 8)")
    p.add_argument("--fixed", type=int, nargs="*", default=[],
                   help="also replay drafting and verifying k drafts every step, for these k")
    p.add_argument("--hw", default=DEFAULT_HW, help=f"hardware profile to price steps (default {DEFAULT_HW})")
    args = ap.parse_args()
    if args.cmd == "record":
        for name in ("prompts", "tokens", "gamma", "threads"):
            if getattr(args, name) < 1:
                ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
        if args.skip < 0:
            ap.error(f"--skip must be >= 0, got {args.skip}")
    else:
        for name in ("max_skip", "recent", "fixed"):
            if any(v < 1 for v in getattr(args, name)):
                ap.error(f"--{name.replace('_', '-')} values must be >= 1, got {getattr(args, name)}")
        if any(not 0.0 < a <= 1.0 for a in args.smoothing):
            ap.error(f"--smoothing values must be in (0, 1], got {args.smoothing}")
        try:
            args.data = json.loads(Path(args.record).read_text())
            missing = [k for k in ("kind", "gamma", "prompts") if k not in args.data]
        except (OSError, json.JSONDecodeError) as e:
            ap.error(f"{args.record}: not a readable record ({e})")
        if missing:
            ap.error(f"{args.record}: not a `record` output (no field {', '.join(missing)})")
    record(args) if args.cmd == "record" else replay(args)


if __name__ == "__main__":
    main()
