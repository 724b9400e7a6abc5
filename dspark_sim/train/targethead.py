"""The target's output path (final RMSNorm + LM head) applied to cached pre-norm hidden
states: it gives the target's next-token distributions at train time without storing them."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


class TargetHead:
    """p_target(. | prefix up to i) = softmax(LMhead(RMSNorm(h_last_i)))."""

    def __init__(self, norm_weight: torch.Tensor, eps: float, lm_head_weight: torch.Tensor) -> None:
        self.norm_weight = norm_weight.detach()
        self.eps = float(eps)
        self.lm_head_weight = lm_head_weight.detach()

    @classmethod
    def from_model(cls, model: Any) -> "TargetHead":
        """Take the final norm and LM head of a transformers causal LM."""
        norm = model.get_decoder().norm
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
        return cls(norm.weight, eps, model.get_output_embeddings().weight)

    def _normed(self, last_hidden: torch.Tensor) -> torch.Tensor:
        h = last_hidden.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight.float()
        return h.to(self.lm_head_weight.dtype)

    @torch.no_grad()
    def logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        """Full-vocabulary logits [..., V] (float32)."""
        return F.linear(self._normed(last_hidden), self.lm_head_weight).float()

    @torch.no_grad()
    def lse_and_top(self, last_hidden: torch.Tensor, chunk: int = 512
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log-sum-exp of the logits and the argmax token at every position [L] (chunked)."""
        lse, top = [], []
        for s in range(0, last_hidden.shape[0], chunk):
            lg = self.logits(last_hidden[s:s + chunk])
            lse.append(torch.logsumexp(lg, -1))
            top.append(lg.argmax(-1))
        return torch.cat(lse), torch.cat(top)

    @torch.no_grad()
    def sub_logprobs(self, last_hidden: torch.Tensor, rows: torch.Tensor, lse: torch.Tensor
                     ) -> torch.Tensor:
        """log p_target over the draft vocabulary [..., Vd], exactly normalised by the cached
        full-vocabulary log-sum-exp `lse` [...]."""
        w = rows if rows.dim() == 2 else self.lm_head_weight[rows.long()]
        return F.linear(self._normed(last_hidden), w).float() - lse.float().unsqueeze(-1)
