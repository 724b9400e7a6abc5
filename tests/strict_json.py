"""Strict JSON checking of the files the test suite makes the product write.

`tests/conftest.py` walks every `.json` / `.jsonl` file under pytest's temporary directories
(each test's own `tmp_path` after the test, everything else at the end of the session) and
parses it with a strict parser: standard JSON only, so `NaN`, `Infinity` and `-Infinity` (which
Python's json module writes and reads by default, but jq, JavaScript and other parsers refuse)
fail. Files a test writes itself as deliberately bad *input* (the bad-input corpus, fuzzing)
are registered with `register_input` and skipped: they are not output of the product.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

JSON_SUFFIXES = (".json", ".jsonl")
_INPUTS: set[str] = set()


def register_input(path: str | Path) -> None:
    """Mark a file the test wrote itself as input (not checked as product output)."""
    _INPUTS.add(os.path.realpath(path))


def _refuse_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity."""
    return json.loads(text, parse_constant=_refuse_constant)


def strict_json_error(path: Path) -> str | None:
    """Why `path` is not strict JSON (JSON Lines for .jsonl), or None when it is."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"unreadable ({exc})"
    try:
        if path.suffix == ".jsonl":
            for lineno, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        strict_loads(line)
                    except ValueError as exc:
                        return f"line {lineno}: {exc}"
        else:
            strict_loads(text)
    except ValueError as exc:
        return str(exc)
    return None


def json_files(root: Path, checked: dict[str, tuple[int, int]]) -> list[Path]:
    """JSON files under `root` not registered as inputs and not checked before in the same
    state (size, mtime); temporary files of atomic writes (`.NAME.tmp`) are skipped."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if not name.endswith(JSON_SUFFIXES) or name.startswith("."):
                continue
            path = Path(dirpath) / name
            real = os.path.realpath(path)
            if real in _INPUTS:
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            state = (st.st_size, st.st_mtime_ns)
            if checked.get(real) == state:
                continue
            checked[real] = state
            out.append(path)
    return out


def violations(root: Path, checked: dict[str, tuple[int, int]]) -> list[str]:
    """'PATH: why' for every JSON file under `root` that is not strict JSON."""
    bad = []
    for path in json_files(root, checked):
        why = strict_json_error(path)
        if why is not None:
            bad.append(f"{path}: {why}")
    return bad
