"""`dspark-sim serve-replay` (the real engine serving a trace) and `dspark-sim validate`
(the simulator against the real engine on the same trace)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from ..vllm.settings import parse_server
from ..vllm.validate import VLLM_DEFAULT_HW
from .options import (DEFAULT_SERVE_DRAFTER, ENGINE_HELP, SERVE_HW_HELP, AiperfOpt, DeviceOpt,
                      PrefixCachingOpt,
                      PromptsOpt, ServeAccOpt, ServeChatOpt, ServeDrafterOpt, ServeHwOpt,
                      ServeSeedOpt, ServeThreadsOpt, TargetOpt, TemperatureOpt, TimeoutOpt,
                      TimeScaleOpt, TraceArg, UrlOpt, VllmBsScheduleOpt, VllmDrafterOpt,
                      VllmPythonOpt, VllmServerOpt, check_serving_engine,
                      machine_checked_hw)
from .render import ms, print_summaries


def _engine_setup(trace, policy, target, drafter, hw, acceptance, prompts, chat, time_scale,
                  temperature, seed, device, threads):
    """Validate inputs, then load the model and build the prompts."""
    from ..decode.sampling import Sampling
    from ..serve.inputs import engine_gamma, load_engine_inputs, load_model
    from ..serve.prompts import PromptBuilder, build_prompts, prompt_sets
    from ..sim.replay import parse_policies

    sampling = Sampling(temperature)
    inputs = load_engine_inputs(trace, parse_policies(policy), hw, drafter, acceptance,
                                temperature, time_scale)
    sets = prompt_sets(prompts)
    tgt, drf = load_model(target, drafter, device, threads)
    gamma = engine_gamma(inputs, drf)
    ids = build_prompts(PromptBuilder(tgt.tokenizer, sets, chat), inputs.trace.task,
                        inputs.trace.prompt_tokens, seed)
    return inputs, tgt, drf, gamma, ids, sampling


def _validate_again(trace, policies, drafter, hw, acceptance, repeats, temperature, time_scale,
                    seed, out, engine_runs: Path) -> None:
    """validate --engine-runs DIR (native engine): the error table of the runs stored in DIR
    against the simulator under `hw`; nothing is served."""
    import json
    import os
    import shlex
    import sys

    from ..serve.engine import read_serve_results
    from ..serve.inputs import load_engine_inputs
    from ..serve.validate import HEADLINE, compare_with_sim, markdown_table, write_validation
    from ..sim.replay import parse_policies

    if repeats < 1:
        raise InputError(f"must be >= 1, got {repeats}", field="--repeats")
    inputs = load_engine_inputs(trace, parse_policies(policies), hw, drafter, acceptance,
                                temperature, time_scale)
    engine = {pol: [read_serve_results(engine_runs / "engine" / pol / f"run-{k}", pol)
                    for k in range(repeats)] for pol in inputs.policies}
    v = compare_with_sim(inputs.trace, engine, inputs.hw, inputs.acceptance, seed,
                         inputs.trace_name, inputs.hw_name)
    earlier = engine_runs / "validation.json"
    before = json.loads(earlier.read_text()) if earlier.exists() else {}
    meta = {**{k: before[k] for k in ("target", "drafter", "drafter_kind", "gamma", "threads",
                                      "time_scale") if k in before},
            "trace": inputs.trace_name, "policies": inputs.policies, "hw": inputs.hw_name,
            "acceptance": {p: a for p, (_, a) in inputs.acceptance.items()}, "repeats": repeats,
            "seed": seed, "engine_runs": str(engine_runs),
            "load_average": before.get("load_average", [round(x, 2) for x in os.getloadavg()]),
            "command": "dspark-sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])}
    written = write_validation(v, out, meta, inputs.trace.ids, engine_written=True)
    typer.echo(markdown_table(v.table, HEADLINE))
    typer.echo("wrote " + ", ".join(str(w) for w in written))


def _vllm_inputs(target, prompts, chat, time_scale, vllm_python, aiperf, vllm_drafter, url,
                 timeout, vllm_server, bs_schedule) -> dict:
    """The options as dspark_sim.vllm.replay.replay_inputs takes them (after the trace,
    policies and seed)."""
    return dict(target=target, prompts=prompts, chat=chat, time_scale=time_scale,
                vllm_python=vllm_python, aiperf=aiperf, drafter=vllm_drafter, url=url,
                timeout=timeout, limits=parse_server(vllm_server), bs_schedule=bs_schedule)


def _serve_replay_vllm(trace: Path, policies: list[str], out: Path, seed: int, **inputs) -> None:
    """serve-replay --engine vllm (dspark_sim/vllm/replay.py): the table and the replay's
    send-time error per policy."""
    from rich.console import Console

    from ..vllm.replay import serve_replay

    with Console(stderr=True).status("vLLM") as status:
        results, dirs = serve_replay(trace, policies, out, seed, status=lambda s: status.update(s),
                                     **inputs)
    print_summaries([r[0].summary for r in results.values()])
    for pol, runs in results.items():
        f = runs[0].summary["replay_fidelity"]
        typer.echo(f"{pol}: {f['records']}/{f['requests']} requests recorded, send-time error median "
                   f"{ms(f['send_error_s']['median'])} / p99 {ms(f['send_error_s']['p99'])}")
    typer.echo("wrote " + ", ".join(str(d) for d in dirs))


def _validate_vllm(trace: Path, policies: list[str], hw: Optional[str], acceptance: Optional[str],
                   repeats: int, out: Path, seed: int, engine_runs: Optional[Path],
                   kv_semantics: str, fresh_servers: Optional[bool] = None,
                   speed_check: Optional[bool] = None, **inputs) -> None:
    """validate --engine vllm (dspark_sim/vllm/validate.py): the error table."""
    import shlex
    import sys

    from rich.console import Console

    from ..serve.validate import HEADLINE, markdown_table
    from ..vllm.validate import validate_on_vllm

    command = "dspark-sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    with Console(stderr=True).status("vLLM") as status:
        v, written, speeds = validate_on_vllm(trace, policies, hw, acceptance, repeats, out, seed,
                                              engine_runs, kv_semantics, command,
                                              status=lambda s: status.update(s),
                                              fresh_servers=fresh_servers, speed_check=speed_check,
                                              **inputs)
    for pol, runs in (speeds or {}).items():
        typer.echo(f"{pol}: simulated at the speed each run's server showed just before its trace: "
                   "decode x" + ", x".join(f"{r['decode']:.3f}" for r in runs) +
                   "; prefill x" + ", x".join(f"{r['prefill']:.3f}" for r in runs))
    typer.echo(markdown_table(v.table, HEADLINE + ("ttft_s.p50", "tps_user.p10", "ttft_s.p99")))
    typer.echo("wrote " + ", ".join(str(w) for w in written))


def register(app: typer.Typer) -> None:
    @app.command("serve-replay")
    def serve_replay(
        trace: TraceArg,
        policy: str = typer.Option("dspark", "--policy", help="Policy or comma-separated policies, "
                                   "served one after another: ar, mtp1, static-K, dspark, "
                                   "dspark-lagged, goodput (oracle is simulator-only)."),
        target: TargetOpt = "embedded",
        drafter: ServeDrafterOpt = DEFAULT_SERVE_DRAFTER,
        hw: ServeHwOpt = "cpu-2core-smollm2-135m",
        acceptance: ServeAccOpt = None,
        prompts: PromptsOpt = None,
        chat: ServeChatOpt = True,
        time_scale: TimeScaleOpt = 1.0,
        temperature: TemperatureOpt = 0.0,
        seed: ServeSeedOpt = 0,
        device: DeviceOpt = "cpu",
        threads: ServeThreadsOpt = 1,
        out: Path = typer.Option(Path("runs/serve"), "--out", help="Output directory: requests.csv, "
                                 "summary.json, outputs.jsonl, iterations.csv (in DIR/<policy>/ "
                                 "for several policies)."),
        engine: str = typer.Option("native", "--engine", help=ENGINE_HELP),
        vllm_python: VllmPythonOpt = None,
        aiperf: AiperfOpt = None,
        url: UrlOpt = None,
        vllm_drafter: VllmDrafterOpt = "ngram",
        timeout: TimeoutOpt = None,
        vllm_server: VllmServerOpt = "",
        bs_schedule: VllmBsScheduleOpt = None,
    ) -> None:
        """Serve TRACE with the real engine on this machine (ours, or vLLM driven by AIPerf), on
        the trace's wall clock."""
        check_serving_engine(engine)
        if engine == "vllm":
            _serve_replay_vllm(trace, [p.strip() for p in policy.split(",") if p.strip()], out, seed,
                               **_vllm_inputs(target, prompts, chat, time_scale, vllm_python, aiperf,
                                              vllm_drafter, url, timeout, vllm_server, bs_schedule))
            return
        from rich.console import Console
        from rich.progress import Progress

        from ..serve.engine import serve, write_serve_results

        inputs, tgt, drf, gamma, ids, sampling = _engine_setup(
            trace, policy, target, drafter, hw, acceptance, prompts, chat, time_scale,
            temperature, seed, device, threads)
        console = Console(stderr=True)
        results = []
        with Progress(console=console, transient=True) as bar:
            for pol in inputs.policies:
                task = bar.add_task(f"serving {pol}", total=len(inputs.trace))
                prof, acc_name = inputs.acceptance[pol]
                results.append(serve(inputs.trace, pol, tgt, drf, inputs.hw, prof, ids, gamma=gamma,
                                     sampling=sampling, seed=seed, trace_name=inputs.trace_name,
                                     hw_name=inputs.hw_name, acceptance_name=acc_name,
                                     progress=lambda n, task=task: bar.update(task, completed=n)))
        written = write_serve_results(results, inputs.trace.ids, out)
        print_summaries([r.summary for r in results])
        typer.echo("wrote " + ", ".join(str(w) for w in written))

    @app.command("validate")
    def validate_cmd(
        trace: TraceArg,
        policies: str = typer.Option("ar,mtp1,static-3,dspark,dspark-lagged,goodput", "--policies",
                                     help="Comma-separated policies to validate (oracle is "
                                     "simulator-only)."),
        target: TargetOpt = "embedded",
        drafter: ServeDrafterOpt = DEFAULT_SERVE_DRAFTER,
        hw: Optional[str] = typer.Option(None, "--hw", help=SERVE_HW_HELP + " [native: "
                                         "cpu-2core-smollm2-135m; vllm: cpu-2core-smollm2-135m-vllm, "
                                         "measured with `profile --engine vllm`]"),
        acceptance: ServeAccOpt = None,
        repeats: int = typer.Option(3, "--repeats", help="Engine runs per policy (interleaved) "
                                    "and simulator seeds: the engine's run-to-run spread."),
        fresh_servers: Optional[bool] = typer.Option(None, "--fresh-servers/--warm-servers",
                                           show_default=False, help="vllm "
                                           "engine: start a server for every run (the default "
                                           "without --url; the spread then "
                                           "holds how much one server start differs from the next; "
                                           "about 25 s more a run on 2 cores), or run all of a "
                                           "policy's repeats, back to back, on one warm server."),
        speed_check: Optional[bool] = typer.Option(None, "--speed-check/--no-speed-check",
                                         show_default=False, help="vllm engine: just before each "
                                         "run, time a few of the profile's points on its server "
                                         "(~20 s) and simulate that run on the profile scaled to "
                                         "the speed measured, decode and prefill apart (the default "
                                         "without --url; with --engine-runs, when the runs hold "
                                         "one). --no-speed-check: the profile as it is."),
        prompts: PromptsOpt = None,
        chat: ServeChatOpt = True,
        time_scale: TimeScaleOpt = 1.0,
        temperature: TemperatureOpt = 0.0,
        seed: ServeSeedOpt = 0,
        device: DeviceOpt = "cpu",
        threads: ServeThreadsOpt = 1,
        out: Path = typer.Option(Path("runs/validate"), "--out", help="Output directory: "
                                 "validation.md / .json (error table), overlay.png, engine/ and sim/ runs."),
        engine: str = typer.Option("native", "--engine", help=ENGINE_HELP + " With vllm, a "
                                   "speculative policy's acceptance is --acceptance or else imported "
                                   "from its first vLLM run's per-request metrics."),
        vllm_python: VllmPythonOpt = None,
        aiperf: AiperfOpt = None,
        url: UrlOpt = None,
        vllm_drafter: VllmDrafterOpt = "ngram",
        timeout: TimeoutOpt = None,
        vllm_server: VllmServerOpt = "",
        bs_schedule: VllmBsScheduleOpt = None,
        engine_runs: Optional[Path] = typer.Option(None, "--engine-runs", help="Do not serve; "
                                                   "simulate again (e.g. with another --hw) against "
                                                   "the runs an earlier validate wrote in this "
                                                   "directory (DIR/engine/<policy>/run-<k>)."),
        kv_semantics: str = typer.Option("reserve", "--kv-semantics", help="vllm engine: the "
                                         "simulator's KV model: reserve (prompt + output at "
                                         "admission) or blocks (vLLM's paged KV with preemption)."),
        prefix_caching: PrefixCachingOpt = False,
    ) -> None:
        """Serve TRACE with the real engine (ours or vLLM) and simulate it; error table, spread
        and overlay plots."""
        from ..sim.kv.semantics import with_prefix_caching

        check_serving_engine(engine)
        kv_semantics = with_prefix_caching(kv_semantics, prefix_caching)
        if prefix_caching and engine != "vllm":
            raise InputError("the native engine (serve/replica.py) has no prefix cache: its KV is "
                             "reserved at admission; --prefix-caching is for --engine vllm",
                             field="prefix-caching")
        if engine == "vllm":
            _validate_vllm(trace, [p.strip() for p in policies.split(",") if p.strip()],
                           machine_checked_hw(hw or VLLM_DEFAULT_HW),
                           acceptance, repeats, out, seed, engine_runs, kv_semantics, fresh_servers,
                           speed_check, **_vllm_inputs(target, prompts, chat, time_scale, vllm_python, aiperf,
                                          vllm_drafter, url, timeout, vllm_server, bs_schedule))
            return
        hw = machine_checked_hw(hw or "cpu-2core-smollm2-135m")
        if engine_runs is not None:
            _validate_again(trace, policies, drafter, hw, acceptance, repeats, temperature,
                            time_scale, seed, out, engine_runs)
            return
        import os
        import shlex
        import sys

        import torch
        from rich.console import Console
        from rich.progress import Progress

        from ..serve.engine import serve
        from ..serve.validate import HEADLINE, markdown_table, validate, write_validation

        if repeats < 1:
            raise InputError(f"must be >= 1, got {repeats}", field="--repeats")
        inputs, tgt, drf, gamma, ids, sampling = _engine_setup(
            trace, policies, target, drafter, hw, acceptance, prompts, chat, time_scale,
            temperature, seed, device, threads)
        console = Console(stderr=True)
        load_before = os.getloadavg()
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("engine runs", total=repeats * len(inputs.policies) * len(inputs.trace))
            done = [0]

            def run_engine(pol: str, k: int):
                prof, acc_name = inputs.acceptance[pol]
                bar.update(task, description=f"engine {pol} run {k + 1}/{repeats}")

                def tick(n: int) -> None:
                    bar.update(task, completed=done[0] + n)

                res = serve(inputs.trace, pol, tgt, drf, inputs.hw, prof, ids, gamma=gamma,
                            sampling=sampling, seed=seed, trace_name=inputs.trace_name,
                            hw_name=inputs.hw_name, acceptance_name=acc_name, progress=tick)
                done[0] += len(inputs.trace)
                return res

            v = validate(inputs.trace, inputs.policies, run_engine, inputs.hw, inputs.acceptance,
                         repeats, seed, inputs.trace_name, inputs.hw_name)
        meta = {"trace": inputs.trace_name, "time_scale": time_scale, "policies": inputs.policies,
                "target": tgt.name, "drafter": drf.name, "drafter_kind": drf.kind, "gamma": gamma,
                "hw": inputs.hw_name,
                "acceptance": {p: a for p, (_, a) in inputs.acceptance.items()},
                "repeats": repeats, "seed": seed, "threads": torch.get_num_threads(),
                "load_average": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "command": "dspark-sim " + " ".join(shlex.quote(a) for a in sys.argv[1:])}
        written = write_validation(v, out, meta, inputs.trace.ids)
        typer.echo(markdown_table(v.table, HEADLINE))
        a = v.agreement
        typer.echo(f"outputs: {a['requests_differing']} of {a['requests']} requests differ across "
                   f"the {a['runs']} engine runs")
        typer.echo("wrote " + ", ".join(str(w) for w in written))
