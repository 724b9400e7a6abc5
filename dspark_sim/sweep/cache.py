"""Per-point result cache: one JSON file per point, named by the point's key, written atomically
as soon as the point finishes (an interrupted sweep loses only the points in flight)."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..fileio import write_json_atomic
from .spec import Point


class PointCache:
    """Rows of finished points under a directory (None: no cache)."""

    def __init__(self, directory: str | Path | None) -> None:
        self.directory = Path(directory) if directory is not None else None

    def path(self, key: str) -> Path | None:
        return self.directory / f"{key}.json" if self.directory is not None else None

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached metrics of a point, or None (missing or unreadable: recompute)."""
        path = self.path(key)
        if path is None or not path.exists():
            return None
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc.get("metrics") if doc.get("key") == key else None

    def put(self, key: str, point: Point, metrics: dict[str, Any]) -> None:
        """Store a finished point (its settings too, for whoever reads the file)."""
        path = self.path(key)
        if path is not None:
            write_json_atomic(path, {"key": key, "point": asdict(point), "metrics": metrics}, indent=None)
