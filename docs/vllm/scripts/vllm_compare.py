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
    vllm_compare.py iterations VLLM_HW.yaml DIR...
        the profile's cost of vLLM's own iterations in `validate --engine vllm` runs (their
        `iterations.csv`: vLLM's model time + the profile's median engine overhead per
        iteration), by kind (decode only, decode with prefill chunks, prefill only), summed
        over each policy's runs. vLLM's log gives no KV context per iteration: each decoding
        request is taken to hold the trace's mean prompt + half its mean output.
    vllm_compare.py speed-scaled VLLM_HW.yaml OUT DIR...
        a diagnostic, in-sample: per trace and policy the profile scaled by its error on
        those runs' own decode-only iterations, the simulator run again on the runs (into OUT),
        and their headline figures as `validation` prints them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import yaml

from dspark_sim.profiles.acceptance import AcceptanceProfile
from dspark_sim.profiles.hardware import HardwareProfile
from dspark_sim.profiles.speed_scale import speed_scaled


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


def _iteration_sums(hw: HardwareProfile, overhead: float, doc: dict, d: str, pol: str) -> dict:
    """Per kind of iteration (decode, mixed, prefill) of a policy's runs: [count, vLLM seconds,
    profile seconds]."""
    import pandas as pd

    from dspark_sim.traces.schema import load_trace

    trace = load_trace(doc["trace"])
    ctx = float(np.mean(trace.prompt_tokens) + np.mean(trace.output_tokens) / 2)
    runs_dir = Path(doc.get("engine_runs") or d)
    spec = doc["speculative_configs"].get(pol)
    sums = {k: [0, 0.0, 0.0] for k in ("decode", "mixed", "prefill")}
    for f in sorted((runs_dir / "engine" / pol).glob("run-*/iterations.csv")):
        it = pd.read_csv(f)
        gen, pre = it.gen_requests.to_numpy(), it.ctx_tokens.to_numpy()
        step = np.asarray(hw.step_time(it.batch_tokens.to_numpy(dtype=float), gen * ctx + pre, pre,
                                       gen + it.ctx_requests.to_numpy()), dtype=float)
        if spec:
            draft = np.asarray(hw.draft_time(spec["method"], np.maximum(gen, 1), np.ones(len(gen))),
                               dtype=float)
            step = step + np.where(gen > 0, draft, 0.0)
        real = it.elapsed_ms.to_numpy() / 1e3 + overhead
        for kind, mask in (("decode", it.ctx_requests.to_numpy() == 0),
                           ("mixed", (it.ctx_requests.to_numpy() > 0) & (gen > 0)),
                           ("prefill", (it.ctx_requests.to_numpy() > 0) & (gen == 0))):
            acc = sums[kind]
            acc[0] += int(mask.sum())
            acc[1] += float(real[mask].sum())
            acc[2] += float(step[mask].sum())
    return sums


def _overhead_of(hw: HardwareProfile) -> float:
    return float(np.median([b["overhead_s"] for b in hw.extra["vllm"]["bursts"]]))


def iterations(vllm_hw: str, *dirs: str) -> None:
    hw = HardwareProfile.load(vllm_hw)
    overhead = _overhead_of(hw)
    print(f"engine overhead per iteration (the profile's median): {overhead * 1e3:.2f} ms")
    print("| trace | policy | decode only: iterations, vLLM s, profile error | with prefill | prefill only |")
    print("|---|---|---|---|---|")
    for d in dirs:
        doc = json.loads((Path(d) / "validation.json").read_text())
        for pol in doc["policies"]:
            sums = _iteration_sums(hw, overhead, doc, d, pol)
            cells = [f"{n}, {m:.2f}, {p / m - 1:+.1%}" if m else "-" for n, m, p in sums.values()]
            print(f"| {Path(doc['trace']).stem} | {pol} | " + " | ".join(cells) + " |")


def speed_scaled_runs(vllm_hw: str, out: str, *dirs: str) -> None:
    """A diagnostic, in-sample: every time of the profile scaled, per trace and policy, by the
    ratio of vLLM's decode-only iterations in those very runs to the profile's cost of them,
    and the simulator run again on the runs (`validate --engine-runs`). It says what is left
    once the machine's speed during the runs is known; it is not a prediction."""
    import subprocess

    hw = HardwareProfile.load(vllm_hw)
    overhead = _overhead_of(hw)
    outs = []
    for d in dirs:
        doc = json.loads((Path(d) / "validation.json").read_text())
        for pol in doc["policies"]:
            _, real, model = _iteration_sums(hw, overhead, doc, d, pol)["decode"]
            factor = real / model
            name = f"{Path(doc['trace']).stem}-{pol}"
            prof = speed_scaled(hw, factor)
            prof.name = f"speed-scaled-{name}"
            Path(out).mkdir(parents=True, exist_ok=True)
            scaled = Path(out) / f"{name}.yaml"
            prof.save(scaled)
            dest = Path(out) / name
            subprocess.run([sys.executable, "-m", "dspark_sim", "validate", doc["trace"], "--engine", "vllm",
                            "--policies", pol, "--repeats", str(doc["repeats"]), "--engine-runs",
                            str(doc.get("engine_runs") or d), "--hw", str(scaled), "--out", str(dest)],
                           check=True, stdout=subprocess.DEVNULL)
            print(f"{name}: profile x {factor:.3f}", file=sys.stderr)
            outs.append(str(dest))
    validation(*outs)


if __name__ == "__main__":
    {"acceptance": acceptance, "curves": curves, "validation": validation,
     "iterations": iterations, "speed-scaled": speed_scaled_runs}[sys.argv[1]](*sys.argv[2:])
