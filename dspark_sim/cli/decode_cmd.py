"""`dspark-sim generate` and `dspark-sim measure`: real speculative decoding on a real target."""
from __future__ import annotations

import platform
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from ..fileio import json_text
from ..errors import InputError
from ..vllm.settings import parse_server
from .options import (ChatOpt, DeviceOpt, DrafterOpt, GammaOpt, MaxNewOpt, SeedOpt, TargetOpt,
                      TemperatureOpt, ThreadsOpt, TopKOpt, TopPOpt, VllmDrafterOpt, VllmPythonOpt,
                      VllmServerOpt, check_serving_engine)
from .render import counted_progress, print_acceptance_report


def _check_common(gamma: int, max_new_tokens: int, temperature: float, top_k: int, top_p: float):
    """Validate the shared options before any model loads; return the Sampling."""
    from ..decode.sampling import Sampling

    if gamma < 1:
        raise InputError(f"must be >= 1, got {gamma}", field="--gamma")
    if max_new_tokens < 1:
        raise InputError(f"must be >= 1, got {max_new_tokens}", field="--max-new-tokens")
    return Sampling(temperature, top_k, top_p)


def _load(target_spec: str, drafter_spec: str, device: str, threads: int):
    from ..decode.drafters import check_drafter, make_drafter
    from ..decode.loading import load_target_threads

    check_drafter(drafter_spec)         # a bad checkpoint fails before the target loads
    target = load_target_threads(target_spec, device, threads)
    return target, make_drafter(drafter_spec, target)


def _result(gen, tokenizer) -> dict:
    return {"prompt_ids": gen.prompt_ids, "output_ids": gen.output_ids,
            "text": tokenizer.decode(gen.output_ids, skip_special_tokens=True),
            "accepted": gen.accepted, "steps": gen.steps, "mean_tau": round(gen.mean_tau, 4),
            "tokens_per_s": round(gen.tokens_per_s, 3), "wall_s": round(gen.wall_s, 4),
            "finish": gen.finish}


def _scheduler_curve(verify: str, hw: str):
    """None (--verify full: verify every draft), the hardware profile the one-request
    scheduler reads (--verify scheduled or lagged), or "measure"/"remeasure" (this machine's curve, timed
    once the models are loaded); a named profile is checked before any model is loaded."""
    if verify == "full":
        return None
    if verify not in ("scheduled", "lagged"):
        raise InputError(f"must be full, scheduled or lagged, got {verify!r}", field="--verify")
    if hw in ("measure", "remeasure"):
        return hw                          # timed on this machine once the models are loaded
    from ..profiles.registry import load_hw_profile

    try:
        return load_hw_profile(hw)
    except (OSError, ValueError) as exc:
        raise InputError(str(exc), field="--hw") from None


def _this_machine_curve(target, drafter, gamma: int, refresh: bool):
    """This machine's decode-loop curve from the user's cache, timed (15-20 s) when missing;
    and where it came from."""
    from ..decode.local_curve import cached_local_curve, curve_cache_path, machine_key

    timed = []

    def on_measure(path) -> None:
        timed.append(path)
        typer.echo(f"timing this machine's decode-loop step curve for the scheduler (once; "
                   f"cached in {path})", err=True)
    prof = cached_local_curve(target, drafter, gamma, refresh=refresh, on_measure=on_measure)
    path = curve_cache_path(machine_key(target, drafter, gamma))
    return prof, (f"this machine's decode loop, measured now (cached in {path})" if timed else
                  f"this machine's decode loop, cached in {path}")


