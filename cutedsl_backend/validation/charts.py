"""The report's charts, drawn with matplotlib and embedded as PNG data URIs (the page stays one
self-contained file): the sweep's ratio heatmap (projection x M) and its bandwidth plot (achieved
TB/s against M, ours and the peer, with the HBM line), and the compile-time histogram.

matplotlib is an optional dependency of the report only: without it each chart is replaced by a
line saying how to render it (``python -m cutedsl_backend render-report REPORT.json``).
"""

from __future__ import annotations

import base64
import io
import math
from typing import Optional

NO_MATPLOTLIB = ("<p><em>chart not drawn: matplotlib is not installed here; <code>pip install matplotlib</code> "
                 "and <code>python -m cutedsl_backend render-report report.json</code> draws it from the "
                 "report</em></p>")


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        return plt
    except ImportError:
        return None


def _embed(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    fig.clf()
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img alt="{alt}" src="data:image/png;base64,{data}">'


def ratio_heatmap(rows: list, dtype: str, gate: float) -> str:
    """Rows: projections (model, name, N x K); columns: M; colour: ours / peer (red below 1, blue
    above, centred on 1); each cell annotated with its ratio; failed or wrong cells marked."""
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    from matplotlib.colors import TwoSlopeNorm

    sel = [r for r in rows if r["dtype"] == dtype and "ratio" in r]
    if not sel:
        return ""
    ms = sorted({r["m"] for r in sel})
    labels = list(dict.fromkeys(f"{r['model']} {r['projection']} ({r['n']}x{r['k']})" for r in sel))
    grid = [[math.nan] * len(ms) for _ in labels]
    marks = []
    for r in sel:
        i, j = labels.index(f"{r['model']} {r['projection']} ({r['n']}x{r['k']})"), ms.index(r["m"])
        grid[i][j] = r["ratio"]
        if not r.get("correct", True):
            marks.append((j, i, "X"))
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * len(ms), 1.2 + 0.34 * len(labels)))
    values = [v for row in grid for v in row if not math.isnan(v)]
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(min(values), 0.5), vmax=max(max(values), 1.5))
    im = ax.imshow(grid, cmap="RdBu", norm=norm, aspect="auto")
    ax.set_xticks(range(len(ms)), [str(m) for m in ms], rotation=45)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("M (tokens)")
    ax.set_title(f"{dtype}: time ratio peer / ours (> 1: ours faster; gate {gate})")
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6.5,
                        color="black" if 0.75 < v < 1.3 else "white", fontweight="bold" if v < gate else "normal")
    for x, y, t in marks:
        ax.text(x, y, t, ha="center", va="center", color="yellow", fontsize=12, fontweight="bold")
    cbar = fig.colorbar(im, ax=ax, fraction=0.03)
    cbar.set_label("peer time / our time")
    return _embed(fig, f"{dtype} ratio heatmap")


def bandwidth_plot(rows: list, dtype: str, hbm_tbps: Optional[float]) -> str:
    """Achieved TB/s (operand bytes over device time) against M, the median over projections per M,
    ours and the peer, with the HBM peak as a line."""
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    import statistics

    sel = [r for r in rows if r["dtype"] == dtype and "ours_tbps" in r]
    if not sel:
        return ""
    ms = sorted({r["m"] for r in sel})
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for key, label, style in (("ours_tbps", "cutedsl-backend", "o-"), ("peer_tbps", "peer", "s--")):
        med = [statistics.median(r[key] for r in sel if r["m"] == m) for m in ms]
        lo = [min(r[key] for r in sel if r["m"] == m) for m in ms]
        hi = [max(r[key] for r in sel if r["m"] == m) for m in ms]
        line, = ax.plot(ms, med, style, label=f"{label} (median over projections)")
        ax.fill_between(ms, lo, hi, alpha=0.12, color=line.get_color())
    if hbm_tbps:
        ax.axhline(hbm_tbps, color="gray", linestyle=":", label=f"HBM peak {hbm_tbps} TB/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms], rotation=45, fontsize=8)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("achieved bandwidth (TB/s): A + B + C bytes / time")
    ax.set_title(f"{dtype}: operand bandwidth against M (band: min-max over projections)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return _embed(fig, f"{dtype} bandwidth")


def histogram(values: list, title: str, xlabel: str) -> str:
    plt = _pyplot()
    if plt is None:
        return NO_MATPLOTLIB
    if not values:
        return ""
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.hist(values, bins=min(20, max(5, len(values) // 4)), color="#4477aa", edgecolor="white")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("cells")
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return _embed(fig, title)
