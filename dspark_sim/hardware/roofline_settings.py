"""Every free parameter of the analytic roofline, its default, and where the default comes from.

The sources are written into each analytic profile (`assumptions.sources`), so a reader of a
profile sees not only the number but why it is that number. "choice" marks a value this project
picked (with the reason); a published figure is named with its publication.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..errors import InputError
from .gpus import DTYPE_BYTES

# Latency floors that the pre-floor model (before issue 14) did not have: setting these to the
# values in LEGACY reproduces it exactly (docs/hardware/scripts/roofline_plausibility.py prints both).
LEGACY = {"layer_overhead_s": 0.0, "a2a_latency_s": 10e-6, "attention_efficiency": None}


@dataclass(frozen=True)
class RooflineSettings:
    """Every free parameter of the analytic model; all of them are written into the profile."""

    dtype: str = "bf16"                  # weights and GEMM math: bf16 or fp8
    kv_dtype: str = "bf16"               # KV-cache element type
    activation_bytes: int = 2            # activations and communication payloads (bf16)
    tp: int = 1                          # tensor-parallel degree of attention / dense parts
    ep: int = 1                          # expert-parallel degree of the routed experts
    draft_tp: int = 0                    # tensor-parallel degree of the drafter (0: tp's)
    compute_efficiency: float = 0.6      # achieved fraction of peak dense FLOP/s (MFU-like)
    bandwidth_efficiency: float = 0.8    # achieved fraction of HBM bandwidth
    comm_efficiency: float = 0.7         # achieved fraction of NVLink / network bandwidth
    overhead_s: float = 1.0e-3           # fixed per step: launch, scheduling, sampling
    layer_overhead_s: float = 20e-6      # per decoder layer per forward: kernel launches and syncs
    collective_latency_s: float = 10e-6  # per TP all-reduce call
    a2a_latency_s: float = 60e-6         # per EP all-to-all (dispatch, combine): latency floor
    attention_efficiency: float | None = 0.6   # decode attention: fraction of peak HBM and FLOP/s
    comm_overlap: float = 0.0            # fraction of communication hidden behind the GEMMs
    memory_utilization: float = 0.9      # fraction of HBM the engine may fill (weights + KV)
    verify_width: int = 2                # query tokens per request assumed by per_context_token_s
    gamma: int = 7                       # drafts per iteration of the parallel drafters
    draft_layers: dict[str, int] = field(
        default_factory=lambda: {"mtp1": 1, "eagle3": 1, "dflash": 5, "dspark": 3})
    markov_rank: int = 256               # rank of DSpark's Markov head (W2: r x V)
    draft_pass_overhead_s: float = 1.0e-4  # fixed per drafter pass

    def validated(self) -> "RooflineSettings":
        """Self, after checking every value is in range (InputError naming the option)."""
        for key in ("dtype", "kv_dtype"):
            if getattr(self, key) not in DTYPE_BYTES:
                raise InputError(f"must be one of {', '.join(DTYPE_BYTES)}", field=key)
        for key in ("tp", "ep", "verify_width", "gamma", "markov_rank"):
            if getattr(self, key) < 1:
                raise InputError("must be >= 1", field=key)
        for key in ("compute_efficiency", "bandwidth_efficiency", "comm_efficiency",
                    "memory_utilization"):
            if not 0 < getattr(self, key) <= 1:
                raise InputError("must be in (0, 1]", field=key)
        if self.attention_efficiency is not None and not 0 < self.attention_efficiency <= 1:
            raise InputError("must be in (0, 1]", field="attention_efficiency")
        if self.draft_tp < 0 or (self.draft_tp and self.tp % self.draft_tp):
            raise InputError(f"must be 0 (the target's tp) or divide tp = {self.tp}", field="draft_tp")
        if not 0 <= self.comm_overlap <= 1:
            raise InputError("must be in [0, 1]", field="comm_overlap")
        for key in ("overhead_s", "layer_overhead_s", "collective_latency_s", "a2a_latency_s",
                    "draft_pass_overhead_s"):
            if getattr(self, key) < 0:
                raise InputError("must be >= 0", field=key)
        return self


_DEEPEP = ("DeepEP README, low-latency kernels on H800 with 400 Gb/s CX7 InfiniBand, 128 tokens "
           "per GPU, FP8 dispatch / BF16 combine: 77 us dispatch and 114 us combine at EP8, "
           "155 / 273 us at EP32")

SETTING_SOURCES: dict[str, str] = {
    "dtype": "user input (--dtype)",
    "kv_dtype": "user input (--kv-dtype)",
    "activation_bytes": "bf16 activations and communication payloads, as in vLLM/SGLang decode",
    "tp": "user input (--tp)",
    "ep": "user input (--ep)",
    "draft_tp": "user input (--draft-tp; 0: the target's tp). vLLM's draft_tensor_parallel_size: "
                "a drafter below the target's tp runs whole on fewer GPUs (replicated), so its "
                "layers stream tp / draft_tp times the weights per GPU",
    "compute_efficiency": "choice: 60% of peak dense FLOP/s for large GEMMs, a typical achieved "
                          "MFU of Hopper GEMM kernels in serving (--compute-eff)",
    "bandwidth_efficiency": "choice: 80% of datasheet HBM bandwidth for weight streaming, what "
                            "large memory-bound GEMV/GEMM kernels reach on H100/H200 (--bandwidth-eff)",
    "comm_efficiency": "choice: 70% of NVLink / InfiniBand line rate (--comm-eff)",
    "overhead_s": "choice: 1 ms per engine iteration for scheduling, sampling, detokenising and "
                  "the host-device round trip (vLLM v0.6.0 performance blog, 2024: CPU-side "
                  "overheads were a large share of a Llama-3-8B H100 step before async "
                  "scheduling) (--overhead-ms)",
    "layer_overhead_s": "choice: about 10 kernels per decoder layer (norms, QKV/O/FFN GEMMs, "
                        "rotary, attention, activation, residuals) at about 2 us launch-to-launch "
                        "each under CUDA graphs, plus their tails; checked against the measured "
                        "Llama-3-8B TPOTs of docs/hardware.md's plausibility table (--layer-overhead-us)",
    "collective_latency_s": "choice: small-message NCCL all-reduce latency inside one NVLink "
                            "node is of order 10 us (--collective-latency-us)",
    "a2a_latency_s": "choice from " + _DEEPEP + ": at EP8 the bandwidth term of this model is "
                     "about 60 us for both directions, leaving about 60 us of latency per "
                     "all-to-all (--a2a-latency-us)",
    "attention_efficiency": "choice: decode attention at small batch reaches a lower fraction of "
                            "peak than large GEMMs; FlashMLA README (H800): up to 3000 GB/s "
                            "(90% of HBM) memory-bound and 580 TFLOP/s (59%) compute-bound at "
                            "large batch; 60% of both taken for SLA-bound batches (--attention-eff; "
                            "null: use compute/bandwidth_efficiency)",
    "comm_overlap": "user input (--comm-overlap; 1.0 = DeepSeek's two-micro-batch overlap)",
    "memory_utilization": "choice: 90% of HBM for weights + KV, vLLM's default "
                          "gpu_memory_utilization (--memory-util)",
    "verify_width": "choice: 2 query tokens per request (MTP-1's verify width) (--verify-width)",
    "gamma": "user input (--gamma); DSpark's production V4 drafter uses 5 (method.md)",
    "draft_layers": "method.md: MTP-1 one layer, Eagle3 one layer, DFlash 5, DSpark 3 (production V4)",
    "markov_rank": "method.md: Markov head rank r = 256",
    "draft_pass_overhead_s": "choice: 0.1 ms fixed per drafter pass (launches)",
}


def settings_sources() -> dict[str, str]:
    """Source of every setting (each field of RooflineSettings has one)."""
    missing = {f.name for f in fields(RooflineSettings)} - set(SETTING_SOURCES)
    assert not missing, f"settings without a source: {missing}"
    return dict(SETTING_SOURCES)
