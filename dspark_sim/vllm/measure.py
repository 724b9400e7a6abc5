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
from .settings import ServerLimits, server_spec


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


def measure_acceptance(out: Path, target: str, tasks: str, n: int | None, max_new_tokens: int,
                       gamma: int, chat: bool, name: str | None, vllm_python: str | None,
                       drafter: str, limits: ServerLimits,
                       progress: Callable[[str, int, int], None] | None = None):
    """`measure --engine vllm`: the prompt sets through vLLM's drafter at K = gamma; writes the
    empirical acceptance profile to `out` and the records it came from beside it. Returns the
    import result (profile and per-task report) and the records' path."""
    import tempfile

    from transformers import AutoTokenizer

    from ..decode.prompts import parse_tasks
    from ..errors import InputError
    from .acceptance_import import import_vllm
    from .records import TaskRule
    from .runtime import (VLLMServer, drafter_kind, parse_drafter, resolve_model,
                          speculative_config, vllm_python as find_python)

    if gamma < 1 or max_new_tokens < 1 or (n is not None and n < 1):
        raise InputError("--gamma, --max-new-tokens and --n must be >= 1", field="--gamma")
    prompt_sets = parse_tasks(tasks, n)
    python = find_python(vllm_python)
    drafter_cfg = parse_drafter(drafter)
    model, model_name = resolve_model(target)
    tokenizer = AutoTokenizer.from_pretrained(model)
    spec = server_spec(model, speculative_config(f"static-{gamma}", drafter_cfg), limits,
                       iteration_log=False)
    stem = out.name[: -len(".acceptance.json")] if out.name.endswith(".acceptance.json") else out.stem
    records_path = out.with_name(stem + ".records.jsonl")
    log = Path(tempfile.mkdtemp(prefix="vllm-measure-")) / "vllm.log"
    total = sum(map(len, prompt_sets.values()))
    label = f"vLLM {drafter_cfg['method']} K={gamma}"
    with VLLMServer(spec, python, log) as server:
        if progress:
            progress(label, 0, total)
        measure_records(server.url, spec.served_name, tokenizer, prompt_sets, max_new_tokens,
                        chat, records_path, progress and (lambda k: progress(label, k, total)))
    result = import_vllm([records_path], name or stem, kind="empirical",
                         rule=TaskRule(path="task"), drafter_kind=drafter_kind(drafter_cfg))
    prof = result.profile
    prof.target, prof.drafter = model_name, f"vllm-{drafter_cfg['method']}"
    prof.extra.setdefault("vllm", {}).update({"speculative_config": spec.speculative,
                                              "max_new_tokens": max_new_tokens, "chat": chat,
                                              "prompts": tasks, "n": n})
    prof.save(out)
    return result, records_path
