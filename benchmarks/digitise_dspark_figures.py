"""Read the fitted frontier lines of the DSpark paper's Fig. 7 and Fig. 8 off the PDF's vector paths.

The paper (DSpark_paper.pdf in github.com/deepseek-ai/DeepSpec) embeds both figures as
matplotlib-made PDF forms: the telemetry scatter is a raster image, but the fitted lines (2.6 pt
wide, MTP blue (0.537, 0.647, 0.8), DSpark green (0.608, 0.773, 0.518)), the axis ticks and their
labels are vector paths. This script inflates the two form streams (`./figs/online_service.pdf` =
Fig. 7, `./figs/online_service_tradeoff.pdf` = Fig. 8), maps each fitted polyline through its
panel's tick marks to data units and interpolates it at the loads the published case uses
(dspark_sim/data/published_cases/dspark-paper-v4-*.yaml record the printed numbers).

    python benchmarks/digitise_dspark_figures.py DSpark_paper.pdf

Reading precision: the polylines are the paper's own fitted lines, so the only error is the
linear interpolation between their vertices (spaced 5-15 pt, i.e. 3-9 requests) plus the PDF's
6-digit coordinates; the scatter around them (the raw telemetry) is not read.
"""
from __future__ import annotations

import re
import sys
import zlib

import numpy as np

BLUE = (0.537254902, 0.6470588235, 0.8)
GREEN = (0.6078431373, 0.7725490196, 0.5176470588)
FIG7 = b"./figs/online_service.pdf"
FIG8 = b"./figs/online_service_tradeoff.pdf"


def form_stream(pdf: bytes, name: bytes) -> str:
    """The inflated content stream of the PDF form whose PTEX.FileName is `name`."""
    at = pdf.index(b"/PTEX.FileName (" + name + b")")
    start = pdf.index(b"stream", at) + len(b"stream")
    start += 2 if pdf[start:start + 2] == b"\r\n" else 1
    end = pdf.index(b"endstream", start)
    return zlib.decompressobj().decompress(pdf[start:end]).decode("latin1")


def ticks(src: str) -> list[tuple[str, float, str]]:
    """(axis, position, label) of every tick mark (3.5 pt segments) followed by its label."""
    out, pending = [], None
    pat = re.compile(r"([\d.]+) ([\d.]+) m\s+([\d.]+) ([\d.]+) l\s+B|\[ \((.*?)\) \] TJ")
    for m in pat.finditer(src):
        if m.group(5) is not None:
            if pending:
                out.append((pending[0], pending[1], m.group(5)))
                pending = None
            continue
        x1, y1, x2, y2 = map(float, m.group(1, 2, 3, 4))
        if abs(abs(x1 - x2) + abs(y1 - y2) - 3.5) < 0.01:
            pending = ("x", x1) if x1 == x2 else ("y", y1)
    return out


def lines(src: str) -> list[tuple[tuple[float, ...], np.ndarray]]:
    """(stroke colour, points) of every 2.6 pt polyline."""
    out = []
    for block in re.finditer(r"2\.6\s+w\s+([\d.]+) ([\d.]+) ([\d.]+) RG /DeviceRGB cs\s+(.*?)\s+S\b", src, re.S):
        pts = re.findall(r"([\d.]+) ([\d.]+) [ml]", block.group(4))
        if len(pts) > 5:                           # legend swatches have 2-3 points
            out.append((tuple(float(v) for v in block.group(1, 2, 3)),
                        np.array([[float(a), float(b)] for a, b in pts])))
    return out


def value(label: str) -> float:
    return float(label[:-1]) * 1000 if label.endswith("k") else float(label)


