"""The copy bias of a trained drafter (dspark_sim/decode/drafters/copybias.py): choose it on
held-out prompts, and write it into a copy of a checkpoint.

    # tau per task on the calibration prompts (GSM8K train questions never trained on, held-out
    # code and chat templates), every draft verified, for each [bigram:unigram] bias:
    python -m dspark_sim.train.copy_bias grid runs/train/dspark-s1-fix1200/drafter \\
        --pairs 0:0,4:0,8:0,12:0,8:2 --n 10 --out runs/copy/grid-dspark-s1.json
    # a checkpoint directory with the chosen bias in its config.json (weights copied as they are):
    python -m dspark_sim.train.copy_bias set runs/train/dspark-s1-fix1200/drafter \\
        runs/train/dspark-s1-fix1200copy/drafter --bigram 12 --unigram 0

The benchmark prompts (GSM8K test, HumanEval, MT-Bench) are never used to choose the bias.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from dspark_sim.errors import InputError
from dspark_sim.fileio import json_text, write_json_atomic


def parse_pairs(spec: str) -> list[tuple[float, float]]:
    out = []
    for item in spec.split(","):
        try:
            b2, b1 = (float(x) for x in item.split(":"))
        except ValueError:
            raise SystemExit(f"--pairs: expected BIGRAM:UNIGRAM, got {item!r}") from None
        if b2 < 0 or b1 < 0:
            raise SystemExit(f"--pairs: biases must be >= 0, got {item!r}")
        out.append((b2, b1))
    return out


def grid(args: argparse.Namespace) -> None:
    import torch

    from dspark_sim.decode.drafters.trained import load_trained
    from dspark_sim.decode.loading import load_target
    from dspark_sim.decode.measure import Settings, measure_prompt
    from dspark_sim.decode.prompts import Prompt
    from dspark_sim.decode.report import pooled_tau
    from dspark_sim.decode.sampling import Sampling
    from dspark_sim.train.prompts import heldout_prompts

    pairs = parse_pairs(args.pairs)
    torch.set_num_threads(args.threads)
    target = load_target(args.target)
    drafter = load_trained(args.checkpoint, target)
    tasks: dict[str, list[Prompt]] = {}
    for p in heldout_prompts(args.gsm8k_train, args.n, 0):
        tasks.setdefault(p.task, []).append(Prompt(p.task, p.text, p.id))
    settings = Settings(args.target, str(args.checkpoint), drafter.kind, args.gamma,
                        args.temperature, 0, 1.0, args.tokens, 0, True, False)
    sampling = Sampling(args.temperature, 0, 1.0)
    rows = []
    for b2, b1 in pairs:
        drafter.copy_bias = (b2, b1)
        row: dict = {"bigram": b2, "unigram": b1}
        index = 0
        for task, prompts in tasks.items():
            accepted, steps = [], []
            for prompt in prompts:
                rec = measure_prompt(target, drafter, prompt, index, settings, sampling)
                index += 1
                accepted.append(sum(rec.accepted))
                steps.append(len(rec.accepted))
            row[task] = round(pooled_tau(np.array(accepted), np.array(steps)), 4)
        row["macro"] = round(sum(row[t] for t in tasks) / len(tasks), 4)
        rows.append(row)
        print(json_text(row), flush=True)
    best = max(rows, key=lambda r: r["macro"])
    result = {"checkpoint": str(args.checkpoint), "temperature": args.temperature,
              "prompts_per_task": args.n, "tokens": args.tokens, "gamma": args.gamma,
              "rows": rows, "best": best}
    if args.out:
        write_json_atomic(args.out, result)
    print(f"best: bigram {best['bigram']:g}, unigram {best['unigram']:g}, macro tau {best['macro']}")


def set_bias(args: argparse.Namespace) -> None:
    from dspark_sim.decode.drafters.checkpoint import CONFIG, read_config

    if args.bigram < 0 or args.unigram < 0:
        raise SystemExit("--bigram and --unigram must be >= 0")
    if args.slots < 0:
        raise SystemExit("--slots must be >= 0 (0 = every draft slot)")
    read_config(args.src)                                   # a valid checkpoint, or exit naming it
    # Built beside DST and renamed into place, so an interrupted run leaves no half-written DST.
    tmp = args.dst.with_name(args.dst.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    shutil.copytree(args.src, tmp)
    cfg = json.loads((tmp / CONFIG).read_text(encoding="utf-8"))
    cfg["copy_bias"] = [args.bigram, args.unigram]
    cfg["copy_slots"] = args.slots
    write_json_atomic(tmp / CONFIG, cfg)
    read_config(tmp)
    if args.dst.exists():
        shutil.rmtree(args.dst)
    tmp.rename(args.dst)
    print(f"wrote {args.dst} (copy_bias [{args.bigram:g}, {args.unigram:g}], "
          f"copy_slots {args.slots})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grid", help="tau per task on held-out prompts for each copy bias")
    g.add_argument("checkpoint", type=Path, help="trained drafter checkpoint directory")
    g.add_argument("--pairs", default="0:0,4:0,8:0,12:0,8:2",
                   help="comma-separated BIGRAM:UNIGRAM biases (logit units) to try")
    g.add_argument("--n", type=int, default=10, help="held-out prompts per task")
    g.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    g.add_argument("--gamma", type=int, default=7, help="drafts per step, all verified")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature")
    g.add_argument("--target", default="embedded", help="target model (default: the embedded one)")
    g.add_argument("--gsm8k-train", default=None, help="GSM8K train JSONL (math prompts) "
                   "[the held-out questions shipped in the package]")
    g.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    g.add_argument("--out", type=Path, help="write the grid and the best pair here (JSON)")
    s = sub.add_parser("set", help="copy a checkpoint with copy_bias written into its config")
    s.add_argument("src", type=Path, help="checkpoint directory to copy")
    s.add_argument("dst", type=Path, help="new checkpoint directory (replaced if it exists)")
    s.add_argument("--bigram", type=float, required=True, help="bias when the last two tokens match")
    s.add_argument("--unigram", type=float, default=0.0, help="bias when only the last token matches")
    s.add_argument("--slots", type=int, default=0,
                   help="draft slots the bias applies to: 0 = every slot (default); 1 = the first "
                        "only, which keeps a block drafter parallel (it reads committed tokens only)")
    args = ap.parse_args(argv)
    try:
        {"grid": grid, "set": set_bias}[args.cmd](args)
    except InputError as exc:      # a bad checkpoint or prompt file: named with its field
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    sys.exit(main())
