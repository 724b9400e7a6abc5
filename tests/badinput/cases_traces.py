"""Bad traces: the JSONL trace (through every command that reads one) and the importers'
Azure CSV, BurstGPT CSV and Mooncake JSONL."""
from __future__ import annotations

from .kit import Case, changed, lines

GOOD_ROWS = [{"id": "a", "arrival_s": 0.0, "prompt_tokens": 12, "output_tokens": 6, "task": "chat"},
             {"id": "b", "arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 4, "task": "code"},
             {"id": "c", "arrival_s": 1.0, "prompt_tokens": 8, "output_tokens": 9, "task": "chat"}]
GOOD_TRACE = lines(*GOOD_ROWS)
HUGE = 10 ** 30


def _row2(**changes) -> str:
    """The good trace with line 2 changed (a key set to None is removed)."""
    return lines(GOOD_ROWS[0], changed(GOOD_ROWS[1], **changes), GOOD_ROWS[2])


def _text2(text: str) -> str:
    return lines(GOOD_ROWS[0], text, GOOD_ROWS[2])


# (id, trace text or bytes, line, field)
TRACE_DEFECTS: list[tuple[str, str | bytes, int | None, str | None]] = [
    ("not-json", _text2('{"id": "b", "arrival_s": '), 2, None),
    ("json-array-line", _text2("[1, 2, 3]"), 2, None),
    ("json-number-line", _text2("42"), 2, None),
    ("deep-nesting", _text2("[" * 100000 + "]" * 100000), 2, None),
    ("arrival-missing", _row2(arrival_s=None), 2, "arrival_s"),
    ("arrival-string", _row2(arrival_s="0.5"), 2, "arrival_s"),
    ("arrival-bool", _row2(arrival_s=True), 2, "arrival_s"),
    ("arrival-null", _text2('{"id": "b", "arrival_s": null, "prompt_tokens": 2, "output_tokens": 2}'),
     2, "arrival_s"),
    ("arrival-nan", _text2('{"id": "b", "arrival_s": NaN, "prompt_tokens": 2, "output_tokens": 2}'),
     2, "arrival_s"),
    ("arrival-infinity", _text2('{"id": "b", "arrival_s": Infinity, "prompt_tokens": 2, '
                                '"output_tokens": 2}'), 2, "arrival_s"),
    ("arrival-overflow", _text2('{"id": "b", "arrival_s": 1e400, "prompt_tokens": 2, '
                                '"output_tokens": 2}'), 2, "arrival_s"),
    ("arrival-negative", lines({**GOOD_ROWS[0], "arrival_s": -1.0}, *GOOD_ROWS[1:]), 1, "arrival_s"),
    ("arrival-decreasing", lines(GOOD_ROWS[0], GOOD_ROWS[1], {**GOOD_ROWS[2], "arrival_s": 0.2}),
     3, "arrival_s"),
    ("prompt-missing", _row2(prompt_tokens=None), 2, "prompt_tokens"),
    ("prompt-zero", _row2(prompt_tokens=0), 2, "prompt_tokens"),
    ("prompt-negative", _row2(prompt_tokens=-3), 2, "prompt_tokens"),
    ("prompt-float", _row2(prompt_tokens=1.5), 2, "prompt_tokens"),
    ("prompt-string", _row2(prompt_tokens="12"), 2, "prompt_tokens"),
    ("prompt-bool", _row2(prompt_tokens=True), 2, "prompt_tokens"),
    ("prompt-list", _row2(prompt_tokens=[12]), 2, "prompt_tokens"),
    ("prompt-huge", _row2(prompt_tokens=HUGE), 2, "prompt_tokens"),
    ("output-zero", _row2(output_tokens=0), 2, "output_tokens"),
    ("output-float", _row2(output_tokens=2.0), 2, "output_tokens"),
    ("output-huge", _row2(output_tokens=HUGE), 2, "output_tokens"),
    ("id-int", _row2(id=7), 2, "id"),
    ("id-empty", _row2(id=""), 2, "id"),
    ("id-duplicate", _row2(id="a"), 2, "id"),
    ("task-int", _row2(task=5), 2, "task"),
    ("task-empty", _row2(task=""), 2, "task"),
    ("not-utf8", GOOD_TRACE.encode() + b'{"id": "\xff\xfe", "arrival_s": 2}\n', 4, None),
    ("empty-file", "", None, None),
    ("blank-lines-only", "\n\n  \n", None, None),
]

# Commands that read a trace: argv with TRACE where the trace goes.
TRACE_COMMANDS = {
    "replay": ("replay", "TRACE", "--out", "out"),
    "stats": ("trace", "stats", "TRACE"),
    "slice": ("trace", "slice", "TRACE", "--out", "out.jsonl"),
    "generate-lengths": ("trace", "generate", "--count", "5", "--lengths-from", "TRACE",
                         "--out", "out.jsonl"),
    "sweep": ("sweep", "--trace", "TRACE", "--points", "2", "--workers", "1", "--out", "out"),
    "plan": ("plan", "--trace", "TRACE", "--sla", "10", "--workers", "1", "--out", "out"),
    "recommend": ("recommend", "--trace", "TRACE", "--points", "2", "--workers", "1", "--out", "out"),
    "serve-replay": ("serve-replay", "TRACE", "--out", "out"),
    "validate": ("validate", "TRACE", "--out", "out"),
    "import-aiperf": ("import-aiperf", "{d}/export.jsonl", "--trace", "TRACE", "--out", "out"),
}
# Every defect through replay; a few through every other command.
OTHER_COMMAND_DEFECTS = ("not-json", "prompt-zero", "arrival-decreasing", "empty-file")

AIPERF_OK = lines({"metadata": {"conversation_id": "a", "credit_issued_ns": 1, "request_start_ns": 1},
                   "metrics": {"usage_prompt_tokens": {"value": 12},
                               "usage_completion_tokens": {"value": 6}}})


def _trace_case(cmd: str, defect: str, text, line, field) -> Case:
    argv = tuple(a.replace("TRACE", "{d}/trace.jsonl") for a in TRACE_COMMANDS[cmd])
    files = {"trace.jsonl": text}
    if cmd == "import-aiperf":
        files["export.jsonl"] = AIPERF_OK
    return Case(f"trace-{cmd}-{defect}", files, argv, "trace.jsonl", line, field)


def trace_cases() -> list[Case]:
    out = [_trace_case("replay", *d) for d in TRACE_DEFECTS]
    chosen = [d for d in TRACE_DEFECTS if d[0] in OTHER_COMMAND_DEFECTS]
    out += [_trace_case(cmd, *d) for cmd in TRACE_COMMANDS if cmd != "replay" for d in chosen]
    out.append(Case("trace-missing-file", {}, ("replay", "{d}/nope.jsonl", "--out", "out"),
                    "nope.jsonl", None, None))
    out.append(Case("trace-is-directory", {}, ("replay", "{d}/tdir", "--out", "out"), "tdir",
                    None, None, dirs=("tdir",)))
    return out


# --- importers ------------------------------------------------------------------------------

AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROWS = ["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,396,109",
              "2023-11-16 18:15:51.4565320,879,21"]
BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURST_ROWS = ["5,ChatGPT,472,18,490,Conversation log", "45,ChatGPT,1087,156,1243,Conversation log",
              "118,GPT-4,417,276,693,Conversation log"]
MOONCAKE_ROWS = [{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]},
                 {"timestamp": 500, "input_length": 200, "output_length": 20, "hash_ids": [2]},
                 {"timestamp": 900, "input_length": 50, "output_length": 5, "hash_ids": [3]}]


