"""The `--engine vllm` side of `profile`, `serve-replay`, `validate` and `measure`: shared
options and the orchestration that runs vLLM (the library work is in dspark_sim/vllm)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import InputError

ENGINE_HELP = ("native: this project's engine (dspark_sim/serve); vllm: a vLLM server on "
               "127.0.0.1 started from .venv-vllm (`make setup-vllm`) or --vllm-python.")
VllmPythonOpt = Annotated[Optional[str], typer.Option(
    "--vllm-python", help="Interpreter that imports vllm [$DSPARK_SIM_VLLM_PYTHON, this one if "
    "it has vllm, else .venv-vllm/bin/python].")]
VllmDrafterOpt = Annotated[str, typer.Option(
    "--vllm-drafter", help="vLLM's drafter for the speculative policies: ngram[:MIN-MAX] "
    "(prompt lookup of MIN..MAX tokens, default 1-4 as the decode core's n-gram drafter), draft_model:PATH, or a --speculative-config JSON object "
    "(num_speculative_tokens comes from the policy).")]
SERVER_SETTINGS = {   # key: (type, default, meaning)
    "max_num_seqs": (int, 16, "requests per iteration; the profile's max_batch_requests"),
    "max_num_batched_tokens": (int, 512, "tokens per iteration (chunked prefill); the profile's "
                               "max_batch_tokens"),
    "max_model_len": (int, 2048, "longest request"),
    "kv_cache_gib": (float, 2.0, "KV cache GiB (VLLM_CPU_KVCACHE_SPACE on CPU builds)"),
    "threads": (int, 1, "OpenMP threads of the worker, bound to the first cores (1 leaves a core "
                "for the API server and the load generator)"),
    "dtype": (str, "float32", "vLLM --dtype (float32 on CPU; auto or bfloat16 on a GPU)"),
}
VllmServerOpt = Annotated[str, typer.Option(
    "--vllm-server", help="vLLM server settings as KEY=VALUE,...: " + "; ".join(
        f"{k} ({d}: {m})" for k, (_, d, m) in SERVER_SETTINGS.items()) + ".")]


@dataclass(frozen=True)
class ServerLimits:
    """The vLLM server settings a run starts its servers with (SERVER_SETTINGS)."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    max_model_len: int = 2048
    kv_cache_gib: float = 2.0
    threads: int = 1
    dtype: str = "float32"


def parse_server(text: str) -> ServerLimits:
    """`--vllm-server` KEY=VALUE,... -> ServerLimits (unknown keys and bad values: InputError)."""
    values: dict = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        key, eq, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in SERVER_SETTINGS:
            raise InputError(f"expected KEY=VALUE with KEY one of {', '.join(SERVER_SETTINGS)}, got "
                             f"{item!r}", field="--vllm-server")
        kind = SERVER_SETTINGS[key][0]
        try:
            values[key] = kind(raw.strip())
        except ValueError:
            raise InputError(f"{key} must be {kind.__name__}, got {raw!r}", field="--vllm-server") from None
        if kind is not str and not values[key] > 0:
            raise InputError(f"{key} must be > 0, got {raw!r}", field="--vllm-server")
    return ServerLimits(**values)


def server_spec(model: str, speculative: dict | None, limits: ServerLimits, iteration_log: bool = True):
    """The ServerSpec of a run."""
    from ..vllm.runtime import ServerSpec

    extra = ["--enable-logging-iteration-details"] if iteration_log else []
    return ServerSpec(model=model, dtype=limits.dtype, max_model_len=limits.max_model_len,
                      speculative=speculative, max_num_seqs=limits.max_num_seqs,
                      max_num_batched_tokens=limits.max_num_batched_tokens,
                      kv_cache_gib=limits.kv_cache_gib, threads=limits.threads, extra_args=extra)


