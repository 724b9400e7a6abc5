"""`dspark-sim calibrate`: Sequential Temperature Scaling of a drafter's confidence head on
held-out rollouts (method.md section 3)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from .options import DeviceOpt, TargetOpt, ThreadsOpt
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
        gsm8k_train: Optional[Path] = typer.Option(None, "--gsm8k-train", help="GSM8K train JSONL "
                                                   "for the default held-out math prompts [the "
                                                   "held-out questions shipped in the package]."),
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
                                   "in the calibration file beside the checkpoint's weights "
                                   "(calibration.sts.json, keyed by the weights' hash; config.json "
                                   "is never edited). A checkpoint inside the installed package "
                                   "(the shipped drafters) is copied to --save-to first."),
        save_to: Optional[Path] = typer.Option(None, "--save-to", help="Where a calibrated copy of "
                                               "a checkpoint inside the installed package goes "
                                               "[REPORT/drafter]; use it as --drafter afterwards."),
        device: DeviceOpt = "auto",
        threads: ThreadsOpt = 0,
    ) -> None:
        """Fit Sequential Temperature Scaling of the confidence head on held-out rollouts."""
        from ..calibration.plot import reliability_diagram
        from ..calibration.positions import format_headline, format_position
        from ..calibration.rollouts import copy_cal_differs, fit_and_report, load_rollouts, save_rollouts
        from ..fileio import write_json_atomic

        if prompts is not None and tasks is not None:
            raise InputError("give --prompts or --tasks, not both", field="--tasks")
        if skip < 0:
            raise InputError(f"must be >= 0, got {skip}", field="--skip")
        ckpt = _checkpoint_dir(drafter)
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
            _say_if_replacing(report / "rollouts.npz")
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
                      rollouts=str((rollouts or report / "rollouts.npz").resolve()),
                      heldout_rollouts=None if heldout_rollouts is None else str(heldout_rollouts.resolve()))
        _say_if_replacing(report / "calibration.json")
        report.mkdir(parents=True, exist_ok=True)
        write_json_atomic(report / "calibration.json", result)
        reliability_diagram(held, temps, report / "reliability.png", copy_cal=copy_cal,
                            title=f"{drafter} confidence, T={temperature}: held-out rollouts",
                            figures={"raw": result["raw"], "sts": result["sts"]})
        copy_note = (f"; copied slots (Tc, d) {', '.join(f'({t:.2f}, {d:.2f})' for t, d in copy_cal)}"
                     if copy_cal_differs(temps, copy_cal) else "")
        head = result["headline"]
        typer.echo(f"ECE (held out, {result['heldout_steps']} steps of {result['heldout_requests']} "
                   f"requests, weighted by the steps reaching each position):")
        for label in ("raw", "sts"):
            typer.echo(f"  {label:>3}: {format_headline(head[label])}")
            typer.echo("       " + "; ".join(format_position(r) for r in result[label]))
        typer.echo(f"temperatures {', '.join(f'{t:.2f}' for t in temps)}{copy_note}")
        if write:
            where = _store(ckpt, save_to or report / "drafter", temperature, temps,
                           copy_cal if copy_cal_differs(temps, copy_cal) else None,
                           {"report": str((report / "calibration.json").resolve()),
                            "rollouts": result["rollouts"],
                            "ece_raw": head["raw"]["ece"], "ece_sts": head["sts"]["ece"],
                            "heldout_steps": result["heldout_steps"]})
            typer.echo(f"stored in {where}")
        else:
            typer.echo(f"dry run: nothing stored; report in {report}")


def _checkpoint_dir(drafter: str) -> Path:
    """The checkpoint directory behind --drafter: a shipped kind's directory, or the path."""
    from ..decode.drafters.config import KINDS
    from ..decode.drafters.trained import shipped_dir

    return shipped_dir(drafter) if drafter in KINDS else Path(drafter)


def _say_if_replacing(path: Path) -> None:
    if path.exists():
        typer.echo(f"note: replacing {path} (from an earlier run)", err=True)


def _store(ckpt: Path, copy_dir: Path, temperature: float, temps, copy_cal, fitted: dict) -> Path:
    """Write the calibration beside the checkpoint's weights; a checkpoint inside the installed
    package is copied to `copy_dir` first (the package is never written to). Returns the file."""
    from ..calibration.store import calibrated_copy, is_installed_package_path, write_calibration

    if is_installed_package_path(ckpt):
        calibrated_copy(ckpt, copy_dir)
        typer.echo(f"{ckpt} is inside the installed package and stays unchanged; calibrating a "
                   f"copy in {copy_dir} (use --drafter {copy_dir})")
        ckpt = copy_dir
    path, note = write_calibration(ckpt, temperature, list(temps),
                                   None if copy_cal is None else copy_cal.tolist(), fitted)
    if note:
        typer.echo(f"note: {note}", err=True)
    return path


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

    import warnings

    from ..calibration.store import StaleCalibration
    from ..decode.loading import load_target_threads

    tgt = load_target_threads(target, device, threads)
    with warnings.catch_warnings():          # the rollouts read raw confidences: a stale fit
        warnings.simplefilter("ignore", StaleCalibration)     # is what this run replaces
        drf = make_drafter(drafter, tgt)
    if not getattr(drf, "has_confidence", False):
        raise InputError(f"{drafter} reports no confidences (no confidence head): there is nothing "
                         f"to calibrate", field="--drafter")
    ids = [encode_prompt(tgt.tokenizer, p.text, True) for p in items]
    with progress_bar("rollouts") as bar:
        task = bar.add_task("rollouts", total=len(ids), info="")

        def on_prompt(done: int, total: int) -> None:
            bar.update(task, completed=done)
            log_line(f"rollouts {done}/{total}")
        return collect(tgt, drf, ids, gamma=gamma, sampling=Sampling(temperature),
                       max_new_tokens=max_new_tokens, seed=seed, on_prompt=on_prompt)
