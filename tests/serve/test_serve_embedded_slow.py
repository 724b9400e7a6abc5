"""The real engine on the embedded target: every policy's outputs equal plain greedy decoding."""
import numpy as np
import pytest
import torch
from greedy_check import compare
from servekit import POLICIES, acceptance, hw
from simkit import make_trace

from dspark_sim.decode.drafters import NGramDrafter
from dspark_sim.decode.loading import load_target
from dspark_sim.serve.engine import serve
from dspark_sim.serve.prompts import PromptBuilder, build_prompts, prompt_sets

pytestmark = pytest.mark.slow


def plain_greedy(target, prompt: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """n greedy tokens through the model's own forward and cache, one at a time, EOS ignored."""
    cache = target.new_cache()
    logits = target.forward(torch.tensor(prompt), cache, last_only=True).logits[-1]
    out, rows = [], []
    for _ in range(n):
        rows.append(logits.float())
        out.append(int(logits.argmax()))
        logits = target.forward(torch.tensor([out[-1]]), cache).logits[-1]
    return out, rows


@pytest.fixture(scope="module")
def embedded():
    target = load_target("embedded", "cpu", quiet=True)
    trace = make_trace([0.0, 0.0, 0.0, 0.3, 0.3, 0.8], [40, 180, 90, 300, 60, 120],
                       [40, 24, 48, 32, 1, 40], task=["math", "code", "chat", "code", "math", "chat"])
    prompts = build_prompts(PromptBuilder(target.tokenizer, prompt_sets(None)), trace.task,
                            trace.prompt_tokens, seed=0)
    refs = [plain_greedy(target, p, int(n)) for p, n in zip(prompts, trace.output_tokens)]
    return target, trace, prompts, refs


def _check(embedded, policy, drafter, gamma):
    target, trace, prompts, refs = embedded
    prof = acceptance(drafter.kind) if gamma == 4 else None
    if gamma != 4:
        from simkit import parametric
        prof = parametric({"chat": [0.5] * gamma}, kind=drafter.kind)
    res = serve(trace, policy, target, drafter, hw(max_batch_tokens=128, max_batch_requests=4),
                prof, prompts, gamma=gamma)
    for i, (out, (ref, logits)) in enumerate(zip(res.outputs, refs)):
        compare(ref, logits, out, f"{policy}/{drafter.name} request {i}")
    assert res.iterations["decode_requests"].max() >= 2
    return res


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_lossless_with_ngram(embedded, policy):
    res = _check(embedded, policy, NGramDrafter(embedded[0]), 4)
    if policy != "ar":
        assert sum(a for s in res.steps for _, _, a in s) > 0


@pytest.mark.parametrize("policy", ["static-3", "dspark", "dspark-lagged"])
def test_trained_drafter_architecture_lossless(embedded, policy):
    """A DSpark drafter of the shipped configuration (random weights when no checkpoint is
    shipped): its confidences drive Algorithm 1; outputs stay greedy."""
    from dspark_sim.hardware.engine_profile import profile_drafter_for

    drafter = profile_drafter_for("dspark", embedded[0])
    _check(embedded, policy, drafter, 7)