def run_vllm_profile(out: Path, target: str, speculative: Optional[str], drafter: str, batches: tuple[int, ...],
                     contexts: tuple[int, ...], prefill_chunks: tuple[int, ...], decode_steps: int,
                     repeats: int, warmup: int, name: Optional[str], seed: int, plot: Path,
                     vllm_python: Optional[str], limits: ServerLimits) -> None:
    """Start vLLM, time it (dspark_sim/vllm/profile.py), fit and write the hardware profile."""
    import tempfile

    from rich.console import Console
    from rich.progress import Progress

    from ..hardware.measure import measured_profile
    from ..hardware.plot import plot_profile
    from ..hardware.profiler import ProfileGrid
    from ..vllm.iterations import kv_capacity_tokens, vllm_version
    from ..vllm.profile import VLLMGrid, profile_vllm, split_proposer
    from ..vllm.runtime import (VLLMServer, drafter_kind, model_vocab, parse_drafter, resolve_model,
                                speculative_config, vllm_python as find_python)
    from .hardware_cmd import print_drafts

    python = find_python(vllm_python)
    spec_cfg = speculative_config(speculative, parse_drafter(drafter)) if speculative else None
    if max(prefill_chunks, default=0) > limits.max_num_batched_tokens:
        raise InputError(f"a prefill chunk is longer than max_num_batched_tokens "
                         f"({limits.max_num_batched_tokens})", field="--prefill-chunks")
    if max(batches) > limits.max_num_seqs:
        raise InputError(f"more requests than max_num_seqs ({limits.max_num_seqs})", field="--batches")
    if max(contexts) + decode_steps + 2 > limits.max_model_len:
        raise InputError(f"contexts + decode steps exceed max_model_len ({limits.max_model_len})",
                         field="--contexts")
    model, model_name = resolve_model(target)
    grid = VLLMGrid(batches, contexts, prefill_chunks, decode_steps, repeats, warmup)
    console = Console()
    vocab = model_vocab(model)
    runs = [("plain", None)] + ([("speculative", spec_cfg)] if spec_cfg else [])
    timed, records_all, log_texts, starts = {}, [], [], []
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("timing vLLM", total=grid.points(spec_cfg is not None))
        for label, cfg in runs:
            spec = server_spec(model, cfg, limits)
            log = Path(tempfile.mkdtemp(prefix=f"vllm-profile-{label}-")) / "vllm.log"
            console.print(f"starting a {label} vLLM server ({python}) on 127.0.0.1; log {log}")
            with VLLMServer(spec, python, log) as server:
                console.print(f"vLLM ready after {server.start_s:.0f} s")
                timed[label], records = profile_vllm(server, grid, vocab, cfg is not None, seed,
                                                     lambda: bar.advance(task), prefill=cfg is None)
                starts.append(round(server.start_s, 1))
            records_all += [{"server": label, **r.as_dict()} for r in records]
            log_texts.append(log.read_text(errors="replace"))
    timings, draft_timings = timed["plain"], []
    if spec_cfg:
        timings, draft_timings = split_proposer(timed["plain"], timed["speculative"],
                                                drafter_kind(spec_cfg))
    log_text = log_texts[0]
    pgrid = ProfileGrid(batches, tuple(sorted({t.width for t in timings if t.op == "decode"})),
                        contexts, prefill_chunks, repeats, warmup)
    dtype, threads = limits.dtype, limits.threads
    prof, fit = measured_profile(timings, pgrid, "cpu" if dtype == "float32" else "cuda",
                                 name or f"vllm-{model_name.lower()}", model_name, seed,
                                 draft_timings=draft_timings, runner="vllm")
    prof.max_batch_requests = limits.max_num_seqs
    prof.max_batch_tokens = limits.max_num_batched_tokens
    prof.kv_capacity_tokens = kv_capacity_tokens(log_text)
    prof.device = f"vLLM {vllm_version(log_text) or '?'} ({'CPU' if dtype == 'float32' else dtype}), " \
                  f"{threads} OpenMP thread(s)"
    prof.extra["vllm"] = {"version": vllm_version(log_text), "python": str(python),
                          "server_args": server_spec(model, spec_cfg, limits).args(0)[2:],
                          "speculative_config": spec_cfg, "startup_s": starts,
                          "decode_steps": decode_steps, "bursts": records_all}
    summary = fit.summary()
    console.print(f"fit: {summary['within_spread']}/{summary['points']} points within their p10-p90 "
                  f"spread; median |error| {summary['median_abs_rel_error']:.1%}, max "
                  f"{summary['max_abs_rel_error']:.1%}; per_context_token_s = {fit.per_context_token_s:.3e}")
    overheads = sorted(r["overhead_s"] for r in records_all)
    if overheads:
        console.print(f"engine overhead per iteration (outside the model): median "
                      f"{1e3 * overheads[len(overheads) // 2]:.1f} ms")
    if prof.draft_curves:
        print_drafts(console, prof)
    prof.save(out)
    path = plot_profile(prof, plot, measurements=prof.extra["measurements"],
                        draft_points=prof.extra.get("draft_measurements"))
    console.print(f"wrote {out} and {path}")


