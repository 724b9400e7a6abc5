"""Prompt sets by task: JSONL loaders (GSM8K, HumanEval, MT-Bench and plain task/prompt rows),
the built-in sets, the `--tasks` option, and chat-template encoding."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..traces.schema import iter_json_lines

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "data" / "prompts"
BUILTIN_TASKS = ("math", "code", "chat")


@dataclass(frozen=True)
class Prompt:
    """One prompt with its task and where it came from (FILE:LINE)."""

    task: str
    text: str
    source: str


def prompt_text(row: dict[str, Any]) -> str | None:
    """The prompt of a row: `prompt` (plain, HumanEval), `question` (GSM8K) or `turns[0]`
    (MT-Bench); None when the row has none of them."""
    for key in ("prompt", "question"):
        if isinstance(row.get(key), str):
            return row[key]
    turns = row.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str):
        return turns[0]
    return None


def load_prompts(path: str | Path, task: str | None = None) -> list[Prompt]:
    """Prompts of a JSONL file, in file order. `task` overrides the rows' own `task` field
    (default "default"). Errors name FILE:LINE."""
    out: list[Prompt] = []
    for number, row in iter_json_lines(path, "prompt file"):
        text = prompt_text(row)
        if text is None or not text.strip():
            raise InputError("no prompt: expected a non-empty string in 'prompt', 'question' or "
                             "'turns[0]'", file=path, line=number, field="prompt")
        row_task = row.get("task", "default")
        if task is None and not isinstance(row_task, str):
            raise InputError("expected a string", file=path, line=number, field="task")
        out.append(Prompt(task or row_task, text, f"{path}:{number}"))
    if not out:
        raise InputError("no prompts in file", file=path)
    return out


def builtin_prompts(task: str) -> list[Prompt]:
    """The project's own prompt set for `task` (math, code or chat)."""
    if task not in BUILTIN_TASKS:
        raise InputError(f"no built-in prompt set {task!r} (built in: {', '.join(BUILTIN_TASKS)})",
                         field="--tasks")
    return load_prompts(BUILTIN_DIR / f"{task}.jsonl", task=task)


def parse_tasks(spec: str, limit: int | None = None) -> dict[str, list[Prompt]]:
    """`--tasks` value: comma-separated NAME=FILE (file's prompts as task NAME), NAME (a
    built-in set) or FILE (rows grouped by their own `task` field). First `limit` per task."""
    tasks: dict[str, list[Prompt]] = {}
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if "=" in item:
            name, _, file = item.partition("=")
            if not name.strip() or not file.strip():
                raise InputError(f"expected NAME=FILE, got {item!r}", field="--tasks")
            prompts = load_prompts(file.strip(), task=name.strip())
        elif item in BUILTIN_TASKS:
            prompts = builtin_prompts(item)
        elif Path(item).exists():
            prompts = load_prompts(item)
        else:
            raise InputError(f"{item!r} is neither NAME=FILE, a built-in set "
                             f"({', '.join(BUILTIN_TASKS)}) nor an existing file", field="--tasks")
        for p in prompts:
            tasks.setdefault(p.task, []).append(p)
    if not tasks:
        raise InputError("names no prompt set", field="--tasks")
    return {name: prompts[:limit] for name, prompts in tasks.items()}


def encode_prompt(tokenizer: Any, text: str, chat: bool = True) -> list[int]:
    """Token ids of `text` as a single user turn through the tokenizer's chat template (with the
    assistant header appended), or of the raw text when `chat` is off or there is no template."""
    if chat and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                             tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])
