"""The target's frozen token embedding and LM head, shared by reference with a drafter.

Deliberately not an nn.Module: these tensors belong to the target, never appear in a
drafter's parameters or state dict, and are never stored in a drafter checkpoint. The LM
head is kept as its rows for the drafter's draft vocabulary.
"""
from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F


class FrozenTargetParts:
    """Embedding [V, d] and the draft-vocabulary rows of the LM head [Vd, d] of the target."""

    def __init__(self) -> None:
        self.embed_weight: torch.Tensor | None = None
        self.head_rows: torch.Tensor | None = None
        self._lm_head: torch.Tensor | None = None      # the target's whole LM head, by reference

    def bind(self, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor,
             vocab_ids: torch.Tensor) -> None:
        self.embed_weight = embed_weight.detach()
        self._lm_head = lm_head_weight.detach()
        self.head_rows = self._rows(vocab_ids)

    def _rows(self, vocab_ids: torch.Tensor) -> torch.Tensor:
        w = self._lm_head
        return w if vocab_ids.numel() == w.shape[0] else w[vocab_ids.long().to(w.device)]

    def rebind_vocab(self, vocab_ids: torch.Tensor) -> None:
        """Take the LM-head rows of a new draft vocabulary (e.g. after a state dict with other
        vocabulary ids was loaded), keeping the current device and dtype; no-op when unbound."""
        if self._lm_head is None or self.head_rows is None:
            return
        self.head_rows = self._rows(vocab_ids).to(device=self.head_rows.device, dtype=self.head_rows.dtype)

    def _need(self) -> None:
        if self.embed_weight is None or self.head_rows is None:
            raise RuntimeError("drafter is not bound to a target (call bind_target first)")

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        self._need()
        return F.embedding(tokens.long(), self.embed_weight)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [..., Vd]."""
        self._need()
        return F.linear(hidden, self.head_rows.to(hidden.dtype))

    def to(self, device: torch.device, dtype: torch.dtype) -> None:
        self._need()
        self.embed_weight = self.embed_weight.to(device)
        self.head_rows = self.head_rows.to(device=device, dtype=dtype)


def target_fingerprint(embed_weight: torch.Tensor) -> str:
    """A short hash of the target's embedding: its shape and where the extreme values of 64
    spread-out rows lie (stable across fp32 / bf16 copies of the same weights)."""
    w = embed_weight.detach()
    rows = torch.linspace(0, w.shape[0] - 1, 64).long().to(w.device)
    sample = w[rows].float()
    marks = torch.stack([sample.argmax(-1), sample.argmin(-1)], -1).cpu().numpy()
    h = hashlib.sha256(str(tuple(w.shape)).encode())
    h.update(marks.astype("int64").tobytes())
    return h.hexdigest()[:16]
