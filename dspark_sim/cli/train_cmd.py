"""`dspark-sim distill` and `train`: self-distillation data and drafter training for a real
target (`calibrate` is in calibrate_cmd.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..fileio import json_text
from ..errors import InputError
from .options import DEVICE_HELP, DeviceOpt, TargetOpt, ThreadsOpt
from .render import log_line, progress_bar

SHIPPED_DATA = "smollm2-135m-selfdistill-full.npz"    # in dspark_sim/data/distill/


def _floats(text: str, field: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated numbers, got {text!r}", field=field) from None
    if not vals or any(v < 0 for v in vals):
        raise InputError("need one or more numbers >= 0", field=field)
    return vals


def register(app: typer.Typer) -> None:
    @app.command()
    def distill(
        out: Path = typer.Option(..., "--out", help="Directory of JSONL shards (created; an "
                                 "existing one is resumed, finished prompts are skipped)."),
        target: TargetOpt = "embedded",
        prompts: list[Path] = typer.Option([], "--prompts", help="Extra prompt JSONL files "
                                           "('prompt', 'question' or 'turns'; optional 'task', 'id')."),
        builtin: bool = typer.Option(True, "--builtin/--no-builtin", help="Include the built-in "
                                     "mix: GSM8K train questions + code and chat templates."),
        gsm8k_train: Optional[Path] = typer.Option(None, "--gsm8k-train", help="GSM8K *train* JSONL "
                                                   "for the built-in math prompts [the questions "
                                                   "of the default mix, shipped in the package]."),
        n_math: int = typer.Option(1200, "--n-math", help="GSM8K train questions in the mix."),
        n_chat: int = typer.Option(500, "--n-chat", help="Chat template prompts in the mix."),
        temperatures: str = typer.Option("0,1", "--temperatures", help="Sampling temperatures "
                                         "assigned to prompts in turn (0 = greedy)."),
        batch_size: int = typer.Option(32, "--batch-size", help="Prompts generated together."),
        max_new_tokens: int = typer.Option(160, "--max-new-tokens", help="Longest answer."),
        seed: int = typer.Option(0, "--seed", help="Seed of prompt selection and sampling."),
        pack: Optional[Path] = typer.Option(None, "--pack", help="Afterwards also write every "
                                            "answer in --out as one compressed .npz of token ids "
                                            "(what `train --data` reads without the shards)."),
        resume_from: Optional[Path] = typer.Option(None, "--resume-from", help="A packed .npz "
                                                   "(e.g. dspark_sim/data/distill/*.npz) whose "
                                                   "answers start an empty --out, so only the "
                                                   "other prompts are answered."),
        minutes: float = typer.Option(0.0, "--minutes", help="Start no new batch after this "
                                      "many minutes (0 = answer every prompt); --out stays "
                                      "resumable and --pack packs what is there."),
        device: DeviceOpt = "auto",
        threads: ThreadsOpt = 0,
    ) -> None:
        """Self-distillation: the target answers training prompts; answers are cached on disk."""
        if pack is not None and pack.suffix != ".npz":
            raise InputError("must end in .npz", file=pack, field="--pack")
        from ..train.pipeline import distill as run_distill
        from ..train.prompts import default_training_prompts, read_prompt_jsonl

        temps = _floats(temperatures, "--temperatures")
        if batch_size < 1 or max_new_tokens < 1:
            raise InputError("--batch-size and --max-new-tokens must be >= 1")
        if minutes < 0:
            raise InputError(f"must be >= 0, got {minutes}", field="--minutes")
        items = default_training_prompts(gsm8k_train, n_math, n_chat, seed) if builtin else []
        for f in prompts:
            items += read_prompt_jsonl(f)
        if not items:
            raise InputError("no prompts: give --prompts or keep --builtin", field="--prompts")
        if resume_from is not None:
            from ..train.selfdistill import seed_from_pack
            n_seeded = seed_from_pack(resume_from, out, chunk=batch_size)
            typer.echo(f"started {out} from {n_seeded} answers in {resume_from}")
        from ..decode.loading import load_target_threads
        tgt = load_target_threads(target, device, threads)
        with progress_bar("distilling") as bar:
            task = bar.add_task("distill", total=len(items), info="")

            def on_batch(done: int, todo: int) -> None:
                bar.update(task, completed=len(items) - todo + done, info=f"{done}/{todo} new")
                log_line(f"{done}/{todo} prompts answered")
            n = run_distill(tgt, items, out, temperatures=[temps[i % len(temps)] for i in range(len(items))],
                            batch_size=batch_size, max_new_tokens=max_new_tokens, seed=seed,
                            on_batch=on_batch, minutes=minutes)
        typer.echo(f"wrote {n} new answers to {out}")
        if pack is not None:
            from ..train.selfdistill import read_records, write_records_npz
            records = read_records(out)
            if pack.exists():
                typer.echo(f"note: replacing {pack}", err=True)
            write_records_npz(records, pack)
            typer.echo(f"packed {len(records)} answers into {pack}")

    @app.command()
    def train(
        drafter: str = typer.Option(..., "--drafter", help="Drafter kind: mtp1, eagle3, dflash or dspark."),
        data: list[Path] = typer.Option([], "--data", help="Self-distillation directories "
                                        "(from `dspark-sim distill`) or packed .npz files "
                                        "(`distill --pack`); the target-feature cache is built "
                                        "inside the first directory (beside a .npz; in the user "
                                        "cache for a pack inside the package) and reused. "
                                        f"[the embedded target's shipped pack, {SHIPPED_DATA}]"),
        out: Path = typer.Option(..., "--out", help="Run directory: checkpoints, metrics.jsonl, "
                                 "summary.json, and the exported drafter in OUT/drafter."),
        features: Optional[Path] = typer.Option(None, "--features", help="Directory of the "
                                                "target-feature cache (built there on first use, "
                                                "reused by later runs) [inside the first --data "
                                                "directory, or beside a .npz]."),
        target: TargetOpt = "embedded",
        budget_minutes: float = typer.Option(0.0, "--budget-minutes", help="Training time budget; "
                                             "the step count is fixed after timing the first steps."),
        steps: int = typer.Option(0, "--steps", help="Optimizer steps (overrides --budget-minutes)."),
        gamma: int = typer.Option(7, "--gamma", help="Block size / unroll depth (MTP-1: always 1)."),
        layers: int = typer.Option(0, "--layers", help="Drafter layers (0 = kind default: 2 for "
                                   "dflash/dspark, 1 otherwise)."),
        draft_vocab: int = typer.Option(8192, "--draft-vocab", help="Draftable tokens (most frequent "
                                        "in the data); 0 = the full vocabulary."),
        seq_head: str = typer.Option("markov", "--seq-head", help="DSpark sequential head: markov or rnn."),
        seq_rank: int = typer.Option(64, "--seq-rank", help="DSpark head rank (0 = no head)."),
        seq_init: str = typer.Option("bigram", "--seq-init", help="DSpark sequential head's start: "
                                     "bigram (a truncated SVD of the data's centred bigram "
                                     "log-probabilities over the draft vocabulary) or zero (no "
                                     "bias at step 0; a saddle that barely moves in a CPU budget)."),
        seq_init_scale: float = typer.Option(1.0, "--seq-init-scale", help="Multiplier of the "
                                             "bigram start's bias (--seq-init bigram)."),
        seq_lr_mult: float = typer.Option(1.0, "--seq-lr-mult", help="Learning rate of DSpark's "
                                          "sequential head as a multiple of --lr."),
        confidence: bool = typer.Option(True, "--confidence/--no-confidence", help="DSpark confidence head."),
        lr: float = typer.Option(6e-4, "--lr", help="Peak AdamW learning rate."),
        row_len: int = typer.Option(1024, "--row-len", help="Tokens per packed training row."),
        rows: int = typer.Option(1, "--rows", help="Packed rows per optimizer step."),
        anchors: int = typer.Option(256, "--anchors", help="Anchors (blocks) per row for dflash/dspark."),
        seed: int = typer.Option(0, "--seed", help="Seed of initialisation, data order and anchors."),
        resume: bool = typer.Option(True, "--resume/--fresh", help="Continue a run found in --out."),
        init_from: Optional[Path] = typer.Option(None, "--init-from", help="A finished run "
                                                 "directory of the same drafter configuration: "
                                                 "start from its weights and optimizer moments "
                                                 "with a new schedule of --steps (warmup, cosine "
                                                 "to zero) and the data order continuing where it "
                                                 "stopped. Or an exported drafter directory "
                                                 "(config.json + model.safetensors, e.g. "
                                                 "dspark_sim/data/drafters/dspark): its weights, "
                                                 "fresh optimizer moments, the data order skipping "
                                                 "--prior-steps. A run already in --out resumes "
                                                 "instead."),
        prior_steps: int = typer.Option(0, "--prior-steps", help="With --init-from an exported "
                                        "drafter: the optimizer steps it was trained for on this "
                                        "data, so the data order continues after them."),
        backbone_from: Optional[Path] = typer.Option(None, "--backbone-from", help="DSpark only: "
                                                     "an exported DFlash drafter of the same shape, "
                                                     "or a DSpark one, whose weights start the "
                                                     "block backbone (the sequential and "
                                                     "confidence heads keep their own start, so "
                                                     "--seq-head / --seq-rank may differ), fresh "
                                                     "optimizer moments, the data order skipping "
                                                     "--prior-steps. Not with --init-from."),
        backbone_loss: float = typer.Option(0.0, "--backbone-loss", help="DSpark only: weight of "
                                            "an extra 0.1 CE + 0.9 TV term on the backbone's "
                                            "logits without the sequential bias (0 = the "
                                            "paper's objective)."),
        position_decay: float = typer.Option(4.0, "--position-decay", help="dflash/dspark: block "
                                             "position k's loss weight exp(-(k-1)/decay) (4 = "
                                             "the paper's)."),
        export: Optional[Path] = typer.Option(None, "--export", help="Also write the fp16 drafter here."),
        checkpoint_minutes: float = typer.Option(5.0, "--checkpoint-minutes", help="Minutes between checkpoints."),
        device: str = typer.Option("auto", "--device", help=DEVICE_HELP + " Training uses bf16 "
                                   "autocast on a GPU."),
        threads: ThreadsOpt = 0,
    ) -> None:
        """Train a drafter on target self-distillation data (features cached once, reused)."""
        import torch

        from ..decode.drafters.config import KINDS
        from ..train.objectives import LossWeights
        from ..train.pipeline import feature_cache, new_drafter, train_drafter
        from ..train.trainer import TrainConfig

        if drafter not in KINDS:
            raise InputError(f"must be one of {', '.join(KINDS)}, got {drafter!r}", field="--drafter")
        if steps <= 0 and budget_minutes <= 0:
            raise InputError("give --steps or --budget-minutes", field="--budget-minutes")
        if gamma < 1:
            raise InputError(f"must be >= 1, got {gamma}", field="--gamma")
        if position_decay <= 0:
            raise InputError(f"must be > 0, got {position_decay}", field="--position-decay")
        if seq_head not in ("markov", "rnn"):
            raise InputError(f"must be markov or rnn, got {seq_head!r}", field="--seq-head")
        from ..train.selfdistill import read_records
        from ..decode.drafters.checkpoint import WEIGHTS
        from ..train.trainer import STATE, ConfigMismatch, init_source

        source = init_source(init_from) if init_from is not None else None
        if init_from is not None and source is None:
            raise InputError(f"neither a run directory ({STATE}) nor an exported drafter "
                             f"({WEIGHTS})", file=init_from, field="--init-from")
        if prior_steps < 0:
            raise InputError(f"must be >= 0, got {prior_steps}", field="--prior-steps")
        if backbone_from is not None:
            if init_from is not None:
                raise InputError("give --init-from or --backbone-from, not both", field="--backbone-from")
            if drafter != "dspark":
                raise InputError(f"only for --drafter dspark, not {drafter}", field="--backbone-from")
            if init_source(backbone_from) != "drafter":
                raise InputError(f"not an exported drafter ({WEIGHTS})", file=backbone_from,
                                 field="--backbone-from")
        if backbone_loss < 0 or (backbone_loss > 0 and drafter != "dspark"):
            raise InputError(f"must be >= 0 and only for --drafter dspark, got {backbone_loss}",
                             field="--backbone-loss")
        if prior_steps and source != "drafter" and backbone_from is None:
            raise InputError("only with --init-from or --backbone-from an exported drafter (a run "
                             "directory records its own steps)", field="--prior-steps")
        data = list(data) or [_shipped_data(target)]
        for d in data:
            if not (d.is_dir() or (d.suffix == ".npz" and d.is_file())):
                raise InputError("not a self-distillation directory or .npz pack", file=d,
                                 field="--data")
            read_records(d)             # a bad shard fails before the target loads
        exported = (export or out / "drafter") / WEIGHTS
        if exported.is_file():
            typer.echo(f"note: {exported.parent} holds an exported drafter; this run replaces it "
                       f"(a confidence calibration beside it is kept if the weights come out the "
                       f"same, else marked stale)", err=True)
        from ..decode.loading import load_target_threads
        tgt = load_target_threads(target, device, threads)
        torch.manual_seed(seed)
        from ..decode.target import default_taps
        taps = list(default_taps(tgt.num_layers))
        with progress_bar("target features") as bar:
            task = bar.add_task("features", total=None, info="")

            def on_progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)
                if done % 200 == 0 or done == total:
                    log_line(f"features {done}/{total}")
            cache = feature_cache(tgt, list(data), taps, cache_dir=features, on_progress=on_progress)
        arch = dict(gamma=gamma, draft_vocab=draft_vocab, seq_head=seq_head, seq_rank=seq_rank,
                    confidence=confidence)
        if layers > 0:
            arch["num_layers"] = layers
        if seq_lr_mult <= 0:
            raise InputError(f"must be > 0, got {seq_lr_mult}", field="--seq-lr-mult")
        module = new_drafter(drafter, tgt, cache, seq_init=seq_init, seq_init_scale=seq_init_scale,
                             seed=seed, **arch)
        _check_validation_split(cache)
        cfg = TrainConfig(lr=lr, row_len=row_len, rows_per_batch=rows, steps=steps,
                          budget_minutes=budget_minutes, seed=seed, checkpoint_minutes=checkpoint_minutes,
                          autocast_bf16=tgt.device.type == "cuda", seq_lr_mult=seq_lr_mult,
                          loss=LossWeights(anchors_per_row=anchors, backbone=backbone_loss,
                                           position_decay=position_decay))
        with progress_bar(f"training {drafter}") as bar:
            task = bar.add_task("train", total=None, info="")

            def on_step(step: int, total: int, m: dict) -> None:
                acc = m.get("accept@k") or m.get("agree@k") or []
                info = f"loss {m.get('loss', 0):.3f}" + (f" acc1 {acc[0]:.2f}" if acc else "")
                bar.update(task, completed=step, total=total if total < 10 ** 9 else None, info=info)
                if step % 10 == 0 or step == total:
                    log_line(f"step {step}/{total if total < 10 ** 9 else '?'} {info}")
            try:
                summary = train_drafter(module, tgt, cache, out, cfg, resume=resume, export_dir=export,
                                        init_from=init_from, prior_steps=prior_steps,
                                        backbone_from=backbone_from, on_step=on_step)
            except ConfigMismatch as exc:
                field = "--init-from" if init_from else "--backbone-from" if backbone_from else "--out"
                raise InputError(str(exc), field=field) from exc
        typer.echo(json_text({k: summary[k] for k in ("kind", "steps", "train_seconds", "checkpoint")}))
        typer.echo(f"validation: {json_text(summary['validation'])}")
        if summary.get("calibration"):
            typer.echo(f"note: {summary['calibration']}", err=True)


def _shipped_data(target: str) -> Path:
    """train's default --data: the self-distillation pack shipped for the embedded target."""
    from ..train.pipeline import SHIPPED_DISTILL_DIR

    if target != "embedded":
        raise InputError(f"give --data for --target {target}: the shipped pack ({SHIPPED_DATA}) "
                         "holds the embedded target's answers (make one with `dspark-sim distill`)",
                         field="--data")
    return SHIPPED_DISTILL_DIR / SHIPPED_DATA


def _check_validation_split(cache) -> None:
    """Refuse a data set too small to train on; say so when the validation split is empty."""
    from ..train.batches import split_entries
    from ..train.trainer import TrainConfig

    fraction = TrainConfig.val_fraction
    train_ids, val_ids = split_entries(cache, fraction)
    if not train_ids:
        raise InputError(f"all {len(cache.entries)} records fall in the validation split "
                         f"({fraction:.0%} by a hash of their id): too little data to train on",
                         field="--data")
    if not val_ids:
        typer.echo(f"warning: none of the {len(cache.entries)} training records falls in the "
                   f"{fraction:.0%} validation split (chosen by a hash of each id), so 0 are kept "
                   f"for validation: summary.json will hold no validation metrics. Training runs "
                   f"its full step count either way (the trainer has no early stop). About "
                   f"{round(1 / fraction)} records give one validation record.", err=True)
    else:
        typer.echo(f"validation split: {len(val_ids)} of {len(cache.entries)} records", err=True)