def _csv(head: str, rows: list[str], line: int | None = None, replace: str | None = None) -> str:
    rows = list(rows)
    if line is not None:
        rows[line - 2] = replace
    return head + "".join(r + "\n" for r in rows)


def _mooncake(**changes) -> str:
    return lines(MOONCAKE_ROWS[0], changed(MOONCAKE_ROWS[1], **changes), MOONCAKE_ROWS[2])


IMPORT_DEFECTS: list[tuple[str, str, str | bytes, int | None, str | None]] = [
    ("azure", "missing-column", _csv("TIMESTAMP,ContextTokens\n", ["2023-11-16 18:15:46,374"]), 1,
     "GeneratedTokens"),
    ("azure", "bad-timestamp", _csv(AZURE_HEAD, AZURE_ROWS, 3, "yesterday,396,109"), 3, "TIMESTAMP"),
    ("azure", "tokens-text", _csv(AZURE_HEAD, AZURE_ROWS, 2, "2023-11-16 18:15:46,abc,44"), 2,
     "ContextTokens"),
    ("azure", "tokens-negative", _csv(AZURE_HEAD, AZURE_ROWS, 2, "2023-11-16 18:15:46,-5,44"), 2,
     "ContextTokens"),
    ("azure", "tokens-fraction", _csv(AZURE_HEAD, AZURE_ROWS, 4, "2023-11-16 18:15:52,5,4.5"), 4,
     "GeneratedTokens"),
    ("azure", "tokens-inf", _csv(AZURE_HEAD, AZURE_ROWS, 2, "2023-11-16 18:15:46,inf,44"), 2,
     "ContextTokens"),
    ("azure", "tokens-huge", _csv(AZURE_HEAD, AZURE_ROWS, 2, "2023-11-16 18:15:46,1e30,44"), 2,
     "ContextTokens"),
    ("azure", "short-row", _csv(AZURE_HEAD, AZURE_ROWS, 3, "2023-11-16 18:15:50,396"), 3,
     "GeneratedTokens"),
    ("azure", "empty-file", "", 1, None),
    ("azure", "header-only", AZURE_HEAD, None, None),
    ("azure", "all-zero", _csv(AZURE_HEAD, ["2023-11-16 18:15:46,0,4", "2023-11-16 18:15:47,3,0"]),
     None, None),
    ("azure", "not-utf8", (AZURE_HEAD + AZURE_ROWS[0] + "\n").encode() + b"2023-11-16 \xff\xfe,3,4\n",
     3, None),
    ("burstgpt", "missing-column", _csv("Timestamp,Model,Request tokens\n", ["5,ChatGPT,472"]), 1,
     "Response tokens"),
    ("burstgpt", "timestamp-text", _csv(BURST_HEAD, BURST_ROWS, 3, "soon,ChatGPT,1,2,3,x"), 3,
     "Timestamp"),
    ("burstgpt", "timestamp-nan", _csv(BURST_HEAD, BURST_ROWS, 2, "nan,ChatGPT,1,2,3,x"), 2,
     "Timestamp"),
    ("burstgpt", "tokens-text", _csv(BURST_HEAD, BURST_ROWS, 4, "200,ChatGPT,1,many,3,x"), 4,
     "Response tokens"),
    ("mooncake", "not-json", lines(MOONCAKE_ROWS[0], "{timestamp: 3}"), 2, None),
    ("mooncake", "missing-input", _mooncake(input_length=None), 2, "input_length"),
    ("mooncake", "timestamp-string", _mooncake(timestamp="500"), 2, "timestamp"),
    ("mooncake", "output-negative", _mooncake(output_length=-1), 2, "output_length"),
    ("mooncake", "output-fraction", _mooncake(output_length=2.5), 2, "output_length"),
    ("mooncake", "input-bool", _mooncake(input_length=True), 2, "input_length"),
    ("mooncake", "input-huge", _mooncake(input_length=HUGE), 2, "input_length"),
    ("mooncake", "empty-file", "", None, None),
]


