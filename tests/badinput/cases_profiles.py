"""Bad hardware profiles (YAML), acceptance profiles (JSON) and batch-size schedules (JSON)."""
from __future__ import annotations

import json

from .cases_traces import GOOD_TRACE
from .kit import Case

HW_LINES = [
    "schema: dspark-sim/hw/v1",                                  # 1
    "name: tiny",                                                # 2
    "source: measured",                                          # 3
    "gpus_per_replica: 1",                                       # 4
    "step_time:",                                                # 5
    "  batch_tokens: [1, 8, 64]",                                # 6
    "  seconds: [0.01, 0.012, 0.02]",                            # 7
    "  per_context_token_s: 1.0e-7",                             # 8
    "draft_time:",                                               # 9
    "  dspark: {requests: [1, 8], seconds: [0.001, 0.002]}",     # 10
    "  mtp1: {requests: [1, 8], seconds: [0.001, 0.002], per_draft: true}",  # 11
    "kv_capacity_tokens: 100000",                                # 12
    "max_batch_tokens: 256",                                     # 13
    "max_batch_requests: 16",                                    # 14
]


def _hw(line: int | None = None, text: str | None = None, drop: int | None = None) -> str:
    rows = list(HW_LINES)
    if line is not None:
        rows[line - 1] = text
    if drop is not None:
        del rows[drop - 1]
    return "\n".join(r for r in rows if r is not None) + "\n"


HW_DEFECTS: list[tuple[str, str | bytes, int | None, str | None]] = [
    ("invalid-yaml", _hw(7, "  seconds: [0.01, 0.012"), 8, None),
    ("tab-indent", _hw(6, "\tbatch_tokens: [1, 8, 64]"), 6, None),
    ("top-level-list", "- 1\n- 2\n", 1, "(document)"),
    ("empty-file", "", 1, "(document)"),
    ("not-utf8", _hw().encode() + b"notes: \xff\xfe\n", 15, None),
    ("schema-wrong", _hw(1, "schema: dspark-sim/hw/v0"), 1, "schema"),
    ("schema-missing", _hw(drop=1), 1, "schema"),
    ("name-missing", _hw(drop=2), 1, "name"),
    ("name-empty", _hw(2, "name: ''"), 2, "name"),
    ("source-unknown", _hw(3, "source: guessed"), 3, "source"),
    ("gpus-zero", _hw(4, "gpus_per_replica: 0"), 4, "gpus_per_replica"),
    ("step-time-missing", "\n".join(HW_LINES[:4] + HW_LINES[8:]) + "\n", 1, "step_time"),
    ("step-time-list", "\n".join(HW_LINES[:4] + ["step_time: [1, 2]"] + HW_LINES[8:]) + "\n", 5,
     "step_time"),
    ("batch-tokens-missing", _hw(drop=6), 5, "step_time"),
    ("batch-tokens-decreasing", _hw(6, "  batch_tokens: [1, 64, 8]"), 6, "step_time.batch_tokens[2]"),
    ("batch-tokens-zero", _hw(6, "  batch_tokens: [0, 8, 64]"), 6, "step_time.batch_tokens[0]"),
    ("seconds-length", _hw(7, "  seconds: [0.01, 0.012]"), 7, "step_time.seconds"),
    ("seconds-negative", _hw(7, "  seconds: [0.01, -0.012, 0.02]"), 7, "step_time.seconds[1]"),
    ("seconds-string", _hw(7, "  seconds: [0.01, fast, 0.02]"), 7, "step_time.seconds[1]"),
    ("seconds-nan", _hw(7, "  seconds: [0.01, .nan, 0.02]"), 7, "step_time.seconds[1]"),
    ("seconds-inf", _hw(7, "  seconds: [0.01, .inf, 0.02]"), 7, "step_time.seconds[1]"),
    ("seconds-empty", _hw(7, "  seconds: []"), 7, "step_time.seconds"),
    ("per-context-negative", _hw(8, "  per_context_token_s: -1.0"), 8, "step_time.per_context_token_s"),
    ("constant-zero", _hw(6, "  constant_s: 0", drop=7), 6, "step_time.constant_s"),
    ("constant-string", _hw(6, "  constant_s: fast", drop=7), 6, "step_time.constant_s"),
    ("draft-time-list", _hw(9, "draft_time: [1, 2]", drop=10).replace(HW_LINES[10] + "\n", ""), 9,
     "draft_time"),
    ("draft-kind-scalar", _hw(10, "  dspark: 0.002"), 10, "draft_time.dspark"),
    ("draft-requests-missing", _hw(10, "  dspark: {seconds: [0.001, 0.002]}"), 10, "draft_time.dspark"),
    ("draft-seconds-negative", _hw(10, "  dspark: {requests: [1, 8], seconds: [0.001, -1]}"), 10,
     "draft_time.dspark.seconds[1]"),
    ("per-draft-not-bool", _hw(11, "  mtp1: {requests: [1, 8], seconds: [0.001, 0.002], "
                                   "per_draft: yes please}"), 11, "draft_time.mtp1.per_draft"),
    ("kv-capacity-zero", _hw(12, "kv_capacity_tokens: 0"), 12, "kv_capacity_tokens"),
    ("max-batch-tokens-float", _hw(13, "max_batch_tokens: 256.5"), 13, "max_batch_tokens"),
    ("max-batch-tokens-sci", _hw(13, "max_batch_tokens: 1e8"), 13, "max_batch_tokens"),
    ("max-batch-requests-string", _hw(14, "max_batch_requests: many"), 14, "max_batch_requests"),
    ("capture-sizes-empty", _hw() + "capture_sizes: []\n", 15, "capture_sizes"),
    ("capture-sizes-decreasing", _hw() + "capture_sizes: [1, 4, 2]\n", 15, "capture_sizes[2]"),
    ("kv-block-size-zero", _hw() + "kv_block_size: 0\n", 15, "kv_block_size"),
    ("device-number", _hw() + "device: 5\n", 15, "device"),
]

