"""Greedy speculative decoding is token-identical to the target's own greedy decoding."""
import pytest
import torch
from greedy_check import compare, reference
from toys import ReplayDrafter, tiny_llama

from dspark_sim.decode.drafters import drafter_names, make_drafter
from dspark_sim.decode.drafters.config import KINDS as TRAINED_KINDS
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.decode.target import HFTarget

N_PROMPTS, NEW_TOKENS, GAMMA = 20, 128, 5


def prompts(vocab: int, count: int = N_PROMPTS, seed: int = 1) -> list[list[int]]:
    """Random prompts; every other one repeats a chunk so that prompt lookup finds matches."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        p = torch.randint(0, vocab, (int(torch.randint(4, 40, (1,), generator=g)),), generator=g).tolist()
        out.append(p + p[: len(p) // 2] if i % 2 else p)
    return out


@pytest.fixture(scope="module")
def tiny():
    model = tiny_llama(seed=0, vocab=260)
    refs = [reference(model, p, NEW_TOKENS) for p in prompts(260)]
    return model, HFTarget(model), refs


# Trained kinds ship checkpoints bound to the embedded target; tests/train runs this check
# for them on tiny targets, and the slow test below runs it on the embedded one.
@pytest.mark.parametrize("name", [n for n in drafter_names() if n not in TRAINED_KINDS])
def test_registered_drafters_match_generate(tiny, name):
    model, target, refs = tiny
    drafter = make_drafter(name, target)
    accepted = rejected = 0
    for i, (p, (ref, logits)) in enumerate(zip(prompts(260), refs)):
        gen = speculative_generate(target, drafter, p, max_new_tokens=NEW_TOKENS, gamma=GAMMA)
        compare(ref, logits, gen.output_ids, f"{name} prompt {i}")
        assert len(gen.output_ids) == NEW_TOKENS
        accepted += sum(gen.accepted)
        rejected += sum(a < v for a, v in zip(gen.accepted, gen.verified))
    if name != "none":   # the check must exercise both paths, or it proves little
        assert accepted > 100 and rejected > 20, (accepted, rejected)


def test_replay_drafter_with_rejections_and_scheduler(tiny):
    """Known-good drafts with corruptions, and a scheduler verifying fewer than proposed."""
    model, target, refs = tiny
    lengths = set()

    def verify_len(draft, ctx):   # varies l in 0..gamma from step to step
        lengths.add(len(ctx.tokens) % (GAMMA + 1))
        return len(ctx.tokens) % (GAMMA + 1)

    for i, (p, (ref, logits)) in enumerate(zip(prompts(260), refs)):
        for sched in (None, verify_len):
            drafter = ReplayDrafter(p + ref, vocab=260, every=3, seed=i)
            gen = speculative_generate(target, drafter, p, max_new_tokens=NEW_TOKENS, gamma=GAMMA,
                                       verify_len=sched)
            compare(ref, logits, gen.output_ids, f"replay prompt {i}")
            if sched is not None:
                assert all(v <= GAMMA for v in gen.verified)
    assert lengths == set(range(GAMMA + 1))


def test_eos_ends_request_like_generate():
    """With an EOS that the model emits, outputs stop exactly where generate stops."""
    model = tiny_llama(seed=3, vocab=260)
    probe, _ = reference(model, prompts(260, 1, seed=7)[0], 60)
    eos = probe[45]                                   # a token this model does emit
    model.generation_config.eos_token_id = eos
    target = HFTarget(model)
    assert target.eos_token_ids == {eos}
    ended = 0
    for i, p in enumerate(prompts(260, 8, seed=7)):
        ref, logits = reference(model, p, NEW_TOKENS)
        for name in ("ngram", "none"):
            gen = speculative_generate(target, make_drafter(name, target), p,
                                       max_new_tokens=NEW_TOKENS, gamma=GAMMA)
            compare(ref, logits, gen.output_ids, f"eos {name} prompt {i}")
            assert (gen.finish == "eos") == (gen.output_ids[-1] == eos)
            assert eos not in gen.output_ids[:-1]
        ended += gen.finish == "eos"
    assert ended >= 1


@pytest.fixture(scope="module")
def embedded():
    """The real embedded SmolLM2-135M-Instruct, 21 chat-templated built-in prompts, and their
    reference greedy continuations from generate."""
    from dspark_sim.decode.loading import load_target
    from dspark_sim.decode.prompts import builtin_prompts, encode_prompt

    target = load_target("embedded", "cpu")
    texts = [p.text for task in ("math", "code", "chat") for p in builtin_prompts(task)[:7]]
    ids = [encode_prompt(target.tokenizer, t) for t in texts]
    return target, ids, [reference(target.model, p, NEW_TOKENS) for p in ids]


@pytest.mark.slow
@pytest.mark.parametrize("name", drafter_names())
def test_embedded_model_matches_generate(embedded, name):
    """The same check on the real embedded model."""
    target, prompts_, refs = embedded
    drafter = make_drafter(name, target)
    ties, accepted = [], 0
    for i, (ids, (ref, logits)) in enumerate(zip(prompts_, refs)):
        gen = speculative_generate(target, drafter, ids, max_new_tokens=NEW_TOKENS, gamma=7)
        note = compare(ref, logits, gen.output_ids, f"embedded {name} prompt {i}")
        ties += [note] if note else []
        accepted += sum(gen.accepted)
    assert name == "none" or accepted > 0
    print(f"{name}: {len(prompts_)} prompts, " + ("; ".join(ties) or "no floating-point ties"))


@pytest.mark.slow
@pytest.mark.parametrize("lagged", [False, True])
def test_embedded_scheduled_skip_drafting_matches_generate(embedded, lagged):
    """DSpark's one-request scheduler as the draft gate (steps whose draft it skips are plain
    steps), with Algorithm 1 or the lagged budget, keeps the output identical on the slow
    prompts, and both paths are taken."""
    from dspark_sim.profiles.registry import load_hw_profile
    from dspark_sim.serve.single import ScheduledVerify

    target, prompts_, refs = embedded
    drafter = make_drafter("dspark", target)
    hw = load_hw_profile("cpu-2core-smollm2-135m")
    skipped = drafted = 0
    for i, (ids, (ref, logits)) in enumerate(zip(prompts_, refs)):
        hook = ScheduledVerify(hw, "dspark", 7, skip_drafting=True, lagged=lagged)
        gen = speculative_generate(target, drafter, ids, max_new_tokens=NEW_TOKENS, gamma=7,
                                   verify_len=hook, draft_budget=hook.draft_budget)
        compare(ref, logits, gen.output_ids, f"embedded scheduled dspark prompt {i}")
        skipped += gen.skipped
        drafted += gen.steps - gen.skipped
    assert skipped > 0 and drafted > 0, (skipped, drafted)
