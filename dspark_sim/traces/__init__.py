"""Traces: schema and validation, generators, importers of public formats, shipped traces."""
from pathlib import Path

from .schema import Trace, load_trace, write_trace

SHIPPED_TRACES_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"


def shipped_trace(name: str) -> Path:
    """Path of a trace shipped in the package (data/traces/NAME.jsonl; README.md there says how
    each was made)."""
    from ..fileio import path_or_shipped

    names = sorted(p.stem for p in SHIPPED_TRACES_DIR.glob("*.jsonl"))
    return path_or_shipped(name, SHIPPED_TRACES_DIR, ".jsonl", "shipped trace", names)


__all__ = ["SHIPPED_TRACES_DIR", "Trace", "load_trace", "shipped_trace", "write_trace"]