AiperfOpt = Annotated[Optional[str], typer.Option(
    "--aiperf", help="AIPerf executable, the load generator [$DSPARK_SIM_AIPERF, "
    ".venv-aiperf/bin/aiperf, PATH].")]
UrlOpt = Annotated[Optional[str], typer.Option(
    "--url", help="Attach to a vLLM server already running on loopback (http://127.0.0.1:PORT) "
    "instead of starting one; its speculative config is then the policy's label only.")]
TimeoutOpt = Annotated[Optional[float], typer.Option(
    "--timeout", help="Seconds one replay may take [the trace's span + 600].")]


BsScheduleOpt = Annotated[Optional[str], typer.Option(
    "--bs-schedule", help="vllm-schedule policy: vLLM's num_speculative_tokens_per_batch_size "
    "JSON ([[start, end, K], ...], or a speculative-config object holding it), text or file.")]


def read_schedule(bs_schedule: Optional[str], policies: list[str]) -> list[list[int]] | None:
    """The validated batch-size schedule (vLLM JSON), required by and only by vllm-schedule."""
    from ..sim.speculation.spec_config import parse_schedule
    from ..vllm.runtime import SCHEDULE_POLICY

    if (bs_schedule is None) == (SCHEDULE_POLICY in policies):
        raise InputError(f"--bs-schedule goes with the policy {SCHEDULE_POLICY} and it needs one",
                         field="--bs-schedule")
    return parse_schedule(bs_schedule, 1 << 10).to_json() if bs_schedule else None


def vllm_replay_inputs(trace_path: Path, policies: list[str], target: str, prompts: Optional[str],
                       chat: bool, time_scale: float, seed: int, vllm_python: Optional[str],
                       aiperf: Optional[str], drafter: str, url: Optional[str], timeout: Optional[float],
                       limits: ServerLimits, bs_schedule: Optional[str] = None):
    """Validated trace, policies, prompt ids and the VLLMSetup; nothing is started."""
    from transformers import AutoTokenizer

    from ..serve.engine import scale_trace
    from ..serve.prompts import PromptBuilder, build_prompts, prompt_sets
    from ..traces.schema import load_trace
    from ..vllm.client import check_loopback
    from ..vllm.replay import VLLMSetup
    from ..vllm.runtime import aiperf_command, parse_drafter, policy_spec_tokens, resolve_model
    from ..vllm.runtime import vllm_python as find_python

    schedule = read_schedule(bs_schedule, policies)
    for p in policies:
        policy_spec_tokens(p)
    if timeout is not None and not timeout > 0:
        raise InputError(f"must be > 0, got {timeout}", field="--timeout")
    if url:
        check_loopback(url)
    trace = scale_trace(load_trace(trace_path), time_scale)
    too_long = int((trace.prompt_tokens + trace.output_tokens).max()) if len(trace) else 0
    if too_long > limits.max_model_len:
        raise InputError(f"a request needs {too_long} tokens, more than max_model_len "
                         f"{limits.max_model_len} (--vllm-server)", file=trace_path, field="prompt_tokens")
    drafter_cfg = parse_drafter(drafter)
    python = find_python(vllm_python) if not url else Path("python")
    aiperf_exe = aiperf_command(aiperf)
    model, _ = resolve_model(target)
    if not Path(model).is_dir():
        raise InputError("vLLM replays need a local model folder (AIPerf and the prompts read its "
                         "tokenizer)", field="--target")
    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = build_prompts(PromptBuilder(tokenizer, prompt_sets(prompts), chat), trace.task,
                        trace.prompt_tokens, seed)
    spec = server_spec(model, None, limits)
    setup = VLLMSetup(python=python, aiperf=aiperf_exe, base=spec, drafter=drafter_cfg,
                      tokenizer=model, url=url, timeout_s=timeout, schedule=schedule)
    return trace, ids, setup


def run_vllm_serve_replay(trace_path: Path, policies: list[str], out: Path, seed: int, **kw) -> None:
    """serve-replay --engine vllm: each policy on its own server; the simulator's files."""
    from rich.console import Console

    from ..vllm.replay import serve_trace_vllm
    from .sim_cmd import summary_table

    trace, ids, setup = vllm_replay_inputs(trace_path, policies, seed=seed, **kw)
    console = Console(stderr=True)
    where = (lambda p: out) if len(policies) == 1 else (lambda p: out / p)
    with console.status("vLLM") as status:
        results = serve_trace_vllm(trace, str(trace_path), policies, ids, setup, where, 1, seed,
                                   status=lambda s: status.update(s))
    summaries = [r[0].summary for r in results.values()]
    Console(width=max(100, 28 + 16 * len(summaries))).print(summary_table(summaries))
    for pol, runs in results.items():
        f = runs[0].summary["replay_fidelity"]
        typer.echo(f"{pol}: {f['records']}/{f['requests']} requests recorded, send-time error median "
                   f"{_ms(f['send_error_s']['median'])} / p99 {_ms(f['send_error_s']['p99'])}")
    typer.echo("wrote " + ", ".join(str(where(p)) for p in policies))


