"""Trace files (formats.md): JSON Lines, one request per line. Load with validation, write atomically."""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fileio import atomic_path, decode_utf8, json_text, parse_json

DEFAULT_TASK = "default"
MAX_TOKENS = 10 ** 9        # longest prompt or output a trace may hold (docs/formats.md);
                            # also keeps token counts within the int64 arrays chunks read into
HASH_BLOCK_TOKENS = 512     # tokens per `hash_ids` entry unless `hash_block_tokens` says (Mooncake's)
PREFIX_FIELDS = ("conversation", "hash_ids", "hash_block_tokens")   # optional: what content is shared


@dataclass
class Trace:
    """Requests of a trace as column arrays, in arrival order."""

    ids: np.ndarray            # object array of str
    arrival_s: np.ndarray      # float64, non-decreasing
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    task: np.ndarray           # object array of str
    name: str = "trace"
    # optional shared-content fields (formats.md), None when no request of the trace has them:
    conversation: np.ndarray | None = None       # object array of str or None
    hash_ids: np.ndarray | None = None           # object array of tuple[int, ...] or None
    hash_block_tokens: np.ndarray | None = None  # int64, tokens per hash id (0: the default 512)

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def has_prefixes(self) -> bool:
        """Does any request name shared content (a conversation or hash ids)?"""
        return self.conversation is not None or self.hash_ids is not None

    def prefix_fields(self, rows=None) -> dict:
        """The shared-content columns (of `rows`, default all) as keyword arguments of Trace, so
        a trace rebuilt from selected rows keeps them."""
        out = {}
        for key in PREFIX_FIELDS:
            col = getattr(self, key)
            if col is not None:
                out[key] = col if rows is None else col[rows]
        return out

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"id": self.ids, "arrival_s": self.arrival_s,
                             "prompt_tokens": self.prompt_tokens,
                             "output_tokens": self.output_tokens, "task": self.task})

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, name: str = "trace") -> "Trace":
        """Build a trace from a DataFrame with the trace columns (id and task optional)."""
        n = len(frame)
        ids = frame["id"].astype(str).to_numpy(dtype=object) if "id" in frame \
            else np.array([str(i + 1) for i in range(n)], dtype=object)
        task = frame["task"].astype(str).to_numpy(dtype=object) if "task" in frame \
            else np.full(n, DEFAULT_TASK, dtype=object)
        return cls(ids=ids, arrival_s=frame["arrival_s"].to_numpy(dtype=float),
                   prompt_tokens=frame["prompt_tokens"].to_numpy(dtype=np.int64),
                   output_tokens=frame["output_tokens"].to_numpy(dtype=np.int64),
                   task=task, name=name)


def _fail(path: Path, lineno: int, field: str | None, message: str) -> InputError:
    return InputError(message, file=path, line=lineno, field=field)


def _int_field(rec: dict, key: str, path: Path, lineno: int) -> int:
    if key not in rec:
        raise _fail(path, lineno, key, "missing required field")
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(path, lineno, key, f"expected an integer, got {v!r}")
    if v < 1:
        raise _fail(path, lineno, key, f"must be >= 1, got {v}")
    if v > MAX_TOKENS:
        raise _fail(path, lineno, key, f"must be <= {MAX_TOKENS:,}, got {v}")
    return v


def hash_ids_field(ids, prompt: int, size: int, path: Path, lineno: int,
                   prompt_field: str = "prompt_tokens") -> tuple[int, ...]:
    """A validated `hash_ids` value: non-negative integers, one per `size` tokens of the prompt
    (the last block may be partial)."""
    if not isinstance(ids, list) or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                        for v in ids):
        raise _fail(path, lineno, "hash_ids", "expected a list of non-negative integers")
    if (len(ids) - 1) * size >= max(prompt, 1):
        raise _fail(path, lineno, "hash_ids", f"{len(ids)} blocks of {size} tokens do not fit "
                    f"{prompt_field} {prompt} (at most ceil({prompt_field} / {size}))")
    return tuple(ids)


