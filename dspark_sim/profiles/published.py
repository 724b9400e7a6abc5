"""Acceptance profiles of the drafters people serve, built from published figures, and the
command that writes them: `python -m dspark_sim.profiles.published` (rewrites the files named
below in dspark_sim/data/acceptance/).

Every profile keeps, in the file: the source (URL or paper and table), target, drafter (and the
draft checkpoint vLLM / SGLang load), temperature, drafts per step, the tasks and the benchmark
each stands for, and the numbers as published (`published`). Where only a mean accepted length
tau per task is published, the per-position conditional acceptance alpha_k is derived with the
DSpark paper's shape for that drafter family (sim/acceptance/paper.py `solve_rates`: a linear
shape, level solved so that 1 + sum_k prod_(i<=k) alpha_i = tau); those values are marked in
`derived`. Task names follow the shipped traces: math = GSM8K, code = HumanEval, chat = MT-Bench.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..sim.acceptance.paper import SHAPE, SLOPE, solve_rates, tau_of
from .acceptance import AcceptanceProfile, TaskAcceptance
from .registry import ACCEPTANCE_DIR, save_profiles

TASK_BENCHMARKS = {"math": "GSM8K", "code": "HumanEval", "chat": "MT-Bench"}
WRITER = "Written by `python -m dspark_sim.profiles.published`."

NEBIUS_LLAMA = ("Nebius, model card of nebius/EAGLE3-Llama-3.3-70B-Instruct, table 'Comparison with "
                "Public Checkpoints' (mean acceptance length tau at temperature 1 with K = 7 drafts; "
                "the checkpoints' own figures measured with rejection sampling), from the LK-losses "
                "paper (Samarin et al. 2026, arXiv 2602.23881)")
NEBIUS_QWEN = ("Nebius, model card of nebius/EAGLE3-Qwen3-235B-A22B-Instruct-2507, table 'Comparison "
               "with Public Checkpoints' (tau at temperature 1 with K = 7 drafts), from the "
               "LK-losses paper (Samarin et al. 2026, arXiv 2602.23881)")
ANGELSLIM = ("Tencent AngelSlim, docs/source/performance/speculative_decoding/benchmarks.md, table "
             "'Eagle3 / Qwen3 Series Models', row Qwen3-8B (accept length measured with vLLM on one "
             "GPU by tools/vllm_spec_benchmark.py)")
DSPARK_PAPER = ("DSpark: Confidence-Scheduled Speculative Decoding with Semi-Autoregressive "
                "Generation (DeepSeek-AI and Peking University, 2026), Table 1: offline accepted "
                "length tau at T = 1, gamma = 7, Qwen3-8B target (method.md section 5)")
DEEPSEEK_V3 = ("DeepSeek-V3 Technical Report (DeepSeek-AI, arXiv 2412.19437), section 5.4.3: the "
               "acceptance rate of the second-token (MTP) prediction is 85%-90% across generation topics")


EAGLE3_TREE = ("The EAGLE-3 paper (arXiv 2503.01840, Table 1) reports tau for this drafter with a "
               "dynamic draft tree (about 60 tokens, depth 6-8), not a chain; the simulator and vLLM's "
               "eagle3 method verify a chain, so the chain measurement is used")
ANGELSLIM_SETTINGS = ("INFERRED, not stated with the table: K = 2 and temperature 0 are the defaults of "
                      "the benchmark script the page names (tools/vllm_spec_benchmark.py: "
                      "--num_spec_tokens 2, --temp 0); every tau is <= 3 = K + 1, consistent with K = 2")
DSPARK_CHECKPOINT = ("the checkpoint name is the one vLLM 0.32's vllm/config/speculative.py gives as "
                     "its DSpark example")
K7_T1 = "K = 7 drafts per step, temperature 1"


@dataclass(frozen=True)
class Published:
    """A drafter's published mean accepted length per task, and where it comes from."""

    name: str
    family: str                     # drafter kind; its shape in sim/acceptance/paper.py
    taus: dict[str, float]          # task -> published tau (TASK_BENCHMARKS)
    gamma: int
    target: str
    checkpoint: str
    temperature: float
    source: str
    url: str
    settings: str
    remarks: dict[str, Any] = field(default_factory=dict)


