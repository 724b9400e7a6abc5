"""The draft vocabulary: the token set a drafter may propose (EAGLE-3 style).

Drafters score only these tokens through the matching rows of the target's frozen LM head
(the most frequent tokens of the training data cover nearly all of the target's
probability mass), which makes both training and drafting several times cheaper on a
small target whose LM head dominates the cost. A token outside the set is never drafted:
its draft probability is 0, which the lossless verification rules handle like any other
value. `size = 0` (or >= V) means the full vocabulary.
"""
from __future__ import annotations

import torch
from torch import nn


class DraftVocab(nn.Module):
    """ids [Vd] of the draftable tokens and the inverse map token -> row (Vd = outside)."""

    def __init__(self, vocab_size: int, size: int) -> None:
        super().__init__()
        n = size if 0 < size < vocab_size else vocab_size
        self.vocab_size = vocab_size
        self.register_buffer("ids", torch.arange(n, dtype=torch.int32))
        self.register_buffer("row", torch.arange(vocab_size, dtype=torch.long).clamp(max=n),
                             persistent=False)

    @property
    def size(self) -> int:
        return self.ids.numel()

    @property
    def is_full(self) -> bool:
        return self.size == self.vocab_size

    def set_ids(self, ids: torch.Tensor) -> None:
        """Choose the draftable tokens (e.g. the most frequent ones of the training data)."""
        ids = torch.as_tensor(ids).to(device=self.ids.device, dtype=torch.int32)
        if ids.numel() != self.size or ids.unique().numel() != ids.numel():
            raise ValueError(f"need {self.size} distinct token ids")
        self.ids.copy_(ids)
        self.row.fill_(self.size)
        self.row[ids.long()] = torch.arange(self.size, device=self.row.device)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # noqa: ANN001
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.set_ids(self.ids.clone())

    def index(self, tokens: torch.Tensor) -> torch.Tensor:
        """Row of each token in the draft vocabulary (`size` for tokens outside it)."""
        return self.row[tokens.long()]

    def to_full(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., Vd] as full-vocabulary logits (-inf outside)."""
        if self.is_full:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy(-1, self.ids.long(), logits)