def axis_map(tk: list[tuple[str, float, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares (slope, intercept) from PDF position to data value for one panel's ticks."""
    pos = np.array([p for _, p, _ in tk])
    val = np.array([value(lbl) for _, _, lbl in tk])
    return np.polyfit(pos, val, 1), pos


def panels(tk: list[tuple[str, float, str]]) -> list[dict]:
    """Group labelled ticks into panels: a new panel starts at an x tick after y ticks, or at a
    y tick whose value does not exceed the previous one (the next panel's axis)."""
    out, cur = [], {"x": [], "y": []}
    for t in tk:
        new_y = t[0] == "y" and cur["y"] and value(t[2]) <= value(cur["y"][-1][2])
        if (t[0] == "x" and cur["y"]) or new_y:
            out.append(cur)
            cur = {"x": [], "y": []}
        cur[t[0]].append(t)
    out.append(cur)
    for i, px in enumerate(out):       # Fig. 8's top row shares the bottom row's (labelled) x axis
        if not px["x"] and i + 2 < len(out):
            px["x"] = out[i + 2]["x"]
    return out


def curve(pts: np.ndarray, px: dict) -> np.ndarray:
    (ax, xpos), (ay, _) = axis_map(px["x"]), axis_map(px["y"])
    inside = (pts[:, 0] >= xpos.min() - 1) & (pts[:, 0] <= xpos.max() + 1)
    data = np.column_stack([np.polyval(ax, pts[inside, 0]), np.polyval(ay, pts[inside, 1])])
    return data[np.argsort(data[:, 0])]


def main(path: str) -> None:
    pdf = open(path, "rb").read()
    src8 = form_stream(pdf, FIG8)
    p8 = panels(ticks(src8))                     # Flash thr, Pro thr, Flash budget, Pro budget
    ln8 = lines(src8)
    loads = {"V4-Flash": [25, 50, 100, 150, 200], "V4-Pro": [25, 50, 100, 150]}
    thr_lines = [(c, p) for c, p in ln8 if c in (BLUE, GREEN)][:4]
    budget_lines = [(c, p) for c, p in ln8 if c == GREEN][2:]
    for i, model in enumerate(("V4-Flash", "V4-Pro")):
        mtp = curve(thr_lines[2 * i][1], p8[i])
        dsp = curve(thr_lines[2 * i + 1][1], p8[i])
        bud = curve(budget_lines[i][1], p8[2 + i])
        print(f"Fig. 8 {model}: concurrency -> MTP-1 tok/s/GPU, DSpark tok/s/GPU, DSpark budget")
        for c in loads[model]:
            b = np.interp(c, bud[:, 0], bud[:, 1]) if bud[0, 0] <= c <= bud[-1, 0] else float("nan")
            print(f"  {c:4d}  {np.interp(c, mtp[:, 0], mtp[:, 1]):8.0f}  "
                  f"{np.interp(c, dsp[:, 0], dsp[:, 1]):8.0f}  {b:5.2f}")
    src7 = form_stream(pdf, FIG7)
    p7 = panels(ticks(src7))
    ln7 = [(c, p) for c, p in lines(src7) if c in (BLUE, GREEN)]
    for i, model in enumerate(("V4-Flash", "V4-Pro")):
        mtp = curve(ln7[2 * i][1], p7[i])           # x = tok/s/user, y = tok/s/GPU
        dsp = curve(ln7[2 * i + 1][1], p7[i])
        print(f"Fig. 7 {model}: frontier points (tok/s/user, tok/s/GPU)")
        print("  MTP-1 :", "; ".join(f"{x:.1f}, {y:.0f}" for x, y in mtp[::3]))
        print("  DSpark:", "; ".join(f"{x:.1f}, {y:.0f}" for x, y in dsp[::3]))
        mtp_by_thr = mtp[np.argsort(mtp[:, 1])]
        for c, thr in zip(loads[model], [np.interp(c, curve(thr_lines[2 * i][1], p8[i])[:, 0],
                                                   curve(thr_lines[2 * i][1], p8[i])[:, 1])
                                         for c in loads[model]]):
            tps = np.interp(thr, mtp_by_thr[:, 1], mtp_by_thr[:, 0])
            print(f"  MTP-1 at {c} requests: {thr:.0f} tok/s/GPU -> Fig. 7 tok/s/user {tps:.1f}; "
                  f"GPUs per instance = {c} x {tps:.1f} / {thr:.0f} = {c * tps / thr:.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "DSpark_paper.pdf")
