"""`dspark-sim acceptance import vllm`: profiles that load back, and a corpus of bad inputs."""
import json
import re
from pathlib import Path

import numpy as np
import pytest
from tests.strict_json import register_input

from dspark_sim.cli import main
from dspark_sim.profiles import AcceptanceProfile

DATA = Path(__file__).parent / "data"
AFTER, BEFORE = DATA / "metrics_after.txt", DATA / "metrics_before.txt"
AIPERF, RESPONSES = DATA / "aiperf_profile_export.jsonl", DATA / "vllm_responses.jsonl"


def run(*args):
    return main(["acceptance", "import", "vllm", *map(str, args)])


def test_prometheus_import_gives_vllms_mean_acceptance_length(tmp_path, capsys):
    out = tmp_path / "ngram.acceptance.json"
    assert run(AFTER, "--before", BEFORE, "--out", out, "--task", "chat", "--drafter-kind", "ngram") == 0
    printed = capsys.readouterr().out
    assert "2.278" in printed and "0.612 [0.572, 0.650]" in printed
    prof = AcceptanceProfile.load(out)
    assert prof.name == "ngram" and prof.gamma == 3 and prof.target == "smol"
    assert prof.drafter_kind == "ngram" and prof.default_task == "chat"
    np.testing.assert_allclose(prof.tasks["chat"].position_accept, [367 / 600, 249 / 367, 151 / 249])
    kept = prof.extra["vllm"]["tasks"]["chat"]
    assert kept["num_drafts"] == 600 and len(kept["position_accept_ci95"]) == 3
    assert prof.tasks["chat"].mean_tau(3) == pytest.approx(1 + 767 / 600)


def test_several_scrapes_pair_with_their_before_scrapes(tmp_path, capsys):
    out = tmp_path / "two.json"
    assert run(AFTER, AFTER, "--before", BEFORE, "--before", BEFORE, "--out", out) == 0
    kept = AcceptanceProfile.load(out).extra["vllm"]["tasks"]["default"]
    assert kept["num_drafts"] == 1200 and kept["accepted_per_pos"] == [734, 498, 302]
    assert "no --before" not in capsys.readouterr().out


