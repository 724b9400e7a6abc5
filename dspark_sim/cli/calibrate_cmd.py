"""`dspark-sim calibrate`: Sequential Temperature Scaling of a drafter's confidence head on
held-out rollouts (method.md section 3)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from .options import GSM8K_TRAIN, DeviceOpt, TargetOpt, ThreadsOpt
from .render import log_line, progress_bar


def register(app: typer.Typer) -> None:
    @app.command()
    def calibrate(
        drafter: str = typer.Option("dspark", "--drafter", help="A drafter with a confidence head: "
                                    "dspark (the shipped checkpoint) or a checkpoint directory."),
        target: TargetOpt = "embedded",
        prompts: Optional[Path] = typer.Option(None, "--prompts", help="Held-out prompt JSONL "
                                               "(default: held-out GSM8K train questions and "
                                               "held-out code/chat templates)."),
        tasks: Optional[str] = typer.Option(None, "--tasks", help="Prompt sets instead of "
                                            "--prompts, as `measure --tasks` takes them "
                                            "(comma-separated NAME=FILE, a built-in set or a "
                                            "FILE): --n prompts per task after --skip."),
        skip: int = typer.Option(0, "--skip", help="With --tasks: leading prompts per task to "
                                 "leave out (e.g. the ones the acceptance profiles measure)."),
        gsm8k_train: Path = typer.Option(GSM8K_TRAIN, "--gsm8k-train", help="GSM8K train JSONL "
                                         "(for the default held-out math prompts)."),
        n: int = typer.Option(40, "--n", help="Held-out prompts per task."),
        temperature: float = typer.Option(0.0, "--temperature", help="Sampling temperature the "
                                          "calibration is for (0 = greedy)."),
        gamma: int = typer.Option(7, "--gamma", help="Drafts verified per step."),
        max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens per rollout."),
        seed: int = typer.Option(0, "--seed", help="Seed of the rollouts."),
        report: Path = typer.Option(..., "--report", help="Directory for calibration.json and the "
                                    "reliability diagram."),
        rollouts: Optional[Path] = typer.Option(None, "--rollouts", help="Refit from a rollouts.npz "
                                                "an earlier calibrate run saved (no decoding; "
                                                "--target, --prompts, --n, --gamma, --temperature "
                                                "and --seed then come from that file)."),
        heldout_rollouts: Optional[Path] = typer.Option(
            None, "--heldout-rollouts", help="Evaluate on this rollouts.npz (another calibrate "
            "run's, on other prompts, same gamma and temperature) instead of the odd-numbered "
            "half of this run's requests; the fit then uses all of them."),
        min_positives: int = typer.Option(30, "--min-positives", help="Keep T_k = 1 at a position "
                                          "with fewer fully accepted prefixes (or failures) than "
                                          "this in the fitting rollouts."),
        boot: int = typer.Option(32, "--boot", help="Bootstrap resamples of the requests the ECE "
                                 "objective is averaged over (0 = the plain ECE of the sample)."),
        cv_folds: int = typer.Option(2, "--cv-folds", help="Keep T_k = 1 unless temperatures fitted "
                                     "on the other folds lower the ECE summed over the held-in "
                                     "folds (requests split into this many folds; 0 = no check)."),
        copy_calibration: bool = typer.Option(True, "--copy-calibration/--no-copy-calibration", help="For a "
                                          "drafter with a copy bias: fit the temperatures on "
                                          "the other slots and, per position, a temperature and "
                                          "an offset of the confidence logit of copy-biased "
                                          "slots (off: temperatures alone, over all slots)."),
        write: bool = typer.Option(True, "--write/--dry-run", help="Store the fitted temperatures "
                                   "in the checkpoint's config.json."),
        device: DeviceOpt = "auto",
        threads: ThreadsOpt = 0,
    ) -> None:
        """Fit Sequential Temperature Scaling of the confidence head on held-out rollouts."""
        from ..calibration.plot import reliability_diagram
        from ..calibration.rollouts import (copy_cal_differs, fit_and_report, load_rollouts, save_rollouts,
                                            store_temperatures)
        from ..decode.drafters.trained import shipped_dir
        from ..fileio import write_json_atomic

        if prompts is not None and tasks is not None:
            raise InputError("give --prompts or --tasks, not both", field="--tasks")
        if skip < 0:
            raise InputError(f"must be >= 0, got {skip}", field="--skip")
        ckpt = shipped_dir(drafter) if drafter in ("dspark",) else Path(drafter)
        if rollouts is not None:
            per_request, meta = load_rollouts(rollouts)
            if write and meta.get("drafter", drafter) != drafter:
                raise InputError(f"{rollouts} holds rollouts of drafter {meta['drafter']!r}, not "
                                 f"{drafter!r}; pass --drafter {meta['drafter']} or --dry-run",
                                 field="--rollouts")
            temperature, gamma, seed = float(meta["temperature"]), int(meta["gamma"]), int(meta["seed"])
            n_prompts = len(per_request)
        else:
            from ..decode.drafters import check_drafter

            check_drafter(drafter)         # a bad checkpoint is named before any prompt is read
            items = _prompt_items(prompts, tasks, skip, gsm8k_train, n)
            per_request = _collect_rollouts(drafter, target, items, temperature, gamma,
                                            max_new_tokens, seed, device, threads)
            n_prompts = len(items)
            report.mkdir(parents=True, exist_ok=True)
            source = str(prompts) if prompts else f"{tasks} (skip {skip})" if tasks else "held-out default"
            save_rollouts(report / "rollouts.npz", per_request,
                          {"drafter": drafter, "target": target, "temperature": temperature,
                           "gamma": gamma, "seed": seed, "n_per_task": n,
                           "max_new_tokens": max_new_tokens, "prompts": source})
        heldout = None
        if heldout_rollouts is not None:
            heldout, hmeta = load_rollouts(heldout_rollouts, "--heldout-rollouts")
            for key, want in (("gamma", gamma), ("temperature", temperature)):
                if float(hmeta[key]) != float(want):
                    raise InputError(f"{heldout_rollouts}: {key} {hmeta[key]} but the fit's is {want}",
                                     field="--heldout-rollouts")
        try:
            temps, copy_cal, result, held = fit_and_report(per_request, gamma, heldout=heldout,
                                                 min_positives=min_positives, n_boot=boot,
                                                 cv_folds=cv_folds, copy_calibration=copy_calibration)
        except ValueError as exc:
            raise InputError(str(exc), field="--rollouts" if rollouts else "--n") from None
        result.update(temperature=temperature, drafter=drafter, prompts=n_prompts, gamma=gamma,
                      rollouts=str(rollouts or report / "rollouts.npz"),
                      heldout_rollouts=None if heldout_rollouts is None else str(heldout_rollouts))
        report.mkdir(parents=True, exist_ok=True)
        write_json_atomic(report / "calibration.json", result)
        reliability_diagram(held, temps, report / "reliability.png", copy_cal=copy_cal,
                            title=f"{drafter} confidence, T={temperature}: held-out rollouts")
        if write:
            store_temperatures(ckpt, temperature, temps, copy_cal)
        copy_note = (f"; copied slots (Tc, d) {', '.join(f'({t:.2f}, {d:.2f})' for t, d in copy_cal)}"
                     if copy_cal_differs(temps, copy_cal) else "")
        typer.echo(f"mean ECE (held out): raw {100 * result['mean_ece_raw']:.2f}% -> STS "
                   f"{100 * result['mean_ece_sts']:.2f}%; temperatures "
                   f"{', '.join(f'{t:.2f}' for t in temps)}{copy_note}"
                   + (f"; stored in {ckpt}" if write else ""))


def _prompt_items(prompts, tasks, skip, gsm8k_train, n):
    """The prompts to roll out: a JSONL file, --tasks sets (--n per task after --skip), or the
    default held-out GSM8K train questions and code/chat templates."""
    from ..decode.prompts import parse_tasks
    from ..train.prompts import heldout_prompts, read_prompt_jsonl

    if n < 2:
        raise InputError(f"must be >= 2, got {n}", field="--n")
    if prompts is not None:
        return read_prompt_jsonl(prompts)
    if tasks is not None:
        sets = parse_tasks(tasks, skip + n)
        short = [f"{name} ({len(ps) - skip if len(ps) > skip else 0})" for name, ps in sets.items()
                 if len(ps) < skip + n]
        if short:
            raise InputError(f"fewer than {n} prompts after skipping {skip} in: {', '.join(short)}",
                             field="--tasks")
        return [p for ps in sets.values() for p in ps[skip:]]
    return heldout_prompts(gsm8k_train, n, seed=0)


def _collect_rollouts(drafter, target, items, temperature, gamma, max_new_tokens, seed, device,
                      threads):
    """Decode the held-out prompts with full-gamma verification; raw rollouts per request."""
    from ..calibration.rollouts import collect
    from ..decode.drafters import make_drafter
    from ..decode.prompts import encode_prompt
    from ..decode.sampling import Sampling

    from ..decode.loading import load_target_threads
    tgt = load_target_threads(target, device, threads)
    drf = make_drafter(drafter, tgt)
    if getattr(getattr(drf, "module", None), "conf_head", None) is None:
        raise InputError("this drafter has no confidence head", field="--drafter")
    ids = [encode_prompt(tgt.tokenizer, p.text, True) for p in items]
    with progress_bar("rollouts") as bar:
        task = bar.add_task("rollouts", total=len(ids), info="")

        def on_prompt(done: int, total: int) -> None:
            bar.update(task, completed=done)
            log_line(f"rollouts {done}/{total}")
        return collect(tgt, drf, ids, gamma=gamma, sampling=Sampling(temperature),
                       max_new_tokens=max_new_tokens, seed=seed, on_prompt=on_prompt)
