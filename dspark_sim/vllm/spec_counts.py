"""vLLM's spec-decode tallies and what they say: per-position conditional acceptance with CIs.

The tallies are those vLLM keeps (v1/spec_decode/metrics.py `SpecDecodingStats.observe_draft`):
every verify step that had drafts adds 1 to `num_drafts`, its proposed drafts to
`num_draft_tokens`, its accepted drafts `a` to `num_accepted_tokens`, and 1 to
`accepted_per_pos[i]` for each i < a. Steps without drafts are not counted at all.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..profiles.acceptance import TaskAcceptance

Z95 = 1.959963984540054   # two-sided 95% normal quantile


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when there are no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    z2n = z * z / trials
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / trials + z2n / (4 * trials)) / (1 + z2n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class PositionAcceptance:
    """P(draft k accepted | drafts before it accepted) at one position, with its 95% CI."""

    position: int      # 0-based draft position (vLLM's `position` label)
    accepted: int      # steps that accepted this position
    reached: int       # steps that accepted every earlier position (num_drafts for position 0)
    rate: float        # accepted / reached; 0 when no step reached the position
    ci95: tuple[float, float]


@dataclass
class SpecDecodeCounts:
    """The four spec-decode tallies of vLLM, for a gamma of `gamma` drafts per step."""

    gamma: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.accepted_per_pos:
            self.accepted_per_pos = [0] * self.gamma

    def observe(self, drafted: int, accepted: int) -> None:
        """Count one verify step that had `drafted` drafts and accepted `accepted` of them."""
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        for i in range(accepted):
            self.accepted_per_pos[i] += 1

    def add(self, other: "SpecDecodeCounts") -> "SpecDecodeCounts":
        """The tallies of both (same gamma)."""
        if other.gamma != self.gamma:
            raise ValueError(f"cannot add counts of gamma {other.gamma} to gamma {self.gamma}")
        return SpecDecodeCounts(self.gamma, self.num_drafts + other.num_drafts,
                                self.num_draft_tokens + other.num_draft_tokens,
                                self.num_accepted_tokens + other.num_accepted_tokens,
                                [a + b for a, b in zip(self.accepted_per_pos, other.accepted_per_pos)])

    @property
    def mean_acceptance_length(self) -> float:
        """vLLM's mean acceptance length: 1 + accepted drafts per verify step with drafts."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def draft_fill(self) -> float:
        """Drafts proposed per step over gamma (< 1 when the drafter proposed short runs)."""
        return self.num_draft_tokens / (self.num_drafts * self.gamma) if self.num_drafts else 0.0

    def positions(self) -> list[PositionAcceptance]:
        """Conditional acceptance per position: accepted_per_pos[k] / accepted_per_pos[k-1]."""
        out = []
        reached = self.num_drafts
        for k, accepted in enumerate(self.accepted_per_pos):
            rate = accepted / reached if reached else 0.0
            out.append(PositionAcceptance(k, accepted, reached, rate, wilson_interval(accepted, reached)))
            reached = accepted
        return out

    def parametric(self) -> TaskAcceptance:
        """The parametric task acceptance (formats.md `position_accept`) these tallies give."""
        return TaskAcceptance("parametric", position_accept=np.array([p.rate for p in self.positions()]))

    def summary(self) -> dict[str, Any]:
        """The tallies and their per-position estimates, as kept in an imported profile."""
        pos = self.positions()
        return {"num_drafts": self.num_drafts, "num_draft_tokens": self.num_draft_tokens,
                "num_accepted_tokens": self.num_accepted_tokens,
                "accepted_per_pos": list(self.accepted_per_pos),
                "mean_acceptance_length": round(self.mean_acceptance_length, 6),
                "draft_fill": round(self.draft_fill, 6),
                "position_accept": [round(p.rate, 6) for p in pos],
                "position_accept_ci95": [[round(p.ci95[0], 6), round(p.ci95[1], 6)] for p in pos]}
