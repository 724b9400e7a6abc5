"""The DeepSeek-V4 cases with a split prior from V4's own attention shape instead of Llama's.

The four V4 published cases take the centre of their per-request / per-token split prior from
SpecDecode-Bench's vLLM step model of Llama-3.1-8B on one H100 (c_kv per KV token against
c_compute per batched token). DeepSeek-V4's attention reads far less KV per request: one
512-wide KV vector per cached entry (one KV head), a 128-token sliding window in every layer,
and, over the older context, compressed entries only (CSA: one per 4 tokens, an indexer key of
128 per entry read whole and the top 512 entries attended; HCA: one per 128 tokens, all
attended). This script scales the published model's c_kv by

    (V4's KV bytes read per request / Llama-3.1-8B's, at the case's mean context)
    x (Llama-3.1-8B's active parameters / the V4 model's)

(the first: what a request's attention reads; the second: what a batched token computes), writes
that as a cost model beside a copy of each V4 case that names it, and runs `validate-published`
on the copies. It is a diagnostic of how the V4 cases respond to a shape-based split, not the
shipped prediction (docs/trust.md, section 1).

    python benchmarks/v4_shape_split.py --out runs/v4-shape-split

Shapes: read from transformers' DeepseekV4Config defaults (checkpoint
deepseek-ai/DeepSeek-V4-Flash-Base: 43 layers, head_dim 512 with a 64-wide rope part, sliding
window 128, CSA rate 4 with index_head_dim 128 and index_topk 512, HCA rate 128, the default
layer schedule for the layer count), the same attention for V4-Pro at its 61 layers (MindSpore's
DeepseekV4Config, as the cases cite); KV cached in FP8 with the rope part in BF16 (vLLM serves V4 with
--kv-cache-dtype fp8), indexer keys in FP8 (assumed). Active parameters: V4-Flash 13B, V4-Pro 49B
(DeepSeek's V4 release: 284B-A13B, 1.6T-A49B), Llama-3.1-8B 8.0B; Llama's KV in BF16 as
SpecDecode-Bench profiled it (32 layers x 8 KV heads x 128 x K and V).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import yaml

V4_CASES = {                        # case: (V4 layers, active parameters)
    "dspark-paper-v4-flash-fig8": (43, 13e9),
    "dspark-paper-v4-pro-fig8": (61, 49e9),
    "vllm-blog-dsv4-pro-b300": (61, 49e9),
    "vllm-pr52362-dsv4-flash-mi350x": (43, 13e9),
}
LLAMA_ACTIVE = 8.0e9
LLAMA_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2          # layers x KV heads x head_dim x (K, V) x bf16


def v4_attention(layers: int) -> dict:
    """V4's attention shape from transformers' DeepseekV4Config defaults, at `layers` layers (its
    default layer schedule for that count)."""
    from transformers import DeepseekV4Config

    cfg = DeepseekV4Config(num_hidden_layers=layers)
    rates = cfg.compress_rates
    return {"head_dim": cfg.head_dim, "rope": cfg.qk_rope_head_dim, "window": cfg.sliding_window,
            "csa_rate": rates["compressed_sparse_attention"], "index_dim": cfg.index_head_dim,
            "index_topk": cfg.index_topk, "hca_rate": rates["heavily_compressed_attention"],
            "layer_types": list(cfg.layer_types)}


def v4_kv_bytes(context: float, shape: dict, value_bytes: int = 1, rope_bytes: int = 2,
                index_bytes: int = 1) -> float:
    """Bytes of KV one request's decode step reads at `context` cached tokens (defaults: FP8
    values with a BF16 rope part, FP8 indexer keys)."""
    entry = (shape["head_dim"] - shape["rope"]) * value_bytes + shape["rope"] * rope_bytes
    total = 0.0
    for kind in shape["layer_types"]:
        total += min(context, shape["window"]) * entry
        if kind == "compressed_sparse_attention":
            compressed = math.ceil(context / shape["csa_rate"])
            total += compressed * shape["index_dim"] * index_bytes + min(compressed, shape["index_topk"]) * entry
        elif kind == "heavily_compressed_attention":
            total += math.ceil(context / shape["hca_rate"]) * entry
    return total


def v4_cached_gib(context: int, shape: dict) -> float:
    """GiB of KV one request caches at `context` tokens in BF16 (the window, every compressed entry
    and its indexer key): the figure DeepSeek's release states for V4-Pro at 1M tokens."""
    entry = shape["head_dim"] * 2
    total = 0
    for kind in shape["layer_types"]:
        total += min(context, shape["window"]) * entry
        if kind == "compressed_sparse_attention":
            total += math.ceil(context / shape["csa_rate"]) * (entry + shape["index_dim"] * 2)
        elif kind == "heavily_compressed_attention":
            total += math.ceil(context / shape["hca_rate"]) * entry
    return total / 2**30


