"""`dspark-sim roofline` (analytic GPU profiles) and `dspark-sim profile` (measured profiles)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from ..vllm.settings import parse_server
from .options import (ENGINE_HELP, PlotOpt, VllmDrafterOpt, VllmPythonOpt, VllmServerOpt,
                      check_serving_engine)
from .render import counted_progress, print_drafts, print_fit, print_points, print_roofline

_PRESETS_HELP = "deepseek-v3, llama-3.1-8b, qwen3-8b"
_GPUS_HELP = "H100, H200, B200, H800, A100"


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {text!r}", field=option) from None
    if not values or min(values) < 1:
        raise InputError(f"expected positive integers, got {text!r}", field=option)
    return values


def _plot_path(out: Path, plot: Optional[Path]) -> Path:
    return plot if plot is not None else out.with_suffix(".png")


def _profile_vllm(out: Path, target: str, speculative: Optional[str], drafter: str, grid, name,
                  seed: int, plot: Path, vllm_python: Optional[str], limits) -> None:
    """profile --engine vllm: measure (dspark_sim/vllm/profile.py), print the fit, write."""
    from rich.console import Console

    from ..hardware.plot import plot_profile
    from ..vllm.profile import measure_vllm_profile

    console = Console()
    with counted_progress(console) as progress:
        run = measure_vllm_profile(target, speculative, drafter, grid, name, seed, vllm_python,
                                   limits, note=console.print, progress=progress)
    prof = run.profile
    print_fit(console, run.fit)
    if run.overheads_s:
        console.print(f"engine overhead per iteration (outside the model): median "
                      f"{1e3 * run.overheads_s[len(run.overheads_s) // 2]:.1f} ms")
    if prof.draft_curves:
        print_drafts(console, prof)
    prof.save(out)
    path = plot_profile(prof, plot, measurements=prof.extra["measurements"],
                        draft_points=prof.extra.get("draft_measurements"))
    console.print(f"wrote {out} and {path}")
    _cache(console, prof)


def _cache(console, prof) -> None:
    """Keep a copy of a measured profile in this machine's cache (profiles/machine.py)."""
    from ..profiles.machine import cache_measured

    cached = cache_measured(prof)
    if cached is not None:
        console.print(f"cached for this machine: {cached} (validate/replay/sweep use it instead "
                      f"of a {prof.name!r} measured elsewhere)")


def _roofline_cudagraph(max_capture_size, speculative_tokens: int, eager_layer_us: float,
                        layers: int, max_batch_tokens, max_batch_requests: int):
    """The roofline's CUDA-graph block: vLLM's default capture limit unless given, and an eager
    floor of layers x --eager-layer-us (source: estimate); None with --max-capture-size 0."""
    from ..profiles.cudagraph import CudaGraph, vllm_default_capture_size

    if eager_layer_us < 0 or speculative_tokens < 0:
        raise InputError("must be >= 0", field="eager-layer-us" if eager_layer_us < 0 else "speculative-tokens")
    if max_capture_size is None:
        max_capture_size = vllm_default_capture_size(max_batch_requests, speculative_tokens,
                                                      max_batch_tokens)
    if max_capture_size <= 0:
        return None
    return CudaGraph(max_capture_size, floor_s=layers * eager_layer_us / 1e6, source="estimate")