def _ms(v) -> str:
    return "-" if v is None else f"{1e3 * v:.1f} ms"


VLLM_DEFAULT_HW = "cpu-2core-smollm2-135m-vllm"


def run_vllm_validate(trace_path: Path, policies: list[str], hw: Optional[str],
                      acceptance: Optional[str], repeats: int, out: Path, seed: int,
                      engine_runs: Optional[Path] = None, kv_semantics: str = "reserve",
                      **kw) -> None:
    """validate --engine vllm: serve on vLLM (warm server per policy, `repeats` runs; or read
    the runs of an earlier validate from `engine_runs`), the simulator with the vLLM profile
    and each policy's acceptance (given, or imported from its first vLLM run's per-request
    metrics), the error table."""
    import os
    import shlex
    import sys

    from rich.console import Console

    from ..profiles.registry import (acceptance_profile_path, hw_profile_path, load_acceptance_profile,
                                     load_hw_profile)
    from ..serve.validate import HEADLINE, compare_with_sim, markdown_table, write_validation
    from ..sim.replay import parse_acceptance_option
    from ..vllm.replay import imported_acceptance, load_engine_runs, serve_trace_vllm
    from ..vllm.runtime import policy_spec_tokens

    if repeats < 1:
        raise InputError(f"must be >= 1, got {repeats}", field="--repeats")
    hw_name = hw or VLLM_DEFAULT_HW
    hw_prof = load_hw_profile(hw_profile_path(hw_name))
    given = parse_acceptance_option(acceptance, policies) if acceptance else {}
    loaded = {p: (load_acceptance_profile(acceptance_profile_path(given[p])), str(given[p]))
              for p in policies if given.get(p) and policy_spec_tokens(p) != 0}
    load_before = os.getloadavg()
    if engine_runs is not None:
        from ..traces.schema import load_trace

        trace, setup = load_trace(trace_path), None
        engine = load_engine_runs(engine_runs, policies, repeats)
        runs_dir = engine_runs
    else:
        trace, ids, setup = vllm_replay_inputs(trace_path, policies, seed=seed, **kw)
        with Console(stderr=True).status("vLLM") as status:
            engine = serve_trace_vllm(trace, str(trace_path), policies, ids, setup,
                                      lambda p: out / "engine" / p, repeats, seed,
                                      status=lambda s: status.update(s))
        runs_dir = out
    accept = {}
    for pol in policies:
        if policy_spec_tokens(pol) == 0:
            accept[pol] = (None, None)
        elif pol in loaded:
            accept[pol] = loaded[pol]
        else:
            accept[pol] = imported_acceptance(trace, runs_dir / "engine" / pol, repeats, pol)
    schedule = read_schedule(kw.get("bs_schedule"), policies) if engine_runs is not None else \
        (setup.schedule if setup else None)
    v = compare_with_sim(trace, engine, hw_prof, accept, seed, str(trace_path), hw_name, kv_semantics,
                         schedule)
    first = engine[policies[0]][0].summary
    meta = {"engine": "vllm", "trace": str(trace_path), "policies": policies,
            "engine_runs": str(runs_dir), "hw": hw_name, "kv_semantics": kv_semantics, "repeats": repeats, "seed": seed,
            "server_args": first.get("server_args"),
            "speculative_configs": {p: r[0].summary.get("speculative_config") for p, r in engine.items()},
            "acceptance": {p: a for p, (_, a) in accept.items()},
            "load_average_engine": {p: [r.summary.get("load_average_before") for r in rs]
                                    for p, rs in engine.items()},
            "load_average": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "command": "dspark-sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])}
    written = write_validation(v, out, meta, trace.ids, engine_written=engine_runs is None)
    typer.echo(markdown_table(v.table, HEADLINE + ("ttft_s.p50", "tps_user.p10", "ttft_s.p99")))
    typer.echo("wrote " + ", ".join(str(w) for w in written))


def run_vllm_measure(out: Path, target: str, tasks: str, n: Optional[int], max_new_tokens: int,
                     gamma: int, chat: bool, name: Optional[str], vllm_python: Optional[str],
                     drafter: str, limits: ServerLimits) -> None:
    """measure --engine vllm: the prompt sets through vLLM's drafter at K = gamma; the empirical
    acceptance profile, its per-task report and the records it came from."""
    import tempfile

    from rich.console import Console
    from rich.progress import Progress
    from transformers import AutoTokenizer

    from ..decode.prompts import parse_tasks
    from ..vllm.acceptance_import import import_vllm
    from ..vllm.measure import measure_records
    from ..vllm.records import TaskRule
    from ..vllm.runtime import (VLLMServer, drafter_kind, parse_drafter, resolve_model,
                                speculative_config, vllm_python as find_python)
    from .acceptance_cmd import print_report

    if gamma < 1 or max_new_tokens < 1 or (n is not None and n < 1):
        raise InputError("--gamma, --max-new-tokens and --n must be >= 1", field="--gamma")
    prompt_sets = parse_tasks(tasks, n)
    python = find_python(vllm_python)
    drafter_cfg = parse_drafter(drafter)
    model, model_name = resolve_model(target)
    tokenizer = AutoTokenizer.from_pretrained(model)
    spec = server_spec(model, speculative_config(f"static-{gamma}", drafter_cfg), limits,
                       iteration_log=False)
    stem = out.name[: -len(".acceptance.json")] if out.name.endswith(".acceptance.json") else out.stem
    records_path = out.with_name(stem + ".records.jsonl")
    console = Console(stderr=True)
    log = Path(tempfile.mkdtemp(prefix="vllm-measure-")) / "vllm.log"
    total = sum(map(len, prompt_sets.values()))
    with VLLMServer(spec, python, log) as server:
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"vLLM {drafter_cfg['method']} K={gamma}", total=total)
            measure_records(server.url, spec.served_name, tokenizer, prompt_sets, max_new_tokens,
                            chat, records_path, lambda k: bar.update(task, completed=k))
    result = import_vllm([records_path], name or stem, kind="empirical",
                         rule=TaskRule(path="task"), drafter_kind=drafter_kind(drafter_cfg))
    prof = result.profile
    prof.target, prof.drafter = model_name, f"vllm-{drafter_cfg['method']}"
    prof.extra.setdefault("vllm", {}).update({"speculative_config": spec.speculative,
                                              "max_new_tokens": max_new_tokens, "chat": chat,
                                              "prompts": tasks, "n": n})
    prof.save(out)
    print_report(result)
    typer.echo(f"wrote {out} and {records_path}")


