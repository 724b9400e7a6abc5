"""Must hold: an interrupted sweep resumes without recomputing the points it finished.

The sweep runs as a real `dspark-sim sweep` process, is interrupted (SIGINT, as Ctrl-C) once a
few points are in its cache (each point long enough that the signal lands before the last one, on
a loaded machine too), and is run again: the finished points come from the cache
(their files untouched), only the rest are simulated, and the table is complete."""
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
from sweepkit import REPO

ARGS = ["sweep", "--trace", str(REPO / "traces" / "chat-heavy-hour.jsonl"), "--policies",
        "mtp1,static-3,dspark", "--points", "6", "--load-range", "2,96", "--requests-per-user", "48",
        "--workers", "1", "--sla", "80"]


def test_interrupted_sweep_resumes_from_cache(tmp_path):
    out = tmp_path / "sweep"
    cache = out / "cache"
    cmd = [sys.executable, "-m", "dspark_sim"] + ARGS + ["--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if cache.exists() and len(list(cache.glob("*.json"))) >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"interrupted" in err
    assert not (out / "results.csv").exists()          # it never got to the tables
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in cache.glob("*.json")}
    total = 4 * 6                                      # ar is always swept
    assert 3 <= len(before) < total
    assert not list(cache.glob(".*.tmp"))              # no half-written cache entries

    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{total} points: {len(before)} from the cache, {total - len(before)} simulated" in done.stdout
    for name, (mtime, data) in before.items():
        path = cache / name
        assert path.stat().st_mtime_ns == mtime and path.read_bytes() == data
    assert len(list(cache.glob("*.json"))) == total
    res = pd.read_csv(out / "results.csv")
    assert len(res) == total and res["throughput_tok_s_per_gpu"].notna().all()
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["cached"] == len(before) and doc["computed"] == total - len(before)
