"""Golden results of the simulator: hashes of every per-request result array, the iteration
count and the preemption count over a fixed matrix of cases, for every engine that runs each
case (the others must still refuse it).

The matrix: the shipped traces cut to their first 10 minutes (every policy; reserve and paged
KV, with a KV-tight profile so that paged KV preempts; open loop, closed loop and disaggregated
prefill; 1 and 3 replicas; both routers) and seeded random scenarios (random traces, hardware
and acceptance profiles: every policy x {open, closed} x {reserve, blocks} and disaggregated
prefill, open and closed; 1-3 replicas; both routers). Moves of code must keep every hash; a
change of behaviour regenerates the file in a commit of its own that says why:

    .venv/bin/python tests/sim/sim_golden.py --write            # regenerate golden/sim_results.json
    .venv/bin/python tests/sim/sim_golden.py --check [--engines fast,loop] [--all]

`--check` exits 1 and names every case, engine and field that differs. Engines marked slow for
a case (the reference engine on the 10-minute chat trace, ~7 s a run) are checked only with
`--all` (and by the slow test); everything else runs in the default suite (test_golden.py).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GOLDEN = HERE / "golden" / "sim_results.json"
SCHEMA = "dspark-sim/test-golden/v1"
ENGINES = ("fast", "loop", "block", "reference")
# per-request results of a run (the request table's fields the simulation writes)
FIELDS = ("replica", "arrival_ns", "first_token_ns", "finish_ns", "prefilled", "generated",
          "steps", "drafted", "verified", "accepted", "preemptions")
POLICIES = ("ar", "mtp1", "static-2", "dspark", "dspark-lagged", "goodput", "oracle",
            "vllm-schedule", "vllm-adaptive")
RANDOM_SHAPES = (("open", "reserve"), ("open", "blocks"), ("closed", "reserve"),
                 ("closed", "blocks"), ("disaggregated", "reserve"),
                 ("disaggregated-closed", "reserve"))
CUT_S = 600.0


@dataclass
class Case:
    """One simulation: `build()` returns simulate()'s arguments."""

    name: str
    build: Callable[[], dict[str, Any]]
    slow_engines: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)


# --- the shipped traces ------------------------------------------------------------------------

def _cut(name: str):
    from dspark_sim.traces import Trace, load_trace
    t = load_trace(REPO / "traces" / f"{name}.jsonl")
    keep = t.arrival_s < CUT_S
    return Trace(ids=t.ids[keep], arrival_s=t.arrival_s[keep], prompt_tokens=t.prompt_tokens[keep],
                 output_tokens=t.output_tokens[keep], task=t.task[keep], name=f"{name}[:10min]")


def _roofline(kv: int | None = None):
    """The default profile; with `kv`, a KV-tight copy (paged KV preempts there)."""
    from dspark_sim.profiles import HardwareProfile
    from dspark_sim.fileio import read_yaml
    doc, _ = read_yaml(REPO / "hw_profiles" / "h200-qwen3-8b-roofline.yaml")
    if kv is not None:
        doc = dict(doc, kv_capacity_tokens=kv, name=f"roofline-kv{kv}")
    return HardwareProfile.from_dict(doc)


def _shipped_acceptance(policy: str):
    from dspark_sim.profiles.registry import load_acceptance_profile
    from dspark_sim.sim.replay import default_acceptance
    name = default_acceptance(policy)
    return load_acceptance_profile(name) if name else None


def _schedule(gamma: int):
    from dspark_sim.sim.speculation.spec_config import parse_schedule
    return parse_schedule(f"[[1, 2, {gamma}], [3, 8, 2], [9, 100000, 1]]", gamma)


def _shipped(trace: str, policy: str, *, kv: int | None = None, kv_semantics: str = "reserve",
             replicas: int = 1, router: str = "rr", closed: tuple[int, int] | None = None,
             prefill: str = "local", seed: int = 0) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        from dspark_sim.sim.cluster.load import ClosedLoop
        acc = _shipped_acceptance(policy)
        return dict(trace=_cut(trace), policy=policy, hw=_roofline(kv), acceptance=acc,
                    replicas=replicas, router=router, seed=seed, prefill=prefill,
                    kv_semantics=kv_semantics,
                    closed_loop=ClosedLoop(*closed, think_s=0.5) if closed else None,
                    schedule=_schedule(acc.gamma) if policy == "vllm-schedule" else None)
    return build


