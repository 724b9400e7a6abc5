"""Plausibility of the analytic roofline against published, measured serving figures.

Each figure is predicted twice: with the model as it was before the latency floors (no per-layer
launch cost, 10 us per all-to-all, attention at the GEMM efficiencies: roofline_settings.LEGACY)
and with the current defaults. The error per figure is predicted / published - 1.

Two kinds of figure:
  - "tpot": the time per output token of plain decoding (no speculation) with R concurrent
    requests of C context tokens each: step_time(R tokens, R x C context);
  - "tput": the best output tokens/s per GPU that still gives each user S tok/s, serving with
    accepted length tau per verify of w tokens: for R decoding requests of C context tokens,
    T(R) = draft_time(R) + step_time(w R, R x C), speed tau / T, throughput R tau / T / GPUs.
Steady state, no queueing, uniform contexts.

    python docs/hardware/scripts/roofline_plausibility.py           # prints the markdown table of docs/hardware.md
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dspark_sim.hardware.analytic_profile import analytic_profile
from dspark_sim.hardware.gpus import get_gpu
from dspark_sim.hardware.models import load_model_shape
from dspark_sim.hardware.roofline import Roofline, RooflineSettings
from dspark_sim.hardware.roofline_settings import LEGACY
from dspark_sim.profiles import HardwareProfile

LAMBDA = ("LambdaLabsML/vllm-benchmark results/prompt_10 (vLLM 0.6, Sept 2024; `benchmark_serving.py` "
          "JSON, 10 ShareGPT-style prompts at once, request rate inf), median_tpot_ms")


@dataclass
class Figure:
    """One published measurement and the layout that reproduces it."""

    label: str
    source: str
    model: str
    gpu: str
    kind: str                   # "tpot" (seconds) or "tput" (tok/s/GPU at a per-user speed)
    published: float
    settings: dict = field(default_factory=dict)
    requests: int = 10          # tpot: concurrent requests
    context: int = 400          # KV tokens per request
    speed: float = 0.0          # tput: tok/s/user to meet
    tau: float = 1.0            # tput: accepted tokens per verify (MTP-1: 1.85)
    width: int = 1              # tput: tokens verified per request per iteration


FIGURES = [
    Figure("vLLM, Llama-3-8B bf16, 1 x H100, 10 concurrent", LAMBDA + " = 7.56 ms (1xH100-80GB-SXM/"
           "Meta-Llama-3-8B-Instruct_tp1_len2048.json)", "llama-3.1-8b", "H100", "tpot", 7.56e-3),
    Figure("vLLM, Llama-3-8B bf16, 1 x A100, 10 concurrent", LAMBDA + " = 12.01 ms (1xA100-80GB-SXM/"
           "Meta-Llama-3-8B-Instruct_tp1_len2048.json)", "llama-3.1-8b", "A100", "tpot", 12.01e-3),
    Figure("vLLM, Llama-3-8B bf16, 2 x A100 TP2, 10 concurrent", LAMBDA + " = 7.93 ms (2xA100-80GB-SXM/"
           "Meta-Llama-3-8B-Instruct_tp2_len2048.json)", "llama-3.1-8b", "A100", "tpot", 7.93e-3,
           {"tp": 2}),
    Figure("vLLM, Llama-3.1-8B FP8, 1 x H100, 10 concurrent", LAMBDA + " = 5.20 ms (1xH100-80GB-SXM/"
           "Meta-Llama-3.1-8B-FP8_tp1_len2048.json)", "llama-3.1-8b", "H100", "tpot", 5.20e-3,
           {"dtype": "fp8"}),
    Figure("DeepSeek service, V3/R1 on H800, EP144 decode, MTP, 20 tok/s/user",
           "DeepSeek open-infra 'inference system overview' (2025): 14.8k output tok/s per H800 "
           "node (1.85k per GPU) at an average 20-22 tok/s/user", "deepseek-v3", "H800", "tput",
           1850.0, {"dtype": "fp8", "ep": 144, "comm_overlap": 1.0, "gamma": 5},
           context=4096, speed=20.0, tau=1.85, width=2),
    Figure("SGLang, DeepSeek-V3 on 72 decode H100 (EP72), no MTP, ~100 ms ITL",
           "LMSYS blog 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert "
           "Parallelism on 96 H100 GPUs' (2025-05-05): 22.3k output tok/s per node (2.79k per GPU) "
           "for 2000-token inputs; ITL about 100 ms (its limitations section)", "deepseek-v3",
           "H100", "tput", 2790.0, {"dtype": "fp8", "ep": 72, "comm_overlap": 1.0},
           context=2100, speed=10.0),
]


def best_throughput(profile: HardwareProfile, speed: float, context: int, tau: float,
                    width: int, drafter: str | None) -> float:
    """Largest tok/s/GPU whose per-user speed tau / T(R) is still >= `speed` (0 if none)."""
    R = np.unique(np.round(np.geomspace(1, 2e6, 4000)))
    R = R[R * context <= (profile.kv_capacity_tokens or np.inf)]
    T = np.asarray(profile.step_time(width * R, R * context), dtype=float)
    if drafter:
        T = T + np.asarray(profile.draft_time(drafter, R), dtype=float)
    ok = tau / T >= speed
    return float((R[ok] * tau / T[ok]).max() / profile.gpus_per_replica) if ok.any() else 0.0


def predict(fig: Figure, legacy: bool) -> float:
    """The model's value for one figure (seconds for tpot, tok/s/GPU for tput)."""
    settings = RooflineSettings(**fig.settings, **(LEGACY if legacy else {}))
    roof = Roofline(load_model_shape(fig.model), get_gpu(fig.gpu), settings)
    if fig.kind == "tpot":
        return float(roof.step_time(fig.requests)) + fig.requests * fig.context * roof.context_token_time(1)
    drafter = "mtp1" if fig.width == 2 else None
    profile = analytic_profile(roof, fig.label, drafters=(drafter,) if drafter else ())
    return best_throughput(profile, fig.speed, fig.context, fig.tau, fig.width, drafter)


def table() -> str:
    """Markdown table: figure, published, before, after, errors."""
    rows = ["| figure | published | model before | error | model after | error |",
            "|---|---|---|---|---|---|"]
    for fig in FIGURES:
        before, after = predict(fig, True), predict(fig, False)
        fmt = (lambda v: f"{v * 1e3:.2f} ms") if fig.kind == "tpot" else (lambda v: f"{v:,.0f} tok/s/GPU")
        rows.append(f"| {fig.label} | {fmt(fig.published)} | {fmt(before)} | "
                    f"{before / fig.published - 1:+.0%} | {fmt(after)} | {after / fig.published - 1:+.0%} |")
    return "\n".join(rows)


def main() -> None:
    print(table())
    print("\nsources:")
    for i, fig in enumerate(FIGURES, 1):
        print(f"{i}. {fig.label}: {fig.source}")


if __name__ == "__main__":
    main()
