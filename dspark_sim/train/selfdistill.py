"""Self-distillation data: the target answers training prompts; responses are cached on disk.

Generation is batched and resumable: every finished batch is appended as one JSONL shard
(written atomically), and a restart skips the prompt ids already present in any shard.
Each record holds the chat-templated prompt ids and the target's response ids.
A finished data set can be packed into one compressed `.npz` of token ids (`write_records_npz`;
a few MB for the default mix), which `read_records` and `dspark-sim train --data` accept in
place of the shard directory, so retraining never has to re-run the target.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from ..errors import InputError
from ..fileio import write_jsonl_atomic
from ..traces.schema import iter_json_lines
from .prompts import TrainPrompt


@dataclass(frozen=True)
class DistillRecord:
    """One prompt and the target's answer, as token ids."""

    id: str
    task: str
    temperature: float
    prompt_ids: list[int]
    response_ids: list[int]

    @property
    def n_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def chat_prompt_ids(tokenizer: Any, text: str, max_prompt_tokens: int) -> list[int]:
    """The chat-templated prompt (with the generation prompt), left-truncated to a limit."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                        add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    ids = [int(t) for t in ids]
    return ids[-max_prompt_tokens:]


NPZ_SCHEMA = "dspark-sim/selfdistill/v1"


def write_records_npz(records: list[DistillRecord], path: str | Path) -> Path:
    """Pack records into one compressed npz of token ids (int32), written atomically."""
    from ..fileio import atomic_path

    def ragged(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.array([len(x) for x in seqs], dtype=np.int64)
        flat = np.fromiter((t for x in seqs for t in x), dtype=np.int32, count=int(lengths.sum()))
        return flat, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)

    p_flat, p_off = ragged([r.prompt_ids for r in records])
    r_flat, r_off = ragged([r.response_ids for r in records])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez_compressed(fh, schema=np.array(NPZ_SCHEMA), ids=np.array([r.id for r in records]),
                            tasks=np.array([r.task for r in records]),
                            temperatures=np.array([r.temperature for r in records], dtype=np.float32),
                            prompt_tokens=p_flat, prompt_offsets=p_off,
                            response_tokens=r_flat, response_offsets=r_off)
    return path


def read_records_npz(path: str | Path) -> list[DistillRecord]:
    """The records of a packed npz (`write_records_npz`)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["schema"]) != NPZ_SCHEMA:
                raise InputError(f"not a self-distillation pack (schema {str(z['schema'])!r}, "
                                 f"expected {NPZ_SCHEMA!r})", file=path, field="schema")
            ids, tasks, temps = z["ids"], z["tasks"], z["temperatures"]
            pt, po, rt, ro = (z[k] for k in ("prompt_tokens", "prompt_offsets",
                                              "response_tokens", "response_offsets"))
    except InputError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"unreadable self-distillation pack: {exc}", file=path) from None
    n = len(ids)
    if not (len(tasks) == len(temps) == n and len(po) == len(ro) == n + 1
            and po[-1] == len(pt) and ro[-1] == len(rt)):
        raise InputError("inconsistent array lengths in the self-distillation pack", file=path)
    return [DistillRecord(id=str(ids[i]), task=str(tasks[i]), temperature=float(temps[i]),
                          prompt_ids=pt[po[i]:po[i + 1]].tolist(),
                          response_ids=rt[ro[i]:ro[i + 1]].tolist()) for i in range(n)]


def read_records(data_dir: str | Path) -> list[DistillRecord]:
    """All records of a self-distillation directory (shards in name order) or packed npz."""
    data_dir = Path(data_dir)
    if data_dir.suffix == ".npz" and data_dir.is_file():
        return read_records_npz(data_dir)
    shards = sorted(data_dir.glob("shard-*.jsonl"))
    if not shards:
        raise InputError("no self-distillation shards (shard-*.jsonl) found", file=data_dir)
    out: list[DistillRecord] = []
    for shard in shards:
        for lineno, row in iter_json_lines(shard, "self-distillation shard"):
            out.append(_record(row, shard, lineno))
    return out


def _record(row: dict, shard: Path, lineno: int) -> DistillRecord:
    """One shard line as a DistillRecord; a bad field names FILE:LINE and the field."""
    def bad(field: str, message: str) -> InputError:
        return InputError(message, file=shard, line=lineno, field=field)
    for key in ("id", "task", "temperature", "prompt_ids", "response_ids"):
        if key not in row:
            raise bad(key, "missing required field")
    temperature = row["temperature"]
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature < 0:
        raise bad("temperature", f"expected a number >= 0, got {temperature!r}")
    ids = {}
    for key in ("prompt_ids", "response_ids"):
        tokens = row[key]
        if not isinstance(tokens, list) or (key == "prompt_ids" and not tokens) or \
                any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in tokens):
            raise bad(key, "expected a list of token ids (integers >= 0)"
                      + (", not empty" if key == "prompt_ids" else ""))
        ids[key] = tokens
    return DistillRecord(id=str(row["id"]), task=str(row["task"]), temperature=float(temperature),
                         prompt_ids=ids["prompt_ids"], response_ids=ids["response_ids"])