def shipped_cases() -> list[Case]:
    cases = []
    for policy in POLICIES:                    # every policy, the code trace (cheap on every engine)
        cases.append(Case(f"code10/{policy}", _shipped("code-heavy-hour", policy)))
    for policy in ("ar", "static-2", "dspark", "vllm-adaptive"):      # paged KV under pressure
        cases.append(Case(f"code10/{policy}/blocks-kv20k",
                          _shipped("code-heavy-hour", policy, kv=20_000, kv_semantics="blocks")))
        cases.append(Case(f"code10/{policy}/reserve-kv20k",
                          _shipped("code-heavy-hour", policy, kv=20_000)))
    cases += [
        Case("code10/dspark/3lo", _shipped("code-heavy-hour", "dspark", replicas=3, router="lo")),
        Case("code10/goodput/3rr", _shipped("code-heavy-hour", "goodput", replicas=3)),
        Case("code10/vllm-schedule/3lo/blocks-kv20k",
             _shipped("code-heavy-hour", "vllm-schedule", kv=20_000, kv_semantics="blocks",
                      replicas=3, router="lo")),
        Case("code10/static-2/disaggregated", _shipped("code-heavy-hour", "static-2",
                                                       prefill="disaggregated")),
    ]
    slow = ("reference",)      # ~7 s a run on the 10-minute chat trace; the fast engines ~0.1-0.5 s
    for policy in ("mtp1", "dspark", "dspark-lagged", "oracle"):
        cases.append(Case(f"chat10/{policy}", _shipped("chat-heavy-hour", policy), slow))
    cases += [
        Case("chat10/dspark/3lo", _shipped("chat-heavy-hour", "dspark", replicas=3, router="lo"), slow),
        Case("chat10/goodput/3rr", _shipped("chat-heavy-hour", "goodput", replicas=3), slow),
        Case("chat10/dspark/closed-48x3", _shipped("chat-heavy-hour", "dspark", closed=(48, 3),
                                                   replicas=3), slow),
        Case("chat10/dspark-lagged/closed-disaggregated",
             _shipped("chat-heavy-hour", "dspark-lagged", closed=(48, 3), prefill="disaggregated",
                      replicas=3)),
        Case("chat10/vllm-adaptive/closed-blocks-kv20k",
             _shipped("chat-heavy-hour", "vllm-adaptive", closed=(32, 2), kv=20_000,
                      kv_semantics="blocks")),
    ]
    return cases


# --- seeded random scenarios ------------------------------------------------------------------

def _random_trace(rng: np.random.Generator):
    from dspark_sim.traces import Trace
    n = int(rng.integers(1, 31))
    gaps = np.where(rng.random(n) < 0.3, 0.0, rng.uniform(0.0, 0.3, n))
    prompt = rng.integers(1, 401, n)
    output = np.where(rng.random(n) < 0.3, rng.integers(1, 4, n), rng.integers(1, 121, n))
    task = rng.choice(["chat", "code", "math", "other"], n)
    return Trace(ids=np.array([f"r{i}" for i in range(n)], dtype=object), arrival_s=np.cumsum(gaps),
                 prompt_tokens=prompt.astype(np.int64), output_tokens=output.astype(np.int64),
                 task=task.astype(object), name="random")


