"""`dspark-sim trace`: generate, import and describe request traces."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..fileio import json_text
from ..errors import InputError
from .render import print_trace_stats


def _check_positive(value: float | None, name: str) -> None:
    if value is not None and not value > 0:
        raise InputError(f"must be > 0, got {value}", field=name)


def _multi_turn(out: Path, preset: str, turns, think, system_tokens, max_prompt, mix, seed: int,
                model, count, duration) -> None:
    """`trace generate --multi-turn`: conversations from the preset, options overriding it."""
    from dataclasses import replace

    import numpy as np

    from ..traces import write_trace
    from ..traces.conversations import PRESETS, generate_conversations

    if preset not in PRESETS:
        raise InputError(f"expected {' or '.join(PRESETS)}, got {preset!r}", field="multi-turn")
    if len(mix) != 1:
        raise InputError("--multi-turn takes one task", field="tasks")
    changes = {k: v for k, v in (("turns", turns), ("think_s", think),
                                 ("system_tokens", system_tokens), ("max_prompt", max_prompt))
               if v is not None}
    shape = replace(PRESETS[preset], **changes)
    starts = model.sample(np.random.default_rng(seed), count=count, duration_s=duration)
    if len(starts) == 0:
        raise InputError("no conversation starts within the duration", field="duration")
    result = generate_conversations(starts, shape, next(iter(mix)), seed, name=out.stem)
    write_trace(out, result)
    typer.echo(f"wrote {out} ({len(result):,} requests in {len(starts):,} conversations, "
               f"{result.arrival_s[-1]:.0f} s)")


def register(app: typer.Typer) -> None:
    trace = typer.Typer(help="Generate, import and describe request traces (JSONL, formats.md).",
                        no_args_is_help=True)

    @trace.command("generate")
    def generate(
        out: Path = typer.Option(..., "--out", help="Trace JSONL to write (atomically)."),
        duration: Optional[float] = typer.Option(None, "--duration", help="Seconds of traffic "
                                                 "(give this or --count)."),
        count: Optional[int] = typer.Option(None, "--count", help="Number of requests "
                                            "(give this or --duration)."),
        rate: float = typer.Option(1.0, "--rate", help="Mean arrival rate, requests per second."),
        arrivals: str = typer.Option("poisson", "--arrivals", help="poisson, or gamma (bursty "
                                     "renewal process with the CV of gaps given by --cv)."),
        cv: float = typer.Option(1.0, "--cv", help="Coefficient of variation of inter-arrival "
                                 "gaps for --arrivals gamma (1 = Poisson, >1 bursty)."),
        diurnal_amplitude: float = typer.Option(0.0, "--diurnal-amplitude", help="Relative rate "
                                                "swing A in [0, 1): rate x (1 + A sin(2 pi (t + "
                                                "phase) / period))."),
        diurnal_period: float = typer.Option(86400.0, "--diurnal-period", help="Period of the rate "
                                             "modulation, seconds."),
        diurnal_phase: float = typer.Option(0.0, "--diurnal-phase", help="Phase of the rate "
                                            "modulation, seconds."),
        tasks: str = typer.Option("chat=1", "--tasks", help="Task mix, e.g. chat=0.7,code=0.2,math=0.1 "
                                  "(weights are normalised)."),
        prompt_mean: float = typer.Option(1000.0, "--prompt-mean", help="Lognormal prompt length: mean tokens."),
        prompt_cv: float = typer.Option(1.0, "--prompt-cv", help="Lognormal prompt length: CV."),
        output_mean: float = typer.Option(200.0, "--output-mean", help="Lognormal output length: mean tokens."),
        output_cv: float = typer.Option(1.0, "--output-cv", help="Lognormal output length: CV."),
        max_prompt: Optional[int] = typer.Option(None, "--max-prompt", help="Clip lognormal prompts to this many tokens."),
        max_output: Optional[int] = typer.Option(None, "--max-output", help="Clip lognormal outputs to this many tokens."),
        lengths_from: Optional[Path] = typer.Option(None, "--lengths-from", help="Draw prompt and "
                                                    "output lengths from the empirical distribution "
                                                    "of this file (trace JSONL, Azure or BurstGPT CSV, "
                                                    "Mooncake JSONL) instead of lognormals."),
        seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same bytes)."),
        multi_turn: Optional[str] = typer.Option(None, "--multi-turn", help="chat or agent: each "
                                                 "arrival starts a conversation whose turns extend "
                                                 "one another behind a shared system prompt "
                                                 "(chat: 5 turns, 20 s think, 300-token system "
                                                 "prompt, 150-token messages and answers; agent: 20 "
                                                 "turns, 2 s, 2000-token tool prefix, 40/60 tokens); "
                                                 "--rate and --count count conversations; the "
                                                 "length options do not apply."),
        turns: Optional[float] = typer.Option(None, "--turns", help="--multi-turn: mean turns "
                                              "per conversation (1 + Poisson)."),
        think: Optional[float] = typer.Option(None, "--think", help="--multi-turn: mean seconds "
                                              "between turns (exponential)."),
        system_tokens: Optional[int] = typer.Option(None, "--system-tokens", help="--multi-turn: "
                                                    "tokens of the shared system/tool prompt."),
        max_turn_prompt: Optional[int] = typer.Option(None, "--max-turn-prompt", help="--multi-turn: "
                                                      "a conversation ends before a turn's prompt "
                                                      "passes this many tokens (default 4096)."),
    ) -> None:
        """Generate a synthetic trace: task mix, lognormal or empirical lengths, Poisson or Gamma
        arrivals, optional diurnal rate; or multi-turn conversations (--multi-turn)."""
        from ..traces import write_trace
        from ..traces.generate import (ArrivalModel, EmpiricalLengths, LognormalLengths,
                                       generate_trace, parse_task_mix)
        from ..traces.importers import read_any

        if (duration is None) == (count is None):
            raise InputError("give exactly one of --duration and --count", field="duration")
        for value, name in ((duration, "duration"), (rate, "rate"), (cv, "cv"),
                            (prompt_mean, "prompt-mean"), (output_mean, "output-mean"),
                            (diurnal_period, "diurnal-period")):
            _check_positive(value, name)
        if count is not None and count < 1:
            raise InputError(f"must be >= 1, got {count}", field="count")
        if prompt_cv < 0 or output_cv < 0:
            raise InputError("CVs must be >= 0", field="prompt-cv" if prompt_cv < 0 else "output-cv")
        if arrivals not in ("poisson", "gamma"):
            raise InputError(f"expected poisson or gamma, got {arrivals!r}", field="arrivals")
        if not 0.0 <= diurnal_amplitude < 1.0:
            raise InputError(f"must lie in [0, 1), got {diurnal_amplitude}", field="diurnal-amplitude")
        mix = parse_task_mix(tasks)
        if multi_turn is not None:
            _multi_turn(out, multi_turn, turns, think, system_tokens, max_turn_prompt, mix, seed,
                        ArrivalModel(rate, arrivals, cv, diurnal_amplitude, diurnal_period,
                                     diurnal_phase), count, duration)
            return
        if lengths_from is not None:
            source = read_any(lengths_from)
            prompt_model = EmpiricalLengths.fit(source.prompt_tokens)
            output_model = EmpiricalLengths.fit(source.output_tokens)
        else:
            prompt_model = LognormalLengths(prompt_mean, prompt_cv, maximum=max_prompt)
            output_model = LognormalLengths(output_mean, output_cv, maximum=max_output)
        model = ArrivalModel(rate, arrivals, cv, diurnal_amplitude, diurnal_period, diurnal_phase)
        result = generate_trace(model, prompt_model, output_model, mix, seed, count=count,
                                duration_s=duration, name=out.stem)
        write_trace(out, result)
        typer.echo(f"wrote {out} ({len(result):,} requests, "
                   f"{result.arrival_s[-1] - result.arrival_s[0]:.0f} s)")

    @trace.command("import")
    def import_(
        fmt: str = typer.Argument(..., metavar="FORMAT", help="azure, burstgpt or mooncake."),
        source: Path = typer.Argument(..., metavar="FILE", help="File in that format."),
        out: Path = typer.Option(..., "--out", help="Trace JSONL to write (atomically)."),
        task: str = typer.Option("default", "--task", help="Task label for every request "
                                 "(matched to acceptance-profile tasks)."),
    ) -> None:
        """Convert an Azure LLM inference CSV, BurstGPT CSV or Mooncake JSONL into a trace."""
        from ..traces import write_trace
        from ..traces.importers import import_trace

        if not task:
            raise InputError("must be a non-empty string", field="task")
        imported = import_trace(fmt, source, task)
        write_trace(out, imported.trace)
        notes = []
        if imported.skipped_zero:
            notes.append(f"skipped {imported.skipped_zero:,} rows with zero tokens")
        if imported.reordered:
            notes.append(f"sorted {imported.reordered:,} out-of-order rows")
        typer.echo(f"wrote {out} ({len(imported.trace):,} requests)"
                   + (f"; {'; '.join(notes)}" if notes else ""))

    @trace.command("slice")
    def slice_(
        source: Path = typer.Argument(..., metavar="TRACE", help="Trace JSONL (or a file "
                                      "`trace import` reads: azure, burstgpt, mooncake)."),
        out: Path = typer.Option(..., "--out", help="Trace JSONL to write (atomically)."),
        window: str = typer.Option("0:", "--window", help="START:DURATION in seconds from the "
                                   "first arrival (DURATION empty = to the end)."),
        limit: Optional[int] = typer.Option(None, "--limit", help="At most this many requests."),
        prompt_scale: float = typer.Option(1.0, "--prompt-scale", help="Multiply prompt lengths."),
        output_scale: float = typer.Option(1.0, "--output-scale", help="Multiply output lengths."),
        max_prompt_tokens: Optional[int] = typer.Option(None, "--max-prompt-tokens", help="Clip "
                                                        "prompt lengths to this."),
        max_output_tokens: Optional[int] = typer.Option(None, "--max-output-tokens", help="Clip "
                                                        "output lengths to this."),
        stretch: float = typer.Option(1.0, "--stretch", help="Multiply arrival times from the "
                                      "window's start (> 1 spreads arrivals out)."),
        task: str = typer.Option("default", "--task", help="Task label when importing a "
                                 "non-trace file."),
    ) -> None:
        """A window of a trace with lengths scaled to another model (e.g. an Azure slice for a
        small target on a CPU)."""
        from ..traces import write_trace
        from ..traces.importers import read_any
        from ..traces.transform import slice_trace

        start_text, _, dur_text = window.partition(":")
        try:
            start = float(start_text or 0)
            duration = float(dur_text) if dur_text else None
        except ValueError:
            raise InputError(f"must be START:DURATION in seconds, got {window!r}", field="--window") from None
        whole = read_any(source, task)
        sliced = slice_trace(whole, start, duration, prompt_scale, output_scale,
                             max_prompt_tokens, max_output_tokens, stretch, limit)
        write_trace(out, sliced)
        if whole.has_prefixes and not sliced.has_prefixes:
            typer.echo("note: the shared-content fields (conversation, hash_ids) were dropped: "
                       "rescaled or clipped prompts no longer hold the content they name "
                       "(slice without --prompt-scale / --max-prompt-tokens to keep them)", err=True)
        typer.echo(f"wrote {out} ({len(sliced):,} requests over {float(sliced.arrival_s[-1]):.1f} s; "
                   f"prompt mean {sliced.prompt_tokens.mean():.0f}, output mean "
                   f"{sliced.output_tokens.mean():.0f})")

    @trace.command("stats")
    def stats(
        paths: list[Path] = typer.Argument(..., metavar="TRACE...", help="Trace JSONL files (or "
                                           "Azure/BurstGPT/Mooncake files), shown side by side."),
        as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    ) -> None:
        """Count, span, rate, CV of gaps, prompt/output mean/p50/p90/p99, per-task counts."""
        from ..traces.importers import read_any
        from ..traces.stats import STAT_ROWS, trace_stats

        results = [trace_stats(read_any(p)) for p in paths]
        if as_json:
            typer.echo(json_text(results if len(results) > 1 else results[0], indent=2))
            return
        print_trace_stats([p.name for p in paths], results, STAT_ROWS)

    app.add_typer(trace, name="trace")
