"""Traces: schema and validation, generators, importers of public formats."""
from .schema import Trace, load_trace, write_trace

__all__ = ["Trace", "load_trace", "write_trace"]