def _random_hw(rng: np.random.Generator, need: int, gamma: int, paged: bool):
    from dspark_sim.profiles import HardwareProfile
    block = int(rng.choice([4, 16]))
    least = -(-(need - 1 + gamma) // block) * block if paged else need
    doc: dict[str, Any] = {"schema": "dspark-sim/hw/v1", "name": "random", "source": "fitted",
                           "kv_block_size": block}
    if rng.random() < 0.7:
        doc["kv_capacity_tokens"] = int(rng.integers(least, 3 * least + 1))
    if rng.random() < 0.6:
        doc["max_batch_tokens"] = int(rng.integers(8, 601))
    if rng.random() < 0.5:
        doc["max_batch_requests"] = int(rng.integers(1, 13))
    if rng.random() < 0.3:
        doc["step_time"] = {"constant_s": float(rng.choice([0.01, 0.0123]))}
        return HardwareProfile.from_dict(doc)
    jagged = rng.random() < 0.5
    doc["step_time"] = {"batch_tokens": [1, 4, 16, 64, 256],
                        "seconds": [0.01, 0.009, 0.012, 0.011, 0.03] if jagged
                        else [0.01, 0.01, 0.012, 0.02, 0.05],
                        "per_context_token_s": float(rng.choice([0.0, 1e-6]))}
    draft = {"dspark": {"requests": [1, 8], "seconds": [0.001, 0.003]},
             "mtp1": {"requests": [1, 8], "seconds": [0.0005, 0.001]},
             "eagle3": {"requests": [1, 8], "seconds": [0.0004, 0.0006], "per_draft": True}}
    if rng.random() < 0.4:       # drafts made priced per draft; a prefill curve of its own
        draft["dspark"].update(drafts=int(rng.integers(1, 8)), per_draft_seconds=[0.0001, 0.00021])
        doc["prefill_time"] = {"prefill_tokens": [8, 64, 300],
                               "seconds": [0.004, 0.008, 0.03] if rng.random() < 0.5
                               else [0.02, 0.01, 0.04]}
    if rng.random() < 0.3:
        doc["capture_sizes"] = [1, 2, 4, 8, 16, 32]
    doc["draft_time"] = draft
    return HardwareProfile.from_dict(doc)


def _random_acceptance(rng: np.random.Generator):
    from dspark_sim.profiles import AcceptanceProfile
    gamma = int(rng.integers(2, 6))
    kind = str(rng.choice(["dspark", "eagle3", "mtp1"]))
    tasks = ["chat", "code", "math"][:int(rng.integers(1, 4))]
    levels = [0.0, 0.4, 0.7, 0.9, 1.0]
    if rng.random() < 0.5:
        spec = {t: {"kind": "parametric", "position_accept": rng.choice(levels, gamma).tolist()}
                for t in tasks}
    else:
        with_conf, capped = rng.random() < 0.5, rng.random() < 0.2
        spec = {}
        for t in tasks:
            items = []
            for _ in range(int(rng.integers(1, 4))):
                steps = int(rng.integers(1, 7))
                item: dict[str, Any] = {"accepted": rng.integers(0, gamma + 1, steps).tolist()}
                if with_conf:
                    item["confidence"] = rng.choice([0.1, 0.5, 0.8, 0.95, 1.0], (steps, gamma)).tolist()
                if capped:         # steps that drafted fewer than gamma (the reference engine only)
                    item["drafted"] = [max(a, int(d)) for a, d in
                                       zip(item["accepted"], rng.integers(0, gamma + 1, steps))]
                items.append(item)
            spec[t] = {"kind": "empirical", "requests": items}
    return AcceptanceProfile.from_dict({
        "schema": "dspark-sim/acceptance/v1", "name": "random", "gamma": gamma, "drafter_kind": kind,
        "default_task": tasks[0], "tasks": spec})


def _random(index: int, policy: str, load: str, kv_semantics: str) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        from dspark_sim.sim.cluster.load import ClosedLoop
        rng = np.random.default_rng([0x601D, index])
        trace = _random_trace(rng)
        acc = _random_acceptance(rng)
        need = int((trace.prompt_tokens + trace.output_tokens).max())
        hw = _random_hw(rng, need, acc.gamma, kv_semantics == "blocks")
        closed = None
        if load.endswith("closed"):
            closed = ClosedLoop(int(rng.integers(1, 7)), int(rng.integers(1, 4)),
                                think_s=float(rng.choice([0.0, 0.05])),
                                offset=int(rng.integers(0, len(trace))))
        return dict(trace=trace, policy=policy, hw=hw, acceptance=None if policy == "ar" else acc,
                    replicas=int(rng.integers(1, 4)), router=str(rng.choice(["rr", "lo"])),
                    seed=int(rng.integers(0, 4)), closed_loop=closed,
                    prefill="disaggregated" if load.startswith("disaggregated") else "local",
                    kv_semantics=kv_semantics,
                    schedule=_schedule(acc.gamma) if policy == "vllm-schedule" else None)
    return build


def random_cases() -> list[Case]:
    cases, index = [], 0
    for policy in POLICIES:
        for load, kv in RANDOM_SHAPES:
            cases.append(Case(f"random{index:02d}/{policy}/{load}/{kv}", _random(index, policy, load, kv)))
            index += 1
    return cases


def cases() -> list[Case]:
    return shipped_cases() + random_cases()


# --- running and hashing ------------------------------------------------------------------------

def digest(values: np.ndarray) -> str:
    """16 hex digits of the SHA-256 of an array's int64 little-endian bytes."""
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<i8").tobytes()).hexdigest()[:16]


def run(case_args: dict[str, Any], engine: str) -> dict[str, Any] | None:
    """The case's results on `engine`, or None when the engine refuses it (bad input)."""
    from dspark_sim.errors import InputError
    from dspark_sim.sim.cluster.run import simulate
    try:
        out = simulate(engine=engine, **case_args)
    except InputError:
        return None
    return {"iterations": int(out.iterations), "preemptions": int(out.preemptions),
            "arrays": {name: digest(getattr(out.table, name)) for name in FIELDS}}


def generate(progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Every case on every engine; the engines that run a case must agree exactly."""
    out: dict[str, Any] = {}
    for case in cases():
        args = case.build()
        results = {engine: run(args, engine) for engine in ENGINES}
        ran = [e for e in ENGINES if results[e] is not None]
        if not ran:
            raise RuntimeError(f"{case.name}: no engine runs it")
        first = results[ran[0]]
        for engine in ran[1:]:
            if results[engine] != first:
                raise RuntimeError(f"{case.name}: {engine} differs from {ran[0]}: "
                                   f"{results[engine]} vs {first}")
        out[case.name] = dict(engines=ran, slow_engines=list(case.slow_engines), **first)
        progress(f"{case.name}: {', '.join(ran)}; {first['iterations']} iterations, "
                 f"{first['preemptions']} preemptions")
    return out


def load_golden() -> dict[str, Any]:
    doc = json.loads(GOLDEN.read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{GOLDEN}: schema {doc.get('schema')!r}, expected {SCHEMA}")
    return doc["cases"]


def check(engines: tuple[str, ...] = ENGINES, include_slow: bool = False,
          only: Callable[[str], bool] = lambda _: True) -> list[str]:
    """Differences from the golden file (empty: none): per case and engine, every field that
    differs; an engine that now refuses a case it ran, or runs one it refused."""
    golden = load_golden()
    problems = []
    names = [c.name for c in cases()]
    if sorted(names) != sorted(golden):
        problems.append(f"the matrix differs from the golden file: new {sorted(set(names) - set(golden))}, "
                        f"gone {sorted(set(golden) - set(names))}")
    for case in cases():
        if case.name not in golden or not only(case.name):
            continue
        want = golden[case.name]
        args = None
        for engine in engines:
            if engine in want["slow_engines"] and not include_slow:
                continue
            args = args or case.build()
            got = run(args, engine)
            if (got is None) != (engine not in want["engines"]):
                problems.append(f"{case.name} [{engine}]: " + ("now refused" if got is None else
                                                                "ran, the golden file says refused"))
                continue
            if got is None:
                continue
            for key in ("iterations", "preemptions"):
                if got[key] != want[key]:
                    problems.append(f"{case.name} [{engine}]: {key} {got[key]} != {want[key]}")
            for name in FIELDS:
                if got["arrays"][name] != want["arrays"][name]:
                    problems.append(f"{case.name} [{engine}]: {name} differs")
    return problems


def write() -> None:
    from dspark_sim.sim.engines import native
    t0 = time.perf_counter()
    results = generate(lambda line: print(line, file=sys.stderr, flush=True))
    doc = {"schema": SCHEMA,
           "note": "tests/sim/sim_golden.py --write regenerates this; a change is a change of the "
                   "simulator's behaviour and goes in a commit of its own that says why",
           "fields": list(FIELDS), "cases": results}
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    tmp = GOLDEN.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(GOLDEN)
    print(f"wrote {GOLDEN} ({len(results)} cases, {time.perf_counter() - t0:.0f} s; compiled "
          f"builds {native.status()})", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the golden file")
    mode.add_argument("--check", action="store_true", help="compare with the golden file")
    ap.add_argument("--engines", default=",".join(ENGINES), help="engines to check (comma-separated)")
    ap.add_argument("--all", action="store_true", help="also the engines marked slow for a case")
    args = ap.parse_args()
    if args.write:
        write()
        return 0
    engines = tuple(e for e in args.engines.split(",") if e)
    unknown = set(engines) - set(ENGINES)
    if unknown:
        print(f"--engines: unknown {sorted(unknown)}; choose from {', '.join(ENGINES)}", file=sys.stderr)
        return 2
    from dspark_sim.sim.engines import native
    print(f"compiled builds in use: {native.status()}", file=sys.stderr)
    problems = check(engines, include_slow=args.all)
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