ACC_DOC = {
    "schema": "dspark-sim/acceptance/v1", "name": "tiny", "target": "t", "drafter": "dspark",
    "drafter_kind": "dspark", "gamma": 3, "temperature": 0.0, "default_task": "chat",
    "tasks": {"chat": {"kind": "parametric", "position_accept": [0.9, 0.8, 0.7]},
              "code": {"kind": "empirical", "requests": [
                  {"accepted": [3, 1], "confidence": [[0.9, 0.8, 0.7], [0.6, 0.5, 0.4]]},
                  {"accepted": [0, 2]}]}},
}


def _acc(change) -> str:
    doc = json.loads(json.dumps(ACC_DOC))
    change(doc)
    return _dump(doc)


def _dump(doc) -> str:
    """One header key per line, each task on its own line (line numbers: see ACC_LINE)."""
    from dspark_sim.profiles.acceptance import dumps_profile

    return dumps_profile(doc) if isinstance(doc, dict) and "tasks" in doc and \
        isinstance(doc["tasks"], dict) else json.dumps(doc, indent=1)


def _set(path: str, value):
    def change(doc):
        keys = path.split(".")
        node = doc
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if value is _DROP:
            node.pop(last)
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


_DROP = object()
# lines of dumps_profile(ACC_DOC): 1 {, 2 schema, 3 name, ..., 7 gamma, 8 temperature,
# 9 default_task, 10 "tasks": {, 11 chat, 12 code head, 13 code request 0, 14 request 1
ACC_DEFECTS: list[tuple[str, str | bytes, int | None, str | None]] = [
    ("invalid-json", _dump(ACC_DOC).replace('"gamma": 3,', '"gamma": 3'), 8, None),
    ("top-level-list", "[1, 2]\n", 1, "(document)"),
    ("not-utf8", _dump(ACC_DOC).encode().replace(b'"t"', b'"\xff"'), 4, None),
    ("schema-wrong", _acc(_set("schema", "dspark-sim/acceptance/v0")), 2, "schema"),
    ("name-missing", _acc(_set("name", _DROP)), 1, "name"),
    ("gamma-zero", _acc(_set("gamma", 0)), 7, "gamma"),
    ("gamma-string", _acc(_set("gamma", "3")), 7, "gamma"),
    ("temperature-negative", _acc(_set("temperature", -1)), 8, "temperature"),
    ("tasks-empty", _acc(_set("tasks", {})), 10, "tasks"),
    ("default-task-unknown", _acc(_set("default_task", "math")), 9, "default_task"),
    ("default-task-list", _acc(_set("default_task", ["chat"])), 9, "default_task"),
    ("drafter-kind-number", _acc(_set("drafter_kind", 5)), 6, "drafter_kind"),
    ("kind-unknown", _acc(_set("tasks.chat.kind", "magic")), 11, "tasks.chat.kind"),
    ("kind-missing", _acc(_set("tasks.chat.kind", _DROP)), 11, "tasks.chat"),
    ("position-accept-length", _acc(_set("tasks.chat.position_accept", [0.9, 0.8])), 11,
     "tasks.chat.position_accept"),
    ("position-accept-above-one", _acc(_set("tasks.chat.position_accept", [0.9, 1.5, 0.7])), 11,
     "tasks.chat.position_accept[1]"),
    ("position-accept-string", _acc(_set("tasks.chat.position_accept", [0.9, "x", 0.7])), 11,
     "tasks.chat.position_accept[1]"),
    ("requests-empty", _acc(_set("tasks.code.requests", [])), 12, "tasks.code.requests"),
    ("accepted-above-gamma", _acc(_set("tasks.code.requests.1.accepted", [0, 4])), 14,
     "tasks.code.requests[1].accepted"),
    ("accepted-bool", _acc(_set("tasks.code.requests.1.accepted", [True, 2])), 14,
     "tasks.code.requests[1].accepted"),
    ("request-not-object", _acc(_set("tasks.code.requests.1", [0, 2])), 14, "tasks.code.requests[1]"),
    ("confidence-shape", _acc(_set("tasks.code.requests.0.confidence", [[0.9, 0.8, 0.7]])), 13,
     "tasks.code.requests[0].confidence"),
    ("confidence-ragged", _acc(_set("tasks.code.requests.0.confidence", [[0.9], [0.6, 0.5, 0.4]])), 13,
     "tasks.code.requests[0].confidence"),
    ("confidence-text", _acc(_set("tasks.code.requests.0.confidence", [["a", "b", "c"], [1, 1, 1]])),
     13, "tasks.code.requests[0].confidence"),
    ("confidence-above-one", _acc(_set("tasks.code.requests.0.confidence", [[2, 0, 0], [0, 0, 0]])),
     13, "tasks.code.requests[0].confidence"),
    ("drafted-length", _acc(_set("tasks.code.requests.1.drafted", [3])), 14,
     "tasks.code.requests[1].drafted"),
    ("drafted-below-accepted", _acc(_set("tasks.code.requests.1.drafted", [3, 1])), 14,
     "tasks.code.requests[1].drafted[1]"),
]