def _prefix_fields(rec: dict, prompt: int, path: Path, lineno: int):
    """The optional shared-content fields of one record (None where absent), validated."""
    conv = rec.get("conversation")
    if conv is not None and (not isinstance(conv, str) or not conv):
        raise _fail(path, lineno, "conversation", f"expected a non-empty string, got {conv!r}")
    block = rec.get("hash_block_tokens")
    if block is not None and (isinstance(block, bool) or not isinstance(block, int)
                              or not 1 <= block <= MAX_TOKENS):
        raise _fail(path, lineno, "hash_block_tokens",
                    f"expected an integer in 1..{MAX_TOKENS:,}, got {block!r}")
    ids = rec.get("hash_ids")
    if ids is not None:
        ids = hash_ids_field(ids, prompt, block or HASH_BLOCK_TOKENS, path, lineno)
    elif block is not None:
        raise _fail(path, lineno, "hash_block_tokens", "given without hash_ids")
    return conv, ids, block or 0


def iter_json_lines(path: str | Path, what: str = "file") -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a JSON Lines file; a line that is not
    a JSON object raises InputError naming FILE:LINE."""
    path = Path(path)
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        raise InputError(f"{what} not found", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", file=path) from None
    with handle:
        for lineno, raw in enumerate(_lines(handle, path, what), start=1):
            if not raw.strip():
                continue
            rec = parse_json(decode_utf8(raw, path, lineno), path, lineno)
            if not isinstance(rec, dict):
                raise _fail(path, lineno, None, "expected a JSON object")
            yield lineno, rec


def _lines(handle, path: Path, what: str) -> Iterator[bytes]:
    """The lines of a binary handle; a read error (a directory, a device) names the file."""
    try:
        yield from handle
    except OSError as exc:
        raise InputError(f"cannot read {what}: {exc.strerror}", file=path) from None


CHUNK_REQUESTS = 65_536


def iter_trace_chunks(path: str | Path, chunk: int = CHUNK_REQUESTS) -> Iterator[Trace]:
    """Read and validate a JSONL trace lazily, `chunk` requests at a time (arrival order and
    unique ids are checked across chunks); any violation raises InputError naming FILE:LINE
    and field. Task names are shared objects, numbers go straight into typed arrays."""
    path = Path(path)
    seen: set[str] = set()
    tasks_seen: dict[str, str] = {}
    last_arrival = 0.0
    ids: list[str] = []
    arrivals, prompts, outputs = array("d"), array("q"), array("q")
    tasks: list[str] = []
    prefixes: list[tuple] = []       # (conversation, hash_ids, hash_block_tokens) per request
    any_prefix = False
    any_rows = False
    for lineno, rec in iter_json_lines(path, "trace file"):
        if "arrival_s" not in rec:
            raise _fail(path, lineno, "arrival_s", "missing required field")
        arrival = rec["arrival_s"]
        if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) \
                or not math.isfinite(arrival):
            raise _fail(path, lineno, "arrival_s", f"expected a finite number, got {arrival!r}")
        if arrival < 0:
            raise _fail(path, lineno, "arrival_s", f"must be >= 0, got {arrival}")
        if arrival < last_arrival:
            raise _fail(path, lineno, "arrival_s",
                        f"arrivals must be non-decreasing ({arrival} after {last_arrival})")
        last_arrival = arrival
        prompt = _int_field(rec, "prompt_tokens", path, lineno)
        output = _int_field(rec, "output_tokens", path, lineno)
        rid = rec.get("id", str(lineno))
        if not isinstance(rid, str) or not rid:
            raise _fail(path, lineno, "id", f"expected a non-empty string, got {rid!r}")
        if rid in seen:
            raise _fail(path, lineno, "id", f"duplicate id {rid!r}")
        seen.add(rid)
        task = rec.get("task", DEFAULT_TASK)
        if not isinstance(task, str) or not task:
            raise _fail(path, lineno, "task", f"expected a non-empty string, got {task!r}")
        ids.append(rid)
        arrivals.append(float(arrival))
        prompts.append(prompt)
        outputs.append(output)
        tasks.append(tasks_seen.setdefault(task, task))
        fields = _prefix_fields(rec, prompt, path, lineno)
        any_prefix = any_prefix or fields[0] is not None or fields[1] is not None
        prefixes.append(fields)
        if len(ids) >= chunk:
            yield _chunk(ids, arrivals, prompts, outputs, tasks, path.stem, prefixes, any_prefix)
            any_rows = True
            ids, tasks, prefixes = [], [], []
            arrivals, prompts, outputs = array("d"), array("q"), array("q")
    if ids:
        yield _chunk(ids, arrivals, prompts, outputs, tasks, path.stem, prefixes, any_prefix)
    elif not any_rows:
        raise InputError("trace has no requests", file=path)


def _chunk(ids, arrivals, prompts, outputs, tasks, name: str, prefixes, any_prefix: bool) -> Trace:
    extra = {}
    if any_prefix:        # (a chunk of a trace with shared content keeps the columns, even empty)
        conv = np.empty(len(ids), dtype=object)
        hashes = np.empty(len(ids), dtype=object)
        conv[:] = [p[0] for p in prefixes]
        hashes[:] = [p[1] for p in prefixes]
        extra = dict(conversation=conv, hash_ids=hashes,
                     hash_block_tokens=np.array([p[2] for p in prefixes], dtype=np.int64))
    return Trace(ids=np.array(ids, dtype=object), arrival_s=np.frombuffer(arrivals, dtype=float),
                 prompt_tokens=np.frombuffer(prompts, dtype=np.int64),
                 output_tokens=np.frombuffer(outputs, dtype=np.int64),
                 task=np.array(tasks, dtype=object), name=name, **extra)


def _filled_prefix(trace: Trace, always: bool = False) -> dict:
    """The trace's shared-content columns, each present (None entries, 0 = default block) when
    any is (or `always`), so that traces with and without them concatenate."""
    if not trace.has_prefixes and not always:
        return {}
    n = len(trace)
    empty = np.empty(n, dtype=object)
    return dict(conversation=trace.conversation if trace.conversation is not None else empty,
                hash_ids=trace.hash_ids if trace.hash_ids is not None else empty.copy(),
                hash_block_tokens=trace.hash_block_tokens if trace.hash_block_tokens is not None
                else np.zeros(n, dtype=np.int64))


def concat_traces(parts: list[Trace], name: str = "trace") -> Trace:
    """One trace of the parts' requests, in order."""
    extra = {}
    if any(p.has_prefixes for p in parts):
        filled = [_filled_prefix(p, always=True) for p in parts]
        extra = {key: np.concatenate([f[key] for f in filled]) for key in PREFIX_FIELDS}
    return Trace(ids=np.concatenate([p.ids for p in parts]),
                 arrival_s=np.concatenate([p.arrival_s for p in parts]),
                 prompt_tokens=np.concatenate([p.prompt_tokens for p in parts]),
                 output_tokens=np.concatenate([p.output_tokens for p in parts]),
                 task=np.concatenate([p.task for p in parts]), name=name, **extra)



