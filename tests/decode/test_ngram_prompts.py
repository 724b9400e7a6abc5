"""Prompt lookup, prompt loaders and chat templates."""
import json

import numpy as np
import pytest
from toys import byte_tokenizer

from dspark_sim.decode.drafters.ngram import lookup
from dspark_sim.decode.prompts import (BUILTIN_TASKS, builtin_prompts, encode_prompt, load_prompts,
                                       parse_tasks)
from dspark_sim.errors import InputError
from tests.shared_data import SHARED, needs_shared
from tests.strict_json import register_input

PROMPTS = SHARED / "prompts"


def test_lookup_prefers_longest_then_most_recent():
    a = np.array([1, 2, 3, 9, 2, 3, 7, 5, 1, 2, 3])
    assert lookup(a, 3).tolist() == [9, 2, 3]            # trigram 1 2 3 at 0 beats bigram 2 3 at 4
    b = np.array([2, 3, 8, 2, 3, 7, 4, 2, 3])
    assert lookup(b, 2).tolist() == [7, 4]               # most recent earlier "2 3" (at 3)
    assert lookup(np.array([5, 6, 7]), 4).tolist() == []  # nothing repeats
    assert lookup(np.array([4, 4]), 3).tolist() == [4]   # continuation limited by what exists
    assert lookup(a, 3, max_n=4, min_n=4).tolist() == []


def test_builtin_sets_have_a_few_dozen_prompts_each():
    for task in BUILTIN_TASKS:
        prompts = builtin_prompts(task)
        assert len(prompts) >= 24 and all(p.task == task and p.text.strip() for p in prompts)
        assert len({p.text for p in prompts}) == len(prompts)


@needs_shared("prompts")
@pytest.mark.parametrize("file,first", [("gsm8k/test.jsonl", "Janet"),
                                        ("humaneval/HumanEval.jsonl", "from typing import List"),
                                        ("mt_bench/question.jsonl", "Compose an engaging travel")])
def test_shared_benchmark_formats(file, first):
    prompts = load_prompts(PROMPTS / file, task="t")
    assert prompts[0].text.startswith(first) and prompts[0].source.endswith(":1")


@needs_shared("prompts", "gsm8k", "test.jsonl")
def test_parse_tasks_mixes_files_builtins_and_task_rows(tmp_path):
    plain = tmp_path / "mixed.jsonl"
    plain.write_text('{"task": "a", "prompt": "x"}\n\n{"task": "b", "prompt": "y"}\n'
                     '{"task": "a", "prompt": "z"}\n')
    tasks = parse_tasks(f"math={PROMPTS / 'gsm8k' / 'test.jsonl'}, chat,{plain}", limit=1)
    assert {k: len(v) for k, v in tasks.items()} == {"math": 1, "chat": 1, "a": 1, "b": 1}
    assert tasks["b"][0].source == f"{plain}:3"


@pytest.mark.parametrize("text,line,msg", [('{"prompt": "ok"}\n{"prompt": "bad"\n', 2, "not valid JSON"),
                                           ('{"prompt": "ok"}\n["a"]\n', 2, "JSON object"),
                                           ('{"prompt": "ok"}\n\n{"text": "x"}\n', 3, "no prompt"),
                                           ('{"prompt": "  "}\n', 1, "no prompt")])
def test_malformed_prompt_files_name_file_and_line(tmp_path, text, line, msg):
    f = tmp_path / "p.jsonl"
    f.write_text(text)
    register_input(f)                          # bad input on purpose (tests/strict_json.py)
    with pytest.raises(InputError, match=msg) as err:
        load_prompts(f)
    assert err.value.line == line and str(err.value).startswith(f"{f}:{line}: ")


def test_bad_tasks_option(tmp_path):
    for spec, msg in [("nope", "neither"), ("math=", "NAME=FILE"), ("x=/no/file", "not found"),
                      ("", "no prompt set")]:
        with pytest.raises(InputError, match=msg):
            parse_tasks(spec)
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no prompts"):
        parse_tasks(f"x={tmp_path / 'e.jsonl'}")


def test_chat_template_wraps_a_user_turn():
    tok = byte_tokenizer()
    ids = encode_prompt(tok, "hi")
    assert tok.decode(ids) == "<user>hi\n<assistant>"
    assert tok.decode(encode_prompt(tok, "hi", chat=False)) == "hi"
    assert tok.decode(encode_prompt(byte_tokenizer(chat_template=False), "hi")) == "hi"
