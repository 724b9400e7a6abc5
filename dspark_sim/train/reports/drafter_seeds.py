"""The fair drafter comparison of scripts/ship_drafters.sh: tau per task per drafter at T = 0 and
T = 1 over seeds (mean and spread), macro gains of DSpark, and its sequential head's own
contribution (the same checkpoints with the head's bias zeroed).

    python -m dspark_sim.train.reports.drafter_seeds zero-head CHECKPOINT OUT     # W2 = 0: B(x) = 0, all else equal
    python -m dspark_sim.train.reports.drafter_seeds rename RUN/measure/STEM ACC/NAME   # a measured profile, renamed
    python -m dspark_sim.train.reports.drafter_seeds table --measure runs/train/measure --runs runs/train \\
        --seeds "0 1 2" --out docs/drafters/seeds.md
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

from dspark_sim.fileio import write_json_atomic, write_text_atomic

KINDS = ("dspark", "dflash", "eagle3", "mtp1")
TASKS = ("math", "code", "chat")
NAMES = {"mtp1": "MTP-1 (gamma 1)", "eagle3": "Eagle3", "dflash": "DFlash", "dspark": "DSpark",
         "dspark-nohead": "DSpark, head zeroed", "dspark_rnn": "DSpark, RNN head",
         "dspark_rnn-nohead": "DSpark, RNN head zeroed"}
VARIANTS = ("dspark-nohead", "dspark_rnn", "dspark_rnn-nohead")   # reported, not ranked


def zero_head(src: Path, dst: Path) -> None:
    """Copy a DSpark checkpoint with its sequential head's output map W2 set to zero."""
    import torch

    from dspark_sim.decode.drafters.checkpoint import load_module, save_drafter

    module = load_module(src)
    if getattr(module, "seq_head", None) is None:
        raise SystemExit(f"{src} has no sequential head")
    with torch.no_grad():
        module.seq_head.w2.weight.zero_()
    save_drafter(module, dst)
    print(f"wrote {dst} (sequential head's bias zeroed)")


def rename(src_stem: Path, dst_stem: Path) -> None:
    """Copy STEM.acceptance.json / .report.json / .report.md as NAME.*, the profile renamed."""
    prof = json.loads(src_stem.with_name(src_stem.name + ".acceptance.json").read_text())
    prof["name"] = dst_stem.name
    write_json_atomic(dst_stem.with_name(dst_stem.name + ".acceptance.json"), prof)
    for ext in (".report.json", ".report.md"):
        src = src_stem.with_name(src_stem.name + ext)
        if src.is_file():
            shutil.copyfile(src, dst_stem.with_name(dst_stem.name + ext))


def report_path(measure: Path, kind: str, seed: str, tag: str, t: int) -> Path:
    """The measure report of one run: KIND-sSEEDTAG-tT.report.json, a head-zeroed twin
    (KIND-nohead) as KIND-sSEEDTAG-nohead-tT.report.json."""
    base, suffix = (kind[:-len("-nohead")], "-nohead") if kind.endswith("-nohead") else (kind, "")
    return measure / f"{base}-s{seed}{tag}{suffix}-t{t}.report.json"


def seed_has_reports(measure: Path, seed: str, tag: str = "") -> bool:
    """Whether any ranked drafter of this seed was measured (a head-zeroed twin alone is not)."""
    return any(report_path(measure, kind, seed, tag, t).is_file() for kind in KINDS for t in (0, 1))


def load_taus(measure: Path, seeds: list[str], tag: str = "", kind_tags: dict[str, str] | None = None
              ) -> dict[tuple[str, int], dict[str, list[float]]]:
    """{(kind, T): {task: [tau per seed]}} from the runs' measure reports (`report_path`);
    `kind_tags` reads some kinds' runs under another tag (e.g. DFlash copying on slot 1 alone)."""
    out: dict[tuple[str, int], dict[str, list[float]]] = {}
    for kind in KINDS + VARIANTS:
        kind_tag = (kind_tags or {}).get(kind, tag)
        for t in (0, 1):
            per_task: dict[str, list[float]] = {}
            for seed in seeds:
                p = report_path(measure, kind, seed, kind_tag, t)
                if not p.is_file():
                    continue
                rep = json.loads(p.read_text())
                for task in TASKS:
                    if task in rep["tasks"]:
                        per_task.setdefault(task, []).append(rep["tasks"][task]["mean_tau"])
            if per_task:
                out[kind, t] = per_task
    return out


