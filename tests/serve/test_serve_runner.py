"""The batched ragged forward equals the model's own forward, request by request."""
import pytest
import torch
from toys import byte_tokenizer, tiny_llama

from dspark_sim.decode.target import HFTarget
from dspark_sim.errors import InputError
from dspark_sim.serve.prompts import PromptBuilder, build_prompts, prompt_sets
from dspark_sim.serve.runner import ModelRunner, Segment


def test_ragged_chunks_and_decode_rows_match_full_forward():
    model = tiny_llama(seed=4, vocab=260, layers=3)
    target = HFTarget(model)
    runner = ModelRunner(target)
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, 260, (n,), generator=g).tolist() for n in (11, 30, 5, 19)]
    taps = (0, 2)
    full = []
    for s in seqs:
        out = target.forward(torch.tensor(s), target.new_cache(), taps)
        full.append(out)
    kvs = [runner.new_kv(40) for _ in seqs]
    # iteration 1: different chunk lengths; iteration 2: the rest, with one single-token row
    cut = [4, 17, 1, 19]
    first = runner.run([Segment(kv, s[:c], "all") for kv, s, c in zip(kvs, seqs, cut)], taps)
    rest = [(kv, s[c:], i) for i, (kv, s, c) in enumerate(zip(kvs, seqs, cut)) if c < len(s)]
    second = runner.run([Segment(kv, ids, "all") for kv, ids, _ in rest], taps)
    got = {i: [o] for i, o in enumerate(first)}
    for (_, _, i), o in zip(rest, second):
        got[i].append(o)
    for i, ref in enumerate(full):
        logits = torch.cat([o.logits for o in got[i]])
        feats = torch.cat([o.features for o in got[i]])
        torch.testing.assert_close(logits, ref.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(feats, ref.features, atol=1e-5, rtol=1e-4)
        assert kvs[i].length == len(seqs[i])


def test_logit_selection_and_crop():
    model = tiny_llama(seed=5, vocab=260)
    target = HFTarget(model)
    runner = ModelRunner(target)
    ids = list(range(10, 30))
    ref = target.forward(torch.tensor(ids), target.new_cache()).logits
    kv = runner.new_kv(32)
    a, b = runner.run([Segment(kv, ids[:12], "none")])[0], runner.run([Segment(kv, ids[12:], "last")])[0]
    assert a.logits is None and b.logits.shape == (1, 260)
    torch.testing.assert_close(b.logits[0], ref[-1], atol=1e-4, rtol=1e-4)
    # verify 5 wrong tokens, roll back, continue with the right ones: same logits as before
    kv.crop(15)
    runner.run([Segment(kv, [1, 2, 3, 4, 5], "all")])
    kv.crop(15)
    again = runner.run([Segment(kv, ids[15:], "all")])[0].logits
    torch.testing.assert_close(again, ref[15:], atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="overflow"):
        runner.run([Segment(kv, list(range(40)), "none")])


def test_unsupported_architecture_is_bad_input():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)).eval()
    with pytest.raises(InputError, match="serving engine runs"):
        ModelRunner(HFTarget(model))


def test_prompts_have_the_exact_length_and_the_task_text():
    tok = byte_tokenizer()
    builder = PromptBuilder(tok, prompt_sets(None))
    for n in (1, 5, 20, 300):
        for task in ("math", "code", "chat", "default"):
            ids = builder.build(task, n, 3)
            assert len(ids) == n
    long = tok.decode(builder.build("code", 400, 0))
    assert long.startswith("<user>") and long.endswith("<assistant>") and "def " in long
    import numpy as np
    tasks = np.array(["math", "math", "code"], dtype=object)
    a = build_prompts(builder, tasks, np.array([50, 50, 50]), seed=1)
    assert a == build_prompts(builder, tasks, np.array([50, 50, 50]), seed=1)
    assert a[0] != a[1]                                  # consecutive requests, different prompts
