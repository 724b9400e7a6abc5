"""The vLLM profile's split of a speculative server's cost into step time and proposer time."""
import pytest

from dspark_sim.hardware.profiler import Timing
from dspark_sim.vllm.profile import split_proposer


def test_proposer_cost_is_taken_off_verify_steps_and_becomes_draft_time():
    plain = [Timing("decode", 1, 1, 140, [0.060, 0.062, 0.061]),
             Timing("decode", 4, 1, 140, [0.080, 0.080]),
             Timing("prefill", 1, 64, 0, [0.18])]
    spec = [Timing("decode", 1, 1, 140, [0.064, 0.066, 0.065]),     # +4 ms: the proposer
            Timing("decode", 4, 1, 140, [0.088]),                    # +8 ms at R = 4
            Timing("decode", 1, 4, 140, [0.075, 0.077], tokens=4),
            Timing("decode", 2, 3, 140, [0.090], tokens=7)]          # R = 2: interpolated, 5.33 ms
    steps, draft = split_proposer(plain, spec, "ngram")
    assert [t.op for t in draft] == ["draft:ngram", "draft:ngram"]
    assert {t.requests: t.samples_s[0] for t in draft} == pytest.approx({1: 0.004, 4: 0.008})
    verify = [t for t in steps if t.op == "decode" and t.batch_tokens > t.requests]
    assert [t.batch_tokens for t in verify] == [4, 7]
    assert verify[0].samples_s == pytest.approx([0.071, 0.073])
    assert verify[1].samples_s == pytest.approx([0.090 - (0.004 + 0.004 / 3)])
    assert all(t in steps for t in plain)                 # plain points are kept as measured


def test_side_by_side_times_each_point_on_every_server_in_alternating_order():
    """Each decode point goes to the plain and the speculative server back to back, on the same
    random prompts, the order flipping from point to point; prefill goes to the plain server."""
    from dspark_sim.vllm.profile import VLLMGrid, profile_side_by_side

    calls = []

    class FakeTimer:
        def __init__(self, label):
            self.label = label

        def burst(self, prompts, max_tokens):
            calls.append((self.label, "warmup", len(prompts)))

        def decode(self, context, prompts, kind):
            calls.append((self.label, kind, context, len(prompts), tuple(map(tuple, prompts))))

        def prefill(self, prompt):
            calls.append((self.label, "prefill", len(prompt)))

    grid = VLLMGrid(batches=(1, 2), contexts=(8,), prefill_chunks=(4,), repeats=1, warmup=1)
    ticks = []
    profile_side_by_side([FakeTimer("plain"), FakeTimer("speculative")], grid, vocab=1000,
                         progress=lambda: ticks.append(1))
    decodes = [c for c in calls if c[1] in ("random", "repeated")]
    assert [(c[0], c[1], c[3]) for c in decodes] == [
        ("plain", "random", 1), ("speculative", "random", 1), ("speculative", "repeated", 1),
        ("speculative", "random", 2), ("speculative", "repeated", 2), ("plain", "random", 2)]
    same = {c[3]: c[4] for c in decodes if c[0] == "plain"}
    assert all(c[4] == same[c[3]] for c in decodes if c[1] == "random")   # the same prompts
    assert calls[-1] == ("plain", "prefill", 4)
    assert len(ticks) == grid.points(speculative=True)


def test_a_decode_burst_that_never_decoded_together_is_sent_again(tmp_path):
    """A burst whose R requests never shared a prefill-free iteration (sends staggered on a busy
    machine) measured nothing at R: it is sent again, up to DECODE_ATTEMPTS in all, and the first
    burst with steady iterations is the one recorded; one that never has any records nothing."""
    from types import SimpleNamespace

    import pandas as pd

    from dspark_sim.vllm.profile import DECODE_ATTEMPTS, BurstTimer, VLLMGrid

    def iterations(steady: bool):
        rows = [{"ctx_requests": 1, "gen_requests": 7, "gen_tokens": 7, "elapsed_ms": 30.0}]
        if steady:
            rows += [{"ctx_requests": 0, "gen_requests": 8, "gen_tokens": 8, "elapsed_ms": 20.0}] * 3
        return pd.DataFrame(rows)

    class Scripted(BurstTimer):
        def __init__(self, answers):
            super().__init__(SimpleNamespace(log_path=tmp_path / "none.log"),
                             VLLMGrid(batches=(8,), contexts=(128,), prefill_chunks=(256,), decode_steps=4,
                                      repeats=1, warmup=0), "plain")
            self.answers, self.sent = list(answers), 0

        def burst(self, prompts, max_tokens):
            self.sent += 1
            recs = [SimpleNamespace(sent_s=0.0, finish_s=0.2)]
            return recs, iterations(self.answers.pop(0))

    late = Scripted([False, True])
    late.decode(128, [[1]] * 8, "random")
    assert late.sent == 2 and [(p.requests, p.iterations) for p in late.records] == [(8, 3)]
    never = Scripted([False] * DECODE_ATTEMPTS)
    never.decode(128, [[1]] * 8, "random")
    assert never.sent == DECODE_ATTEMPTS and never.records == []
