"""The training pipeline as library calls: self-distillation data -> target-feature cache ->
a drafter trained on it -> an exported checkpoint. The CLI (`dspark-sim distill`, `train`)
only parses options and reports progress."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from ..calibration.store import is_installed_package_path
from ..decode.drafters.checkpoint import build_module, save_drafter
from ..decode.loading import cache_root
from ..decode.drafters.config import DrafterConfig
from ..decode.drafters.frozen import target_fingerprint
from ..errors import InputError
from ..fileio import write_json_atomic
from .featcache import FeatureCache, build_feature_cache, target_features_fn
from .prompts import TrainPrompt, is_heldout
from .selfdistill import DistillRecord, generate_responses, read_records
from .targethead import TargetHead
from .trainer import Trainer, TrainConfig, init_source


def distill(target: Any, prompts: list[TrainPrompt], out_dir: str | Path, *, temperatures: list[float],
            batch_size: int, max_new_tokens: int, seed: int,
            on_batch: Callable[[int, int], None] | None = None, minutes: float = 0.0) -> int:
    """Have the target answer `prompts` (resumable; at most `minutes` of batches when > 0);
    return the number of new records."""
    if target.tokenizer is None:
        raise InputError("the target has no tokenizer; self-distillation needs one", field="--target")
    return generate_responses(target.model, target.tokenizer, prompts, out_dir,
                              temperatures=temperatures, batch_size=batch_size,
                              max_new_tokens=max_new_tokens, seed=seed, on_batch=on_batch,
                              minutes=minutes)


def training_records(data_dirs: list[Path]) -> list[DistillRecord]:
    """Records of every data directory, first occurrence of an id wins, held-out ids dropped."""
    seen: dict[str, DistillRecord] = {}
    for d in data_dirs:
        for r in read_records(d):
            if r.id not in seen and not is_heldout(r.id) and r.response_ids:
                seen[r.id] = r
    return list(seen.values())


SHIPPED_DISTILL_DIR = Path(__file__).resolve().parent.parent / "data" / "distill"


def feature_cache(target: Any, data_dirs: list[Path], taps: list[int], *, max_len: int = 512,
                  cache_dir: Path | None = None,
                  on_progress: Callable[[int, int], None] | None = None) -> FeatureCache:
    """The target-feature cache of the data (built once, resumable, then reused)."""
    fp = target_fingerprint(target.embed_tokens.weight)
    if cache_dir is None:
        first, name = Path(data_dirs[0]), f"features-{fp}-taps{'-'.join(map(str, taps))}"
        # a shard directory holds its cache; a packed .npz gets one beside it, or in the user's
        # cache directory when it is inside the installed package (never written to)
        cache_dir = first.parent / f"{first.stem}.{name}" if first.is_file() else first / name
        if is_installed_package_path(first):
            cache_dir = cache_root() / "features" / f"{first.stem}.{name}"
    meta = cache_dir / "meta.json"
    if meta.is_file():
        m = json.loads(meta.read_text())
        if m.get("done") == m.get("n_records") and m.get("fingerprint") == fp and m.get("taps") == list(taps):
            return FeatureCache(cache_dir)
    records = training_records(data_dirs)
    if not records:
        raise InputError("no training records in the data directories", file=data_dirs[0])
    build_feature_cache(records, cache_dir, target_features_fn(target, taps),
                        TargetHead.from_model(target.model), taps=list(taps),
                        hidden_size=target.hidden_size, vocab_size=target.vocab_size,
                        target=target.name, fingerprint=fp, max_len=max_len, on_progress=on_progress)
    return FeatureCache(cache_dir)


def draft_vocabulary(cache: FeatureCache, size: int, always: set[int]) -> torch.Tensor:
    """The `size` most frequent response tokens of the cache (ties by id), always keeping
    `always` (e.g. the end-of-sequence ids)."""
    counts = torch.from_numpy(cache.token_counts()).double()
    for t in always:
        if 0 <= t < counts.numel():
            counts[t] = float("inf")
    order = sorted(range(counts.numel()), key=lambda i: (-counts[i].item(), i))
    return torch.tensor(order[:size], dtype=torch.int32)


def new_drafter(kind: str, target: Any, cache: FeatureCache, *, seq_init: str = "bigram",
                seq_init_scale: float = 1.0, seed: int = 0, val_fraction: float = 0.03,
                **arch: Any) -> torch.nn.Module:
    """A fresh drafter for `target` on the cache's taps, its draft vocabulary set from the data.

    DSpark's sequential head starts from the bigram statistics of the training split (the
    trainer's `val_fraction` split; `seq_init="bigram"`, train/seqinit.py) or from the zero bias
    (`"zero"`: W2 = 0, the old start, a saddle)."""
    if seq_init not in ("bigram", "zero"):
        raise InputError(f"must be bigram or zero, got {seq_init!r}", field="--seq-init")
    torch.manual_seed(seed)
    cfg = DrafterConfig.for_target(kind, target.model.config, taps=list(cache.taps),
                                   target=target.name,
                                   target_fingerprint=target_fingerprint(target.embed_tokens.weight),
                                   **arch)
    if cfg.kind != "mtp1" and list(cfg.taps) != cache.taps:
        raise InputError(f"drafter taps {cfg.taps} differ from the feature cache's {cache.taps}",
                         field="--taps")
    module = build_module(cfg)
    if not module.vocab.is_full:
        module.vocab.set_ids(draft_vocabulary(cache, module.vocab.size, set(target.eos_token_ids)))
    module.bind_target(target.embed_tokens.weight, target.lm_head.weight)
    head = getattr(module, "seq_head", None)
    if head is not None and seq_init == "bigram":
        from .seqinit import init_seq_head_from_bigrams
        from .batches import split_entries
        train_ids, _ = split_entries(cache, val_fraction)
        module.seq_init = init_seq_head_from_bigrams(head, cache, module.vocab.ids, module.vocab.vocab_size,
                                                     scale=seq_init_scale, seed=seed, entries=train_ids)
    return module


def export_keeping_calibration(module: torch.nn.Module, export_dir: Path) -> str | None:
    """Export the drafter into `export_dir` (fp16). A confidence calibration of the drafter that
    was there (calibration/store.py; or `sts` of an older config.json) is kept when the weights
    are unchanged and marked stale otherwise; returns what happened (None: there was none)."""
    from ..calibration.store import mark_stale_after_export, weight_files, weights_digest

    previous, legacy = None, None
    if weight_files(export_dir):
        previous = weights_digest(export_dir)
    config = export_dir / "config.json"
    if config.is_file():
        try:
            old = json.loads(config.read_text(encoding="utf-8"))
            legacy = {k: old.get(k) for k in ("sts", "sts_copy")}
        except (OSError, ValueError):
            legacy = None
    save_drafter(module, export_dir)
    return mark_stale_after_export(export_dir, previous, legacy)


def train_drafter(module: torch.nn.Module, target: Any, cache: FeatureCache, run_dir: str | Path,
                  cfg: TrainConfig, *, resume: bool = True, export_dir: str | Path | None = None,
                  init_from: str | Path | None = None, prior_steps: int = 0,
                  backbone_from: str | Path | None = None,
                  on_step: Callable[[int, int, dict], None] | None = None) -> dict:
    """Train (resuming a run in `run_dir` when present, else warm-starting from `init_from`
    when given: a run directory's weights and moments, or an exported drafter's weights after
    `prior_steps` steps; or a DSpark backbone from the exported DFlash `backbone_from`), validate,
    export fp16; return a summary."""
    run_dir = Path(run_dir)
    device = target.device
    module.to(device)
    trainer = Trainer(module, cache, TargetHead.from_model(target.model), cfg, run_dir, device, on_step)
    resumed = trainer.try_resume() if resume else False
    if not resumed and backbone_from is not None:
        trainer.warm_start_backbone(backbone_from, prior_steps)
    elif not resumed and init_from is not None:
        if init_source(init_from) == "run":
            trainer.warm_start(init_from)
        else:
            trainer.warm_start_weights(init_from, prior_steps)
    t0 = time.perf_counter()
    trainer.run()
    val = trainer.validate()
    export_dir = Path(export_dir) if export_dir else run_dir / "drafter"
    calibration = export_keeping_calibration(module, export_dir)
    summary = {
        "kind": module.cfg.kind, "target": target.name, "steps": trainer.step,
        "init_from": trainer.init_from, "prior_steps": trainer.data_offset,
        "total_steps": trainer.data_offset + trainer.step,
        "train_seconds": round(trainer.elapsed, 1), "this_run_seconds": round(time.perf_counter() - t0, 1),
        "resumed": resumed, "validation": val, "train_config": asdict(cfg),
        "data": {"records": len(cache.entries), "tokens": int(cache.meta["n_tokens"]),
                 "train_records": len(trainer.train_ids), "val_records": len(trainer.val_ids)},
        "parameters": sum(p.numel() for p in module.parameters()),
        "seq_init": getattr(module, "seq_init", None),
        "checkpoint": str(export_dir),
        "calibration": calibration,
    }
    write_json_atomic(run_dir / "summary.json", summary)
    return summary
