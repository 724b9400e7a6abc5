"""Plain-data configuration of a trained drafter (stored as JSON next to its weights)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..target import default_taps

KINDS = ("mtp1", "eagle3", "dflash", "dspark")
# Drafters that make one sequential pass per drafted token (`per_draft: true` in a profile).
AUTOREGRESSIVE_KINDS = ("mtp1", "eagle3")
# Block drafters: one pass over a block of as many slots as drafts asked for, then per-draft
# work (the output head over the drafts made, DSpark's sequential head).
BLOCK_KINDS = ("dflash", "dspark")


def draft_depths(kind: str, gamma: int) -> tuple[int, ...]:
    """Drafts per request at which to time a drafter of `kind` drafting up to `gamma`: every
    depth for block drafters (their cost depends on the block), else gamma alone."""
    return tuple(range(1, gamma + 1)) if kind in BLOCK_KINDS else (gamma,)


@dataclass
class DrafterConfig:
    """Architecture and target binding of one drafter; everything a checkpoint needs."""

    kind: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_target_layers: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    num_layers: int = 1
    taps: list[int] = field(default_factory=list)
    gamma: int = 7
    draft_vocab: int = 8192            # draftable tokens (most frequent); 0 = full vocabulary
    # DSpark sequential head: "markov" | "rnn", rank r (0 = none: the DFlash backbone alone)
    seq_head: str = "markov"
    seq_rank: int = 64
    confidence: bool = True
    target: str = ""
    target_fingerprint: str = ""
    # Sequential temperature scaling of the confidence logits, by sampling temperature.
    sts: dict[str, list[float]] = field(default_factory=dict)
    # The confidence calibration of slots the copy bias applied to, [Tc_k, d_k] per position
    # (c_k = sigmoid(z_k / Tc_k + d_k), calibration/sts.py), by sampling temperature.
    sts_copy: dict[str, list[list[float]]] = field(default_factory=dict)
    # Copy bias [bigram, unigram] added to the copied token's logit (copybias.py); [] = off.
    copy_bias: list[float] = field(default_factory=list)
    # Draft slots the copy bias applies to: 0 = every slot; 1 = the first only, which reads
    # committed tokens alone and so keeps a block drafter parallel (one pass, no slot loop).
    copy_slots: int = 0
    # Confidence of a drafter without a confidence head: the draft's own probability of each
    # drafted token (EAGLE-2's observation: it tracks the acceptance rate), calibrated like a
    # head's by STS. Set for published EAGLE-3 checkpoints (eagle3_published.py).
    draft_confidence: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown drafter kind {self.kind!r}; expected one of {KINDS}")
        if self.kind == "mtp1":
            self.gamma = 1
        if self.gamma < 1:
            raise ValueError("gamma must be >= 1")
        if len(self.copy_bias) > 2 or any(b < 0 for b in self.copy_bias):
            raise ValueError("copy_bias is [bigram, unigram], both >= 0")
        if self.copy_slots < 0:
            raise ValueError("copy_slots must be >= 0 (0 = every draft slot)")

    @property
    def has_confidence(self) -> bool:
        return (self.kind == "dspark" and self.confidence) or self.draft_confidence

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DrafterConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown drafter config fields: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def for_target(cls, kind: str, target_config: Any, **overrides: Any) -> "DrafterConfig":
        """A drafter shaped like the target's layers (width, heads, MLP), with defaults."""
        tc = target_config
        n_layers = int(tc.num_hidden_layers)
        rope = getattr(tc, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0)))
        head_dim = int(getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads)
        base: dict[str, Any] = dict(
            kind=kind, hidden_size=int(tc.hidden_size), num_heads=int(tc.num_attention_heads),
            num_kv_heads=int(getattr(tc, "num_key_value_heads", tc.num_attention_heads)),
            head_dim=head_dim, intermediate_size=int(tc.intermediate_size),
            vocab_size=int(tc.vocab_size), num_target_layers=n_layers,
            rms_norm_eps=float(getattr(tc, "rms_norm_eps", 1e-5)), rope_theta=theta,
            num_layers=2 if kind in ("dflash", "dspark") else 1,
            taps=list(default_taps(n_layers)),
        )
        base.update(overrides)
        return cls(**base)