SCHEDULE_DEFECTS: list[tuple[str, str | bytes, int | None, str | None]] = [
    ("invalid-json", "[[1, 4, 3],\n [5, 8, 2]\n", 3, "bs-schedule"),
    ("not-a-list", '"fast"\n', 1, "bs-schedule"),
    ("entry-short", "[\n [1, 4, 3],\n [5, 8]\n]\n", 3, "bs-schedule[1]"),
    ("entry-float", "[\n [1, 4, 3],\n [5, 8, 2.5]\n]\n", 3, "bs-schedule[1]"),
    ("overlap", "[\n [1, 4, 3],\n [4, 8, 2]\n]\n", 3, "bs-schedule[1]"),
    ("not-from-one", "[\n [2, 4, 3]\n]\n", 2, "bs-schedule[0]"),
    ("k-negative", "[\n [1, 4, -1]\n]\n", 2, "bs-schedule[0]"),
    ("object-missing-key", '{"method": "dspark"}\n', 1, "num_speculative_tokens_per_batch_size"),
    ("num-tokens-too-big", '{"num_speculative_tokens": 99,\n "num_speculative_tokens_per_batch_size": '
                           '[[1, 4, 3]]}\n', 1, "num_speculative_tokens"),
    ("not-utf8", b"[[1, 4, 3], [5, 8, \xff]]\n", 1, None),
]