def case_context(table_md: str, case: str) -> float:
    """The mean KV context per request the case's fit reported (table.md's split-prior line)."""
    section = table_md.split(f"## {case}:", 1)[1]
    marker = " context tokens"
    head = section.split(marker, 1)[0]
    return float(head.rsplit(" at ", 1)[1])


def write_inputs(out: Path, table_md: str) -> list[Path]:
    """A scaled cost model and a case copy naming it, per V4 case; the case paths."""
    from dspark_sim.published.cases import shipped_cases
    from dspark_sim.published.cost_models import shipped_cost_model_paths

    base = yaml.safe_load(shipped_cost_model_paths()["specdecode-bench-llama31-8b-h100"].read_text())
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    print(f"V4-Pro shape (61 layers): {v4_cached_gib(1_000_000, v4_attention(61)):.2f} GiB of BF16 KV "
          "cached per request at 1M tokens (DeepSeek's V4 release: 9.62 GiB)")
    for case, (layers, active) in V4_CASES.items():
        ctx = case_context(table_md, case)
        shape = v4_attention(layers)
        kv_ratio = v4_kv_bytes(ctx, shape) / (LLAMA_KV_BYTES_PER_TOKEN * ctx)
        factor = kv_ratio * LLAMA_ACTIVE / active
        cm = dict(base, name=f"{case}-v4-shape")
        cm["target"] = dict(base["target"], c_kv=base["target"]["c_kv"] * factor)
        cm["how"] = (f"{base['how']}; c_kv scaled by {factor:.4f} = V4 KV bytes per request / "
                     f"Llama-3.1-8B's at {ctx:g} context tokens ({kv_ratio:.4f}) x 8.0B / "
                     f"{active / 1e9:g}B active parameters (benchmarks/v4_shape_split.py)")
        (out / f"{case}-v4-shape.cost.yaml").write_text(yaml.safe_dump(cm, sort_keys=False))
        data = yaml.safe_load(shipped_cases()[case].read_text())
        data["fit"]["split_prior"]["cost_model"] = f"{case}-v4-shape.cost.yaml"
        data["fit"]["split_prior"]["how"] = cm["how"]
        path = out / f"{case}.case.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        paths.append(path)
        print(f"{case}: context {ctx:g}, KV bytes per request {v4_kv_bytes(ctx, shape) / 1e6:.2f} MB "
              f"(Llama-3.1-8B {LLAMA_KV_BYTES_PER_TOKEN * ctx / 1e6:.1f} MB), c_kv x {factor:.4f}, "
              f"per-request / per-token ratio {base['target']['c_kv'] * factor * ctx / base['target']['c_compute']:.3f} "
              f"(Llama's split: {base['target']['c_kv'] * ctx / base['target']['c_compute']:.2f})")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/v4-shape-split"),
                        help="folder for the scaled cost models, the case copies and validate-published's "
                             "table (default: runs/v4-shape-split)")
    parser.add_argument("--shipped-table", type=Path, default=Path("runs/validate-published/table.md"),
                        help="the shipped cases' table, whose split-prior lines give each case's mean "
                             "context (default: runs/validate-published/table.md)")
    args = parser.parse_args(argv)
    paths = write_inputs(args.out, args.shipped_table.read_text())
    from dspark_sim.cli import main as cli

    return cli(["validate-published", *map(str, paths), "--out", str(args.out / "table")])


if __name__ == "__main__":
    sys.exit(main())
