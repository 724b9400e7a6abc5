"""The `--engine vllm` side of `profile`, `serve-replay`, `validate` and `measure`: shared
options and the orchestration that runs vLLM (the library work is in dspark_sim/vllm)."""
from __future__ import annotations

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
    "(prompt lookup, default 2-3), draft_model:PATH, or a --speculative-config JSON object "
    "(num_speculative_tokens comes from the policy).")]
MaxSeqsOpt = Annotated[int, typer.Option("--max-num-seqs", help="vLLM's max_num_seqs (requests "
                                         "per iteration); the profile's max_batch_requests.")]
MaxTokensOpt = Annotated[int, typer.Option("--max-num-batched-tokens", help="vLLM's "
                                           "max_num_batched_tokens (tokens per iteration, chunked "
                                           "prefill); the profile's max_batch_tokens.")]
MaxLenOpt = Annotated[int, typer.Option("--max-model-len", help="vLLM's max_model_len.")]
KvGibOpt = Annotated[float, typer.Option("--kv-cache-gib", help="KV cache GiB (VLLM_CPU_KVCACHE_SPACE "
                                         "on CPU builds).")]
VllmThreadsOpt = Annotated[int, typer.Option("--vllm-threads", help="OpenMP threads of vLLM's "
                                             "worker, bound to the first cores (1 leaves a core for "
                                             "the API server and the load generator).")]
DtypeOpt = Annotated[str, typer.Option("--vllm-dtype", help="vLLM --dtype (float32 on CPU; auto "
                                       "or bfloat16 on a GPU).")]


def server_spec(model: str, speculative: dict | None, max_num_seqs: int, max_num_batched_tokens: int,
                max_model_len: int, kv_cache_gib: float, threads: int, dtype: str,
                iteration_log: bool = True):
    """A ServerSpec with the project's defaults, validated."""
    from ..vllm.runtime import ServerSpec

    for value, name in ((max_num_seqs, "--max-num-seqs"), (max_num_batched_tokens, "--max-num-batched-tokens"),
                        (max_model_len, "--max-model-len"), (threads, "--vllm-threads")):
        if value < 1:
            raise InputError(f"must be >= 1, got {value}", field=name)
    if not kv_cache_gib > 0:
        raise InputError(f"must be > 0, got {kv_cache_gib}", field="--kv-cache-gib")
    extra = ["--enable-logging-iteration-details"] if iteration_log else []
    return ServerSpec(model=model, dtype=dtype, max_model_len=max_model_len, speculative=speculative,
                      max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                      kv_cache_gib=kv_cache_gib, threads=threads, extra_args=extra)


def run_vllm_profile(out: Path, target: str, speculative: Optional[str], drafter: str, batches: tuple[int, ...],
                     contexts: tuple[int, ...], prefill_chunks: tuple[int, ...], decode_steps: int,
                     repeats: int, warmup: int, name: Optional[str], seed: int, plot: Path,
                     vllm_python: Optional[str], max_num_seqs: int, max_num_batched_tokens: int,
                     max_model_len: int, kv_cache_gib: float, threads: int, dtype: str) -> None:
    """Start vLLM, time it (dspark_sim/vllm/profile.py), fit and write the hardware profile."""
    import tempfile

    from rich.console import Console
    from rich.progress import Progress

    from ..hardware.measure import measured_profile
    from ..hardware.plot import plot_profile
    from ..hardware.profiler import ProfileGrid
    from ..vllm.iterations import kv_capacity_tokens, vllm_version
    from ..vllm.profile import VLLMGrid, profile_vllm
    from ..vllm.runtime import (VLLMServer, model_vocab, parse_drafter, resolve_model,
                                 speculative_config, vllm_python as find_python)

    python = find_python(vllm_python)
    spec_cfg = speculative_config(speculative, parse_drafter(drafter)) if speculative else None
    if max(prefill_chunks, default=0) > max_num_batched_tokens:
        raise InputError(f"a prefill chunk is longer than --max-num-batched-tokens "
                         f"({max_num_batched_tokens})", field="--prefill-chunks")
    if max(batches) > max_num_seqs:
        raise InputError(f"more requests than --max-num-seqs ({max_num_seqs})", field="--batches")
    if max(contexts) + decode_steps + 2 > max_model_len:
        raise InputError(f"contexts + decode steps exceed --max-model-len ({max_model_len})",
                         field="--contexts")
    model, model_name = resolve_model(target)
    grid = VLLMGrid(batches, contexts, prefill_chunks, decode_steps, repeats, warmup)
    spec = server_spec(model, spec_cfg, max_num_seqs, max_num_batched_tokens, max_model_len,
                       kv_cache_gib, threads, dtype)
    console = Console()
    log = Path(tempfile.mkdtemp(prefix="vllm-profile-")) / "vllm.log"
    console.print(f"starting vLLM ({python}) on 127.0.0.1; log {log}")
    with VLLMServer(spec, python, log) as server:
        console.print(f"vLLM ready after {server.start_s:.0f} s")
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("timing vLLM", total=grid.points(spec_cfg is not None))
            timings, records = profile_vllm(server, grid, model_vocab(model), spec_cfg is not None,
                                            seed, lambda: bar.advance(task))
        log_text = log.read_text(errors="replace")
    pgrid = ProfileGrid(batches, tuple(sorted({t.width for t in timings if t.op == "decode"})),
                        contexts, prefill_chunks, repeats, warmup)
    prof, fit = measured_profile(timings, pgrid, "cpu" if dtype == "float32" else "cuda",
                                 name or f"vllm-{model_name.lower()}", model_name, seed,
                                 runner="vllm")
    prof.max_batch_requests = max_num_seqs
    prof.max_batch_tokens = max_num_batched_tokens
    prof.kv_capacity_tokens = kv_capacity_tokens(log_text)
    prof.device = f"vLLM {vllm_version(log_text) or '?'} ({'CPU' if dtype == 'float32' else dtype}), " \
                  f"{threads} OpenMP thread(s)"
    prof.extra["vllm"] = {"version": vllm_version(log_text), "python": str(python),
                          "server_args": spec.args(0)[2:], "speculative_config": spec_cfg,
                          "startup_s": round(server.start_s, 1), "decode_steps": decode_steps,
                          "bursts": [r.as_dict() for r in records]}
    summary = fit.summary()
    console.print(f"fit: {summary['within_spread']}/{summary['points']} points within their p10-p90 "
                  f"spread; median |error| {summary['median_abs_rel_error']:.1%}, max "
                  f"{summary['max_abs_rel_error']:.1%}; per_context_token_s = {fit.per_context_token_s:.3e}")
    overheads = [r.period_s - r.model_s for r in records]
    if overheads:
        console.print(f"engine overhead per iteration (period - model time): median "
                      f"{1e3 * float(sorted(overheads)[len(overheads) // 2]):.1f} ms")
    prof.save(out)
    path = plot_profile(prof, plot, measurements=prof.extra["measurements"])
    console.print(f"wrote {out} and {path}")
