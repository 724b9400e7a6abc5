"""The committed state of one request, as the speculative loop hands it to a drafter.

`tokens` holds every committed token (prompt + output); the last one is the *anchor*, the
token the next verification starts from. `features` holds, for every committed token except
the anchor, the target's hidden states at the drafter's tapped layers: the anchor's
features appear only after the target has processed it in the next step. Rejected positions
never enter the context; it only grows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


class FeatureBuffer:
    """A growable (length, taps, hidden) tensor: amortised O(1) appends, no re-concatenation."""

    def __init__(self) -> None:
        self._data: torch.Tensor | None = None
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def append(self, rows: torch.Tensor) -> None:
        """Append rows of shape (n, taps, hidden)."""
        n = rows.shape[0]
        if self._data is None:
            self._data = rows.new_empty((max(64, 2 * n), *rows.shape[1:]))
        elif self._len + n > self._data.shape[0]:
            bigger = self._data.new_empty((max(2 * self._data.shape[0], self._len + n),
                                           *self._data.shape[1:]))
            bigger[: self._len] = self._data[: self._len]
            self._data = bigger
        self._data[self._len: self._len + n] = rows
        self._len += n

    def view(self) -> torch.Tensor | None:
        """The rows appended so far (a view, valid until the next append), or None if none."""
        return None if self._data is None else self._data[: self._len]


@dataclass
class Context:
    """Committed tokens and the target features of all of them but the anchor."""

    tokens: list[int]
    prompt_len: int
    taps: tuple[int, ...] = ()
    _features: FeatureBuffer = field(default_factory=FeatureBuffer, repr=False)

    @property
    def anchor(self) -> int:
        """The last committed token, from which the next draft continues."""
        return self.tokens[-1]

    @property
    def features(self) -> torch.Tensor | None:
        """(len(tokens) - 1, len(taps), hidden) tapped target states, or None without taps."""
        return self._features.view()

    def commit(self, tokens: list[int], features: torch.Tensor | None) -> None:
        """Append newly committed tokens and the features of the positions processed before them."""
        self.tokens.extend(tokens)
        if features is not None:
            self._features.append(features)
