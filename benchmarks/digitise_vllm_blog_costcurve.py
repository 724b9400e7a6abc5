"""Read the verify cost table of Fig. 2 of vLLM's DSpark adaptive-verification blog post off its SVG.

Fig. 2 (`assets/figures/2026-08-14-dspark-adaptive-verification/fig2-costcurve.svg`, "440
profiled steps at startup, DeepSeek-V4-Flash-0731 TP=4 on B300") has two panels; the left one,
"verify cost vs batch tokens", draws the engine's cost table (median of five timed dummy steps
per shape) as a step line over log-log axes, batch tokens 1..8192 (base 2) against 10 / 100 ms
(base 10), with the CUDA-graph limit (1,024) marked. This script maps the table's vertices
through the labelled ticks and prints one row per step of the line: batch tokens, milliseconds.

    git --git-dir=<mirror> show 00d79dd:assets/figures/2026-08-14-dspark-adaptive-verification/fig2-costcurve.svg > fig2.svg
    python benchmarks/digitise_vllm_blog_costcurve.py fig2.svg
    python benchmarks/digitise_vllm_blog_costcurve.py fig2.svg --draft-share 3/43:7

With `--draft-share D/L:G` it also reads the right panel, "draft cost vs requests (graph replays
only)" (the drafter's own cost table, linear axes 0..256 requests against 2 / 4 / 6 ms), and sets
each step of it beside the layer-share price `hardware/draft_cost.py` gives a block drafter of D
layers against a target of L: D / L of the left panel's verify cost at R x G tokens, read inside
the captured region only (R x G <= 1,024 tokens; above it the left panel is the eager path,
which the drafter's own graphs do not take). The ratio measured / priced is how far the bare
layer-share pricing is off for this drafter on this engine and GPU: `SHAPE_PRICING_BAND` and
(with SpecDecode-Bench's EAGLE draft) `LAYER_SHARE_OVERHEAD` in hardware/draft_cost.py are read
from it.

What the eager cost of dspark_sim/data/published_cases/vllm-blog-dsv4-pro-b300.case.yaml (and
the high end of vllm-pr52362-dsv4-flash-mi350x's) is read from: the last in-graph step (20.6 ms at
1,024 tokens) against the first eager one (about 104.5 ms just above it). Reading precision: the
SVG's one-decimal pixel coordinates, about +-1% of a value.
"""
from __future__ import annotations

import math
import re
import sys


PANEL_SPLIT_X = 560.0                                 # left panel (verify cost) | right (draft cost)


def _ticks(svg: str, right: bool = False) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(pixel, value) of a panel's labelled x ticks (batch tokens, or requests on the right) and y
    ticks (ms)."""
    xs, ys = [], []
    for m in re.finditer(r'<text\s+x="([-\d.]+)" y="([-\d.]+)"[^>]*>([^<]*)</text>', svg):
        x, y, label = float(m.group(1)), float(m.group(2)), m.group(3).strip()
        if (x > PANEL_SPLIT_X) != right:
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


def read_draft_table(svg: str) -> list[tuple[float, float]]:
    """(requests, ms) at each step of the right panel's draft-cost line (linear axes)."""
    xs, ys = _ticks(svg, right=True)
    (x0, r0), (x1, r1) = min(xs), max(xs)
    (y0, m0), (y1, m1) = min(ys), max(ys)
    lines = re.findall(r'<polyline\s+points="([^"]+)"', svg)
    line = next(pts for pts in lines if float(pts.split()[0].split(",")[0]) > PANEL_SPLIT_X)
    rows: list[tuple[float, float]] = []
    for pair in line.split():
        px, py = map(float, pair.split(","))
        req = round(r0 + (px - x0) / (x1 - x0) * (r1 - r0))
        ms = round(m0 + (py - y0) / (y1 - y0) * (m1 - m0), 2)
        if rows and rows[-1][0] == req:
            rows[-1] = (req, ms)                # a vertical riser: the step's value is its top
        else:
            rows.append((req, ms))
    return rows


def _table_at(rows: list[tuple[float, float]], tokens: float) -> float:
    """The left panel's staircase at `tokens` (the step at or below it)."""
    return [ms for t, ms in rows if t <= tokens + 0.5][-1]


def _parse_share(text: str):
    """'D/L:G' -> the product's own LayerShare of a block drafter (bare layers, overhead 1), or
    exit 2 naming what was expected."""
    from dspark_sim.errors import InputError
    from dspark_sim.hardware.draft_cost import parse_layer_shares
    why = ""
    if ":" in text:                                   # a block drafter's width is required here
        try:
            return parse_layer_shares(f"dspark={text}", overhead=1.0)["dspark"]
        except InputError as exc:
            why = f" ({exc})"
    print(f"--draft-share: expected D/L:G (drafter layers / target layers : tokens per request), "
          f"got {text!r}{why}", file=sys.stderr)
    sys.exit(2)


def main(path: str, draft_share: str | None) -> None:
    with open(path, encoding="utf-8") as fh:
        svg = fh.read()
    rows = read_cost_table(svg)
    print("batch_tokens\tms")
    for tokens, ms in rows:
        print(f"{tokens:g}\t{ms:g}")
    if not draft_share:
        return
    share = _parse_share(draft_share)
    frac, gamma = draft_share.split(":")[0], share.gamma
    print(f"\nrequests\tdraft_ms\tverify_ms_at_{gamma}R\tpriced_ms ({frac} of it)\tmeasured/priced")
    ratios = []
    for req, ms in read_draft_table(svg):
        tokens = req * gamma
        if req < 1 or tokens > 1024:
            continue
        verify = _table_at(rows, tokens)
        priced = share.draft_layers / share.target_layers * verify
        ratios.append(ms / priced)
        print(f"{req:g}\t{ms:g}\t{verify:g}\t{priced:.3f}\t{ms / priced:.2f}")
    print(f"measured / priced over {len(ratios)} steps: {min(ratios):.2f} .. {max(ratios):.2f}, "
          f"median {sorted(ratios)[len(ratios) // 2]:.2f}")


if __name__ == "__main__":
    args = sys.argv[1:]
    share = None
    if len(args) == 3 and args[1] == "--draft-share":
        share = args[2]
    elif len(args) != 1:
        sys.exit("usage: digitise_vllm_blog_costcurve.py FIG2_SVG [--draft-share D/L:G]")
    main(args[0], share)
