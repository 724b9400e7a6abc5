"""The simulator's rooms and their contract (docs/simulator.md, "Layout"):

- imports run one way, replay -> cluster -> engines -> {scheduler, speculation, cost, acceptance}
  -> kv -> core, counting every import (module level, under TYPE_CHECKING, inside functions);
  among the middle rooms only speculation -> cost; output/ (requests.csv, summary.json) reads
  only core/ and only replay reads it; no exceptions, and no import circle in sim/;
- each small rule has one definition: a grep of sim/ and serve/'s replica for its twins finds
  the rule only where it lives.
"""
import re
from pathlib import Path

import import_graph

ROOT = import_graph.ROOT
SIM = "dspark_sim.sim"
# rank of each room: a room imports only rooms of lower rank (same-rank rooms are independent);
# defaults (the shipped profile names, importing nothing) sits below every room
RANK = {"replay": 6, "defaults": 0, "cluster": 5, "engines": 4,
        "scheduler": 3, "speculation": 3, "cost": 3, "acceptance": 3, "kv": 2, "core": 1}
SIBLINGS = {("speculation", "cost")}    # policies price iterations through the cost's SPS view
SIDE = {"output": ({"core"}, {"replay"})}   # room: (what it may import, who may import it)


def room_of(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "sim"


def allowed(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    if importer in SIDE:
        return imported in SIDE[importer][0]
    if imported in SIDE:
        return importer in SIDE[imported][1]
    if (importer, imported) in SIBLINGS:
        return True
    return RANK[imported] < RANK[importer]


def test_every_module_has_a_room():
    rooms = {room_of(m) for m in import_graph.modules(SIM)} - {"sim"}
    assert rooms <= set(RANK) | set(SIDE), rooms - set(RANK) - set(SIDE)


def test_imports_run_one_way():
    bad = []
    for module, targets in import_graph.graph(SIM).items():
        for target in targets:
            if not target.startswith(SIM + "."):
                continue
            a, b = room_of(module), room_of(target)
            if a == "sim" or not allowed(a, b):
                bad.append(f"{module} -> {target} ({a} -> {b})")
    assert not bad, "\n".join(bad)


def test_no_import_circle_in_sim():
    assert import_graph.circles(import_graph.graph(SIM)) == []


def test_the_contract_sees_hidden_imports(tmp_path):
    """Imports under TYPE_CHECKING and inside functions count (the graph reads them all)."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .cluster import run\n"
                   "def f():\n    from .engines.loop import LoopReplica\n")
    known = import_graph.modules(SIM)
    found = import_graph.imports_of(f"{SIM}.core.m", src, known)
    assert f"{SIM}.cluster.run" not in found   # relative to core/, .cluster is not sim/cluster
    found = import_graph.imports_of(f"{SIM}.m", src, known)
    assert found == {f"{SIM}.cluster.run", f"{SIM}.engines.loop"}
    assert not allowed("core", "cluster") and not allowed("kv", "scheduler")
    assert not allowed("cost", "speculation") and allowed("speculation", "cost")
    assert not allowed("output", "cluster") and not allowed("cluster", "output")


# --- one definition per rule -------------------------------------------------------------------

SCOPE = [p for p in (ROOT / "dspark_sim" / "sim").rglob("*") if p.suffix in (".py", ".pyx")] + \
    [ROOT / "dspark_sim" / "serve" / "replica.py"]
# rule: (pattern of a restatement, the files where the rule lives)
RULES = {
    "tokens a decode step emits, 1 + min(accepted, verify), clipped to what is owed":
        (r"1 \+ (np\.)?min(imum)?\(|\[:owed\]|\ba \+ 1\b", {"sim/core/rules.py"}),
    "the prefill room, min(pending, budget - decode tokens), and the drafts room":
        (r"budget - |min\([^)]*pending", {"sim/scheduler.py"}),
    "dspark-lagged's lag of 2 and its history":
        (r"\[-2:\]|- 2, 0\)|lag = 2\b|LAG = |history\[0\]", {"sim/speculation/lag.py"}),
    "the drafting cost: fixed + drafts x slope, per-draft drafters":
        (r"\* (self\.)?_?slope\b|\.per_draft\b|\.linear\b|_draft_of\b", {"sim/cost/iteration.py"}),
    "drafts made per step: the fixed number or the largest verify length":
        (r"max\(lengths|drafts is not None else (self\.)?gamma\b", {"sim/speculation/base.py"}),
    "the prefix hash chain (a block's id from its parent's and its tokens') and the cache hit at "
    "admission (full blocks, at most input - 1 tokens)":
        (r"_intern\b|setdefault\(key|\(input_tokens - 1\) //|HASH_BLOCK_TOKENS", {"sim/kv/prefix.py"}),
    "a request's blocks: ceil(tokens / block size)":
        (r"-\(-", {"sim/kv/paged.py"}),
    "an iteration's time: step + prefill + attention, rounded":
        (r"context_ns \*|prefill_ns\[|step_ns\[",
         {"sim/cost/iteration.py", "sim/engines/stretch.py", "sim/engines/stretch_kernel.pyx"}),
    "the per-request term, per_request_s x requests in the iteration (issue 41)":
        (r"per_request\w* \*|_request_ns \*", {"sim/cost/iteration.py"}),
    "the eager term of a step above the CUDA-graph capture limit (issue 41)":
        (r"eager_seconds|max_capture_size|\.cudagraph\b", {"sim/cost/iteration.py"}),
}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT / "dspark_sim"))


def test_each_rule_is_defined_once():
    twins = []
    for rule, (pattern, homes) in RULES.items():
        regex = re.compile(pattern)
        seen_home = False
        for path in SCOPE:
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#")[0]
                if not regex.search(code) or code.strip().startswith(('"', "'")):
                    continue
                if _rel(path) in homes:
                    seen_home = True
                else:
                    twins.append(f"{_rel(path)}:{number}: {rule}: {line.strip()}")
        assert seen_home, f"{rule}: not found where it lives ({homes}); the pattern is stale"
    assert not twins, "\n".join(twins)


def test_the_twin_grep_finds_a_restatement(tmp_path, monkeypatch):
    """A copy of a rule written elsewhere is caught."""
    twin = tmp_path / "twin.py"
    twin.write_text("def emitted(a, l, owed):\n    return min(1 + min(a, l), owed)\n")
    monkeypatch.setattr(__import__(__name__), "SCOPE", SCOPE + [twin])
    monkeypatch.setattr(__import__(__name__), "_rel", lambda p, rel=_rel: "sim/twin.py" if p == twin else rel(p))
    try:
        test_each_rule_is_defined_once()
    except AssertionError as exc:
        assert "twin.py:2" in str(exc)
    else:
        raise AssertionError("the restatement was not found")
