"""`dspark-sim replay` streaming and partitioning options: the same bytes partitioned or not,
Parquet and sketched summaries, and clean exit-2 failures that write nothing."""
import json

import pandas as pd
import pytest
from test_replay_cli import TRACE

from dspark_sim.cli import main


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE)
    return path


def _run(trace, out, *extra):
    return main(["replay", str(trace), "--policy", "dspark,ar", "--hw", "constant-10ms",
                 "--replicas", "3", "--out", str(out), *extra])


def test_partitioned_replay_writes_the_same_bytes(trace, tmp_path):
    assert _run(trace, tmp_path / "one") == 0
    assert _run(trace, tmp_path / "parts", "--parallel", "inline") == 0
    for pol in ("dspark", "ar"):
        a, b = (tmp_path / d / pol for d in ("one", "parts"))
        assert (a / "requests.csv").read_bytes() == (b / "requests.csv").read_bytes()
        sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
        assert sb.pop("partitioned") == {"executor": "inline", "workers": 2}
        sa.pop("sim_wall_s"), sb.pop("sim_wall_s")
        assert sa == sb


def test_parquet_and_sketch(trace, tmp_path):
    pytest.importorskip("pyarrow")
    out = tmp_path / "pq"
    assert _run(trace, out, "--requests-format", "parquet", "--quantiles", "sketch") == 0
    frame = pd.read_parquet(out / "dspark" / "requests.parquet")
    assert len(frame) == 60 and not (out / "dspark" / "requests.csv").exists()
    summary = json.loads((out / "dspark" / "summary.json").read_text())
    assert summary["quantiles"]["method"] == "sketch"


@pytest.mark.parametrize("extra,field", [
    (["--parallel", "ray", "--router", "least-outstanding"], "router"),
    (["--parallel", "threads"], "parallel"),
    (["--requests-format", "xlsx"], "requests-format"),
    (["--quantiles", "approx"], "quantiles"),
])
def test_bad_options_exit_2_and_write_nothing(trace, tmp_path, capsys, extra, field):
    out = tmp_path / "bad"
    assert _run(trace, out, *extra) == 2
    assert f"field '{field}'" in capsys.readouterr().err
    assert not out.exists()


def test_staged_outputs_reach_the_directory_only_on_success(tmp_path):
    from dspark_sim.fileio import staged_dir
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with staged_dir(out) as stage:
            (stage / "a").mkdir()
            (stage / "a" / "requests.csv").write_text("x")
            raise RuntimeError("second policy failed")
    assert list(tmp_path.iterdir()) == []
    with staged_dir(out) as stage:
        (stage / "a").mkdir()
        (stage / "a" / "requests.csv").write_text("y")
    assert (out / "a" / "requests.csv").read_text() == "y" and len(list(tmp_path.iterdir())) == 1
