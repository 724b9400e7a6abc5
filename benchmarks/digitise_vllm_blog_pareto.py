"""Read the points of Fig. 3 of vLLM's DSpark adaptive-verification blog post off its SVG.

The post (vllm-project/vllm-project.github.io, `_posts/2026-08-14-dspark-adaptive-verification.md`)
gives its sweep only as a figure: `assets/figures/2026-08-14-dspark-adaptive-verification/fig3-pareto.svg`,
made by matplotlib. Each arm is a polyline (one vertex per concurrency, 1 / 16 / 32 / 64 / 128 /
256, starting at concurrency 1, labelled `c1` in the plot) whose legend entry names it; the
x axis (per-user decode speed, tok/s/user) is logarithmic and the y axis (output tok/s) linear,
both with labelled tick marks. This script maps every vertex through the ticks to data units.

    git --git-dir=<mirror> show 00d79dd:assets/figures/2026-08-14-dspark-adaptive-verification/fig3-pareto.svg > fig3.svg
    python benchmarks/digitise_vllm_blog_pareto.py fig3.svg

Commit 00d79dd (2026-08-14, the version whose text quotes 264 tok/s at concurrency 1 and 8855 vs
6267 tok/s at 256) is what dspark_sim/data/published_cases/vllm-blog-dsv4-pro-b300.case.yaml
records. Reading precision: the SVG's 6-digit coordinates, i.e. about +-1 tok/s.
"""
from __future__ import annotations

import re
import sys

import numpy as np

CONCURRENCY = (1, 16, 32, 64, 128, 256)


def _ticks(svg: str, axis: str) -> tuple[np.ndarray, np.ndarray]:
    """(pixel, value) of the labelled ticks of one axis ('x' or 'y')."""
    pix, val = [], []
    starts = [m.start() for m in re.finditer(rf'<g id="{axis}tick_\d+">', svg)]
    for a, b in zip(starts, starts[1:] + [None]):
        body = svg[a:b][:4000]                         # the tick mark, its grid line, its label
        pos = re.search(r'<use xlink:href="#m[0-9a-f]+" x="([-\d.]+)" y="([-\d.]+)"', body)
        label = re.search(r"<!-- ([^>]*?) -->", body)
        if pos and label:
            pix.append(float(pos.group(1 if axis == "x" else 2)))
            val.append(float(label.group(1).replace(",", "").replace("\u2212", "-")))
    return np.array(pix), np.array(val)


def _legend(svg: str) -> dict[str, str]:
    """Stroke colour -> arm label, from the legend's sample lines and their texts."""
    legend = svg[svg.index('<g id="legend_1">'):]
    colours = re.findall(r'<g id="line2d_\d+">\s*<path d="[^"]*" style="[^"]*stroke: (#[0-9a-f]{6})', legend)
    labels = re.findall(r'<g id="text_\d+">\s*<!-- (.*?) -->', legend)
    return dict(zip(colours, labels))


def read_pareto(svg: str) -> dict[str, list[tuple[int, float, float]]]:
    """Arm label -> [(concurrency, tok/s/user, output tok/s)] for every plotted arm."""
    xp, xv = _ticks(svg, "x")
    yp, yv = _ticks(svg, "y")
    ax, bx = np.polyfit(xp, np.log10(xv), 1)          # log axis: pixel linear in log10(value)
    ay, by = np.polyfit(yp, yv, 1)
    names = _legend(svg)
    plot = svg[:svg.index('<g id="legend_1">')]
    out = {}
    for m in re.finditer(r'<g id="line2d_\d+">\s*<path d="([^"]*)"[^>]*stroke: (#[0-9a-f]{6})', plot):
        pts = [tuple(map(float, p)) for p in re.findall(r"[ML] ([-\d.]+) ([-\d.]+)", m.group(1))]
        if m.group(2) not in names or len(pts) != len(CONCURRENCY):
            continue                                   # grid and tick lines
        out[names[m.group(2)]] = [(c, float(10 ** (ax * x + bx)), float(ay * y + by))
                                  for c, (x, y) in zip(CONCURRENCY, pts)]
    return out


def main(path: str) -> None:
    svg = open(path, encoding="utf-8").read()
    arms = read_pareto(svg)
    print("| arm | " + " | ".join(f"c = {c}" for c in CONCURRENCY) + " |")
    print("|---|" + "---|" * len(CONCURRENCY))
    for name, pts in arms.items():
        print(f"| {name} | " + " | ".join(f"{t:,.0f} tok/s ({u:.1f}/user)" for _, u, t in pts) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