def register(app: typer.Typer) -> None:
    @app.command()
    def generate(
        prompt: str = typer.Option(..., "--prompt", help="Prompt text (sent as one user turn "
                                   "through the chat template unless --no-chat)."),
        target: TargetOpt = "embedded",
        drafter: DrafterOpt = "ngram",
        max_new_tokens: MaxNewOpt = 128,
        temperature: TemperatureOpt = 0.0,
        top_k: TopKOpt = 0,
        top_p: TopPOpt = 1.0,
        gamma: GammaOpt = 7,
        seed: SeedOpt = 0,
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object with token ids, "
                                     "text, accepted drafts per step, mean tau and tokens/s."),
        compare_ar: bool = typer.Option(False, "--compare-ar", help="Also decode plainly; report it "
                                        "under 'ar' (and whether the outputs are identical). Both "
                                        "decoders are warmed up, then timed twice in alternating "
                                        "order (plain, speculative, speculative, plain); tokens/s "
                                        "is the mean of the two runs."),
        chat: ChatOpt = True,
        verify: str = typer.Option("full", "--verify", help="full: verify every draft; scheduled: "
                                   "DSpark's hardware-aware scheduler (Algorithm 1, one request) "
                                   "picks how many drafts to verify from the drafter's calibrated "
                                   "confidences and --hw's step-time curve (drafters without a "
                                   "confidence head verify all); the loop drafts no more than the "
                                   "scheduler could ever verify on that curve (a block drafter "
                                   "then runs a shorter block). lagged: the paper's production "
                                   "variant for jagged curves: each step verifies the budget an "
                                   "unconstrained search (no early stop) found on the previous "
                                   "draft step's confidences (lossless: it never reads the "
                                   "current drafts)."),
        hw: str = typer.Option("measure", "--hw", help="The step-time curve the scheduler reads "
                               "with --verify scheduled. measure (default): this decode loop's own "
                               "curve on this machine, for this target, drafter, gamma and thread "
                               "count, timed once (15-20 s on a CPU) and cached under the dspark-sim "
                               "cache directory; remeasure: time it again; or a hardware profile "
                               "(shipped name or .yaml path), e.g. "
                               "cpu-1thread-smollm2-135m-decode-loop, measured on another CPU."),
        skip_drafting: bool = typer.Option(True, "--skip-drafting/--no-skip-drafting", help="With "
                                           "--verify scheduled or lagged: skip the draft step while the "
                                           "previous steps' confidences (a running mean of "
                                           "each step's expected gain) say drafting does not "
                                           "pay (backing off 1, 2, 4 .. 16 steps; the output is "
                                           "unchanged)."),
        device: DeviceOpt = "auto",
        threads: ThreadsOpt = 0,
    ) -> None:
        """Generate text with speculative decoding on a real target and print it."""
        import torch

        from ..decode.prompts import encode_prompt
        from ..decode.speculate import plain_generate, speculative_generate

        sampling = _check_common(gamma, max_new_tokens, temperature, top_k, top_p)
        if not prompt.strip():
            raise InputError("must not be empty", field="--prompt")
        curve = _scheduler_curve(verify, hw)
        tgt, drf = _load(target, drafter, device, threads)
        if curve is not None:
            from ..decode.local_curve import verify_cost_curve
            from ..profiles.registry import hw_profile_path
            curve, source = (_this_machine_curve(tgt, drf, gamma, refresh=curve == "remeasure")
                             if isinstance(curve, str) else (curve, f"hardware profile {hw} "
                                                                    f"({hw_profile_path(hw)})"))
            curve, lines = verify_cost_curve(curve, source, repair=verify == "scheduled")
            for line in lines:
                typer.echo(line, err=True)
        if tgt.tokenizer is None:
            raise InputError("the target has no tokenizer; text prompts need one", field="--target")
        ids = encode_prompt(tgt.tokenizer, prompt, chat)

        def speculative(tokens: int = max_new_tokens):
            hook = None
            if curve is not None:
                from ..serve.single import ScheduledVerify
                hook = ScheduledVerify(curve, drf.kind, gamma, skip_drafting=skip_drafting,
                                       lagged=verify == "lagged")
            return speculative_generate(
                tgt, drf, ids, max_new_tokens=tokens, gamma=gamma, sampling=sampling,
                generator=torch.Generator(device=tgt.device).manual_seed(seed), verify_len=hook,
                draft_budget=None if hook is None else hook.draft_budget)

        def plain(tokens: int = max_new_tokens):
            return plain_generate(tgt, ids, max_new_tokens=tokens, sampling=sampling,
                                  generator=torch.Generator(device=tgt.device).manual_seed(seed))

        if compare_ar:
            speculative(8), plain(8)                          # warm-up, untimed
            ar, gen = plain(), speculative()
            gen2, ar2 = speculative(), plain()
            gen.wall_s, ar.wall_s = (gen.wall_s + gen2.wall_s) / 2, (ar.wall_s + ar2.wall_s) / 2
        else:
            gen = speculative()
        out = {"target": tgt.name, "drafter": drf.name, "gamma": gamma, "verify": verify,
               "temperature": temperature, **_result(gen, tgt.tokenizer)}
        if gen.verified:
            out["mean_verified"] = round(sum(gen.verified) / len(gen.verified), 4)
        if curve is not None:
            out["skipped_draft_steps"] = gen.skipped
        if compare_ar:
            out["ar"] = _result(ar, tgt.tokenizer)
            out["speedup"] = round(ar.wall_s / gen.wall_s, 4) if gen.wall_s > 0 else None
            if sampling.greedy:
                out["identical"] = ar.output_ids == gen.output_ids
        if as_json:
            typer.echo(json_text(out))
            return
        typer.echo(out["text"])
        line = (f"[{drf.name}, verify {verify}] {len(gen.output_ids)} tokens in {gen.steps} steps, "
                f"mean tau {gen.mean_tau:.2f}, mean verified {out.get('mean_verified', 0):.2f}, "
                f"{gen.tokens_per_s:.1f} tok/s")
        if compare_ar:
            line += f"; plain {out['ar']['tokens_per_s']:.1f} tok/s ({out['speedup']:.2f}x)"
            if "identical" in out:
                line += f", identical output: {out['identical']}"
        typer.echo(line, err=True)

    @app.command()
    def measure(
        out: Path = typer.Option(..., "--out", help="Acceptance profile to write (NAME.acceptance."
                                 "json); the report, plots and a resumable record file go next to it."),
        target: TargetOpt = "embedded",
        drafter: DrafterOpt = "ngram",
        tasks: str = typer.Option("math,code,chat", "--tasks", help="Comma-separated NAME=FILE "
                                  "(JSONL with 'prompt', 'question' or 'turns'), NAME of a built-in "
                                  "set (math, code, chat), or FILE (rows carry a 'task' field)."),
        n: Optional[int] = typer.Option(None, "--n", help="First N prompts per task (default all)."),
        max_new_tokens: MaxNewOpt = 128,
        gamma: GammaOpt = 7,
        temperature: TemperatureOpt = 0.0,
        top_k: TopKOpt = 0,
        top_p: TopPOpt = 1.0,
        seed: SeedOpt = 0,
        plain: bool = typer.Option(True, "--plain/--no-plain", help="Time plain decoding of every "
                                   "prompt side by side (needed for the speedup figures)."),
        name: Optional[str] = typer.Option(None, "--name", help="Profile name (default: from --out)."),
        chat: ChatOpt = True,
        device: DeviceOpt = "auto",
        threads: ThreadsOpt = 0,
        engine: str = typer.Option("native", "--engine", help="native: this project's decode core "
                                   "and --drafter; vllm: a vLLM server's drafter (--vllm-drafter, "
                                   "K = --gamma) with its per-request metrics, greedy."),
        vllm_python: VllmPythonOpt = None,
        vllm_drafter: VllmDrafterOpt = "ngram",
        vllm_server: VllmServerOpt = "",
    ) -> None:
        """Measure a drafter's acceptance per task; write an empirical acceptance profile and a report."""
        check_serving_engine(engine)
        if engine == "vllm":
            if temperature != 0.0:
                raise InputError("measure --engine vllm is greedy", field="--temperature")
            from rich.console import Console

            from ..vllm.measure import measure_acceptance

            with counted_progress(Console(stderr=True)) as progress:
                result, records = measure_acceptance(out, target, tasks, n, max_new_tokens, gamma,
                                                     chat, name, vllm_python, vllm_drafter,
                                                     parse_server(vllm_server), progress)
            print_acceptance_report(result)
            typer.echo(f"wrote {out} and {records}")
            return
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        from ..decode.measure import Settings, build_profile, run_measurement
        from ..decode.prompts import parse_tasks
        from ..decode.report import write_report

        sampling = _check_common(gamma, max_new_tokens, temperature, top_k, top_p)
        if n is not None and n < 1:
            raise InputError(f"must be >= 1, got {n}", field="--n")
        prompt_sets = parse_tasks(tasks, n)
        tgt, drf = _load(target, drafter, device, threads)
        if tgt.tokenizer is None:
            raise InputError("the target has no tokenizer; text prompts need one", field="--target")
        settings = Settings(target=tgt.name, drafter=drf.name, drafter_kind=drf.kind, gamma=gamma,
                            temperature=sampling.temperature, top_k=top_k, top_p=top_p,
                            max_new_tokens=max_new_tokens, seed=seed, chat=chat, plain=plain)
        stem = out.name[: -len(".acceptance.json")] if out.name.endswith(".acceptance.json") else out.stem
        checkpoint = out.with_name(stem + ".records.jsonl")
        from ..decode.measure import checkpoint_note
        for note in (checkpoint_note(checkpoint, settings),
                     f"note: replacing {out} and its report" if out.exists() else None):
            if note:
                typer.echo(note, err=True)
        total = sum(map(len, prompt_sets.values()))
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("tau {task.fields[tau]}"), TimeElapsedColumn(),
                      TimeRemainingColumn(), console=Console(stderr=True)) as progress:
            bar = progress.add_task("measuring", total=total, tau="-")
            sums = [0, 0]

            def on_record(rec):
                sums[0] += sum(rec.accepted)
                sums[1] += len(rec.accepted)
                tau = f"{sums[0] / sums[1] + 1:.2f}" if sums[1] else "-"
                progress.update(bar, advance=1, description=f"{rec.task:>6}", tau=tau)
                if not sys.stderr.isatty():     # a log file: one plain line per prompt
                    done = int(progress.tasks[0].completed)
                    typer.echo(f"{done}/{total} {rec.source}: {rec.output_tokens} tokens, "
                               f"tau {sum(rec.accepted) / max(len(rec.accepted), 1) + 1:.2f}, "
                               f"spec {rec.spec_wall_s:.1f}s, plain {rec.plain_wall_s or 0:.1f}s, "
                               f"running tau {tau}", err=True)

            records = run_measurement(tgt, drf, prompt_sets, settings, checkpoint, on_record)
        profile = build_profile(records, settings, name or stem)
        profile.save(out)
        command = "dspark-sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        import torch
        environment = (f"{platform.machine()} {platform.system()}, "
                       f"{'GPU ' + torch.cuda.get_device_name() if tgt.device.type == 'cuda' else 'CPU'}, "
                       f"torch {torch.__version__} ({torch.get_num_threads()} threads), "
                       f"dtype {str(tgt.dtype).replace('torch.', '')}")
        paths = write_report(records, settings, out, command, environment)
        typer.echo(f"wrote {out}")
        for p in paths:
            typer.echo(f"wrote {p}")
        for task_name, task in profile.tasks.items():
            typer.echo(f"  {task_name}: mean tau {task.mean_tau(gamma):.3f} over "
                       f"{len(task.requests)} requests")
