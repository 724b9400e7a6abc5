"""Must hold: notebooks/what_if.ipynb runs clean top to bottom (small settings) and writes its
plots and tables."""
import os

import nbformat
import pandas as pd
from nbclient import NotebookClient
from sweepkit import REPO


def test_what_if_notebook_runs(tmp_path, monkeypatch):
    out = tmp_path / "what_if"
    monkeypatch.setenv("WHAT_IF_SIZE", "small")
    monkeypatch.setenv("WHAT_IF_OUT", str(out))
    monkeypatch.setenv("WHAT_IF_WORKERS", "2")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(REPO / "notebooks" / "what_if.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors
    for name in ("baseline", "drafter_better", "h100", "code_heavy"):
        for plot in ("frontier.png", "concurrency.png"):
            path = out / name / plot
            assert path.stat().st_size > 10_000 and path.read_bytes()[:4] == b"\x89PNG"
    assert (out / "what_if_summary.png").stat().st_size > 10_000
    summary = pd.read_csv(out / "what_if_summary.csv")
    assert set(summary["scenario"]) == {"baseline (H200, chat)", "drafter +10%", "H100", "code-heavy"}
    assert (out / "h100-qwen3-8b-roofline.yaml").exists()
    assert os.path.getsize(out / "dspark-g5-better.acceptance.json") > 0
