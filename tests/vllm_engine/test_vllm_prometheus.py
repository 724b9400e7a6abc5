"""Prometheus text parsing, vLLM's spec-decode counters, scrape differences and Wilson CIs."""
from pathlib import Path

import pytest

from dspark_sim.errors import InputError
from dspark_sim.vllm.prometheus import (PER_POS, difference, parse_exposition, read_scrape,
                                        scrape_counts, spec_series)
from dspark_sim.vllm.spec_counts import SpecDecodeCounts, wilson_interval

DATA = Path(__file__).parent / "data"
AFTER, BEFORE = DATA / "metrics_after.txt", DATA / "metrics_before.txt"


def test_parses_a_real_exposition():
    samples = read_scrape(AFTER)
    by = {s.series(): s for s in samples}
    assert by['python_info{implementation="CPython",major="3",minor="11",patchlevel="7",'
              'version="3.11.7"}'].value == 1.0
    inf = by['vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="smol"}']
    assert inf.value == 3.0 and inf.line == AFTER.read_text().splitlines().index(
        'vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="smol"} 3.0') + 1
    drafts = [s for s in samples if s.name == "vllm:spec_decode_num_drafts_total"]
    assert sorted((s.labels["engine"], s.value) for s in drafts) == [("0", 413.0), ("1", 207.0)]
    per_pos = [s for s in samples if s.name == PER_POS]
    assert len(per_pos) == 6 and {s.labels["position"] for s in per_pos} == {"0", "1", "2"}


def test_escapes_values_timestamps_and_eof():
    text = ('# HELP m A "quoted" help\n# TYPE m counter\n'
            'm_total{path="C:\\\\x",msg="say \\"hi\\"\\n",} 3 1700000000000\n'
            'g NaN\nh{} -Inf\nk +1.5e3\n# EOF\n')
    s = parse_exposition(text, "t.txt")
    assert s[0].labels == {"path": "C:\\x", "msg": 'say "hi"\n'} and s[0].value == 3.0
    assert s[1].value != s[1].value and s[2].value == float("-inf") and s[3].value == 1500.0


@pytest.mark.parametrize("text, line", [
    ("a 1\nb{x=\"1\"} 2", 2),                      # no final newline: truncated
    ("a 1\nb{x=\"1\" 2\n", 2),                     # unclosed labels
    ("a 1\nb{x=1} 2\n", 2),                        # unquoted label value
    ("a 1\nb{x=\"1\",x=\"2\"} 2\n", 2),            # label twice
    ("a 1\nb\n", 2),                               # no value
    ("a 1\nb 1_000\n", 2),                         # Python-only float syntax
    ("a 1\nb 1 2 3\n", 2),                         # too many fields
    ("a 1\nb 1 1.5\n", 2),                         # timestamp not an integer
    ("a 1\n9b 1\n", 2),                            # bad metric name
    ("a 1\nb{x=\"\\t\"} 1\n", 2),                  # escape the format does not allow
    ("# TYPE a countr\na 1\n", 1),                 # unknown type
    ("a 1\na 2\n", 2),                             # duplicate series
    ("a 1\n# EOF\nb 2\n", 3),                      # content after EOF
])
def test_malformed_lines_name_their_line(text, line):
    with pytest.raises(InputError) as err:
        parse_exposition(text, "m.txt")
    assert err.value.file == "m.txt" and err.value.line == line


def test_empty_exposition_is_an_error():
    with pytest.raises(InputError, match="no samples"):
        parse_exposition("# HELP a x\n\n", "e.txt")


def test_counts_sum_engines_and_difference_scrapes():
    total, model = scrape_counts(AFTER)
    assert model == "smol"
    assert (total.num_drafts, total.num_draft_tokens, total.num_accepted_tokens) == (620, 1816, 772)
    assert total.accepted_per_pos == [371, 250, 151]
    run, _ = scrape_counts(AFTER, BEFORE)
    assert (run.num_drafts, run.num_draft_tokens, run.num_accepted_tokens) == (600, 1756, 767)
    assert run.accepted_per_pos == [367, 249, 151]
    assert run.mean_acceptance_length == pytest.approx(1 + 767 / 600)


def test_conditional_acceptance_and_its_mean_length():
    run, _ = scrape_counts(AFTER, BEFORE)
    pos = run.positions()
    assert [(p.accepted, p.reached) for p in pos] == [(367, 600), (249, 367), (151, 249)]
    assert [p.rate for p in pos] == pytest.approx([367 / 600, 249 / 367, 151 / 249])
    for p in pos:
        assert p.ci95[0] < p.rate < p.ci95[1]
    # the parametric profile's tau is vLLM's mean acceptance length, exactly
    assert run.parametric().mean_tau(3) == pytest.approx(run.mean_acceptance_length, abs=1e-12)


@pytest.mark.parametrize("k, n, lo, hi", [(5, 10, 0.2366, 0.7634), (0, 10, 0.0, 0.2775),
                                          (10, 10, 0.7225, 1.0), (0, 0, 0.0, 1.0)])
def test_wilson_interval_reference_values(k, n, lo, hi):
    assert wilson_interval(k, n) == pytest.approx((lo, hi), abs=1e-4)


def test_counts_from_steps_match_vllm_increments():
    c = SpecDecodeCounts(3)
    for drafted, accepted in [(3, 2), (3, 0), (2, 2), (3, 3)]:
        c.observe(drafted, accepted)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (4, 11, 7)
    assert c.accepted_per_pos == [3, 3, 1]
    assert c.draft_fill == pytest.approx(11 / 12)


TWO_MODELS = """\
vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="a"} 20
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="a"} 5
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a",position="0"} 4
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="a",position="1"} 1
vllm:spec_decode_num_drafts_total{engine="0",model_name="b"} 10
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="b"} 20
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="b"} 2
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="b",position="0"} 2
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="b",position="1"} 0
"""


def test_model_name_selects_the_series(tmp_path):
    path = tmp_path / "m.txt"
    path.write_text(TWO_MODELS)
    with pytest.raises(InputError, match="several models"):
        scrape_counts(path)
    counts, model = scrape_counts(path, model_name="b")
    assert model == "b" and counts.accepted_per_pos == [2, 0]
    with pytest.raises(InputError, match="found: a, b"):
        scrape_counts(path, model_name="c")


def test_decreasing_counter_names_the_after_line():
    after, _ = spec_series(read_scrape(BEFORE))
    before, _ = spec_series(read_scrape(AFTER))
    with pytest.raises(InputError, match="decreased") as err:
        difference(after, before)
    assert err.value.file == str(BEFORE) and err.value.line is not None


def test_series_split_by_an_unknown_label_is_refused(tmp_path):
    path = tmp_path / "m.txt"
    extra = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="a",pid="7"} 1\n'
    path.write_text(TWO_MODELS + extra)
    with pytest.raises(InputError, match="second series") as err:
        scrape_counts(path, model_name="a")
    assert err.value.line == 11