def profile_cases() -> list[Case]:
    tr = {"trace.jsonl": GOOD_TRACE}
    out = []
    for name, text, line, field in HW_DEFECTS:
        out.append(Case(f"hw-replay-{name}", {**tr, "hw.yaml": text},
                        ("replay", "{d}/trace.jsonl", "--hw", "{d}/hw.yaml", "--out", "out"),
                        "hw.yaml", line, field))
    for name in ("invalid-yaml", "seconds-nan", "schema-wrong", "not-utf8"):
        _, text, line, field = next(d for d in HW_DEFECTS if d[0] == name)
        out.append(Case(f"hw-check-{name}", {"hw.yaml": text}, ("profiles", "check", "{d}/hw.yaml"),
                        "hw.yaml", line, field))
        out.append(Case(f"hw-sweep-{name}", {**tr, "hw.yaml": text},
                        ("sweep", "--trace", "{d}/trace.jsonl", "--hw", "{d}/hw.yaml", "--points", "2",
                         "--workers", "1", "--out", "out"), "hw.yaml", line, field))
        out.append(Case(f"hw-serve-{name}", {**tr, "hw.yaml": text},
                        ("serve-replay", "{d}/trace.jsonl", "--hw", "{d}/hw.yaml", "--out", "out"),
                        "hw.yaml", line, field))
    for name, text, line, field in ACC_DEFECTS:
        out.append(Case(f"acc-replay-{name}", {**tr, "acc.json": text},
                        ("replay", "{d}/trace.jsonl", "--policy", "dspark", "--acceptance",
                         "{d}/acc.json", "--out", "out"), "acc.json", line, field))
    for name in ("invalid-json", "gamma-zero", "confidence-ragged", "default-task-list"):
        _, text, line, field = next(d for d in ACC_DEFECTS if d[0] == name)
        out.append(Case(f"acc-check-{name}", {"acc.json": text}, ("profiles", "check", "{d}/acc.json"),
                        "acc.json", line, field))
        out.append(Case(f"acc-plan-{name}", {**tr, "acc.json": text},
                        ("plan", "--trace", "{d}/trace.jsonl", "--sla", "10", "--acceptance",
                         "{d}/acc.json", "--workers", "1", "--out", "out"), "acc.json", line, field))
    for name, text, line, field in SCHEDULE_DEFECTS:
        out.append(Case(f"schedule-replay-{name}", {**tr, "sched.json": text},
                        ("replay", "{d}/trace.jsonl", "--policy", "vllm-schedule", "--bs-schedule",
                         "{d}/sched.json", "--out", "out"), "sched.json", line, field))
    for name in ("overlap", "not-utf8"):
        _, text, line, field = next(d for d in SCHEDULE_DEFECTS if d[0] == name)
        out.append(Case(f"schedule-sweep-{name}", {**tr, "sched.json": text},
                        ("sweep", "--trace", "{d}/trace.jsonl", "--policies", "vllm-schedule",
                         "--bs-schedule", "{d}/sched.json", "--points", "2", "--workers", "1",
                         "--out", "out"), "sched.json", line, field))
    return out
