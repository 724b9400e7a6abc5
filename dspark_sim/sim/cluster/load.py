"""Load shapes besides a trace's own arrivals: a time-compressed trace, and a closed loop of users.

- `scale_arrivals(trace, f)`: every arrival time divided by f (f = 2 doubles the arrival
  rate; lengths and tasks unchanged).
- `ClosedLoop`: C users, each sending its next request when its previous one finishes (plus
  an optional think time). The users' requests take their lengths and tasks from the trace's
  rows in order, cycling: request k of user u is row (offset + k C + u) mod n. User u is
  served by replica u mod N (sticky sessions; the router does not apply). With
  `total_requests` N the loop sends N requests in all (rows 0..N-1: the first N mod C users
  send one more), as a benchmark client with a concurrency cap and N prompts does.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import InputError
from ...traces.schema import Trace


def scale_arrivals(trace: Trace, factor: float) -> Trace:
    """The same requests arriving `factor` times as fast (arrival_s / factor)."""
    if not factor > 0 or not np.isfinite(factor):
        raise InputError(f"must be a positive number, got {factor}", field="rate_scale")
    return Trace(ids=trace.ids, arrival_s=np.asarray(trace.arrival_s, dtype=float) / factor,
                 prompt_tokens=trace.prompt_tokens, output_tokens=trace.output_tokens,
                 task=trace.task, name=trace.name, **trace.prefix_fields())


@dataclass(frozen=True)
class ClosedLoop:
    """C users each sending `requests_per_user` requests back to back (think time between)."""

    users: int
    requests_per_user: int
    think_s: float = 0.0
    offset: int = 0             # trace row of user 0's first request
    total_requests: int | None = None   # N requests in all (None: users x requests_per_user)

    def __post_init__(self) -> None:
        if self.users < 1:
            raise InputError(f"must be >= 1, got {self.users}", field="users")
        if self.requests_per_user < 1:
            raise InputError(f"must be >= 1, got {self.requests_per_user}", field="requests_per_user")
        if not self.think_s >= 0 or not np.isfinite(self.think_s):
            raise InputError(f"must be >= 0, got {self.think_s}", field="think_s")
        if self.total_requests is not None and not 1 <= self.total_requests <= self.users * self.requests_per_user:
            raise InputError(f"must be 1..users x requests_per_user ({self.users * self.requests_per_user}), "
                             f"got {self.total_requests}", field="total_requests")

    @property
    def count(self) -> int:
        """Requests the loop sends in all."""
        return self.users * self.requests_per_user if self.total_requests is None else self.total_requests

    def requests(self, trace: Trace) -> Trace:
        """Row k*C + u = request k of user u, lengths and task from the trace (arrivals 0:
        the simulation sets them as the users send)."""
        n = len(trace)
        if n == 0:
            raise InputError("the trace has no requests", field="trace")
        count = self.count
        src = (self.offset + np.arange(count)) % n
        user = np.arange(count) % self.users
        k = np.arange(count) // self.users
        ids = np.array([f"u{u}.{j}:{trace.ids[s]}" for u, j, s in zip(user, k, src)], dtype=object)
        return Trace(ids=ids, arrival_s=np.zeros(count), prompt_tokens=trace.prompt_tokens[src],
                     output_tokens=trace.output_tokens[src], task=trace.task[src], name=trace.name,
                     **trace.prefix_fields(src))

    def user_of(self, rows: np.ndarray) -> np.ndarray:
        """User of each request row."""
        return np.asarray(rows) % self.users

    def index_of(self, rows: np.ndarray) -> np.ndarray:
        """Position of each request row in its user's sequence (0 = the user's first)."""
        return np.asarray(rows) // self.users