def register(app: typer.Typer) -> None:
    @app.command("import-aiperf")
    def import_aiperf(
        export: Path = typer.Argument(..., metavar="EXPORT", help="AIPerf's per-request records "
                                      "(profile_export.jsonl)."),
        out: Path = typer.Option(..., "--out", help="Directory for requests.csv and summary.json."),
        trace: Optional[Path] = typer.Option(None, "--trace", help="The trace AIPerf replayed, its "
                                             "ids = the records' conversation ids (serve-replay "
                                             "writes them so) [the records themselves: arrival = "
                                             "when AIPerf issued each request]."),
        policy: str = typer.Option("unknown", "--policy", help="Label of the served policy."),
    ) -> None:
        """An AIPerf run's records (yours or serve-replay's) as the simulator's requests.csv /
        summary.json, with the replay's send-time error."""
        from ..fileio import write_json_atomic, write_text_atomic
        from ..sim.output.metrics import requests_csv, summarise
        from ..traces.schema import load_trace
        from ..vllm.aiperf import read_export, trace_from_export

        tr = load_trace(trace) if trace else trace_from_export(export)
        frame, fidelity = read_export(export, tr)
        summary = summarise(frame, policy=policy, trace=str(trace or export), hw="measured",
                            acceptance=None, seed=0, gpus=1, iterations=0, sim_wall_s=0.0)
        summary.update({"engine": "aiperf-export", "replay_fidelity": fidelity,
                        "drafted_tokens": int(frame["drafted_tokens"].sum()),
                        "accepted_tokens": int(frame["accepted_tokens"].sum())})
        write_text_atomic(out / "requests.csv", requests_csv(frame))
        write_json_atomic(out / "summary.json", summary)
        typer.echo(f"wrote {out / 'requests.csv'} and {out / 'summary.json'} ({fidelity['records']} of "
                   f"{fidelity['requests']} requests recorded)")