PUBLISHED = [
    Published("eagle3-llama31-8b-g7", "eagle3", {"math": 3.34, "code": 3.49, "chat": 2.77}, 7,
              "meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 1.0, NEBIUS_LLAMA,
              "https://huggingface.co/nebius/EAGLE3-Llama-3.3-70B-Instruct", K7_T1,
              {"why_not_the_eagle3_paper": EAGLE3_TREE}),
    Published("eagle3-qwen3-8b-g2", "eagle3", {"math": 2.00, "code": 1.97, "chat": 1.97}, 2, "Qwen/Qwen3-8B",
              "AngelSlim/Qwen3-8B_eagle3", 0.0, ANGELSLIM, "https://angelslim.readthedocs.io/zh-cn/latest/"
              "performance/speculative_decoding/benchmarks.html", ANGELSLIM_SETTINGS, {"tau_alpaca": 2.02}),
    Published("eagle3-qwen3-235b-a22b-g7", "eagle3", {"math": 3.78, "code": 3.52, "chat": 2.56}, 7,
              "Qwen/Qwen3-235B-A22B-Instruct-2507", "RedHatAI/Qwen3-235B-A22B-Instruct-2507-speculator.eagle3",
              1.0, NEBIUS_QWEN, "https://huggingface.co/nebius/EAGLE3-Qwen3-235B-A22B-Instruct-2507", K7_T1),
    Published("dspark-qwen3-8b-g7", "dspark", {"math": 6.17, "code": 5.52, "chat": 3.72}, 7, "Qwen/Qwen3-8B",
              "deepseek-ai/dspark_qwen3_8b_block7", 1.0, DSPARK_PAPER, "method.md section 5 (the DSpark "
              "paper, Table 1)", "gamma = 7, temperature 1, offline (scheduler off: every draft verified)",
              {"checkpoint_name": DSPARK_CHECKPOINT}),
]


def published_profile(spec: Published) -> AcceptanceProfile:
    """A parametric profile whose per-task rates are derived from the published mean taus."""
    tasks, derived = {}, {}
    for task, tau in spec.taus.items():
        alpha = solve_rates(tau, SLOPE[spec.family], spec.gamma)
        tasks[task] = TaskAcceptance("parametric", position_accept=alpha)
        derived[task] = {"position_accept": [float(a) for a in alpha], "tau_check": round(tau_of(alpha), 4)}
    published = {"tau": {f"{task} ({TASK_BENCHMARKS[task]})": tau for task, tau in spec.taus.items()},
                 "settings": spec.settings, **spec.remarks}
    shape = (f"DERIVED: only the mean accepted length per task is published; alpha_k has the DSpark "
             f"paper's {spec.family} shape ({SHAPE[spec.family]}; slope {SLOPE[spec.family]:+.4f} per "
             f"position), level solved per task so that 1 + sum_k prod_(i<=k) alpha_i over "
             f"{spec.gamma} positions equals the published tau (sim/acceptance/paper.py solve_rates)")
    extra = {"source": spec.source, "source_url": spec.url, "published": published, "derived": derived,
             "shape": shape, "tasks_from": {t: TASK_BENCHMARKS[t] for t in spec.taus}, "notes": WRITER,
             "drafter_checkpoint": spec.checkpoint}
    label = {"eagle3": "EAGLE-3", "dspark": "DSpark"}.get(spec.family, spec.family)
    return AcceptanceProfile(name=spec.name, gamma=spec.gamma, tasks=tasks, default_task="chat",
                             drafter_kind=spec.family, drafter=f"{label} ({spec.checkpoint})",
                             target=spec.target, temperature=spec.temperature, extra=extra)


def deepseek_v3_mtp1() -> AcceptanceProfile:
    """DeepSeek-V3's MTP module as MTP-1: alpha_1 = 0.87, the midpoint of the published 85-90%."""
    alpha = 0.87
    return AcceptanceProfile(
        name="deepseek-v3-mtp1", gamma=1, default_task="default",
        tasks={"default": TaskAcceptance("parametric", position_accept=np.array([alpha]))},
        drafter_kind="mtp1", drafter="MTP-1 (the MTP layer in the DeepSeek-V3/R1 checkpoints)",
        target="deepseek-ai/DeepSeek-V3",
        temperature=0.0,
        extra={"source": DEEPSEEK_V3, "source_url": "https://arxiv.org/abs/2412.19437",
               "published": {"second_token_acceptance": "85%-90%", "tasks": "various generation topics",
                             "temperature": "not stated",
                             "r1": "DeepSeek-R1 has the same MTP layer; its rate is not published"},
               "derived": {"default": {"position_accept": [alpha],
                                       "why": "midpoint of 85-90% (DERIVED); tau = 1.87"}},
               "tasks_from": {"default": "all generation topics (one figure for every task)"},
               "notes": "temperature is not stated in the source; 0 is recorded. " + WRITER})


def published_profiles() -> list[AcceptanceProfile]:
    """Every shipped profile built from published figures."""
    return [published_profile(spec) for spec in PUBLISHED] + [deepseek_v3_mtp1()]


def write_all(directory: Path = ACCEPTANCE_DIR) -> list[Path]:
    """Write the published-figure profiles into `directory`."""
    return save_profiles(published_profiles(), directory)


if __name__ == "__main__":  # pragma: no cover
    print("\n".join(str(p) for p in write_all()))