def load_trace(path: str | Path) -> Trace:
    """Read and validate a JSONL trace; any violation raises InputError naming FILE:LINE and field."""
    path = Path(path)
    return concat_traces(list(iter_trace_chunks(path)), name=path.stem)


def _trace_lines(trace: Trace, lo: int, hi: int) -> str:
    rows = []
    fields = _filled_prefix(trace)
    for k, (rid, arr, p, o, t) in enumerate(zip(trace.ids[lo:hi], trace.arrival_s[lo:hi].tolist(),
                                                trace.prompt_tokens[lo:hi].tolist(),
                                                trace.output_tokens[lo:hi].tolist(), trace.task[lo:hi])):
        rec = {"id": str(rid), "arrival_s": round(float(arr), 6), "prompt_tokens": int(p),
               "output_tokens": int(o), "task": str(t)}
        if fields:
            i = lo + k
            if fields["conversation"][i] is not None:
                rec["conversation"] = str(fields["conversation"][i])
            if fields["hash_ids"][i] is not None:
                rec["hash_ids"] = [int(v) for v in fields["hash_ids"][i]]
                if int(fields["hash_block_tokens"][i]):
                    rec["hash_block_tokens"] = int(fields["hash_block_tokens"][i])
        rows.append(json_text(rec))
    return "\n".join(rows) + "\n"


def dumps_trace(trace: Trace) -> str:
    """JSONL text of a trace (arrival times rounded to microseconds)."""
    return _trace_lines(trace, 0, len(trace))


def write_trace(path: str | Path, trace: Trace, chunk: int = CHUNK_REQUESTS) -> None:
    """Write a trace as JSONL (the bytes of `dumps_trace`), `chunk` lines at a time, atomically."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as handle:
        for lo in range(0, len(trace), chunk):
            handle.write(_trace_lines(trace, lo, lo + chunk))