def register(app: typer.Typer) -> None:
    @app.command("roofline")
    def roofline(
        model: str = typer.Option(..., "--model", help=f"Built-in preset ({_PRESETS_HELP}), or a "
                                  "Hugging Face config.json, or a model folder holding one."),
        gpu: str = typer.Option(..., "--gpu", help=f"GPU of the built-in table ({_GPUS_HELP})."),
        tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree of attention and dense parts."),
        ep: int = typer.Option(1, "--ep", help="Expert-parallel degree (MoE); GPUs per replica = max(tp, ep), "
                               "attention runs data-parallel over max(tp, ep) / tp groups."),
        draft_tp: int = typer.Option(0, "--draft-tp", help="Tensor-parallel degree of the drafters "
                                     "(vLLM's draft_tensor_parallel_size; 0: the target's --tp). "
                                     "Below --tp a drafter runs whole on fewer GPUs and its tables "
                                     "price that; must divide --tp."),
        dtype: str = typer.Option("bf16", "--dtype", help="Weights and GEMM math: bf16 or fp8."),
        kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="KV-cache element type: bf16 or fp8."),
        max_batch_tokens: Optional[int] = typer.Option(None, "--max-batch-tokens",
                                                       help="Top of the batch-token grid and the "
                                                       "profile's token budget [4096 per attention group]."),
        max_batch_requests: Optional[int] = typer.Option(None, "--max-batch-requests",
                                                         help="Profile's request cap and top of the "
                                                         "draft-time grid [256 per attention group]."),
        compute_eff: float = typer.Option(0.6, "--compute-eff", help="Achieved fraction of peak FLOP/s."),
        bandwidth_eff: float = typer.Option(0.8, "--bandwidth-eff", help="Achieved fraction of HBM bandwidth."),
        comm_eff: float = typer.Option(0.7, "--comm-eff", help="Achieved fraction of NVLink/network bandwidth."),
        comm_overlap: float = typer.Option(0.0, "--comm-overlap", help="Fraction of communication hidden "
                                           "behind GEMMs (1.0: two-micro-batch overlap)."),
        overhead_ms: float = typer.Option(1.0, "--overhead-ms", help="Fixed per-step overhead in ms."),
        layer_overhead_us: float = typer.Option(20.0, "--layer-overhead-us", help="Launch/sync cost "
                                                "per decoder layer per forward, in us."),
        collective_latency_us: float = typer.Option(10.0, "--collective-latency-us", help="Latency "
                                                    "per TP all-reduce call, in us."),
        a2a_latency_us: float = typer.Option(60.0, "--a2a-latency-us", help="Latency per EP "
                                             "all-to-all (dispatch, combine), in us."),
        attention_eff: Optional[float] = typer.Option(0.6, "--attention-eff", help="Fraction of peak "
                                                      "HBM and FLOP/s decode attention reaches "
                                                      "(at small batch)."),
        memory_util: float = typer.Option(0.9, "--memory-util", help="Fraction of HBM for weights + KV."),
        verify_width: int = typer.Option(2, "--verify-width", help="Query tokens per request assumed by "
                                         "per_context_token_s (matters for MLA, which is compute-bound)."),
        gamma: int = typer.Option(7, "--gamma", help="Block size of the parallel drafters (dflash, dspark)."),
        drafters: str = typer.Option("mtp1,eagle3,dflash,dspark", "--drafters",
                                     help="Drafter kinds to give draft_time tables (empty: none)."),
        max_capture_size: Optional[int] = typer.Option(None, "--max-capture-size", help="CUDA-graph "
                                                       "capture limit in batch tokens (vLLM's "
                                                       "max_cudagraph_capture_size); 0: no graphs "
                                                       "modelled [vLLM's default: min(2 x "
                                                       "max-batch-requests x (1 + "
                                                       "--speculative-tokens), 512)]."),
        speculative_tokens: int = typer.Option(0, "--speculative-tokens", help="Draft tokens per "
                                               "request the engine is configured with (vLLM's "
                                               "num_speculative_tokens; widens its default capture limit)."),
        eager_layer_us: float = typer.Option(100.0, "--eager-layer-us", help="Extra cost per decoder "
                                             "layer of a step above the capture limit, run eagerly, "
                                             "in us (choice: ~10 kernels a layer at ~10 us of host "
                                             "launch and dispatch each, against ~2 us replayed)."),
        request_overhead_us: float = typer.Option(0.0, "--request-overhead-us", help="Seconds per "
                                                  "request per step in us, written as "
                                                  "step_time.per_request_s (host-side work per "
                                                  "sequence: scheduling, input preparation, "
                                                  "detokenising; the analytic model has no "
                                                  "per-request device term, so 0 unless you know "
                                                  "your engine's); `profile fit --roofline` takes "
                                                  "it as per_request_s's prior."),
        name: Optional[str] = typer.Option(None, "--name", help="Profile name [from gpu, model, layout]."),
        note: str = typer.Option("", "--note", help="Text appended to the profile's notes."),
        out: Optional[Path] = typer.Option(None, "--out", help="Write the profile YAML here (atomically)."),
        plot: PlotOpt = None,
    ) -> None:
        """Analytic hardware profile: roofline step and draft times of MODEL on GPU, every assumption written in."""
        from rich.console import Console

        from ..hardware.analytic_profile import analytic_profile
        from ..hardware.gpus import get_gpu
        from ..hardware.models import load_model_shape
        from ..hardware.roofline import Roofline, RooflineSettings
        from ..hardware.plot import plot_profile

        settings = RooflineSettings(
            dtype=dtype, kv_dtype=kv_dtype, tp=tp, ep=ep, draft_tp=draft_tp, compute_efficiency=compute_eff,
            bandwidth_efficiency=bandwidth_eff, comm_efficiency=comm_eff, comm_overlap=comm_overlap,
            overhead_s=overhead_ms / 1e3, layer_overhead_s=layer_overhead_us / 1e6,
            collective_latency_s=collective_latency_us / 1e6, a2a_latency_s=a2a_latency_us / 1e6,
            attention_efficiency=attention_eff, memory_utilization=memory_util,
            verify_width=verify_width, gamma=gamma)
        shape = load_model_shape(model)
        roof = Roofline(shape, get_gpu(gpu), settings)
        kinds = tuple(k for k in drafters.split(",") if k.strip())
        layout = f"tp{tp}" + (f"-ep{ep}" if ep > 1 else "") + \
            (f"-drafttp{draft_tp}" if draft_tp and draft_tp != tp else "")
        name = name or f"{roof.gpu.name.lower()}x{roof.gpus}-{shape.name}-{layout}-{dtype}"
        profile = analytic_profile(roof, name, max_batch_tokens, max_batch_requests, kinds,
                                   _roofline_cudagraph(max_capture_size, speculative_tokens,
                                                       eager_layer_us, shape.layers, max_batch_tokens,
                                                       max_batch_requests or 256 * roof.dp))
        if request_overhead_us < 0:
            raise InputError(f"must be >= 0, got {request_overhead_us}", field="request-overhead-us")
        profile.per_request_s = request_overhead_us / 1e6
        if note:
            profile.extra["notes"] += " " + note

        console = Console()
        print_roofline(console, profile, roof.gpus)
        console.print(f"per_context_token_s = {profile.per_context_token_s:.3e} "
                      f"(at {verify_width} query tokens per request); KV capacity "
                      f"{profile.kv_capacity_tokens:,} tokens; weights "
                      f"{roof.weight_bytes_per_gpu / 1e9:.1f} GB per GPU")
        if out is not None:
            profile.save(out)
            console.print(f"wrote {out}")
        if out is not None or plot is not None:
            path = plot_profile(profile, _plot_path(out or Path(f"{name}.yaml"), plot),
                                contexts=(0.0, 512.0, 2048.0))
            console.print(f"wrote {path}")

    profile_app = typer.Typer(help="Hardware profiles from measurements: time the target on this "
                              "device (dspark-sim profile --target T --out HW), or fit one to "
                              "observed serving numbers (dspark-sim profile fit --help).")

    @profile_app.callback(invoke_without_command=True)
    def profile(
        ctx: typer.Context,
        out: Optional[Path] = typer.Option(None, "--out", help="Write the measured profile YAML here "
                                           "(atomically); required unless a subcommand is given."),
        target: Optional[str] = typer.Option(None, "--target", help="Model to time: 'embedded' "
                                             "(SmolLM2-135M-Instruct) or a local Hugging Face model folder."),
        random_config: Optional[str] = typer.Option(None, "--random-config", help="Instead of --target: "
                                                    f"build this config ({_PRESETS_HELP} or a config.json) "
                                                    "with random weights on the device and time it."),
        device: str = typer.Option("auto", "--device", help="auto (CUDA when present), cpu or cuda."),
        dtype: str = typer.Option("auto", "--dtype", help="auto (bf16 on CUDA, fp32 on CPU), bf16, fp16, fp32."),
        batches: Optional[str] = typer.Option(None, "--batches", help="Requests per verify step, R "
                                              "[native 1,2,4,8; vllm 1,2,4,8,16]."),
        widths: str = typer.Option("1,2,4,8", "--widths", help="Tokens per request per verify step, w "
                                   "(1 .. gamma+1)."),
        contexts: Optional[str] = typer.Option(None, "--contexts", help="KV tokens per request "
                                               "[native 64,512; vllm 128,512]."),
        prefill_chunks: Optional[str] = typer.Option(None, "--prefill-chunks",
                                                     help="Prompt chunk lengths of one request (empty "
                                                     "cache) [native 16,64,256; vllm 64,128,256,512]."),
        repeats: Optional[int] = typer.Option(None, "--repeats", help="Timed runs per point (median, "
                                              "p10, p90) [native 7; vllm 2 bursts of --decode-steps "
                                              "iterations]."),
        warmup: int = typer.Option(2, "--warmup", help="Untimed runs per point first."),
        threads: int = typer.Option(2, "--threads", help="torch CPU threads (use the serving "
                                    "engine's setting; 1 on a shared machine)."),
        runner: str = typer.Option("engine", "--runner", help="engine: time the serving engine's own "
                                   "iteration step (dspark_sim/serve; Llama-family models); hf: "
                                   "transformers' forward with a DynamicCache; decode-loop: the "
                                   "decode core's own step for one request (target forward with "
                                   "the first --drafters' taps, each drafter's propose; what "
                                   "`generate --verify scheduled` runs; widths up to gamma+1)."),
        drafters: str = typer.Option("", "--drafters", help="Drafter kinds whose draft step to time "
                                     "(engine runner), e.g. ngram,mtp1,eagle3,dflash,dspark; trained "
                                     "kinds without a shipped checkpoint are timed with random "
                                     "weights of the shipped configuration."),
        draft_requests: str = typer.Option("", "--draft-requests", help="Request counts of the "
                                           "draft timings [--batches]."),
        draft_context: int = typer.Option(256, "--draft-context", help="Context tokens per request "
                                          "in the draft timings (block drafters, dflash and dspark, "
                                          "are timed at every depth 1..gamma: per_draft_seconds)."),
        prefill_curve: bool = typer.Option(True, "--prefill-curve/--no-prefill-curve",
                                           help="Write the prefill chunks' timings as a separate "
                                           "prefill_time curve and fit step_time to the decode "
                                           "points alone (--no-prefill-curve: one step curve "
                                           "through both, as profiles before it)."),
        gpu: Optional[str] = typer.Option(None, "--gpu", help="Compare with the roofline of this GPU "
                                          "[the detected CUDA GPU; none on CPU]."),
        name: Optional[str] = typer.Option(None, "--name", help="Profile name [from device and model]."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random token ids and weights."),
        plot: PlotOpt = None,
        engine: str = typer.Option("native", "--engine", help=ENGINE_HELP),
        speculative: Optional[str] = typer.Option(None, "--speculative", help="vllm engine: also "
                                                  "time verify steps under this policy (static-K "
                                                  "or mtp1) with --vllm-drafter; bursts alternate "
                                                  "prompts the n-gram drafter misses and matches."),
        vllm_drafter: VllmDrafterOpt = "ngram",
        decode_steps: int = typer.Option(24, "--decode-steps", help="vllm engine: decode "
                                         "iterations per burst."),
        vllm_python: VllmPythonOpt = None,
        vllm_server: VllmServerOpt = "",
    ) -> None:
        """Measured hardware profile: time the target on this device (or vLLM serving it), fit
        SPS(B), plot it."""
        if ctx.invoked_subcommand is not None:
            return
        if out is None:
            raise InputError("missing option --out (where to write the measured profile)", field="out")
        check_serving_engine(engine)
        if engine == "vllm":
            if target is None or random_config is not None:
                raise InputError("--engine vllm profiles a --target", field="--target")
            from ..vllm.profile import VLLMGrid

            repeats = 2 if repeats is None else repeats
            if repeats < 1 or warmup < 0 or decode_steps < 4:
                raise InputError("--repeats >= 1, --warmup >= 0, --decode-steps >= 4", field="repeats")
            grid = VLLMGrid(_int_list(batches or "1,2,4,8,16", "batches"),
                            _int_list(contexts or "128,512", "contexts"),
                            _int_list(prefill_chunks if prefill_chunks is not None else "64,128,256,512",
                                      "prefill-chunks"),
                            decode_steps, repeats, warmup)
            _profile_vllm(out, target, speculative, vllm_drafter, grid, name, seed,
                          _plot_path(out, plot), vllm_python, parse_server(vllm_server))
            return
        from rich.console import Console
        from rich.progress import Progress

        from ..hardware.profiler import ProfileGrid

        batches = batches or ("1" if runner == "decode-loop" else "1,2,4,8")
        contexts = contexts or "64,512"
        prefill_chunks = "16,64,256" if prefill_chunks is None else prefill_chunks
        repeats = 7 if repeats is None else repeats
        if (target is None) == (random_config is None):
            raise InputError("give exactly one of --target and --random-config", field="target")
        if repeats < 1 or warmup < 0 or threads < 1:
            raise InputError("--repeats and --threads must be >= 1, --warmup >= 0", field="repeats")
        if runner not in ("engine", "hf", "decode-loop"):
            raise InputError(f"must be engine, hf or decode-loop, got {runner!r}", field="runner")
        kinds = tuple(k.strip() for k in drafters.split(",") if k.strip())
        if kinds and runner == "hf":
            raise InputError("drafter timings need --runner engine or decode-loop", field="drafters")
        if runner == "decode-loop":
            if batches.strip() != "1":
                raise InputError("the decode loop serves one request: --batches must be 1",
                                 field="batches")
        draft_batches = _int_list(draft_requests, "draft-requests") if draft_requests else None
        if draft_context < 2:
            raise InputError(f"must be >= 2, got {draft_context}", field="draft-context")
        grid = ProfileGrid(_int_list(batches, "batches"), _int_list(widths, "widths"),
                           _int_list(contexts, "contexts"),
                           _int_list(prefill_chunks, "prefill-chunks") if prefill_chunks else (),
                           repeats, warmup)
        import torch

        from ..hardware.gpus import get_gpu, gpu_from_device_name
        from ..decode.target import HFTarget
        from ..hardware.measure import measure_engine_profile, measure_profile
        from ..hardware.models import load_hf_config_dict, load_model_shape
        from ..hardware.plot import plot_profile
        from ..hardware.random_model import build_random_model
        from ..hardware.roofline import Roofline, RooflineSettings
        from ..hardware.target import load_profile_target, resolve_device, resolve_dtype

        torch.set_num_threads(threads)
        device = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, device)
        console = Console()
        if random_config is not None:
            model_name, config_ref = Path(random_config).stem, random_config
            console.print(f"building {random_config} with random weights on {device} ...")
            model = build_random_model(load_hf_config_dict(random_config), device, torch_dtype, seed)
            tgt = HFTarget(model, name=model_name)
        else:
            tgt, model_name = load_profile_target(target, device, torch_dtype)
            config_ref = target if Path(target).is_dir() else None
        roof = None
        gpu_spec = get_gpu(gpu) if gpu else (
            gpu_from_device_name(torch.cuda.get_device_name(0)) if device == "cuda" else None)
        if gpu_spec is not None and config_ref is not None:
            roof_dtype = "bf16" if torch_dtype in (torch.bfloat16, torch.float16) else None
            if roof_dtype is None:
                console.print("no roofline comparison: the roofline models bf16/fp8, not fp32")
            else:
                roof = Roofline(load_model_shape(config_ref), gpu_spec, RooflineSettings(dtype=roof_dtype))
        name = name or f"{device}-{model_name}-measured"
        from ..decode.drafters.config import draft_depths
        from ..hardware.engine_profile import SHIPPED_SETTINGS

        # both time block drafters at every depth 1..gamma: the decode loop once per context
        # (R = 1, gamma = the widest verify step - 1), the engine for each request count
        loop_gamma = max(grid.widths) - 1
        total = grid.points() + (sum(len(draft_depths(k, loop_gamma)) for k in kinds) * len(grid.contexts)
                                 if runner == "decode-loop" else
                                 sum(len(draft_depths(k, SHIPPED_SETTINGS["gamma"])) for k in kinds)
                                 * len(draft_batches or grid.batches))
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("timing", total=total)
            advance = lambda t: bar.advance(task)  # noqa: E731
            if runner == "decode-loop":
                from ..decode.drafters import make_drafter
                from ..decode.loop_profile import measure_decode_loop_profile
                prof, fit = measure_decode_loop_profile(tgt, [make_drafter(k, tgt) for k in kinds], grid,
                                                        loop_gamma, device, name, model_name, seed, advance,
                                                        prefill_curve=prefill_curve)
            elif runner == "engine":
                prof, fit = measure_engine_profile(tgt, grid, device, name, model_name, seed, roof,
                                                   kinds, draft_batches, draft_context, advance,
                                                   prefill_curve=prefill_curve)
            else:
                prof, fit = measure_profile(tgt.model, grid, device, name, model_name, seed, roof,
                                            progress=advance, prefill_curve=prefill_curve)
        print_points(console, prof.extra)
        print_drafts(console, prof)
        print_fit(console, fit)
        prof.save(out)
        path = plot_profile(prof, _plot_path(out, plot), measurements=prof.extra["measurements"],
                            draft_points=prof.extra.get("draft_measurements"))
        console.print(f"wrote {out} and {path}")
        _cache(console, prof)

    app.add_typer(profile_app, name="profile")

