"""Errors the CLI reports without a traceback (exit status 2)."""
from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad user input: names the file, line and field when they are known."""

    def __init__(self, message: str, file: str | Path | None = None,
                 line: int | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = None if file is None else str(file)
        self.line = line
        self.field = field

    def __reduce__(self):
        # keep file, line and field when the error crosses a process boundary (sweep workers)
        return (type(self), (self.message, self.file, self.line, self.field))

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
            where += ": "
        field = f"field '{self.field}': " if self.field else ""
        return f"{where}{field}{self.message}"


class EngineError(RuntimeError):
    """A serving engine we drive (vLLM, AIPerf) failed or went away; the message carries the end
    of its log. The CLI reports it without a traceback (exit status 1)."""
