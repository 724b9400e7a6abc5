"""The settings a vLLM server is started with (`--vllm-server KEY=VALUE,...`) and the ServerSpec
of a run. Imports nothing heavy: the CLI's help text reads SERVER_SETTINGS at start-up."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError

SERVER_SETTINGS = {   # key: (type, default, meaning)
    "max_num_seqs": (int, 16, "requests per iteration; the profile's max_batch_requests"),
    "max_num_batched_tokens": (int, 512, "tokens per iteration (chunked prefill); the profile's "
                               "max_batch_tokens"),
    "max_model_len": (int, 2048, "longest request"),
    "kv_cache_gib": (float, 2.0, "KV cache GiB (VLLM_CPU_KVCACHE_SPACE on CPU builds)"),
    "threads": (int, 1, "OpenMP threads of the worker, bound to the first cores (1 leaves a core "
                "for the API server and the load generator)"),
    "dtype": (str, "float32", "vLLM --dtype (float32 on CPU; auto or bfloat16 on a GPU)"),
    "prefix_caching": (str, "off", "on: vLLM's --enable-prefix-caching (its own default); off: "
                       "--no-enable-prefix-caching (simulate with --kv-semantics blocks "
                       "--prefix-caching to match on)"),
}


@dataclass(frozen=True)
class ServerLimits:
    """The vLLM server settings a run starts its servers with (SERVER_SETTINGS)."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    max_model_len: int = 2048
    kv_cache_gib: float = 2.0
    threads: int = 1
    dtype: str = "float32"
    prefix_caching: str = "off"


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
        if key == "prefix_caching" and values[key] not in ("on", "off"):
            raise InputError(f"prefix_caching must be on or off, got {raw!r}", field="--vllm-server")
        if kind is not str and not values[key] > 0:
            raise InputError(f"{key} must be > 0, got {raw!r}", field="--vllm-server")
    return ServerLimits(**values)


def server_spec(model: str, speculative: dict | None, limits: ServerLimits, iteration_log: bool = True):
    """The ServerSpec of a run."""
    from .runtime import ServerSpec

    extra = ["--enable-logging-iteration-details"] if iteration_log else []
    return ServerSpec(model=model, dtype=limits.dtype, max_model_len=limits.max_model_len,
                      speculative=speculative, max_num_seqs=limits.max_num_seqs,
                      max_num_batched_tokens=limits.max_num_batched_tokens,
                      kv_cache_gib=limits.kv_cache_gib, threads=limits.threads,
                      prefix_caching=limits.prefix_caching == "on", extra_args=extra)
