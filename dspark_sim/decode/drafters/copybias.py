"""Copy bias: a parameter-free sequential term that any trained drafter can add to its logits.

At draft slot k the history is the committed tokens plus the drafts 1..k-1. If the last two
tokens of that history occurred together earlier, the token that followed their latest earlier
occurrence (the copy candidate) gets `bigram` added to its logit; failing that, the token after
the latest earlier occurrence of the last token alone gets `unigram`. This is prompt lookup
(n-gram copying) folded into the draft distribution instead of replacing the drafter: a strong
bias makes the drafter copy wherever the history repeats and draft on its own elsewhere.
The draft distribution q the verifier sees includes the bias, so decoding stays lossless.
"""
from __future__ import annotations


class CopyIndex:
    """Latest following position of every bigram and unigram of a growing token list."""

    def __init__(self) -> None:
        self._tokens: list[int] = []
        self._after1: dict[int, int] = {}
        self._after2: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._tokens)

    def extend(self, tokens: list[int]) -> None:
        """Append committed tokens (each position j >= 1 registers what follows tokens[j-1])."""
        t = self._tokens
        for tok in tokens:
            j = len(t)
            t.append(int(tok))
            if j >= 1:
                self._after1[t[j - 1]] = j
            if j >= 2:
                self._after2[(t[j - 2], t[j - 1])] = j

    def candidate(self, drafted: list, bigram: bool = True, unigram: bool = True
                  ) -> tuple[int, int] | None:
        """(token, 2 or 1) copied after the latest earlier match of the history's last two
        (else last one) tokens, the history being the committed tokens plus `drafted` (ints or
        one-element tensors)."""
        m, d = len(self._tokens), len(drafted)
        n = m + d
        if n < 2:
            return None
        lo = max(0, m - 2)                     # tail of the history held in a list
        tail = self._tokens[lo:] + [int(x) for x in drafted]

        def at(i: int) -> int:
            return tail[i - lo]

        last, prev = at(n - 1), at(n - 2)
        if bigram and n >= 3:
            # Matches whose following token is a draft (position >= m), latest first...
            for i in range(n - 2, max(m - 1, 1) - 1, -1):
                if at(i) == last and at(i - 1) == prev:
                    return at(i + 1), 2
            # ...then matches wholly among the committed tokens.
            j = self._after2.get((prev, last))
            if j is not None:
                return self._tokens[j], 2
        if unigram:
            for i in range(n - 2, max(m - 1, 0) - 1, -1):
                if at(i) == last:
                    return at(i + 1), 1
            j = self._after1.get(last)
            if j is not None:
                return self._tokens[j], 1
        return None
