"""What a sweep runs: the load grid and the points (policy x load x seed), each with the key
that names its cached result."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import InputError

LOAD_MODES = ("concurrency", "rate")


@dataclass(frozen=True)
class Point:
    """One simulation: a policy at one load with one seed. Paths are resolved profile files."""

    trace: str                      # trace JSONL path
    hw: str                         # hardware profile YAML path
    policy: str
    acceptance: str | None          # acceptance profile JSON path (None for ar)
    load_mode: str                  # "concurrency" (closed loop of users) | "rate" (trace x factor)
    load: float                     # users, or the arrival-rate factor
    seed: int = 0
    replicas: int = 1
    router: str = "round-robin"
    requests_per_user: int = 16     # closed loop: requests each user sends
    warmup: int = 1                 # closed loop: first requests of each user left out of metrics
    think_s: float = 0.0            # closed loop: pause between a finish and the user's next request
    max_requests: int | None = None  # only the trace's first N requests
    prefill: str = "local"          # "disaggregated": prompts prefilled elsewhere, replicas decode
    sim_engine: str = "fast"        # the simulator's engine (sim/engines/capability.py ENGINES)
    kv_semantics: str = "reserve"   # "blocks": vLLM's paged KV with preemption
    schedule: str | None = None     # vllm-schedule: the batch-size schedule as vLLM's JSON

    def key(self) -> str:
        """Hash of everything the result depends on: the inputs' bytes, the point's settings
        and the simulator's source (sim_version)."""
        doc = asdict(self)
        doc.pop("sim_engine")       # every engine gives the same bytes
        doc["trace"] = file_digest(self.trace)
        doc["hw"] = file_digest(self.hw)
        doc["acceptance"] = file_digest(self.acceptance) if self.acceptance else None
        doc["sim_version"] = sim_version()
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]

    def label(self) -> str:
        load = f"{int(self.load)} users" if self.load_mode == "concurrency" else f"rate x{self.load:g}"
        return f"{self.policy} {load} seed {self.seed} ({self.replicas} replica(s))"


@dataclass
class LoadGrid:
    """The loads of a sweep: users (concurrency) or arrival-rate factors (rate)."""

    mode: str
    values: list[float] = field(default_factory=list)


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes (memoised by path, size and mtime)."""
    p = Path(path)
    st = p.stat()
    return _digest(str(p.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=256)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@lru_cache(maxsize=1)
def sim_version() -> str:
    """Package version + hash of the simulator's and the point metrics' source files (point.py
    and the queue-growth measure of overload.py): a change to either invalidates cached points."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(__version__.encode())
    for path in sorted((root / "sim").glob("*.py")) + [root / "sweep" / n for n in ("point.py", "overload.py")]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}"


def load_grid(mode: str, points: int, low: float, high: float) -> LoadGrid:
    """`points` loads spaced geometrically from low to high (users rounded to distinct integers)."""
    if mode not in LOAD_MODES:
        raise InputError(f"unknown load mode {mode!r}; choose {' or '.join(LOAD_MODES)}", field="load")
    if points < 1:
        raise InputError(f"must be >= 1, got {points}", field="points")
    if not (0 < low <= high) or not np.isfinite(high):
        raise InputError(f"need 0 < LOW <= HIGH, got {low:g},{high:g}", field="load-range")
    values = np.geomspace(low, high, points) if points > 1 else np.array([high])
    if mode == "concurrency":
        if low < 1:
            raise InputError(f"users must be >= 1, got {low:g}", field="load-range")
        return LoadGrid(mode, [float(v) for v in sorted(set(np.rint(values).astype(int).tolist()))])
    return LoadGrid(mode, [float(f"{v:.6g}") for v in values])


def parse_range(text: str | None) -> tuple[float, float] | None:
    """'LOW,HIGH' -> (low, high); None stays None."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise InputError(f"expected LOW,HIGH (two numbers), got {text!r}", field="load-range") from None
    return low, high


def parse_numbers(text: str, field_name: str) -> list[float]:
    """'80,120' -> [80.0, 120.0] (positive numbers)."""
    out = []
    for part in filter(None, (s.strip() for s in text.split(","))):
        try:
            value = float(part)
        except ValueError:
            raise InputError(f"not a number: {part!r}", field=field_name) from None
        if not value > 0:
            raise InputError(f"must be > 0, got {part}", field=field_name)
        out.append(value)
    if not out:
        raise InputError("no value given", field=field_name)
    return out