def _cell(vals: list[float]) -> str:
    if len(vals) == 1:
        return f"{vals[0]:.3f} (1 seed)"
    return f"{np.mean(vals):.3f} ± {(max(vals) - min(vals)) / 2:.3f} ({len(vals)} seeds)"


def tau_table(taus: dict, t: int) -> list[str]:
    lines = [f"| drafter (T = {t}) | " + " | ".join(TASKS) + " | macro mean |", "|---|" + "---|" * (len(TASKS) + 1)]
    for kind in NAMES:
        per_task = taus.get((kind, t))
        if not per_task:
            continue
        cells = [_cell(per_task[task]) if task in per_task else "n/a" for task in TASKS]
        macro = np.mean([np.mean(per_task[task]) for task in TASKS if task in per_task])
        lines.append(f"| {NAMES[kind]} | " + " | ".join(cells) + f" | {macro:.3f} |")
    return lines


def macro_gains(taus: dict, t: int, a: str, b: str) -> str | None:
    """Macro gain mean_task(tau_a / tau_b - 1) of the seed means, and its range over seed pairs."""
    ta, tb = taus.get((a, t)), taus.get((b, t))
    if not ta or not tb or any(task not in ta or task not in tb for task in TASKS):
        return None
    mean = np.mean([np.mean(ta[x]) / np.mean(tb[x]) - 1 for x in TASKS])
    pairs = [np.mean([ta[x][i] / tb[x][j] - 1 for x in TASKS])
             for i in range(len(ta[TASKS[0]])) for j in range(len(tb[TASKS[0]]))]
    return f"{mean:+.1%} (seed pairs {min(pairs):+.1%} .. {max(pairs):+.1%})"


def first_on_every_task(taus: dict, t: int) -> list[str]:
    """Per task: the best drafter by seed mean, and whether DSpark is first or within the
    seed spread of first."""
    lines = []
    for task in TASKS:
        means = {k: np.mean(v[task]) for (k, tt), v in taus.items()
                 if tt == t and k in KINDS and task in v}
        if "dspark" not in means or len(means) < 2:    # nothing to rank DSpark against
            continue
        best = max(means, key=means.get)
        vals = taus["dspark", t][task]
        spread = (max(vals) - min(vals)) / 2
        ok = best == "dspark" or means["dspark"] + spread >= means[best] - \
            (max(taus[best, t][task]) - min(taus[best, t][task])) / 2
        lines.append(f"- {task}: first {NAMES[best]} ({means[best]:.3f}); DSpark {means['dspark']:.3f} "
                     f"-> {'first' if best == 'dspark' else ('within seed spread' if ok else 'NOT within seed spread')}")
    return lines


def _run_name(path: str) -> str:
    """The run a warm start came from: its directory, not the `drafter` export inside it (a
    backbone start, `train --backbone-from`, is named as the backbone of that run)."""
    backbone = path.startswith("backbone:")
    p = Path(path.removeprefix("backbone:"))
    name = p.parent.name if p.name == "drafter" else p.name
    return f"the backbone of {name}" if backbone else name


def training_rows(runs: Path, seeds: list[str], tag: str = "") -> list[str]:
    lines = ["| run | steps (this run + the run it started from) | train seconds (this run) | "
             "tokens in the data | held-out accept@1 | head start |",
             "|---|---|---|---|---|---|"]
    for kind in KINDS + ("dspark_rnn",):
        for seed in seeds:
            p = runs / f"{kind}-s{seed}{tag}" / "summary.json"
            if not p.is_file():
                continue
            s = json.loads(p.read_text())
            acc = (s["validation"].get("accept@k") or [float("nan")])[0]
            init = s.get("seq_init") or {}
            head = f"bigram SVD, rank {init['rank']}, rel. error {init['relative_error']}" if init else "-"
            steps = f"{s['steps']}" if not s.get("prior_steps") else \
                f"{s['total_steps']} ({s['steps']} + {s['prior_steps']} from {_run_name(s['init_from'])})"
            lines.append(f"| {kind}-s{seed}{tag} | {steps} | {s['train_seconds']:.0f} | {s['data']['tokens']} | "
                         f"{acc:.3f} | {head} |")
    return lines


