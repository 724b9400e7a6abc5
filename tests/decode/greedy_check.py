"""Greedy identity against `model.generate(do_sample=False)`, tolerating only floating-point ties."""
from __future__ import annotations

import warnings

import torch

TIE = 1e-4


def reference(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and per-step logits from transformers' own generate."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         do_sample=False, output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(prompt):].tolist(), [row[0].float() for row in out.logits]


def compare(ref: list[int], ref_logits: list[torch.Tensor], out: list[int], label: str) -> str | None:
    """None if identical; a description if they diverge at a tie; AssertionError otherwise."""
    if out == ref:
        return None
    j = next((k for k, (a, b) in enumerate(zip(ref, out)) if a != b), min(len(ref), len(out)))
    assert j < len(ref) and j < len(out), (
        f"{label}: one output is a strict prefix of the other (ref {len(ref)}, spec {len(out)} tokens)")
    top2 = torch.topk(ref_logits[j], 2).values
    gap = float(top2[0] - top2[1])
    assert gap <= TIE, (f"{label}: token {j} differs (reference {ref[j]}, speculative {out[j]}) "
                        f"although the reference's top-two logit gap is {gap:.3g} > {TIE}")
    note = f"{label}: diverged at token {j} on a floating-point tie (top-two gap {gap:.2e})"
    warnings.warn(note)
    return note
