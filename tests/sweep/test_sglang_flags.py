"""`recommend`'s SGLang flags: checked against SGLang 0.5.23's documented flag set always, and
parsed by SGLang's own argument parser where an interpreter that imports SGLang is given.

SGLang's wheel pins a CUDA build of torch (2.14.1) and GPU kernels, so it does not install on a
CPU machine within reason; its argument parser needs only its Python sources and a few pure-Python
packages (orjson, pybase64, starlette, msgspec, aiohttp, triton). Point DSPARK_SIM_SGLANG_PYTHON at
an interpreter that has `pip install --no-deps sglang==0.5.23` plus those to run the second test."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from dspark_sim.profiles.registry import load_acceptance_profile
from dspark_sim.sim.spec_config import parse_schedule
from dspark_sim.sweep.deploy import SGLANG_ALGORITHMS, check_sglang_flags, deployment

CASES = [("static-3", "eagle3", "eagle3-llama31-8b-g7"), ("static-5", "dspark", "dspark-qwen3-8b-g7"),
         ("vllm-adaptive", "dspark", "dspark-qwen3-8b-g7"), ("vllm-schedule", "eagle3", "eagle3-qwen3-8b-g2"),
         ("static-4", "ngram", "vllm-ngram-smollm2-135m-g7-t0"), ("mtp1", "mtp", "deepseek-v3-mtp1"),
         ("static-2", "dflash", "paper-dflash-g7"), ("static-2", "draft_model", "paper-dflash-g7")]


def _flags():
    out = []
    for policy, method, name in CASES:
        prof = load_acceptance_profile(name)
        schedule = parse_schedule("[[1, 8, 2], [9, 64, 1]]", prof.gamma)
        plan = deployment(policy, method, prof.gamma, schedule, prof, draft_model=None if method != "draft_model"
                          else "org/draft", fixed_k=2, max_running=128)
        out.append((policy, method, plan))
    return out


def test_flags_are_in_sglangs_documented_set():
    for policy, method, plan in _flags():
        assert plan.sglang, (policy, method)
        assert check_sglang_flags(plan.sglang) == [], (policy, method, plan.sglang)
        algorithm = plan.sglang[plan.sglang.index("--speculative-algorithm") + 1]
        assert algorithm in SGLANG_ALGORITHMS
        assert plan.sglang[-2:] == ["--max-running-requests", "128"]
    assert check_sglang_flags(["--speculative-algorithm", "MEDUSA"]) == ["unknown speculative algorithm 'MEDUSA'"]
    assert check_sglang_flags(["--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                               "--speculative-num-draft-tokens", "3"])[0].startswith("a chain (top-k 1) of 3 steps")
    assert check_sglang_flags(["--speculative-dspark-block-size", "5", "--speculative-num-draft-tokens", "5"])
    assert check_sglang_flags(["--speculative-num-stepz", "3"]) == ["--speculative-num-stepz is not a documented SGLang flag"]
    assert check_sglang_flags(["--speculative-num-steps", "0"])


def test_no_speculation_has_no_flags():
    plan = deployment("ar", "eagle3", 7, None, None)
    assert plan.vllm is None and plan.sglang == []


_PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
parser = argparse.ArgumentParser()
ServerArgs.add_cli_args(parser)
out = []
for flags in json.load(sys.stdin):
    args = parser.parse_args(["--model-path", "org/target"] + flags)
    SpeculativeAlgorithm.from_string(args.speculative_algorithm)
    out.append({k: v for k, v in vars(args).items() if k.startswith("speculative_") or k == "max_running_requests"})
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.environ.get("DSPARK_SIM_SGLANG_PYTHON"),
                    reason="SGLang is not importable here (its wheel needs CUDA torch 2.14.1); set "
                           "DSPARK_SIM_SGLANG_PYTHON to an interpreter with sglang 0.5.23's sources")
def test_flags_parse_with_sglangs_own_parser():
    python = Path(os.environ["DSPARK_SIM_SGLANG_PYTHON"])
    cases = _flags()
    res = subprocess.run([str(python), "-c", _PARSE], input=json.dumps([p.sglang for _, _, p in cases]),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    parsed = json.loads(res.stdout.strip().splitlines()[-1])
    for (_, _, plan), args in zip(cases, parsed):
        given = dict(zip(plan.sglang[::2], plan.sglang[1::2]))
        for flag, value in given.items():
            key = flag.removeprefix("--").replace("-", "_")
            assert str(args[key]) == value, (flag, args[key], value)