def _write_shard(out_dir: Path, no: int, records: list[DistillRecord]) -> None:
    """Shard `no` of `out_dir`, written atomically: one JSON line per record (the inverse of
    `_record`)."""
    write_jsonl_atomic(out_dir / f"shard-{no:05d}.jsonl",
                       ({"id": r.id, "task": r.task, "temperature": r.temperature,
                         "prompt_ids": r.prompt_ids, "response_ids": r.response_ids} for r in records))


def seed_from_pack(pack: str | Path, out_dir: str | Path, chunk: int = 32) -> int:
    """Start an empty self-distillation directory from a packed npz (`write_records_npz`): its
    records become shards, so `generate_responses` skips their prompts and answers the rest.
    Returns the number of records written; refuses a directory that already holds shards."""
    out_dir = Path(out_dir)
    if any(out_dir.glob("shard-*.jsonl")):
        raise InputError("already holds shards; --resume-from starts an empty directory only",
                         file=out_dir, field="--resume-from")
    records = read_records_npz(pack)
    out_dir.mkdir(parents=True, exist_ok=True)
    for no, start in enumerate(range(0, len(records), chunk)):
        _write_shard(out_dir, no, records[start:start + chunk])
    return len(records)


def _done_ids(data_dir: Path) -> set[str]:
    if not any(data_dir.glob("shard-*.jsonl")):
        return set()
    return {r.id for r in read_records(data_dir)}


def _batches(prompts: list[TrainPrompt], temperatures: list[float], batch_size: int, seed: int
             ) -> Iterable[tuple[float, list[TrainPrompt]]]:
    """Batches of one temperature and similar prompt length, in a seeded random order (so a
    run stopped early still holds a balanced mix of tasks and temperatures)."""
    batches = []
    for temp in sorted(set(temperatures)):
        group = [p for p, t in zip(prompts, temperatures) if t == temp]
        group.sort(key=lambda p: (len(p.text), p.id))
        batches += [(temp, group[i:i + batch_size]) for i in range(0, len(group), batch_size)]
    order = np.random.default_rng(seed).permutation(len(batches))
    return [batches[i] for i in order]


def generate_responses(model: Any, tokenizer: Any, prompts: list[TrainPrompt], out_dir: str | Path,
                       *, temperatures: list[float], batch_size: int = 32,
                       max_new_tokens: int = 256, max_prompt_tokens: int = 512, seed: int = 0,
                       on_batch: Callable[[int, int], None] | None = None,
                       minutes: float = 0.0) -> int:
    """Answer every prompt not yet in `out_dir`; return how many new records were written.

    `temperatures[i]` is the sampling temperature of `prompts[i]` (0 = greedy). `on_batch`
    receives (prompts done in this call, prompts to do) after every batch. `minutes` > 0: no
    batch starts after that many minutes (the directory stays resumable).
    """
    import time

    import torch

    if len(temperatures) != len(prompts):
        raise ValueError("one temperature per prompt")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = _done_ids(out_dir)
    todo = [(p, t) for p, t in zip(prompts, temperatures) if p.id not in done]
    shard_no = len(list(out_dir.glob("shard-*.jsonl")))
    eos_ids = {int(tokenizer.eos_token_id)}
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end >= 0:
        eos_ids.add(im_end)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
    device = next(model.parameters()).device
    written = 0
    stop_at = time.monotonic() + 60.0 * minutes if minutes > 0 else math.inf
    for temp, batch in _batches([p for p, _ in todo], [t for _, t in todo], batch_size, seed):
        if time.monotonic() >= stop_at:
            break
        ids = [chat_prompt_ids(tokenizer, p.text, max_prompt_tokens) for p in batch]
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(ids), width), dtype=torch.long)
        for row, x in enumerate(ids):  # left padding
            input_ids[row, width - len(x):] = torch.tensor(x)
            attn[row, width - len(x):] = 1
        torch.manual_seed(seed + shard_no)  # HF generate samples from the global generator
        with torch.no_grad():
            out = model.generate(input_ids=input_ids.to(device), attention_mask=attn.to(device),
                                 max_new_tokens=max_new_tokens, do_sample=temp > 0,
                                 temperature=temp if temp > 0 else None, top_k=None, top_p=None,
                                 pad_token_id=pad_id, eos_token_id=sorted(eos_ids))
        answers = []
        for row, p in enumerate(batch):
            resp: list[int] = []
            for tok in out[row, width:].tolist():
                resp.append(int(tok))
                if tok in eos_ids:
                    break
            answers.append(DistillRecord(id=p.id, task=p.task, temperature=temp,
                                         prompt_ids=ids[row], response_ids=resp))
        _write_shard(out_dir, shard_no, answers)
        shard_no += 1
        written += len(batch)
        if on_batch is not None:
            on_batch(written, len(todo))
    return written