def test_records_import_is_empirical_per_task_with_drafted(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert run(RESPONSES, "--out", out, "--name", "resp") == 0
    printed = capsys.readouterr().out
    assert re.search(r"math\s*│\s*2\s*│\s*7\s*│\s*6\s*│\s*3\.000", printed)   # 1 + 12 / 6
    prof = AcceptanceProfile.load(out)
    assert set(prof.tasks) == {"math", "code"} and prof.tasks["math"].kind == "empirical"
    math = prof.tasks["math"].requests
    assert math[0].accepted.tolist() == [2, 0, 0, 3, 1] and math[0].drafted.tolist() == [3, 3, 0, 3, 3]
    assert math[1].drafted is None                     # every step drafted gamma: left out
    assert prof.extra["vllm"]["tasks"]["math"]["mean_acceptance_length"] == pytest.approx(1 + 12 / 6)


def test_records_as_parametric(tmp_path):
    out = tmp_path / "p.json"
    assert run(AIPERF, "--out", out, "--kind", "parametric", "--task", "t") == 0
    prof = AcceptanceProfile.load(out)
    np.testing.assert_allclose(prof.tasks["t"].position_accept, [1 / 13, 0.0, 0.0])
    assert prof.tasks["t"].mean_tau(3) == pytest.approx(1 + 1 / 13)


def test_empirical_from_a_scrape_is_refused(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert run(AFTER, "--out", out, "--kind", "empirical") == 2
    assert "field 'kind'" in capsys.readouterr().err and not out.exists()


# --- bad inputs: exit 2, FILE:LINE and field in the message, nothing written -------------------

def _lines(path):
    return path.read_text().splitlines(keepends=True)


def _prom_edit(old, new):
    return lambda: AFTER.read_text().replace(old, new, 1)


def _record_edit(path, line, edit):
    def make():
        rows = [json.loads(t) for t in _lines(path)]
        edit(rows[line - 1])
        return "".join(json.dumps(r) + "\n" for r in rows)
    return make


def _spec(rec):
    return rec.get("spec_decode_acceptance") or rec["metrics"]["speculative_decoding"]


DRAFTS0 = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="smol"} 413.0'
AFTER_LINE = {s.strip(): i + 1 for i, s in enumerate(_lines(AFTER))}

CORPUS = {
    "truncated scrape": ("m.txt", lambda: AFTER.read_text()[:-9], len(_lines(AFTER)), None),
    "negative counter": ("m.txt", _prom_edit(DRAFTS0, DRAFTS0.replace("413.0", "-5")),
                         AFTER_LINE[DRAFTS0], "vllm:spec_decode_num_drafts_total"),
    "fractional counter": ("m.txt", _prom_edit(DRAFTS0, DRAFTS0.replace("413.0", "41.5")),
                           AFTER_LINE[DRAFTS0], "vllm:spec_decode_num_drafts_total"),
    "per-position sum off": ("m.txt", _prom_edit(
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smol"} 531.0',
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smol"} 530.0'),
        None, "vllm:spec_decode_num_accepted_tokens_total"),
    "bad sample line": ("m.txt", _prom_edit(DRAFTS0, DRAFTS0.replace("{", "{engine=")),
                        AFTER_LINE[DRAFTS0], "vllm:spec_decode_num_drafts_total"),
    "engine label lost": ("m.txt", _prom_edit(DRAFTS0, DRAFTS0.replace("{", "{x")),
                          AFTER_LINE[DRAFTS0], "vllm:spec_decode_num_accepted_tokens_per_pos_total"),
    "no spec counters": ("m.txt", lambda: "".join(
        t for t in _lines(AFTER) if "spec_decode" not in t), None, None),
    "empty file": ("e.jsonl", lambda: "\n\n", None, None),
    "bad JSON": ("a.jsonl", lambda: "".join(_lines(AIPERF)[:2]) + _lines(AIPERF)[2][:150], 3, None),
    "not an object": ("a.jsonl", lambda: "".join(_lines(AIPERF)[:1]) + "[1, 2]\n", 2, None),
    "unknown record": ("a.jsonl", lambda: '{"id": 1}\n', 1, None),
    "missing per_step_drafted": ("a.jsonl", _record_edit(
        AIPERF, 2, lambda r: _spec(r).pop("per_step_drafted")), 2,
        "spec_decode_acceptance.per_step_drafted"),
    "summary level": ("r.jsonl", _record_edit(RESPONSES, 1, lambda r: (
        _spec(r).pop("per_step_accepted"), _spec(r).pop("per_step_drafted"))), 1,
        "metrics.speculative_decoding.per_step_accepted"),
    "missing completion tokens": ("r.jsonl", _record_edit(
        RESPONSES, 2, lambda r: r["usage"].pop("completion_tokens")), 2, "usage.completion_tokens"),
    "no spec metrics": ("r.jsonl", _record_edit(RESPONSES, 3, lambda r: r.pop("metrics")), 3,
                        "metrics.speculative_decoding"),
    "accepted > drafted": ("r.jsonl", _record_edit(RESPONSES, 2, lambda r: _spec(r).update(
        per_step_drafted=[0, 3], num_draft_tokens=3)), 2,
        "metrics.speculative_decoding.per_step_accepted[0]"),
    "negative accepted": ("a.jsonl", _record_edit(AIPERF, 6, lambda r: _spec(r).update(
        per_step_accepted=[0, 0, 0, 1, 0, -1])), 6,
        "spec_decode_acceptance.per_step_accepted[5]"),
    "steps disagree": ("a.jsonl", _record_edit(AIPERF, 1, lambda r: _spec(r).update(num_spec_steps=3)),
                       1, "spec_decode_acceptance.num_spec_steps"),
    "totals disagree": ("r.jsonl", _record_edit(RESPONSES, 1, lambda r: _spec(r).update(
        num_draft_tokens=11)), 1, "metrics.speculative_decoding.num_draft_tokens"),
    "tokens do not add up": ("r.jsonl", _record_edit(RESPONSES, 1, lambda r: r["usage"].update(
        completion_tokens=5)), 1, "usage.completion_tokens"),
    "gamma differs": ("a.jsonl", _record_edit(AIPERF, 4, lambda r: _spec(r).update(num_spec_tokens=4)),
                      4, "spec_decode_acceptance.num_spec_tokens"),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_input_exits_2_names_file_line_field_writes_nothing(tmp_path, capsys, case):
    name, make, line, field = CORPUS[case]
    src = tmp_path / name
    src.write_text(make())
    register_input(src)                        # bad input on purpose (tests/strict_json.py)
    out = tmp_path / "out.acceptance.json"
    assert run(src, "--out", out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {src}"), err
    if line is not None:
        assert err.startswith(f"error: {src}:{line}: "), err
    if field is not None:
        assert f"field '{field}" in err, err
    assert "Traceback" not in err and not out.exists()
    assert list(tmp_path.iterdir()) == [src]            # no temporary file left behind either


def test_decreasing_counters_between_scrapes(tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(BEFORE, "--before", AFTER, "--out", out) == 2
    err = capsys.readouterr().err
    assert re.match(rf"error: {re.escape(str(BEFORE))}:\d+: field 'vllm:spec_decode_", err)
    assert "decreased" in err and not out.exists()


@pytest.mark.parametrize("args, field", [
    (["--task", "a", "--task-field", "x"], "task"),
    (["--kind", "both"], "kind"),
    (["--before", str(BEFORE), "--before", str(BEFORE)], "before"),
    (["--task-field", "metadata.session"], "task-field"),
])
def test_bad_options(tmp_path, capsys, args, field):
    out = tmp_path / "o.json"
    assert run(AFTER, "--out", out, *args) == 2
    assert f"field '{field}'" in capsys.readouterr().err and not out.exists()


def test_mixed_inputs_are_refused(tmp_path, capsys):
    out = tmp_path / "o.json"
    assert run(AFTER, AIPERF, "--out", out) == 2
    assert "mixes" in capsys.readouterr().err and not out.exists()
