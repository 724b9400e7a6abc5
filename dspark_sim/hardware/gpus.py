"""Built-in GPU table: peak dense tensor FLOP/s, HBM, NVLink, each number with its source."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import InputError

DTYPE_BYTES = {"bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class GPU:
    """Datasheet figures of one GPU (dense, i.e. without 2:4 sparsity)."""

    name: str
    bf16_tflops: float          # peak dense BF16 tensor-core TFLOP/s
    fp8_tflops: float | None    # peak dense FP8 tensor-core TFLOP/s (None: no FP8 tensor cores)
    hbm_gb_s: float             # HBM bandwidth, GB/s (1 GB = 1e9 bytes)
    hbm_gb: float               # HBM capacity, GB
    nvlink_gb_s: float          # NVLink bandwidth per GPU, GB/s, both directions together
    node_gpus: int              # GPUs that share one NVLink/NVSwitch domain (one HGX board)
    internode_gb_s: float       # scale-out network per GPU, GB/s per direction
    source: str

    def peak_flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for matrix work in `dtype` (bf16 or fp8)."""
        if dtype == "bf16":
            return self.bf16_tflops * 1e12
        if dtype == "fp8":
            if self.fp8_tflops is None:
                raise InputError(f"{self.name} has no FP8 tensor cores; use --dtype bf16",
                                 field="dtype")
            return self.fp8_tflops * 1e12
        raise InputError(f"unknown dtype {dtype!r} (choose from {', '.join(DTYPE_BYTES)})",
                         field="dtype")

    @property
    def nvlink_unidir_bytes_s(self) -> float:
        """NVLink bytes per second one way (half the datasheet's bidirectional figure)."""
        return self.nvlink_gb_s * 1e9 / 2

    def as_dict(self) -> dict:
        """Plain mapping, written into profiles as the stated hardware assumption."""
        return asdict(self)


_HOPPER_NET = "400 Gb/s InfiniBand NDR (ConnectX-7) per GPU in NVIDIA's HGX/DGX H100/H200 reference designs"

GPUS: dict[str, GPU] = {g.name: g for g in [
    GPU("H100", bf16_tflops=989.5, fp8_tflops=1979.0, hbm_gb_s=3350, hbm_gb=80, nvlink_gb_s=900,
        node_gpus=8, internode_gb_s=50,
        source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: BF16 1,979 and FP8 3,958 "
               "TFLOPS with sparsity (halved here for dense), 80 GB HBM3, 3.35 TB/s, NVLink 900 GB/s; "
               + _HOPPER_NET),
    GPU("H800", bf16_tflops=989.5, fp8_tflops=1979.0, hbm_gb_s=3350, hbm_gb=80, nvlink_gb_s=400,
        node_gpus=8, internode_gb_s=50,
        source="NVIDIA H800 SXM5 datasheet: H100 SXM compute and memory (BF16 1,979 / FP8 3,958 "
               "TFLOPS with sparsity, 80 GB, 3.35 TB/s) with NVLink cut to 400 GB/s; "
               "50 GB/s InfiniBand per GPU as stated in the DeepSeek-V3 technical report (section 3.2)"),
    GPU("H200", bf16_tflops=989.5, fp8_tflops=1979.0, hbm_gb_s=4800, hbm_gb=141, nvlink_gb_s=900,
        node_gpus=8, internode_gb_s=50,
        source="NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: BF16 1,979 and FP8 3,958 "
               "TFLOPS with sparsity (halved here for dense), 141 GB HBM3e, 4.8 TB/s, NVLink "
               "900 GB/s; " + _HOPPER_NET),
    GPU("B200", bf16_tflops=2250.0, fp8_tflops=4500.0, hbm_gb_s=7700, hbm_gb=180, nvlink_gb_s=1800,
        node_gpus=8, internode_gb_s=50,
        source="NVIDIA HGX B200 specifications, individual B200 GPU: FP16/BF16 4.5 and FP8 9 "
               "PFLOPS with sparsity (halved here for dense), 180 GB HBM3e at 7.7 TB/s (earlier "
               "announcements: 192 GB, 8 TB/s), 5th-generation NVLink 1.8 TB/s; 400 Gb/s "
               "ConnectX-7 per GPU"),
    GPU("A100", bf16_tflops=312.0, fp8_tflops=None, hbm_gb_s=2039, hbm_gb=80, nvlink_gb_s=600,
        node_gpus=8, internode_gb_s=25,
        source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column: BF16 312 TFLOPS "
               "dense (624 with sparsity), no FP8, 2,039 GB/s HBM2e, NVLink 600 GB/s; 200 Gb/s "
               "InfiniBand HDR per GPU in DGX A100"),
]}

_ALIASES = {"H100-SXM": "H100", "H100SXM": "H100", "H200-SXM": "H200", "H200SXM": "H200",
            "H800-SXM": "H800", "A100-SXM": "A100", "A100-80GB": "A100", "HGX-B200": "B200"}


def get_gpu(name: str) -> GPU:
    """GPU from the built-in table by name (case-insensitive; 'H200', 'h100-sxm', ...)."""
    key = name.strip().upper().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in GPUS:
        raise InputError(f"unknown GPU {name!r}; built in: {', '.join(GPUS)}", field="gpu")
    return GPUS[key]


def gpu_from_device_name(device_name: str) -> GPU | None:
    """Match a CUDA device name ('NVIDIA H200', 'NVIDIA H100 80GB HBM3') to the table, or None."""
    upper = device_name.upper()
    for name in GPUS:
        if name in upper:
            return GPUS[name]
    return None
