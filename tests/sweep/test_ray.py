"""`--executor ray` on a local Ray instance gives the same table as local processes.
Ray is in the `dev` and `ray` extras; without it the test is skipped."""
import pandas as pd
import pytest
from sweepkit import REPO

from dspark_sim.sweep.run import SweepConfig, run_sweep

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'dspark-sim[ray]')")
pytestmark = pytest.mark.ray


def test_ray_executor_matches_local(tmp_path):
    cfg = SweepConfig(trace=str(REPO / "traces" / "chat-heavy-hour.jsonl"), policies=["mtp1", "dspark"],
                      points=3, load_range=(1, 8), requests_per_user=4, max_requests=200, seeds=2)
    on_ray = run_sweep(cfg, cache_dir=tmp_path / "ray", workers=2, executor="ray")
    assert not ray.is_initialized()               # the instance it started is shut down
    local = run_sweep(cfg, cache_dir=tmp_path / "local", workers=2, executor="local")
    assert on_ray.computed == local.computed == 18          # ar is always swept too
    drop = ["sim_wall_s"]
    pd.testing.assert_frame_equal(on_ray.results.drop(columns=drop), local.results.drop(columns=drop))
    assert sorted(p.name for p in (tmp_path / "ray").glob("*.json")) == \
        sorted(p.name for p in (tmp_path / "local").glob("*.json"))
