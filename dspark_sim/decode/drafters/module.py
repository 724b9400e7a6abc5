"""Common base of the trained drafter modules: config, draft vocabulary, frozen target parts."""
from __future__ import annotations

import torch
from torch import nn

from .config import DrafterConfig
from .frozen import FrozenTargetParts
from .vocab import DraftVocab


class DrafterModule(nn.Module):
    """A drafter's own layers; the embedding and LM head are bound from the target."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab = DraftVocab(cfg.vocab_size, cfg.draft_vocab)
        self.frozen = FrozenTargetParts()
        # a loaded state dict may carry other draft-vocabulary ids than the ones bound: the
        # LM-head rows must follow them, or logits row j scores another token than vocab.ids[j]
        self.register_load_state_dict_post_hook(lambda module, _keys: module.frozen.rebind_vocab(module.vocab.ids))

    def bind_target(self, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        """Share the target's frozen embedding and LM head (call after the vocabulary is set)."""
        self.frozen.bind(embed_weight, lm_head_weight, self.vocab.ids)

    def head_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., Vd] of final hidden states (already normed)."""
        return self.frozen.logits(h)
