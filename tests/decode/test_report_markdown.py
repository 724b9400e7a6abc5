"""decode/report.py: the shipped acceptance reports' Markdown is what `markdown` renders from their
JSON, and a profile measured --no-plain shows "n/a" in its speed columns (not "n/ax")."""
import json
from pathlib import Path

import pytest

from dspark_sim.decode.report import markdown

ACC = Path(__file__).resolve().parents[2] / "dspark_sim" / "data" / "acceptance"
STEMS = sorted(p.name[: -len(".report.json")] for p in ACC.glob("*.report.json"))


@pytest.mark.parametrize("stem", STEMS)
def test_shipped_markdown_renders_from_its_json(stem):
    d = json.loads((ACC / f"{stem}.report.json").read_text())
    text = markdown(d, d["command"], d["environment"])
    assert "n/ax" not in text
    assert text.strip() == (ACC / f"{stem}.report.md").read_text().strip()


def test_unmeasured_speed_reads_na():
    d = json.loads((ACC / "smollm2-135m-dspark-g7-t0.report.json").read_text())
    assert "plain_tokens_per_s" not in d["tasks"]["math"]          # measured --no-plain
    row = next(line for line in markdown(d, "cmd", "env").splitlines() if line.startswith("| math |"))
    assert row.split(" | ")[6:9] == ["n/a", "n/a", "n/a"]          # plain tok/s, speedup, median