def table(args: argparse.Namespace) -> None:
    seeds = args.seeds.split()
    missing = [s for s in seeds if not seed_has_reports(args.measure, s, args.tag)]
    if missing:   # a partial table would silently replace a complete one
        print(f"drafter_seeds.py table: error: {args.measure} has no KIND-sSEED{args.tag}-tT.report.json "
              f"for seed(s) {' '.join(missing)}; run the `measure` stage for them, or pass --seeds "
              "without them", file=sys.stderr)
        raise SystemExit(2)
    kind_tags = parse_kind_tags(args.kind_tag)
    taus = load_taus(args.measure, seeds, args.tag, kind_tags)
    out = ["# Fair drafter comparison: equal optimizer steps, same data, several seeds", "",
           "Generated by `python -m dspark_sim.train.reports.drafter_seeds table` from `scripts/ship_drafters.sh` runs.",
           "Cells: mean tau over seeds ± half the range over seeds.", ""]
    if kind_tags:
        out += ["Runs read under another tag: " + ", ".join(
            f"{NAMES.get(k, k)} `{v or '(none)'}`" for k, v in kind_tags.items()) + f" (the others `{args.tag}`).", ""]
    for t in (0, 1):
        out += [f"## T = {t}", ""] + tau_table(taus, t) + [""]
        for b in ("dflash", "eagle3", "mtp1"):
            g = macro_gains(taus, t, "dspark", b)
            if g:
                out.append(f"- macro gain of DSpark over {NAMES[b]}: {g}")
        for kind, what in (("dspark", "Markov"), ("dspark_rnn", "RNN")):
            head = macro_gains(taus, t, kind, kind + "-nohead")
            if head:
                out.append(f"- the {what} head's own contribution (same checkpoints, head zeroed): {head}")
        out += first_on_every_task(taus, t) + [""]
    out += ["## Training runs", ""] + training_rows(args.runs, seeds, args.tag) + [""]
    write_text_atomic(args.out, "\n".join(out))
    print("\n".join(out))


def parse_kind_tags(items: list[str]) -> dict[str, str]:
    """`--kind-tag KIND=TAG` items as {kind: tag}; a bad item exits 2 naming it."""
    out = {}
    for item in items:
        kind, sep, tag = item.partition("=")
        if not sep or kind not in KINDS + VARIANTS:
            print(f"drafter_seeds.py table: error: --kind-tag expects KIND=TAG with KIND one of "
                  f"{', '.join(KINDS + VARIANTS)}, got {item!r}", file=sys.stderr)
            raise SystemExit(2)
        out[kind] = tag
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    z = sub.add_parser("zero-head")
    z.add_argument("src", type=Path)
    z.add_argument("dst", type=Path)
    r = sub.add_parser("rename")
    r.add_argument("src", type=Path)
    r.add_argument("dst", type=Path)
    t = sub.add_parser("table")
    t.add_argument("--measure", type=Path, default=Path("runs/train/measure"))
    t.add_argument("--runs", type=Path, default=Path("runs/train"))
    t.add_argument("--seeds", default="0 1 2")
    t.add_argument("--tag", default="", help="suffix of the run names (scripts/ship_drafters.sh TAG)")
    t.add_argument("--kind-tag", action="append", default=[], metavar="KIND=TAG",
                   help="read KIND's runs under TAG instead of --tag (repeatable), e.g. "
                        "dflash=-fix1200copy1 to rank DSpark against another DFlash variant")
    t.add_argument("--out", type=Path, default=Path("docs/drafters/seeds.md"))
    args = ap.parse_args()
    if args.cmd == "zero-head":
        zero_head(args.src, args.dst)
    elif args.cmd == "rename":
        rename(args.src, args.dst)
    else:
        table(args)


if __name__ == "__main__":
    main()