def import_cases() -> list[Case]:
    out = []
    for fmt, name, text, line, field in IMPORT_DEFECTS:
        src = f"src.{'jsonl' if fmt == 'mooncake' else 'csv'}"
        out.append(Case(f"import-{fmt}-{name}", {src: text},
                        ("trace", "import", fmt, f"{{d}}/{src}", "--out", "out.jsonl"), src, line, field))
    # the same readers behind `trace stats` / `trace slice` (format detected from the first line)
    for fmt, name in (("azure", "bad-timestamp"), ("burstgpt", "tokens-text"), ("mooncake", "missing-input")):
        fmt_, _, text, line, field = next(d for d in IMPORT_DEFECTS if d[:2] == (fmt, name))
        src = f"src.{'jsonl' if fmt == 'mooncake' else 'csv'}"
        out.append(Case(f"slice-{fmt}-{name}", {src: text},
                        ("trace", "slice", f"{{d}}/{src}", "--out", "out.jsonl"), src, line, field))
    out.append(Case("import-unknown-format", {"src.csv": _csv(AZURE_HEAD, AZURE_ROWS)},
                    ("trace", "import", "parquet", "{d}/src.csv", "--out", "out.jsonl"), None, None,
                    "format"))
    out.append(Case("stats-unrecognised-format", {"src.txt": "hello,world\n1,2\n"},
                    ("trace", "stats", "{d}/src.txt"), "src.txt", 1, None))
    return out
