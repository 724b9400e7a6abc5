"""Small field checks shared by the profile readers; each raises InputError naming the field."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import LineMap


class FieldChecker:
    """Validates fields of one parsed document and reports FILE:LINE and the field on failure."""

    def __init__(self, file: str | Path | None, lines: LineMap | None = None) -> None:
        self.file = file
        self.lines = lines or LineMap()

    def fail(self, field: str, message: str) -> InputError:
        """Build the InputError for `field` (raise it at the call site)."""
        return InputError(message, file=self.file, line=self.lines.line(field), field=field)

    def mapping(self, value: Any, field: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(field, f"expected a mapping, got {type(value).__name__}")
        return value

    def require(self, data: dict, key: str, prefix: str = "") -> Any:
        field = f"{prefix}.{key}" if prefix else key
        if key not in data:
            raise self.fail(prefix or key, f"missing required field '{field}'")
        return data[key]

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(field, "expected a non-empty string")
        return value

    def number(self, value: Any, field: str, minimum: float | None = None,
               exclusive: bool = False, maximum: float | None = None) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.fail(field, f"expected a finite number, got {value!r}")
        if minimum is not None and (value <= minimum if exclusive else value < minimum):
            raise self.fail(field, f"must be {'>' if exclusive else '>='} {minimum}, got {value!r}")
        if maximum is not None and value > maximum:
            raise self.fail(field, f"must be <= {maximum}, got {value!r}")
        return float(value)

    def integer(self, value: Any, field: str, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(field, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(field, f"must be >= {minimum}, got {value!r}")
        return value

    def number_list(self, value: Any, field: str, minimum: float | None = None,
                    exclusive: bool = False, maximum: float | None = None) -> list[float]:
        if not isinstance(value, list) or not value:
            raise self.fail(field, "expected a non-empty list of numbers")
        return [self.number(v, f"{field}[{i}]", minimum, exclusive, maximum) for i, v in enumerate(value)]

    def increasing(self, values: list[float], field: str) -> None:
        for i in range(1, len(values)):
            if values[i] <= values[i - 1]:
                raise self.fail(f"{field}[{i}]", "values must be strictly increasing")

    def schema(self, data: dict, expected: str) -> None:
        found = data.get("schema")
        if found != expected:
            raise self.fail("schema", f"expected schema '{expected}', found {found!r}")
