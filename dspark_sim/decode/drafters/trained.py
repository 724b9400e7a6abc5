"""The trained drafters (MTP-1, Eagle3, DFlash, DSpark) behind the decode core's Drafter
interface: incremental per-request state, proposals with draft distributions q, and for
DSpark calibrated confidences c_k = sigmoid(z_k / T_k).

A checkpoint whose config sets `copy_bias` adds the copy bias (copybias.py) to the logits of
every draft slot (block drafters then draft slot by slot), or of the first `copy_slots` slots
(`copy_slots: 1` keeps DFlash one parallel pick). `--drafter mtp1|eagle3|dflash|dspark`
loads the checkpoint shipped for the embedded target
from `dspark_sim/data/drafters/<kind>/`; `--drafter PATH` loads any checkpoint directory.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

import torch
from torch import nn

from ...errors import InputError
from ..context import Context
from ..sampling import Sampling, sample_from
from ..target import Target
from .base import Draft, Drafter
from .checkpoint import load_module, read_config
from .config import DrafterConfig
from .copybias import CopyIndex
from .frozen import target_fingerprint


def shipped_dir(kind: str) -> Path:
    """Directory of the checkpoint shipped for the embedded target."""
    return Path(str(importlib.resources.files("dspark_sim"))) / "data" / "drafters" / kind


def sts_temperatures(cfg: DrafterConfig, temperature: float) -> torch.Tensor | None:
    """Calibrated per-position temperatures for the sampling temperature nearest `temperature`."""
    key = _nearest_key(cfg.sts, temperature)
    return None if key is None else torch.tensor(cfg.sts[key], dtype=torch.float32)


def sts_copy_calibration(cfg: DrafterConfig, temperature: float) -> torch.Tensor | None:
    """[Tc_k, d_k] per position for the confidence logits of copy-biased slots, from the same
    calibration as sts_temperatures (None where that one calibrates copied slots like the rest)."""
    key = _nearest_key(cfg.sts or cfg.sts_copy, temperature)
    pairs = cfg.sts_copy.get(key) if key is not None else None
    return None if pairs is None else torch.tensor(pairs, dtype=torch.float32)


def _nearest_key(by_temperature: dict[str, list], temperature: float) -> str | None:
    """The key (a sampling temperature) of `by_temperature` nearest `temperature`."""
    if not by_temperature:
        return None
    return min(by_temperature, key=lambda k: abs(float(k) - temperature))


def check_fits_target(cfg: DrafterConfig, target: Target, config_path: Path | None) -> None:
    """Refuse a checkpoint that does not fit `target` before anything runs: an InputError naming
    the file, the field, the value the target needs and the one found."""
    def refuse(field: str, expected, found, what: str) -> InputError:
        return InputError(f"the drafter does not fit target {target.name}: {what} expected "
                          f"{expected} (the target's), found {found}", file=config_path, field=field)

    if cfg.hidden_size != target.hidden_size:
        raise refuse("hidden_size", target.hidden_size, cfg.hidden_size, "hidden size")
    if cfg.vocab_size != target.vocab_size:
        raise refuse("vocab_size", target.vocab_size, cfg.vocab_size, "vocabulary size")
    taps = (-1,) if cfg.kind == "mtp1" else tuple(cfg.taps)
    outside = [t for t in taps if not -target.num_layers <= t < target.num_layers]
    if outside:
        raise refuse("taps", f"layer indices below {target.num_layers}", outside,
                     f"target layers (it has {target.num_layers})")
    if cfg.kind != "mtp1" and cfg.num_target_layers != target.num_layers:
        raise refuse("num_target_layers", target.num_layers, cfg.num_target_layers,
                     "decoder layer count")


def apply_calibration_file(cfg: DrafterConfig, checkpoint: Path) -> None:
    """Take the STS temperatures of the calibration file beside the checkpoint's weights
    (calibration/store.py) over config.json's, for the temperatures it holds; a stale file is
    not applied (a StaleCalibration warning says so)."""
    from ...calibration.store import usable_calibration

    doc = usable_calibration(checkpoint)
    if doc is None:
        return
    for key, temps in doc.get("sts", {}).items():
        cfg.sts[key] = list(temps)
        if key in doc.get("sts_copy", {}):
            cfg.sts_copy[key] = [list(p) for p in doc["sts_copy"][key]]
        else:
            cfg.sts_copy.pop(key, None)


class TrainedDrafter(Drafter):
    """A drafter module bound to a target, with the per-request caches it keeps."""

    def __init__(self, module: nn.Module, target: Target, name: str) -> None:
        cfg: DrafterConfig = module.cfg
        check_fits_target(cfg, target, None)
        module = module.to(device=target.device, dtype=target.dtype).eval()
        module.bind_target(target.embed_tokens.weight, target.lm_head.weight)
        self.module = module
        self.cfg = cfg
        self.name, self.kind = name, cfg.kind
        self.taps = (-1,) if cfg.kind == "mtp1" else tuple(cfg.taps)
        self._state = None
        self._seen = 0
        bias = list(cfg.copy_bias) + [0.0] * (2 - len(cfg.copy_bias))
        self.copy_bias = (float(bias[0]), float(bias[1]))      # [bigram, unigram]; 0 = off
        self.copy_slots = int(cfg.copy_slots)                  # 0 = every slot
        self._copy = CopyIndex()

    def begin(self, ctx: Context) -> None:
        self._state = self.module.new_state()
        self._seen = 0
        self._copy = CopyIndex()

    @property
    def has_confidence(self) -> bool:
        """Whether drafts carry confidences c_k (what `calibrate` fits and the scheduler reads)."""
        return self.cfg.has_confidence

    @property
    def copies(self) -> bool:
        return self.copy_bias[0] > 0 or self.copy_bias[1] > 0

    def _with_copy(self, logits: torch.Tensor, drafted: list[torch.Tensor]
                   ) -> tuple[torch.Tensor, bool]:
        """One slot's draft-vocabulary logits [1, Vd] plus the copy bias (copybias.py), given
        the tokens drafted so far in this step (one-element tensors), and whether it applied."""
        if not self.copies or (self.copy_slots and len(drafted) >= self.copy_slots):
            return logits, False
        found = self._copy.candidate(drafted, bigram=self.copy_bias[0] > 0,
                                     unigram=self.copy_bias[1] > 0)
        if found is None:
            return logits, False
        token, order = found
        row = int(self.module.vocab.row[token])
        if row >= logits.shape[-1]:                  # not draftable
            return logits, False
        logits = logits.clone()
        logits[0, row] += self.copy_bias[0] if order == 2 else self.copy_bias[1]
        return logits, True

    def _new_features(self, ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of positions not given to the module yet [n, taps*d], and the token after each."""
        feats = ctx.features
        n_have = 0 if feats is None else feats.shape[0]
        nxt = torch.tensor(ctx.tokens[self._seen + 1:n_have + 1], dtype=torch.long,
                           device=self.module_device)
        if feats is None:
            return torch.empty(0, device=self.module_device), nxt
        new = feats[self._seen:n_have]
        self._seen = n_have
        return new.reshape(new.shape[0], new.shape[1] * new.shape[2]), nxt

    @property
    def module_device(self) -> torch.device:
        return next(self.module.parameters()).device

    @torch.inference_mode()
    def propose(self, ctx: Context, gamma: int, sampling: Sampling,
                generator: torch.Generator | None = None) -> Draft:
        if self._state is None:
            self.begin(ctx)
        feats, nxt = self._new_features(ctx)
        if self.copies:
            self._copy.extend(ctx.tokens[len(self._copy):])
        k = min(gamma, self.cfg.gamma)
        if self.kind in ("dflash", "dspark"):
            self.module.extend(self._state, feats)
            return self._propose_block(ctx.anchor, k, sampling, generator)
        self.module.extend(self._state, feats, nxt)
        return self._propose_autoregressive(k, sampling, generator)

    def _pick(self, logits: torch.Tensor, sampling: Sampling, generator: torch.Generator | None
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draw from draft-vocabulary logits [n, Vd]: token ids [n] and q over the full vocabulary
        [n, V] (None when greedy). Warping the Vd logits equals warping full-vocabulary logits
        that are -inf outside the draft vocabulary, at a fraction of the cost."""
        ids = self.module.vocab.ids.long()
        if sampling.greedy:
            return ids[logits.argmax(-1)], None
        q_sub = sampling.probs(logits)
        tokens = ids[sample_from(q_sub, generator)]
        if self.module.vocab.is_full:
            return tokens, q_sub
        q = q_sub.new_zeros(q_sub.shape[0], self.module.vocab.vocab_size)
        return tokens, q.index_copy(-1, ids, q_sub)

    def _propose_block(self, anchor: int, k: int, sampling: Sampling,
                       generator: torch.Generator | None) -> Draft:
        m = self.module
        h = m.block_hidden(self._state, anchor, k)                     # (k, d): a k-slot block
        base = m.output_logits(h).float()                              # (k, Vd)
        if self.kind == "dflash" and (not self.copies or self.copy_slots == 1):
            # Parallel: one pick over the block (a copy bias on slot 1 reads committed tokens only).
            copied = None
            if self.copies and k > 0:
                first, hit = self._with_copy(base[:1], [])
                base = torch.cat([first, base[1:]])
                copied = torch.zeros(k, dtype=torch.bool)
                copied[0] = hit
            return Draft(*self._pick(base, sampling, generator), copied=copied)
        head = m.seq_head if self.kind == "dspark" else None
        conf_head = m.conf_head if self.kind == "dspark" else None
        state = head.init_state(1, h) if head is not None else None
        prev = torch.tensor([anchor], device=h.device)
        toks, qs, zs, copied = [], [], [], []
        for j in range(k):
            logits = base[j:j + 1]
            if head is not None:
                bias, state = head.step(m.vocab.index(prev), h[j:j + 1], state)
                logits = logits + bias.float()
            logits, hit = self._with_copy(logits, toks)
            copied.append(hit)
            if conf_head is not None:
                zs.append(m.confidence_logits(h[j:j + 1], prev))
            tok, q = self._pick(logits, sampling, generator)
            toks.append(tok)
            if q is not None:
                qs.append(q)
            prev = tok
        flags = torch.tensor(copied, dtype=torch.bool) if self.copies else None
        conf = self._calibrated(torch.cat(zs).float(), flags, sampling) if zs else None
        return Draft(torch.cat(toks), torch.cat(qs) if qs else None, conf, flags)

    def _calibrated(self, raw: torch.Tensor, flags: torch.Tensor | None, sampling: Sampling
                    ) -> torch.Tensor:
        """Confidences c_k = sigmoid(z_k / T_k) of raw confidence logits [k] (STS of the sampling
        temperature; copied slots by their own (Tc_k, d_k) where calibrated apart)."""
        k = raw.shape[0]
        temps = sts_temperatures(self.cfg, sampling.temperature)
        z = raw / temps[:k].to(raw.device) if temps is not None else raw
        copy_cal = sts_copy_calibration(self.cfg, sampling.temperature)
        if copy_cal is not None and flags is not None:
            c = copy_cal[:k].to(raw.device)
            z = torch.where(flags.to(raw.device), raw / c[:, 0] + c[:, 1], z)
        return torch.sigmoid(z)

    def _draft_logit(self, logits: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
        """logit(q(x)) of the drafted token under the draft's own softmax (T = 1) over the draft
        vocabulary [1]: the raw confidence of a drafter without a confidence head."""
        p = torch.softmax(logits.float(), dim=-1)[0, self.module.vocab.index(token)]
        p = p.clamp(1e-6, 1 - 1e-6)
        return torch.log(p) - torch.log1p(-p)

    def _propose_autoregressive(self, k: int, sampling: Sampling,
                                generator: torch.Generator | None) -> Draft:
        m = self.module
        h = self._state.last_hidden
        toks, qs, extra, copied, zs = [], [], [], [], []
        for j in range(k):
            logits, hit = self._with_copy(m.output_logits(h.unsqueeze(0)).float(), toks)
            copied.append(hit)
            tok, q = self._pick(logits, sampling, generator)
            toks.append(tok)
            if q is not None:
                qs.append(q)
            if self.cfg.draft_confidence:
                zs.append(self._draft_logit(logits, tok))
            if j + 1 < k:
                h = m.step(self._state, h, tok, j + 1, extra)
        flags = torch.tensor(copied, dtype=torch.bool) if self.copies else None
        conf = self._calibrated(torch.cat(zs), flags, sampling) if zs else None
        return Draft(torch.cat(toks), torch.cat(qs) if qs else None, conf, flags)


def load_trained(path: str | Path, target: Target, name: str | None = None) -> TrainedDrafter:
    """Load a checkpoint directory for `target` (shapes are checked; the fingerprint of the
    target's embedding is checked when the checkpoint records one)."""
    path = Path(path)
    check_fits_target(read_config(path), target, path / "config.json")
    module = load_module(path)
    apply_calibration_file(module.cfg, path)
    fp = module.cfg.target_fingerprint
    if fp and fp != target_fingerprint(target.embed_tokens.weight):
        raise InputError(f"checkpoint was trained for target {module.cfg.target or '?'} "
                         f"(fingerprint {fp}), not for {target.name}", file=path,
                         field="--drafter")
    return TrainedDrafter(module, target, name or str(path))


def shipped_factory(kind: str):
    """`--drafter KIND`: the shipped checkpoint for the embedded target."""
    def factory(target: Target) -> TrainedDrafter:
        path = shipped_dir(kind)
        if not (path / "config.json").is_file():
            raise InputError(f"no shipped {kind} checkpoint in {path}; train one with "
                             f"`dspark-sim train run --drafter {kind}` and pass its path",
                             field="--drafter")
        return load_trained(path, target, name=kind)
    return factory


_HELP = {"mtp1": "trained MTP-1 (one draft per step) for the embedded target",
         "eagle3": "trained Eagle3 (autoregressive, fused target features) for the embedded target",
         "dflash": "trained DFlash (parallel block drafter) for the embedded target",
         "dspark": "trained DSpark (DFlash + Markov head + calibrated confidence head) for the "
                   "embedded target"}


def register() -> None:
    """Offer the shipped checkpoints by kind and load any checkpoint directory by path."""
    from .base import register_checkpoint_kind, register_drafter
    from .config import KINDS

    for kind in KINDS:
        register_drafter(kind, shipped_factory(kind), _HELP[kind])
        register_checkpoint_kind(kind, lambda path, target: load_trained(path, target),
                                 check=read_config)
