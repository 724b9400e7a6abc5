"""Atomic writes and structured-file reading that keeps line numbers for error messages.

Every JSON document the product writes goes through `json_text` (files: `write_json_atomic`,
JSON Lines: `json_line`), which writes strict JSON: a float that is not finite (NaN, +-Infinity:
a statistic of no samples, an interval of one request) becomes null, so that jq, JavaScript and
every strict parser read the file. The producer of such a figure writes the sample count it came
from beside it (`n`, `requests`, `steps`), which says why it is null."""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import yaml

from .errors import InputError


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_path, 0o666 & ~umask)   # mkstemp makes 0600; outputs get the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def staged_dir(out_dir: str | Path) -> Iterator[Path]:
    """Yield a temporary directory beside `out_dir`; if the block succeeds, move every file
    written there to the same place under `out_dir` (each by a rename). On an error nothing
    reaches `out_dir`. For outputs written piece by piece (large per-request files)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        yield stage
        for item in sorted(stage.rglob("*")):
            if item.is_file():
                target = out_dir / item.relative_to(stage)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(item, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def path_or_shipped(name_or_path: str | Path, folder: Path, suffix: str, what: str,
                    shipped: list[str]) -> Path:
    """`name_or_path` if it exists, else `folder/NAME+suffix`; InputError listing `shipped` if neither."""
    path = Path(name_or_path)
    if path.exists():
        return path
    candidate = folder / f"{name_or_path}{suffix}"
    if candidate.exists():
        return candidate
    raise InputError(f"no such file, and no {what} of that name ({', '.join(shipped) or 'none'})",
                     file=name_or_path)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write text to `path` via a temporary file and a rename."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def strict_json_value(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN, +-Infinity; also numpy scalars and arrays)
    replaced by None, tuples as lists: what strict JSON can hold."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json_value(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json_value(v) for v in obj]
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    tolist = getattr(obj, "tolist", None)          # numpy scalars and arrays
    if callable(tolist):
        return strict_json_value(tolist())
    return obj


def json_text(obj: Any, indent: int | None = None, **options: Any) -> str:
    """Strict JSON text of `obj` (non-finite floats as null; json.dumps `options` such as
    `separators`, `sort_keys`); the one place the product turns data into JSON."""
    return json.dumps(strict_json_value(obj), indent=indent, allow_nan=False, **options)


def json_line(obj: Any) -> str:
    """One JSON Lines record: strict JSON on one line, with its newline."""
    return json_text(obj) + "\n"


def write_json_atomic(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write strict JSON (json_text) to `path` atomically."""
    write_text_atomic(path, json_text(obj, indent=indent) + "\n")


def write_jsonl_atomic(path: str | Path, rows: Iterable[Any]) -> None:
    """Write JSON Lines (one strict record per row) to `path` atomically."""
    write_text_atomic(path, "".join(json_line(r) for r in rows))


def append_json_line(path: str | Path, obj: Any) -> None:
    """Append one strict JSON Lines record to `path` (a resumable log; readers drop a torn
    last line)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json_line(obj))


def write_yaml_atomic(path: str | Path, obj: Any) -> None:
    """Write YAML to `path` atomically, keeping key order."""
    write_text_atomic(path, yaml.safe_dump(obj, sort_keys=False, default_flow_style=None, width=100))


class LineMap:
    """Maps field paths ('step_time.seconds', 'tasks.chat.requests[3]') to 1-based lines.

    The map is built lazily from the document text on the first lookup, so reading a large
    valid file costs nothing extra; only error paths pay for the YAML composer.
    """

    def __init__(self, text: str | None = None) -> None:
        self._text = text
        self._lines: dict[str, int] | None = None
        self._root = 1

    def _build(self) -> dict[str, int]:
        if self._lines is None:
            self._lines = {}
            if self._text is not None:
                try:
                    node = yaml.compose(self._text)
                except (yaml.YAMLError, RecursionError):
                    node = None
                if node is not None:
                    self._root = node.start_mark.line + 1
                    _yaml_lines(node, "", self._lines)
        return self._lines

    def line(self, field: str | None) -> int | None:
        """Line of `field`, or of its closest recorded parent; the document's first line for a
        field the document lacks (a missing top-level key, the whole document)."""
        lines = self._build()
        while field:
            if field in lines:
                return lines[field]
            field = re.sub(r"(\.[^.\[]*|\[\d+\])$", "", field) if re.search(r"[.\[]", field) else None
        return None if self._text is None else self._root


def _yaml_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            out[key] = key_node.start_mark.line + 1
            _yaml_lines(value_node, key, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            key = f"{prefix}[{i}]"
            out[key] = item.start_mark.line + 1
            _yaml_lines(item, key, out)


def read_bytes(path: str | Path) -> bytes:
    """A file's bytes; a missing or unreadable file is an InputError naming it."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path) from None


def decode_utf8(data: bytes, path: str | Path, first_line: int = 1) -> str:
    """UTF-8 text of `data` (bytes of `path` from line `first_line` on); bytes that are not
    UTF-8 are an InputError naming the file and the line they are on."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + data.count(b"\n", 0, exc.start)
        raise InputError(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", file=path,
                         line=line) from None


def read_text(path: str | Path) -> str:
    """A text file's contents; a missing, unreadable or non-UTF-8 file is an InputError naming it."""
    return decode_utf8(read_bytes(path), path)


def parse_json(text: str, path: str | Path, line: int | None = None) -> Any:
    """json.loads with every failure (syntax, nesting too deep for the parser) as an InputError
    naming the file and the line (`line`: the line of a JSON Lines record)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = exc.lineno if line is None else line
        raise InputError(f"not valid JSON ({exc.msg})", file=path, line=at) from None
    except RecursionError:
        raise InputError("not valid JSON (nested too deeply)", file=path, line=line or 1) from None


def read_yaml(path: str | Path) -> tuple[Any, LineMap]:
    """Parse a YAML file; return the data and a LineMap for error messages."""
    path = Path(path)
    text = read_text(path)
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise InputError("invalid YAML: nested too deeply", file=path, line=1) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise InputError(f"invalid YAML: {getattr(exc, 'problem', exc)}", file=path, line=line) from None
    return data, LineMap(text)


def read_json(path: str | Path) -> tuple[Any, LineMap]:
    """Parse a JSON file; return the data and a LineMap of its top-level and nested keys."""
    path = Path(path)
    text = read_text(path)
    data = parse_json(text, path)
    # JSON is (nearly) a subset of YAML, so the YAML composer finds key lines on error paths.
    return data, LineMap(text)
