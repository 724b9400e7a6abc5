"""Drafters and their registry (`--drafter NAME` or a checkpoint path)."""
from .base import (Draft, Drafter, NoDrafter, check_drafter, drafter_help, drafter_names,
                   make_drafter, register_checkpoint_kind, register_drafter)
from .ngram import NGramDrafter

register_drafter("none", NoDrafter, "no drafts: plain autoregressive decoding")
register_drafter("ngram", NGramDrafter,
                 "prompt lookup (longest n-gram <= 4 first, most recent occurrence)")

from . import eagle3_published, trained  # noqa: E402  (registers mtp1, eagle3, dflash, dspark)

trained.register()
eagle3_published.register()

__all__ = ["Draft", "Drafter", "NoDrafter", "NGramDrafter", "check_drafter", "drafter_help",
           "drafter_names", "make_drafter", "register_checkpoint_kind", "register_drafter"]
