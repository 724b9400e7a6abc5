"""Training objectives of the four drafters (method.md section 2-3).

- MTP-1: soft CE to the target's next-next-token distribution.
- Eagle3: soft CE per unrolled step j, weighted 0.8^j.
- DFlash: CE to the data tokens, block position k weighted exp(-(k-1)/4).
- DSpark: 0.1 CE + 0.9 TV + 1.0 BCE(confidence, 1 - TV detached and clamped), same weights;
  optionally plus `backbone` x (0.1 CE + 0.9 TV) of the backbone's logits without the
  sequential bias (a signal of its own for the parallel drafter; 0 by default, as in the paper).
Blocks use many anchors per packed row; an anchor's block sees only its own sequence's
context strictly before the anchor. Logits over the vocabulary are formed in checkpointed
chunks so memory stays at one chunk of [positions, V].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .batches import Batch
from .targethead import TargetHead


@dataclass
class LossWeights:
    """Weights and shapes of the objectives (defaults from the paper / DeepSpec)."""

    ce: float = 0.1
    tv: float = 0.9
    confidence: float = 1.0
    backbone: float = 0.0            # DSpark: weight of the bias-free backbone's own CE + TV
    position_decay: float = 4.0      # w_k = exp(-(k-1)/decay)
    step_decay: float = 0.8          # Eagle3 unroll step weight
    anchors_per_row: int = 256
    chunk: int = 1024                # positions per vocabulary chunk


def _head_terms(drafter, h: torch.Tensor, label_rows: torch.Tensor | None,
                tgt_hidden: torch.Tensor | None, tgt_lse: torch.Tensor | None,
                tgt_top: torch.Tensor | None, bias: torch.Tensor | None, head: TargetHead
                ) -> torch.Tensor:
    """Per position [M, 5]: CE to the label, soft CE to the target, TV(draft, target), top-1
    agreement with the target (or the label), and whether the label is draftable.

    Draft q lives on the draft vocabulary; the target p there is exactly normalised by the
    cached log-sum-exp, and the target mass outside the draft vocabulary counts in TV.
    """
    logits = drafter.output_logits(h).float()
    if bias is not None:
        logits = logits + bias.float()
    logq = torch.log_softmax(logits, dim=-1)
    n_rows = logq.shape[-1]
    zeros = logq.new_zeros(logq.shape[0])
    if label_rows is not None:
        drafted = label_rows < n_rows
        ce = -logq.gather(-1, label_rows.clamp(max=n_rows - 1).unsqueeze(-1)).squeeze(-1)
        ce = ce * drafted
    else:
        drafted, ce = zeros.bool(), zeros
    best = logq.argmax(-1)
    if tgt_hidden is None:
        agree = (best == label_rows).float() if label_rows is not None else zeros
        return torch.stack([ce, zeros, zeros, agree.detach(), drafted.float()], dim=-1)
    logp = head.sub_logprobs(tgt_hidden, drafter.frozen.head_rows, tgt_lse)
    p = logp.exp()
    outside = (1.0 - p.sum(-1)).clamp_min(0.0)
    soft_ce = -(p * logq).sum(-1)
    tv = 0.5 * ((logq.exp() - p).abs().sum(-1) + outside)
    agree = (drafter.vocab.ids[best].long() == tgt_top).float()
    return torch.stack([ce, soft_ce, tv, agree.detach(), drafted.float()], dim=-1)


def head_terms(drafter, head: TargetHead, chunk: int, h: torch.Tensor,
               label_rows: torch.Tensor | None = None, tgt_hidden: torch.Tensor | None = None,
               tgt_lse: torch.Tensor | None = None, tgt_top: torch.Tensor | None = None,
               bias: torch.Tensor | None = None) -> torch.Tensor:
    """`_head_terms` over [M, ...] inputs in checkpointed chunks of `chunk` positions."""
    out = []
    for s in range(0, h.shape[0], chunk):
        args = [None if x is None else x[s:s + chunk]
                for x in (h, label_rows, tgt_hidden, tgt_lse, tgt_top, bias)]
        fn = lambda *a: _head_terms(drafter, *a, head)  # noqa: E731
        if torch.is_grad_enabled():
            out.append(checkpoint(fn, *args, use_reentrant=False))
        else:
            out.append(fn(*args))
    return torch.cat(out) if out else h.new_zeros(0, 5)


# ---- anchors and block targets (DFlash / DSpark) --------------------------------------------
def sample_anchors(batch: Batch, n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to n anchors per row, uniformly among positions a whose next token (same sequence)
    is a response token; returns anchors [B, n] (sorted) and valid [B, n]."""
    seg, lm = batch.segment, batch.loss_mask
    cand = torch.zeros_like(lm)
    cand[:, :-1] = lm[:, 1:] & (seg[:, 1:] == seg[:, :-1]) & (seg[:, :-1] >= 0)
    scores = torch.rand(cand.shape, generator=gen).to(cand.device).masked_fill(~cand, 2.0)
    k = min(n, cand.shape[1])
    picked = scores.topk(k, dim=1, largest=False).indices
    valid = cand.gather(1, picked)
    picked = torch.where(valid, picked, torch.zeros_like(picked))
    order = torch.argsort(picked + (~valid) * cand.shape[1], dim=1)
    return picked.gather(1, order), valid.gather(1, order)


