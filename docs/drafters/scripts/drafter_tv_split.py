"""Teacher-forced TV (and agreement) of exported drafters on groups of a feature cache's
records: those a reference cache also holds (the data the drafter was trained on) against the
others, overall and per task. It sizes a drafter's fit to its training answers.

    python docs/drafters/scripts/drafter_tv_split.py --cache runs/train/features-full \\
        --seen runs/train/features --rows 10 dspark_sim/data/drafters/dspark dspark_sim/data/drafters/eagle3

Rows are packed like training rows (1,024 tokens; Eagle3 512), the validation loss of
`Trainer.validate` (fixed anchors) on up to --rows rows per group. Prints one JSON line per drafter.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch

from dspark_sim.decode.drafters.checkpoint import load_module
from dspark_sim.decode.loading import load_target
from dspark_sim.train.featcache import FeatureCache
from dspark_sim.train.objectives import LossWeights
from dspark_sim.train.targethead import TargetHead
from dspark_sim.train.trainer import Trainer, TrainConfig


def groups_of(cache: FeatureCache, seen_ids: set[str]) -> dict[str, list[int]]:
    """Entry indices of `cache` by 'seen' / 'new' and by 'seen/TASK' / 'new/TASK'."""
    out: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(cache.entries):
        src = "seen" if e.id in seen_ids else "new"
        out[src].append(i)
        out[f"{src}/{e.task}"].append(i)
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("drafters", nargs="+", help="Exported drafter directories.")
    ap.add_argument("--cache", required=True, help="Feature cache whose records are scored.")
    ap.add_argument("--seen", required=True, help="Feature cache of the drafters' training data.")
    ap.add_argument("--target", default="embedded", help="The target (default: the embedded one).")
    ap.add_argument("--rows", type=int, default=10, help="Packed rows scored per group.")
    ap.add_argument("--threads", type=int, default=2, help="Torch threads.")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(args.target, "cpu")
    cache = FeatureCache(args.cache)
    groups = groups_of(cache, {e.id for e in FeatureCache(args.seen).entries})
    print(json.dumps({"records": {k: len(v) for k, v in sorted(groups.items())}}))
    for path in args.drafters:
        module = load_module(path).float()
        module.bind_target(target.embed_tokens.weight, target.lm_head.weight)
        cfg = TrainConfig(row_len=512 if module.cfg.kind == "eagle3" else 1024, steps=1,
                          loss=LossWeights(anchors_per_row=256))
        trainer = Trainer(module, cache, TargetHead.from_model(target.model), cfg, "/nonexistent", "cpu")
        result = {}
        for name, entries in sorted(groups.items()):
            m = trainer.validate(max_rows=args.rows, entries=entries)
            result[name] = {k: round(m[k], 4) for k in ("tv", "soft_ce", "ce") if k in m}
            result[name]["agree@1"] = round(m["agree@k"][0], 4) if "agree@k" in m else None
        print(json.dumps({"drafter": path, "kind": module.cfg.kind, "groups": result}), flush=True)


if __name__ == "__main__":
    main()
