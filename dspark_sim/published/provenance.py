"""Provenance fields of the published cases: every group of numbers says how it was obtained."""
from __future__ import annotations

from ..profiles.validate import FieldChecker

# published: as printed; read: read off a figure; derived: computed from published numbers;
# assumed: not published (the `how` says why this value)
BASES = ("published", "read", "derived", "assumed")


def text(check: FieldChecker, spec: dict, name: str, prefix: str) -> str:
    """A required non-empty text field (provenance is never optional)."""
    value = check.require(spec, name, prefix)
    if not isinstance(value, str) or not value.strip():
        raise check.fail(f"{prefix}.{name}", "expected a non-empty text (provenance is required)")
    return value.strip()


def basis(check: FieldChecker, spec: dict, key: str) -> str:
    """`key.basis`, one of BASES."""
    value = text(check, spec, "basis", key)
    if value not in BASES:
        raise check.fail(f"{key}.basis", f"must be one of {', '.join(BASES)}, got {value!r}")
    return value
