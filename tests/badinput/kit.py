"""The bad-input corpus harness: a case is a set of small input files, a command line, and
where the error must point (file, line, field). Each case runs the real CLI in-process with
the working directory set to a fresh folder, and checks exit status 2, a one-line message
naming FILE:LINE and the field, no traceback, and nothing written (no output, no temp file)."""
from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from tests.strict_json import register_input

INPUT_PLACEHOLDER = "{d}"


@dataclass(frozen=True)
class Case:
    """One bad input. `files` maps a relative name to its text (str) or bytes; the argv may
    refer to the case folder as {d}. The message must name `file` ({d}-relative; None: no file,
    e.g. a bad option), `line` (None where lines do not apply: binary files, directories,
    missing files) and `field` (None where no field applies: a line that is not JSON)."""

    id: str
    files: dict[str, str | bytes]
    argv: tuple[str, ...]
    file: str | None
    line: int | None
    field: str | None
    dirs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "argv", tuple(self.argv))


@dataclass
class Outcome:
    rc: int | None
    stderr: str
    crash: str = ""
    written: list[str] = field(default_factory=list)


def changed(row: dict, **changes) -> dict:
    """A copy of `row` with keys set (a value of None removes the key)."""
    out = dict(row)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def lines(*rows: object) -> str:
    """JSONL text: dict rows are dumped, str rows taken as they are."""
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def write_inputs(case: Case, folder: Path) -> set[Path]:
    made = set()
    for d in case.dirs:
        (folder / d).mkdir(parents=True, exist_ok=True)
        made.add(folder / d)
    for name, content in case.files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        made.add(path.parent)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        register_input(path)                   # bad input on purpose (tests/strict_json.py)
        made.add(path)
    return made


def run_case(case: Case, folder: Path, capsys) -> Outcome:
    """Write the case's files under `folder`, run the CLI there, report what happened."""
    from dspark_sim.cli import main

    inputs = write_inputs(case, folder)
    argv = [a.replace(INPUT_PLACEHOLDER, str(folder)) for a in case.argv]
    before = os.getcwd()
    os.chdir(folder)
    capsys.readouterr()
    rc, crash = None, ""
    try:
        rc = main(argv)
    except SystemExit as exc:          # click exits for usage errors outside standalone mode
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:              # noqa: BLE001 - a traceback is the failure we look for
        crash = traceback.format_exc()
    finally:
        os.chdir(before)
    err = capsys.readouterr().err
    written = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                     if p not in inputs and p != folder)
    return Outcome(rc, err, crash, written)


def problems(case: Case, outcome: Outcome, folder: Path) -> list[str]:
    """What is wrong with the outcome of a bad-input case (empty: it passes)."""
    out = []
    if outcome.crash:
        return [f"traceback:\n{outcome.crash}"]
    if outcome.rc != 2:
        out.append(f"exit status {outcome.rc}, expected 2")
    if "Traceback" in outcome.stderr:
        out.append("traceback on stderr")
    errors = [ln for ln in outcome.stderr.splitlines() if ln.startswith("error: ")]
    if len(errors) != 1:
        out.append(f"expected one 'error: ' line on stderr, got {outcome.stderr!r}")
        return out
    msg = errors[0]
    if case.file is not None:
        where = str(folder / case.file)
        if case.line is not None:
            where += f":{case.line}"
        if f"{where}: " not in msg and not msg.endswith(where):
            out.append(f"message does not name {where!r}: {msg!r}")
    if case.field is not None and f"field '{case.field}'" not in msg:
        out.append(f"message does not name field {case.field!r}: {msg!r}")
    if outcome.written:
        out.append(f"wrote {outcome.written}")
    return out
