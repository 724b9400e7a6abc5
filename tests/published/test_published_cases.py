"""Published GPU cases: every shipped case loads with its provenance, runs in the default suite
with small settings, and its table regenerates identically; bad case files exit 2 (issue 41)."""
import json
from pathlib import Path

import pytest
import yaml

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.published.cases import flat_rate, load_case, shipped_cases

SMALL = ["--requests-per-user", "2", "--rounds", "1", "--bootstrap", "4"]


def test_every_shipped_case_loads_with_provenance():
    cases = shipped_cases()
    assert {"vllm-pr52362-dsv4-flash-mi350x", "dspark-paper-v4-flash-fig8", "dspark-paper-v4-pro-fig8",
            "sglang-gpt-oss-120b-h100-eagle3-dflash"} <= set(cases)
    for path in cases.values():
        case = load_case(path)
        assert case.source["url"].startswith("https://") and case.source["where"]
        assert any(a.name == case.baseline for a in case.arms)
        for arm in case.arms:
            assert arm.read and len(arm.throughput) == len(case.loads)
            if arm.policy != "ar":
                assert arm.acceptance_note["basis"] in ("published", "read", "derived", "assumed")


def test_issue_numbers_are_carried_as_published():
    case = load_case(shipped_cases()["vllm-pr52362-dsv4-flash-mi350x"])
    assert case.arm("none").throughput[-1] == 8878.57 and case.arm("fixed-k7").throughput[-1] == 7852.42
    assert case.per_gpu(case.arm("adaptive-k7"))[-1] == pytest.approx(13324.67 / 8)


def test_flat_rate_solves_the_accept_length():
    a = flat_rate(2.41, 3)
    assert 1 + a + a * a + a ** 3 == pytest.approx(2.41)


def _broken(tmp_path, edit):
    src = shipped_cases()["sglang-gpt-oss-120b-h100-eagle3-dflash"]
    data = yaml.safe_load(src.read_text())
    edit(data)
    path = tmp_path / "broken.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["source"].pop("where"), "source.where"),
    (lambda d: d["arms"][1].pop("read"), "arms[1].read"),
    (lambda d: d["arms"][2]["acceptance"].update(basis="guessed"), "eagle3.acceptance.basis"),
    (lambda d: d["output_tokens"].pop("how"), "output_tokens.how"),
    (lambda d: d["arms"][0].update(throughput=[1, 2]), "arms[0].throughput"),
])
def test_missing_provenance_names_file_line_and_field(tmp_path, edit, field):
    path = _broken(tmp_path, edit)
    with pytest.raises(InputError) as err:
        load_case(path)
    assert field in str(err.value) and err.value.file == str(path) and err.value.line


def test_bad_case_exits_2_and_writes_nothing(tmp_path, capsys):
    path = _broken(tmp_path, lambda d: d["source"].pop("url"))
    out = tmp_path / "out"
    assert main(["validate-published", str(path), "--out", str(out), *SMALL]) == 2
    assert "source.url" in capsys.readouterr().err and not out.exists()


def test_every_case_runs_and_its_table_regenerates_identically(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["validate-published", "--out", str(first), *SMALL]) == 0
    assert main(["validate-published", "--out", str(second), *SMALL]) == 0
    assert (first / "table.md").read_bytes() == (second / "table.md").read_bytes()
    table = json.loads((first / "table.json").read_text())
    cases = {r["case"] for r in table["rows"]}
    assert cases == set(shipped_cases())
    for name in cases:
        assert (first / f"{name}.png").stat().st_size > 0
    # every published speculative cell has a prediction and an error, the baseline arm its residual
    for r in table["rows"]:
        assert r["predicted_tok_s_per_gpu"] > 0
        if r["baseline"]:
            assert abs(r["throughput_error"]) < 0.25
    # the issue's cliff case: fixed K=7 below no speculation at 256 users is a published loss
    cliff = [r for r in table["rows"] if r["arm"] == "fixed-k7" and r["load"] == 256]
    assert cliff and cliff[0]["published_below_baseline"]


def test_published_cost_model_is_compared_with_the_roofline(tmp_path):
    from dspark_sim.published.cost_models import compare, load_cost_model, shipped_cost_models

    paths = shipped_cost_models()
    assert [p.name for p in paths] == ["specdecode-bench-llama31-8b-h100.cost.yaml"]
    cm = load_cost_model(paths[0])
    rows = compare(cm)
    first = rows[0]                   # batch 1 at 1,024 KV tokens, the published constants by hand
    assert first["published_step_s"] == pytest.approx(3.92645679e-08 * 1024 + 2.10103129e-05
                                                      + 5.88590713e-03 + 1.20683946e-03)
    assert first["published_draft_s"] == pytest.approx(2.37768493e-09 * 1024 + 8.41429603e-07 * 3
                                                       + 2.13526175e-03)
    assert [r["batch"] for r in rows] == [1, 8, 16, 32, 64] and all(r["roofline_step_s"] > 0 for r in rows)
    data = yaml.safe_load(paths[0].read_text())
    del data["target"]["c_kv"]
    bad = tmp_path / "bad.cost.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as err:
        load_cost_model(bad)
    assert "target.c_kv" in str(err.value) and err.value.line
