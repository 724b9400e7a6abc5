"""Print vLLM's measurements beside the decode core's / our engine's, as markdown.

    vllm_compare.py acceptance VLLM.acceptance.json CORE.acceptance.json
        per task: tokens per decode step (all steps) and vLLM's mean acceptance length
        (1 + accepted / steps that drafted), for vLLM's n-gram drafter and the decode core's;
        the core's side from its records file (CORE.records.jsonl, drafts proposed per step).
    vllm_compare.py curves VLLM_HW.yaml OURS_HW.yaml
        both profiles' step time at every decode point vLLM measured (its requests, tokens and
        context), and the ratio vLLM / ours.
    vllm_compare.py validation DIR...
        the headline figures of `validate --engine vllm` outputs: vLLM's mean (half-range
        spread) and the simulator's error, per trace and policy.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

from dspark_sim.profiles.acceptance import AcceptanceProfile
from dspark_sim.profiles.hardware import HardwareProfile


def _steps(task) -> tuple[int, int, int]:
    """(decode steps, steps that drafted, accepted drafts) of an empirical task."""
    steps = drafting = accepted = 0
    for r in task.requests:
        acc = np.asarray(r.accepted)
        drafted = np.asarray(r.drafted) if getattr(r, "drafted", None) is not None else None
        steps += len(acc)
        accepted += int(acc.sum())
        drafting += int((drafted > 0).sum()) if drafted is not None else len(acc)
    return steps, drafting, accepted


def _core_drafting(records: Path) -> dict[str, tuple[int, int, int]]:
    out: dict[str, list[int]] = {}
    for line in records.read_text().splitlines():
        rec = json.loads(line)
        if "task" not in rec:            # the settings header
            continue
        s = out.setdefault(rec["task"], [0, 0, 0])
        s[0] += len(rec["accepted"])
        s[1] += sum(1 for v in rec["verified"] if v > 0)
        s[2] += sum(rec["accepted"])
    return {k: tuple(v) for k, v in out.items()}


def acceptance(vllm_path: str, core_path: str) -> None:
    v, c = AcceptanceProfile.load(vllm_path), AcceptanceProfile.load(core_path)
    core_records = Path(core_path.replace(".acceptance.json", ".records.jsonl"))
    core = _core_drafting(core_records) if core_records.exists() else {}
    print(f"vLLM: `{vllm_path}` (gamma {v.gamma}); decode core: `{core_path}` (gamma {c.gamma})\n")
    print("| task | vLLM requests | vLLM tokens/step | vLLM mean acc. length | vLLM drafting steps | "
          "core requests | core tokens/step | core mean acc. length | core drafting steps | "
          "tokens/step vLLM / core |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for task in sorted(set(v.tasks) | set(c.tasks)):
        vs = _steps(v.tasks[task]) if task in v.tasks else None
        cs = core.get(task) or (_steps(c.tasks[task]) if task in c.tasks else None)
        cells = []
        for s, prof in ((vs, v), (cs, c)):
            if s is None:
                cells += ["-"] * 4
                continue
            steps, drafting, acc = s
            cells += [str(len(prof.tasks[task].requests)), f"{(steps + acc) / steps:.3f}",
                      f"{1 + acc / max(drafting, 1):.3f}", f"{drafting / steps:.0%}"]
        ratio = "-"
        if vs and cs:
            ratio = f"{((vs[0] + vs[2]) / vs[0]) / ((cs[0] + cs[2]) / cs[0]):.3f}"
        print(f"| {task} | " + " | ".join(cells) + f" | {ratio} |")


def curves(vllm_hw: str, ours_hw: str) -> None:
    v, o = HardwareProfile.load(vllm_hw), HardwareProfile.load(ours_hw)
    doc = yaml.safe_load(Path(vllm_hw).read_text())
    print(f"vLLM: `{vllm_hw}` ({v.device}); ours: `{ours_hw}` ({o.device})\n")
    print("| op | requests | tokens | context/request | vLLM measured (ms) | vLLM profile (ms) | "
          "ours profile (ms) | vLLM / ours |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for m in doc["measurements"]:
        ctx = m["context_tokens"]
        ours = float(o.step_time(m["batch_tokens"], ctx))
        vp = float(v.step_time(m["batch_tokens"], ctx))
        ratios.append(m["median_s"] / ours)
        print(f"| {m['op']} | {m['requests']} | {m['batch_tokens']} | {m['context']} | "
              f"{1e3 * m['median_s']:.1f} | {1e3 * vp:.1f} | {1e3 * ours:.1f} | {m['median_s'] / ours:.2f} |")
    print(f"\nmedian ratio vLLM / ours {np.median(ratios):.2f} (range {min(ratios):.2f} - {max(ratios):.2f}); "
          f"ours is evaluated from its fitted profile at vLLM's points.")


VALIDATION_KEYS = [("throughput_tok_s", "throughput"), ("tps_user.p50", "tok/s/user p50"),
                   ("tps_user.p10", "tok/s/user p10"), ("ttft_s.p50", "TTFT p50"),
                   ("ttft_s.p99", "TTFT p99")]


def validation(*dirs: str) -> None:
    print("| trace | policy | " + " | ".join(f"{label}: vLLM (spread) | sim error"
                                            for _, label in VALIDATION_KEYS) + " |")
    print("|---|---|" + "---|---|" * len(VALIDATION_KEYS))
    for d in dirs:
        doc = json.loads((Path(d) / "validation.json").read_text())
        rows = {(r["policy"], r["metric"]): r for r in doc["table"]}
        for pol in doc["policies"]:
            cells = []
            for key, _ in VALIDATION_KEYS:
                r = rows.get((pol, key))
                cells += ["-", "-"] if r is None else [
                    f"{r['engine_mean']:.3g} (±{100 * r['engine_spread']:.1f}%)",
                    f"{100 * r['sim_error']:+.1f}%"]
            print(f"| {Path(doc['trace']).stem} | {pol} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    {"acceptance": acceptance, "curves": curves, "validation": validation}[sys.argv[1]](*sys.argv[2:])