def block_targets(batch: Batch, anchors: torch.Tensor, valid: torch.Tensor, gamma: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """labels, label positions and a contiguous-prefix mask [B, N, gamma] for every block.

    Slot k (0-based) of the block at anchor a predicts the token at a+k+1, whose target
    distribution is the one computed at position a+k.
    """
    L = batch.tokens.shape[1]
    lab_pos = anchors.unsqueeze(-1) + 1 + torch.arange(gamma, device=anchors.device)
    inside = lab_pos < L
    safe = lab_pos.clamp(max=L - 1)
    b_idx = torch.arange(anchors.shape[0], device=anchors.device).view(-1, 1, 1)
    labels = batch.tokens[b_idx, safe]
    same = batch.segment[b_idx, safe] == batch.segment.gather(1, anchors).unsqueeze(-1)
    ok = inside & same & batch.loss_mask[b_idx, safe] & valid.unsqueeze(-1)
    ok = ok.long().cumprod(-1).bool()
    return labels, safe, ok


def position_weights(gamma: int, decay: float, device: torch.device) -> torch.Tensor:
    return torch.exp(-torch.arange(gamma, device=device, dtype=torch.float32) / decay)


def _wmean(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).sum() / w.sum().clamp_min(1e-6)


def _per_slot(x: torch.Tensor, ok: torch.Tensor) -> list[float]:
    okf = ok.float()
    return ((x * okf).sum(dim=tuple(range(x.dim() - 1))) /
            okf.sum(dim=tuple(range(x.dim() - 1))).clamp_min(1)).tolist()


def block_loss(drafter, batch: Batch, head: TargetHead, w: LossWeights, gen: torch.Generator
               ) -> tuple[torch.Tensor, dict]:
    """DFlash (CE only) or DSpark (0.1 CE + 0.9 TV + 1.0 confidence BCE) on sampled anchors."""
    g = drafter.cfg.gamma
    anchors, valid = sample_anchors(batch, w.anchors_per_row, gen)
    labels, lab_pos, ok = block_targets(batch, anchors, valid, g)
    h = drafter.forward_blocks(batch.taps, batch.tokens, batch.segment, anchors, valid)
    prev = torch.cat([batch.tokens.gather(1, anchors).unsqueeze(-1), labels[..., :-1]], dim=-1)
    is_dspark = drafter.cfg.kind == "dspark"
    with_target = is_dspark or not torch.is_grad_enabled()   # DFlash: TV only when validating
    sel = ok.reshape(-1)
    flat = lambda x: x.reshape(-1, *x.shape[ok.dim():])[sel]  # noqa: E731
    b_idx = torch.arange(anchors.shape[0], device=anchors.device).view(-1, 1, 1)
    tgt = dict(tgt_hidden=flat(batch.last[b_idx, lab_pos - 1]), tgt_lse=flat(batch.lse[b_idx, lab_pos - 1]),
               tgt_top=flat(batch.top[b_idx, lab_pos - 1])) if with_target else {}
    label_rows = flat(drafter.vocab.index(labels))
    weights = position_weights(g, w.position_decay, h.device) * ok.float()

    def slot_terms(bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Head terms [B, N, gamma, 5] of every block slot (zeros outside `ok`), weighted CE, TV."""
        terms = head_terms(drafter, head, w.chunk, flat(h), label_rows=label_rows,
                           bias=None if bias is None else flat(bias), **tgt)
        full = terms.new_zeros(sel.shape[0], terms.shape[1])
        full[sel] = terms
        full = full.view(*ok.shape, terms.shape[1])
        return full, _wmean(full[..., 0], weights * full[..., 4]), _wmean(full[..., 2], weights)

    full, ce, tv = slot_terms(drafter.block_bias(h, prev) if is_dspark else None)
    metrics = {"ce": ce.item(), "agree@k": _per_slot(full[..., 3], ok)}
    if with_target:
        metrics["tv"] = tv.item()
        metrics["accept@k"] = _per_slot(1 - full[..., 2].detach(), ok)
    if not is_dspark:
        return ce, metrics
    loss = w.ce * ce + w.tv * tv
    if w.backbone > 0:   # the backbone's own logits, without the sequential bias
        _, bb_ce, bb_tv = slot_terms(None)
        loss = loss + w.backbone * (w.ce * bb_ce + w.tv * bb_tv)
        metrics["tv_backbone"] = bb_tv.item()
    conf = drafter.confidence_logits(h, prev)
    if conf is not None:
        label = (1 - full[..., 2].detach()).clamp(0, 1)
        bce = F.binary_cross_entropy_with_logits(conf.float(), label, reduction="none")
        bce = _wmean(bce, weights)
        loss = loss + w.confidence * bce
        metrics["bce"] = bce.item()
    return loss, metrics


def _causal_head(drafter, batch: Batch, head: TargetHead, w: LossWeights, h: torch.Tensor,
                 offset: int) -> torch.Tensor | None:
    """Head terms of entries i predicting x_{i+offset} (target distribution at i+offset-1)."""
    ok, tgt_pos = _causal_targets(batch, offset)
    sel = ok.reshape(-1)
    if not bool(sel.any()):
        return None
    src = (tgt_pos - 1).reshape(-1)[sel]
    last = batch.last.reshape(-1, batch.last.shape[-1])
    return head_terms(drafter, head, w.chunk, h.reshape(-1, h.shape[-1])[sel],
                      tgt_hidden=last[src], tgt_lse=batch.lse.reshape(-1)[src],
                      tgt_top=batch.top.reshape(-1)[src])


def eagle3_loss(drafter, batch: Batch, head: TargetHead, w: LossWeights) -> tuple[torch.Tensor, dict]:
    """Training-time-test unroll: step j at entry i predicts x_{i+2+j}; weight 0.8^j."""
    outs = drafter.forward_ttt(batch.taps, batch.tokens, batch.segment, drafter.cfg.gamma)
    total = batch.taps.new_zeros(())
    acc, agree = [], []
    for j, h in enumerate(outs):
        terms = _causal_head(drafter, batch, head, w, h, offset=2 + j)
        if terms is None:
            continue
        total = total + (w.step_decay ** j) * terms[:, 1].mean()
        acc.append((1 - terms[:, 2]).mean().item())
        agree.append(terms[:, 3].mean().item())
    return total, {"soft_ce": total.item(), "accept@k": acc, "agree@k": agree}


def mtp1_loss(drafter, batch: Batch, head: TargetHead, w: LossWeights) -> tuple[torch.Tensor, dict]:
    """Entry i predicts x_{i+2}; soft CE to the target distribution at i+1."""
    h = drafter.forward_train(batch.last, batch.tokens, batch.segment)
    terms = _causal_head(drafter, batch, head, w, h, offset=2)
    if terms is None:
        return h.sum() * 0.0, {}
    loss = terms[:, 1].mean()
    return loss, {"soft_ce": loss.item(), "accept@k": [(1 - terms[:, 2]).mean().item()],
                  "agree@k": [terms[:, 3].mean().item()]}


def _causal_targets(batch: Batch, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Entries i whose token at i+offset is a response token of the same sequence; returns
    the mask [B, L] and flat indices [B, L] of position i+offset."""
    b, L = batch.tokens.shape
    idx = torch.arange(L, device=batch.tokens.device)
    tgt = (idx + offset).clamp(max=L - 1)
    ok = (idx + offset < L).expand(b, L) & batch.loss_mask[:, tgt] & \
         (batch.segment[:, tgt] == batch.segment) & (batch.segment >= 0)
    flat = tgt.expand(b, L) + (torch.arange(b, device=idx.device) * L).unsqueeze(1)
    return ok, flat


def compute_loss(drafter, batch: Batch, head: TargetHead, w: LossWeights, gen: torch.Generator
                 ) -> tuple[torch.Tensor, dict]:
    """The objective of the drafter's kind on one batch; returns (loss, metrics)."""
    kind = drafter.cfg.kind
    if kind in ("dflash", "dspark"):
        return block_loss(drafter, batch, head, w, gen)
    if kind == "eagle3":
        return eagle3_loss(drafter, batch, head, w)
    if kind == "mtp1":
        return mtp1_loss(drafter, batch, head, w)
    raise ValueError(kind)


