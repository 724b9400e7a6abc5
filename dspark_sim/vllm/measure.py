"""`dspark-sim measure --engine vllm`: prompt sets through a vLLM server, its per-request
spec-decode metrics as an empirical acceptance profile (via `acceptance import vllm`).

Every prompt is sent at once (vLLM batches up to max_num_seqs and queues the rest), greedy,
ending at EOS or `max_new_tokens`, with the tokenizer's chat template. Each response's final
usage chunk (`usage` and `metrics.speculative_decoding`, detailed per step) is one line of
`records.jsonl` beside the profile, with the request's task and prompt source.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..decode.prompts import Prompt, encode_prompt
from ..fileio import write_jsonl_atomic
from .client import run_schedule
from .runtime import EngineError


def measure_records(url: str, model: str, tokenizer: Any, tasks: dict[str, list[Prompt]],
                    max_new_tokens: int, chat: bool, records_path: Path,
                    progress: Callable[[int], None] | None = None) -> list[dict]:
    """Serve every prompt; write and return one vLLM-response record per prompt."""
    order = [(task, p) for task, prompts in tasks.items() for p in prompts]
    ids = [encode_prompt(tokenizer, p.text, chat) for _, p in order]
    recs = run_schedule(url, model, ids, [max_new_tokens] * len(ids), [0.0] * len(ids),
                        timeout_s=1800, exact=False, progress=progress)
    failed = [(order[r.index][1].source, r.error) for r in recs if r.error]
    if failed:
        raise EngineError(f"{len(failed)} of {len(recs)} requests failed; first: {failed[0][1]} "
                          f"({failed[0][0]})")
    out = []
    for (task, prompt), rec in zip(order, recs):
        if rec.spec is None:
            raise EngineError("vLLM returned no per-request spec-decode metrics; is the server "
                              "speculative and started with --per-request-spec-decode-metrics detailed?")
        out.append({"id": f"{task}-{len(out)}", "task": task, "source": prompt.source,
                    "usage": {"prompt_tokens": rec.reported_prompt_tokens,
                              "completion_tokens": rec.completion_tokens},
                    "metrics": {"speculative_decoding": rec.spec}})
    write_jsonl_atomic(records_path, out)
    return out
