"""Real prompts of exactly the trace's lengths: each request gets text of its task, as a chat turn.

A trace gives only a prompt length and a task. The engine needs token ids, and acceptance
depends on what the text is, so each request takes prompts of its task from a prompt set
(the built-in math / code / chat sets by default, or the user's `NAME=FILE` sets), joined
until long enough, and wrapped in the tokenizer's chat template with the assistant header
appended; the user content is then cut at the token level so the whole prompt has exactly
`prompt_tokens` ids. A prompt too short for the template is the content's first tokens.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..decode.prompts import BUILTIN_TASKS, Prompt, builtin_prompts, encode_prompt, parse_tasks
from ..errors import InputError

FALLBACK_TASK = "chat"       # prompt set for trace tasks that have none of their own


def prompt_sets(spec: str | None) -> dict[str, list[Prompt]]:
    """`--prompts` value (see decode's `--tasks`: NAME=FILE, built-in NAME or FILE, comma-separated);
    default: the built-in math, code and chat sets."""
    if spec:
        return parse_tasks(spec)
    return {task: builtin_prompts(task) for task in BUILTIN_TASKS}


class PromptBuilder:
    """Token ids of a given length and task, from a tokenizer and prompt sets."""

    def __init__(self, tokenizer: Any, sets: dict[str, list[Prompt]], chat: bool = True) -> None:
        if tokenizer is None:
            raise InputError("the target has no tokenizer, so prompts cannot be built",
                             field="--target")
        self.tokenizer, self.sets, self.chat = tokenizer, sets, chat
        empty = encode_prompt(tokenizer, "", chat)
        marked = encode_prompt(tokenizer, "\u2588", chat)
        head = 0
        while head < min(len(empty), len(marked)) and empty[head] == marked[head]:
            head += 1
        tail = 0
        while tail < min(len(empty), len(marked)) - head and empty[-1 - tail] == marked[-1 - tail]:
            tail += 1
        self.prefix, self.suffix = empty[:head], empty[len(empty) - tail:] if tail else []

    def _set_for(self, task: str) -> list[Prompt]:
        if task in self.sets:
            return self.sets[task]
        if FALLBACK_TASK in self.sets:
            return self.sets[FALLBACK_TASK]
        return next(iter(self.sets.values()))

    def build(self, task: str, length: int, index: int) -> list[int]:
        """`length` token ids of task `task`; `index` picks where in the task's set to start."""
        prompts = self._set_for(task)
        frame = len(self.prefix) + len(self.suffix)
        templated = self.chat and length >= frame + 8
        room = length - frame if templated else length
        content: list[int] = []
        i = index
        while len(content) < room:
            text = prompts[i % len(prompts)].text
            ids = self.tokenizer(("\n\n" if content else "") + text, add_special_tokens=False)["input_ids"]
            content += list(ids)
            i += 1
        content = content[:room]
        return self.prefix + content + self.suffix if templated else content


def build_prompts(builder: PromptBuilder, tasks: np.ndarray, lengths: np.ndarray,
                  seed: int = 0) -> list[list[int]]:
    """Prompt ids for every request of a trace: request j of a task starts at prompt
    (offset + j) of that task's set, the offset drawn from `seed`."""
    rng = np.random.default_rng([seed, 0x9E7])
    offsets: dict[str, int] = {}
    counts: dict[str, int] = {}
    out = []
    for task, length in zip(tasks, lengths):
        task = str(task)
        if task not in offsets:
            offsets[task] = int(rng.integers(0, 1 << 16))
            counts[task] = 0
        out.append(builder.build(task, int(length), offsets[task] + counts[task]))
        counts[task] += 1
    return out


def share_content(prompts: list[list[int]], trace) -> list[list[int]]:
    """Prompt ids whose shared content is shared token for token, as the trace's `hash_ids` and
    `conversation` say (sim/kv/prefix.py defines what a token is): a hash block's positions copy
    the first request that had that id, a conversation's positions past its hash blocks copy the
    conversation's stream (the longest prompt so far). A request's other positions keep its own
    ids. Without those fields the prompts are returned as they are."""
    if not trace.has_prefixes:
        return prompts
    from ..traces.schema import HASH_BLOCK_TOKENS

    blocks: dict[int, list[int]] = {}
    streams: dict[str, list[int]] = {}
    out = []
    for i, ids in enumerate(prompts):
        ids = list(ids)
        start = 0
        hashes = trace.hash_ids[i] if trace.hash_ids is not None else None
        if hashes:
            size = int(trace.hash_block_tokens[i]) or HASH_BLOCK_TOKENS
            for k, h in enumerate(hashes):
                lo, hi = k * size, min((k + 1) * size, len(ids))
                block = blocks.setdefault(h, ids[lo:hi])
                take = min(hi - lo, len(block))
                ids[lo:lo + take] = block[:take]
            start = min(len(hashes) * size, len(ids))
        conv = trace.conversation[i] if trace.conversation is not None else None
        if conv is not None:
            stream = streams.setdefault(conv, [])
            if len(stream) < len(ids):
                stream.extend(ids[len(stream):])
            ids[start:] = stream[start:len(ids)]
        out.append(ids)
    return out
