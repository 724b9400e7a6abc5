"""Read the verify cost table of Fig. 2 of vLLM's DSpark adaptive-verification blog post off its SVG.

Fig. 2 (`assets/figures/2026-08-14-dspark-adaptive-verification/fig2-costcurve.svg`, "440
profiled steps at startup, DeepSeek-V4-Flash-0731 TP=4 on B300") has two panels; the left one,
"verify cost vs batch tokens", draws the engine's cost table (median of five timed dummy steps
per shape) as a step line over log-log axes, batch tokens 1..8192 (base 2) against 10 / 100 ms
(base 10), with the CUDA-graph limit (1,024) marked. This script maps the table's vertices
through the labelled ticks and prints one row per step of the line: batch tokens, milliseconds.

    git --git-dir=<mirror> show 00d79dd:assets/figures/2026-08-14-dspark-adaptive-verification/fig2-costcurve.svg > fig2.svg
    python benchmarks/digitise_vllm_blog_costcurve.py fig2.svg

What the eager cost of dspark_sim/data/published_cases/vllm-blog-dsv4-pro-b300.case.yaml (and
the high end of vllm-pr52362-dsv4-flash-mi350x's) is read from: the last in-graph step (20.6 ms at
1,024 tokens) against the first eager one (about 104.5 ms just above it). Reading precision: the
SVG's one-decimal pixel coordinates, about +-1% of a value.
"""
from __future__ import annotations

import math
import re
import sys


def _ticks(svg: str) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(pixel, value) of the left panel's labelled x ticks (batch tokens) and y ticks (ms)."""
    xs, ys = [], []
    for m in re.finditer(r'<text\s+x="([-\d.]+)" y="([-\d.]+)"[^>]*>([^<]*)</text>', svg):
        x, y, label = float(m.group(1)), float(m.group(2)), m.group(3).strip()
        if x > 560:                                   # the right panel (draft cost)
            continue
        if re.fullmatch(r"\d+", label) and y > 340:
            xs.append((x, float(label)))
        elif re.fullmatch(r"\d+ ms", label):
            ys.append((y - 4.0, float(label.split()[0])))   # label baseline sits 4 px below its line
    return xs, ys


def _log_map(ticks: list[tuple[float, float]]):
    (p0, v0), (p1, v1) = ticks[0], ticks[-1]
    return lambda p: math.exp(math.log(v0) + (p - p0) / (p1 - p0) * (math.log(v1) - math.log(v0)))


def read_cost_table(svg: str) -> list[tuple[float, float]]:
    """(batch tokens, ms) at each step of the left panel's cost-table line."""
    xs, ys = _ticks(svg)
    to_tokens, to_ms = _log_map(sorted(xs)), _log_map(sorted(ys))
    line = re.search(r'<polyline\s+points="([^"]+)"', svg).group(1)   # the first line: the table
    rows, last = [], None
    for pair in line.split():
        px, py = map(float, pair.split(","))
        ms = round(to_ms(py), 2)
        if ms != last:
            rows.append((round(to_tokens(px), 1), ms))
            last = ms
    return rows


def main(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        rows = read_cost_table(fh.read())
    print("batch_tokens\tms")
    for tokens, ms in rows:
        print(f"{tokens:g}\t{ms:g}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: digitise_vllm_blog_costcurve.py FIG2_SVG")
    main(sys.argv[1])
