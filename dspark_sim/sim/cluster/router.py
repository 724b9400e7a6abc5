"""Routing an arrival to a replica: round-robin, or the fewest outstanding requests."""
from __future__ import annotations

import numpy as np

from ..engines.replica import ReplicaBase

ROUTERS = ("round-robin", "least-outstanding")
ROUTER_ALIASES = {"rr": "round-robin", "round-robin": "round-robin",
                  "lo": "least-outstanding", "least-outstanding": "least-outstanding"}


class Router:
    """Chooses a replica for each arrival: round-robin, or the fewest outstanding requests
    (routed and not finished; ties go to the lowest index)."""

    def __init__(self, kind: str, replicas: list[ReplicaBase]) -> None:
        self.kind = kind
        self.replicas = replicas

    def route(self, rid: int, t_ns: int) -> ReplicaBase:
        if self.kind == "round-robin":
            return self.replicas[rid % len(self.replicas)]
        loads = [rep.outstanding_at(t_ns) for rep in self.replicas]
        return self.replicas[int(np.argmin(loads))]

    def candidate_after(self, rid: int, replica: ReplicaBase) -> int | None:
        """First request index >= rid that may be routed to `replica` (None: none left)."""
        n = len(self.replicas)
        if self.kind == "round-robin" and n > 1:
            rid += (replica.index - rid) % n
        return rid
