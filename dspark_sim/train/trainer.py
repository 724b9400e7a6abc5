"""The drafter trainer: AdamW, linear warmup + cosine decay, gradient clipping, a time
budget, periodic checkpoints with exact resume, and a JSONL metrics log.

With `--budget-minutes` the number of optimizer steps is fixed after timing the first
steps (and stored in the checkpoint, so a resumed run keeps the same schedule); `--steps`
fixes it directly. On a GPU the forward/backward runs under bf16 autocast.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from ..fileio import append_json_line, atomic_path
from .batches import epoch_rows, make_batch, split_entries
from .featcache import FeatureCache
from .objectives import LossWeights, compute_loss
from .targethead import TargetHead

STATE = "trainer_state.pt"


# Fields in which a DFlash drafter may differ from the DSpark drafter whose backbone it starts
# (the heads DFlash lacks, its kind, calibration), and DSpark's own parameters a DFlash lacks.
BACKBONE_FREE_FIELDS = ("kind", "seq_head", "seq_rank", "confidence", "sts")
DSPARK_HEAD_PREFIXES = ("seq_head.", "conf_head.")
# Decoding settings of a checkpoint, not properties of its weights: never a mismatch.
DECODING_FIELDS = {"copy_bias", "copy_slots", "sts_copy"}


class ConfigMismatch(ValueError):
    """A trainer state belongs to a different drafter configuration than the module."""


def check_same_drafter(mine: dict, theirs: dict, source: str | Path, *, ignore: tuple = ()) -> None:
    """Raise ConfigMismatch naming the fields in which `source`'s drafter configuration differs
    from this module's (`ignore`: fields allowed to differ)."""
    keys = (set(mine) | set(theirs)) - set(ignore) - DECODING_FIELDS
    diff = sorted(k for k in keys if mine.get(k) != theirs.get(k))
    if diff:
        raise ConfigMismatch(f"{source} belongs to a different drafter configuration "
                             f"(differs in {', '.join(diff)})")


def init_source(path: str | Path) -> str | None:
    """What `--init-from` points at: "run" (a run directory with a trainer state), "drafter"
    (an exported drafter's weights) or None (neither)."""
    from ..decode.drafters.checkpoint import WEIGHTS

    path = Path(path)
    if (path / STATE).is_file():
        return "run"
    if (path / WEIGHTS).is_file():
        return "drafter"
    return None


@dataclass
class TrainConfig:
    """Optimisation settings (paper: AdamW lr 6e-4, 4% warmup, cosine, no decay, clip 1.0)."""

    lr: float = 6e-4
    warmup: float = 0.04
    weight_decay: float = 0.0
    clip: float = 1.0
    row_len: int = 1024
    rows_per_batch: int = 1
    steps: int = 0                     # 0: derive from budget_minutes
    budget_minutes: float = 0.0
    timing_steps: int = 5
    seed: int = 0
    val_fraction: float = 0.03
    checkpoint_minutes: float = 5.0
    seq_lr_mult: float = 1.0           # DSpark's sequential head: learning rate x this
    autocast_bf16: bool = False
    loss: LossWeights = field(default_factory=LossWeights)


def lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    """Linear warmup over `warmup * total` steps, then cosine decay to zero."""
    warm = max(1, int(round(cfg.warmup * total)))
    if step < warm:
        return cfg.lr * (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return cfg.lr * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def param_groups(module: nn.Module, seq_lr_mult: float) -> list[dict]:
    """AdamW groups: DSpark's sequential head (if any) at `seq_lr_mult` x the learning rate,
    everything else at 1x."""
    head = getattr(module, "seq_head", None)
    head_ids = {id(p) for p in head.parameters()} if head is not None else set()
    rest = [p for p in module.parameters() if p.requires_grad and id(p) not in head_ids]
    groups = [{"params": rest, "lr_mult": 1.0}]
    if head_ids:
        groups.append({"params": [p for p in head.parameters() if p.requires_grad],
                       "lr_mult": seq_lr_mult})
    return groups


class Trainer:
    """Trains one drafter module on a feature cache; `run` returns the metrics of the last step."""

    def __init__(self, module: nn.Module, cache: FeatureCache, head: TargetHead, cfg: TrainConfig,
                 out_dir: str | Path, device: torch.device | str = "cpu",
                 on_step: Callable[[int, int, dict], None] | None = None) -> None:
        self.module, self.cache, self.head, self.cfg = module, cache, head, cfg
        self.out_dir = Path(out_dir)
        self.device = torch.device(device)
        self.on_step = on_step
        self.train_ids, self.val_ids = split_entries(cache, cfg.val_fraction)
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(param_groups(module, cfg.seq_lr_mult), lr=cfg.lr,
                                     weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
        self.step = 0
        self.total = cfg.steps
        self.data_offset = 0               # optimizer steps of the run this one continues
        self.init_from: str | None = None
        self.elapsed = 0.0
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.log_path = self.out_dir / "metrics.jsonl"
        self._epochs: dict[int, list[list[int]]] = {}

    # ---- data ------------------------------------------------------------------------------
    def _epoch(self, epoch: int) -> list[list[int]]:
        if epoch not in self._epochs:
            self._epochs[epoch] = epoch_rows(self.cache, self.train_ids, self.cfg.row_len,
                                             self.cfg.seed, epoch)
        return self._epochs[epoch]

    def _rows_for(self, step: int) -> list[list[int]]:
        """The packed rows of optimizer step `step` (deterministic in seed and step)."""
        out = []
        step += self.data_offset
        for r in range(step * self.cfg.rows_per_batch, (step + 1) * self.cfg.rows_per_batch):
            epoch, base = 0, 0
            while r >= base + len(self._epoch(epoch)):
                base += len(self._epoch(epoch))
                epoch += 1
            out.append(self._epoch(epoch)[r - base])
        return out

    # ---- checkpoints ------------------------------------------------------------------------
    def save(self) -> None:
        """Write trainer state (fp32 weights, optimizer, schedule, RNG) atomically."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        state = {"model": self.module.state_dict(), "opt": self.opt.state_dict(),
                 "step": self.step, "total": self.total, "elapsed": self.elapsed,
                 "gen": self.gen.get_state(), "config": asdict(self.cfg),
                 "drafter": self.module.cfg.to_dict(), "data_offset": self.data_offset,
                 "init_from": self.init_from}
        with atomic_path(self.out_dir / STATE) as tmp:
            torch.save(state, tmp)

    def _load_state(self, path: Path) -> dict:
        state = torch.load(path, map_location="cpu", weights_only=False)
        check_same_drafter(self.module.cfg.to_dict(), state["drafter"], path)
        self.module.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.gen.set_state(state["gen"])
        return state

    def try_resume(self) -> bool:
        """Continue from `out_dir`'s trainer state if there is one."""
        path = self.out_dir / STATE
        if not path.is_file():
            return False
        state = self._load_state(path)
        self.step, self.total, self.elapsed = state["step"], state["total"], state["elapsed"]
        self.data_offset = state.get("data_offset", 0)
        self.init_from = state.get("init_from")
        return True

    def warm_start(self, run_dir: str | Path) -> int:
        """Start from a finished run's weights, optimizer moments and generator, with a fresh
        schedule of `cfg.steps` (a warm restart: warmup, then cosine to zero again) and the data
        stream continuing where that run stopped. Returns that run's optimizer steps so far
        (its own warm starts included)."""
        path = Path(run_dir) / STATE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no trainer state to start from")
        state = self._load_state(path)
        self.data_offset = state.get("data_offset", 0) + state["step"]
        self.init_from = str(run_dir)
        return self.data_offset

    def _exported(self, drafter_dir: str | Path, prior_steps: int, *, ignore: tuple,
                  kinds: tuple[str, ...] | None = None) -> nn.Module:
        """The exported drafter at `drafter_dir`, checked against this module's configuration
        (fields in `ignore` may differ; `kinds`: the kinds it may be)."""
        from ..decode.drafters.checkpoint import load_module

        if prior_steps < 0:
            raise ValueError(f"prior_steps must be >= 0, got {prior_steps}")
        source = load_module(drafter_dir)
        if kinds is not None and source.cfg.kind not in kinds:
            raise ConfigMismatch(f"{drafter_dir} is a {source.cfg.kind} drafter; the backbone "
                                 f"comes from a {' or '.join(kinds)} one")
        check_same_drafter(self.module.cfg.to_dict(), source.cfg.to_dict(), drafter_dir, ignore=ignore)
        return source

    def warm_start_weights(self, drafter_dir: str | Path, prior_steps: int) -> int:
        """Start from an exported drafter's weights (config.json + model.safetensors, e.g. a
        shipped one) with fresh optimizer moments and a fresh schedule; the data stream skips
        the `prior_steps` optimizer steps that drafter was trained for. Returns `prior_steps`."""
        # calibration (sts) is refitted after training, so it may differ
        source = self._exported(drafter_dir, prior_steps, ignore=("sts",))
        self.module.load_state_dict(source.state_dict())
        self.data_offset = prior_steps
        self.init_from = str(drafter_dir)
        return self.data_offset

    def warm_start_backbone(self, drafter_dir: str | Path, prior_steps: int) -> int:
        """Start a DSpark drafter's block backbone (everything but its sequential and confidence
        heads, which keep their own start) from an exported DFlash drafter of the same shape, or
        from the backbone of an exported DSpark drafter (its heads are dropped, so the head type
        and rank may differ), with fresh optimizer moments and a fresh schedule; the data stream
        skips the `prior_steps` steps that drafter was trained for. Returns `prior_steps`."""
        if self.module.cfg.kind != "dspark":
            raise ConfigMismatch(f"a backbone start is for a dspark drafter, not {self.module.cfg.kind}")
        source = self._exported(drafter_dir, prior_steps, ignore=BACKBONE_FREE_FIELDS,
                                kinds=("dflash", "dspark"))
        weights = {k: v for k, v in source.state_dict().items()
                   if not k.startswith(DSPARK_HEAD_PREFIXES)}
        missing, unexpected = self.module.load_state_dict(weights, strict=False)
        foreign = [k for k in missing if not k.startswith(DSPARK_HEAD_PREFIXES)] + list(unexpected)
        if foreign:
            raise ConfigMismatch(f"{drafter_dir}: weights do not match the backbone "
                                 f"({', '.join(sorted(foreign)[:4])})")
        self.data_offset = prior_steps
        self.init_from = f"backbone:{drafter_dir}"
        return self.data_offset

    # ---- loop ---------------------------------------------------------------------------------
    def _one_step(self) -> dict:
        batch = make_batch(self.cache, self._rows_for(self.step), self.cfg.row_len).to(self.device)
        for group in self.opt.param_groups:
            group["lr"] = lr_at(self.step, max(self.total, 1), self.cfg) * group.get("lr_mult", 1.0)
        self.module.train()
        ctx = torch.autocast(self.device.type, dtype=torch.bfloat16) if self.cfg.autocast_bf16 \
            else torch.autocast(self.device.type, enabled=False)
        with ctx:
            loss, metrics = compute_loss(self.module, batch, self.head, self.cfg.loss, self.gen)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(self.params, self.cfg.clip)
        self.opt.step()
        metrics.update(loss=loss.item(), grad_norm=float(gnorm), lr=self.opt.param_groups[0]["lr"])
        return metrics

    def _log(self, metrics: dict) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        append_json_line(self.log_path, {"step": self.step, "elapsed_s": round(self.elapsed, 2), **metrics})

    def run(self) -> dict:
        """Train until the step budget is spent, checkpointing every few minutes."""
        cfg = self.cfg
        if self.total <= 0 and cfg.budget_minutes <= 0:
            raise ValueError("give steps or budget_minutes")
        metrics: dict = {}
        last_ckpt = time.perf_counter()
        while self.total <= 0 or self.step < self.total:
            t0 = time.perf_counter()
            if self.total <= 0:
                self.total = 10 ** 9   # provisional while timing the first steps
            metrics = self._one_step()
            self.step += 1
            self.elapsed += time.perf_counter() - t0
            if cfg.steps <= 0 and self.step == cfg.timing_steps and self.total == 10 ** 9:
                per_step = self.elapsed / self.step
                self.total = max(self.step + 1, int(cfg.budget_minutes * 60 / per_step))
            self._log(metrics)
            if self.on_step is not None:
                self.on_step(self.step, self.total, metrics)
            if time.perf_counter() - last_ckpt > cfg.checkpoint_minutes * 60:
                self.save()
                last_ckpt = time.perf_counter()
        self.save()
        return metrics

    @torch.no_grad()
    def validate(self, max_rows: int = 8, entries: list[int] | None = None) -> dict:
        """Mean metrics over validation rows (fixed anchors from a fixed generator) packed from
        `entries` of the cache (default: the validation split)."""
        self.module.eval()
        entries = self.val_ids if entries is None else entries
        rows = epoch_rows(self.cache, entries, self.cfg.row_len, self.cfg.seed, 0)[:max_rows]
        gen = torch.Generator().manual_seed(12345)
        sums: dict[str, list] = {}
        for row in rows:
            batch = make_batch(self.cache, [row], self.cfg.row_len).to(self.device)
            _, m = compute_loss(self.module, batch, self.head, self.cfg.loss, gen)
            for k, v in m.items():
                sums.setdefault(k, []).append(v)
        out = {}
        for k, vs in sums.items():
            if isinstance(vs[0], list):
                out[k] = [sum(v[i] for v in vs) / len(vs) for i in range(len(vs[0]))]
            else:
                out[k] = sum(vs) / len(vs)
        return out
