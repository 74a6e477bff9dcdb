"""Report writers: JSON (schema in docs/report-schema.md), JUnit XML and a Markdown summary."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from html import escape
from pathlib import Path
from xml.sax.saxutils import quoteattr


def write_reports(report: dict, out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    paths = {
        "json": out_dir / "report.json",
        "junit": out_dir / "junit.xml",
        "markdown": out_dir / "summary.md",
        "budgets_proposal": out_dir / "budgets.proposed.json",
        "html": out_dir / "report.html",
    }
    paths["json"].write_text(json.dumps(report, indent=1, default=str))
    paths["junit"].write_text(junit(report))
    paths["markdown"].write_text(markdown(report))
    paths["html"].write_text(html(report))
    paths["budgets_proposal"].write_text(
        json.dumps(report["summary"]["budgets"].get("proposed", {}), indent=2) + "\n")
    return paths


def junit(report: dict) -> str:
    res = report["results"]
    c = Counter(r["status"] for r in res)
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuite name="cutedsl_backend.validate" tests="{len(res)}" failures="{c["fail"]}" '
             f'skipped="{c["skip"]}" time="{report["summary"]["seconds"]}">']
    for r in res:
        t = r.get("compile_seconds", 0) or 0
        lines.append(f'  <testcase classname={quoteattr(r["gate"])} name={quoteattr(r["id"])} time="{t}">')
        if r["status"] == "fail":
            lines.append(f'    <failure message={quoteattr(r.get("reason", ""))}/>')
        elif r["status"] == "skip":
            lines.append(f'    <skipped message={quoteattr(r.get("reason", ""))}/>')
        lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"


def markdown(report: dict) -> str:
    s = report["summary"]
    env = report["environment"]
    res = report["results"]
    c = Counter(r["status"] for r in res)
    out = [f"# cutedsl-backend validation: {s['run_id']}", "",
           f"**{'PASS' if s['ok'] else 'FAIL'}**: {c['pass']} passed, {c['fail']} failed, "
           f"{c['skip']} skipped ({s['seconds']} s, tag `{s['tag']}`)", "",
           f"Machine: {env.get('gpu', 'no GPU')}; torch {env.get('torch')}; "
           f"nvidia-cutlass-dsl {env.get('nvidia_cutlass_dsl')}; python {env.get('python')}", ""]
    if s.get("gpu_required_but_missing"):
        out += ["**GPU required but not present: no GPU cell ran.**", ""]
    out += ["## Cells by gate", "", "| arch | gate | pass | fail | skip |", "|---|---|---|---|---|"]
    agg = defaultdict(Counter)
    for r in res:
        agg[(r["cell"].get("arch", "?"), r["gate"])][r["status"]] += 1
    for (arch, gate), cc in sorted(agg.items()):
        out.append(f"| {arch} | {gate} | {cc['pass']} | {cc['fail']} | {cc['skip']} |")
    out += ["", "## Skips by reason", ""]
    if s["skips_by_reason"]:
        out += ["| reason | cells |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in sorted(s["skips_by_reason"].items(), key=lambda x: -x[1])]
    else:
        out.append("none")
    fails = [r for r in res if r["status"] == "fail"]
    out += ["", "## Failures", ""]
    out += [f"- `{r['id']}` ({r['gate']}): {r.get('reason', '')}" for r in fails] or ["none"]
    b = s["budgets"]
    out += ["", "## Compile-time budgets", "",
            f"Gate: {'ok' if b['ok'] else 'FAILED'}", "",
            "| config | cells | median s | max s | budget (median / cell) |", "|---|---|---|---|---|"]
    for cfg, v in b["configs"].items():
        out.append(f"| {cfg} | {v['n']} | {v['median_s']} | {v['max_s']} | {v['budget_median_s']} / "
                   f"{v['budget_cell_max_s']} |")
    if b.get("warm_load"):
        w = b["warm_load"]
        if w.get("status") == "skip":
            out += ["", f"Warm disk-cache load: {w['reason']}"]
        else:
            out += ["", f"Warm disk-cache load: {w['seconds']:.3f} s (budget {w['budget_s']} s, "
                        f"hit: {w['cache_hit'] or 'none'}) {'ok' if w['ok'] else 'FAILED'}; first use in a "
                        f"fresh process, DSL import included: {w.get('first_use_seconds', 0):.2f} s"]
    for x in b.get("regressions", []):
        out.append(f"- regression: {x}")
    for x in b.get("improvements", []):
        out.append(f"- improvement: {x}")
    if report.get("perf"):
        p = report["perf"]
        out += ["", "## Performance (same run, vs the peer)", "",
                "| dtype | shape | ours TFLOP/s | peer TFLOP/s | ratio | baseline min | status |",
                "|---|---|---|---|---|---|---|"]
        for r in p["results"]:
            out.append(f"| {r['dtype']} | {r['shape']} | {r['ours_tflops']:.1f} | {r['peer_tflops']:.1f} | "
                       f"{r['ratio']:.3f} | {r['min_ratio']} | {r['status']} |")
    if report.get("mutants"):
        mu = report["mutants"]
        out += ["", f"## Fault injection: {sum(m['caught'] for m in mu)}/{len(mu)} mutants caught", "",
                "| mutant | kind | caught | by |", "|---|---|---|---|"]
        out += [f"| {m['mutant']} | {m['kind']} | {'yes' if m['caught'] else 'NO'} | {m['by']} |" for m in mu]
    comp = [r for r in res if r["gate"] == "compile" and r.get("sass")]
    if comp:
        out += ["", "## SASS summary (compile gate)", "",
                "| cell | s | regs | local B | HGMMA | UTMALDG | UTMASTG |", "|---|---|---|---|---|---|---|"]
        for r in comp[:40]:
            out.append(f"| `{r['id']}` | {r['compile_seconds']} | {r['resources']['registers']} | "
                       f"{r['resources']['local_bytes']} | {r['sass'].get('HGMMA')} | "
                       f"{r['sass'].get('UTMALDG')} | {r['sass'].get('UTMASTG')} |")
        if len(comp) > 40:
            out.append(f"| ... {len(comp) - 40} more in report.json | | | | | | |")
    return "\n".join(out) + "\n"


def merge_reports(out_dir, report_paths) -> int:
    """One report from several (a release: one per GPU kind); fails if any part failed."""
    from collections import Counter

    parts = [json.loads(Path(p).read_text()) for p in report_paths]
    results = [r | {"run": p["summary"]["run_id"]} for p in parts for r in p["results"]]
    skips = Counter(r["reason"] for r in results if r["status"] == "skip")
    budgets = {"ok": all(p["summary"]["budgets"]["ok"] for p in parts), "configs": {},
               "regressions": [x for p in parts for x in p["summary"]["budgets"].get("regressions", [])],
               "improvements": []}
    for p in parts:
        for k, v in p["summary"]["budgets"]["configs"].items():
            budgets["configs"][f"{p['summary']['run_id']}:{k}"] = v
    ok = all(p["summary"]["ok"] for p in parts)
    merged = {
        "schema": 1,
        "summary": {"run_id": "merged-" + "+".join(p["summary"]["run_id"] for p in parts),
                    "tag": ",".join(sorted({p["summary"]["tag"] for p in parts})),
                    "seconds": round(sum(p["summary"]["seconds"] for p in parts), 1),
                    "counts": dict(Counter(r["status"] for r in results)), "skips_by_reason": dict(skips),
                    "budgets": budgets, "ok": ok, "parts": [p["summary"] for p in parts]},
        "environment": {"parts": [p["environment"] for p in parts],
                        "gpu": ", ".join(str(p["environment"].get("gpu", "no GPU")) for p in parts)},
        "results": results,
        "perf": None,
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_reports(merged, out)
    print((out / "summary.md").read_text())
    return 0 if ok else 1


# ----------------------------------------------------------------------------- HTML

_COLORS = {"pass": "#3c9a5f", "fail": "#c0392b", "skip": "#9aa0a6"}


def _esc(x) -> str:
    return escape(str(x))


def _bar_chart(title: str, groups: list, series: list, unit: str) -> str:
    """Grouped bars as inline SVG: groups = [(label, [value per series])]."""
    if not groups:
        return f"<p><em>{_esc(title)}: nothing measured in this run.</em></p>"
    w_bar, gap, h = 18, 14, 220
    vmax = max((v for _, vals in groups for v in vals if v is not None), default=1.0) or 1.0
    width = 60 + len(groups) * (len(series) * w_bar + gap)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"]
    parts = [f'<svg width="{width}" height="{h + 90}" role="img" aria-label="{_esc(title)}">',
             f'<text x="4" y="14" font-size="13" font-weight="bold">{_esc(title)} ({_esc(unit)})</text>']
    x = 50
    for label, vals in groups:
        for i, v in enumerate(vals):
            if v is None:
                continue
            bh = h * v / vmax
            parts.append(f'<rect x="{x + i * w_bar}" y="{24 + h - bh:.1f}" width="{w_bar - 2}" height="{bh:.1f}" '
                         f'fill="{palette[i % 4]}"><title>{_esc(series[i])}: {v:.1f} {_esc(unit)}</title></rect>')
        parts.append(f'<text x="{x}" y="{h + 40}" font-size="10" transform="rotate(30 {x},{h + 40})">'
                     f'{_esc(label)}</text>')
        x += len(series) * w_bar + gap
    for i, s in enumerate(series):
        parts.append(f'<rect x="{50 + i * 150}" y="{h + 75}" width="10" height="10" fill="{palette[i % 4]}"/>'
                     f'<text x="{64 + i * 150}" y="{h + 84}" font-size="11">{_esc(s)}</text>')
    parts.append(f'<text x="4" y="34" font-size="10">{vmax:.0f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _histogram(title: str, values: list, unit: str, bins: int = 12) -> str:
    if not values:
        return f"<p><em>{_esc(title)}: nothing measured in this run.</em></p>"
    lo, hi = min(values), max(values)
    step = (hi - lo) / bins or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / step))] += 1
    groups = [(f"{lo + i * step:.1f}-{lo + (i + 1) * step:.1f}", [c]) for i, c in enumerate(counts)]
    return _bar_chart(title, groups, ["cells"], unit)


def html(report: dict) -> str:
    """A self-contained page: summary, pass/skip/fail heatmap, compile times, performance."""
    s = report["summary"]
    res = report["results"]
    c = Counter(r["status"] for r in res)
    # heatmap: rows arch/dtype->out, columns epilogue; a cell shows its worst status over gates
    rank = {"fail": 2, "pass": 1, "skip": 0}
    grid: dict = defaultdict(lambda: defaultdict(Counter))
    cols = []
    for r in res:
        cell = r.get("cell", {})
        if "dtype" not in cell:
            continue
        # perf cells name no output dtype or epilogue: their own column, by gate
        row = f"{cell['arch']} {cell['dtype']}->{cell.get('out_dtype', cell['dtype'])}"
        col = cell.get("epilogue", "none") if r["gate"] in ("compile", "gpu") else r["gate"]
        if col not in cols:
            cols.append(col)
        grid[row][col][r["status"]] += 1
    heat = ["<table class='heat'><tr><th>arch dtype->out</th>" + "".join(f"<th>{_esc(x)}</th>" for x in cols)
            + "</tr>"]
    for row in sorted(grid):
        heat.append(f"<tr><th>{_esc(row)}</th>")
        for col in cols:
            cnt = grid[row].get(col)
            if not cnt:
                heat.append("<td></td>")
                continue
            worst = max(cnt, key=lambda k: rank[k])
            label = " ".join(f"{k}:{v}" for k, v in sorted(cnt.items()))
            heat.append(f"<td style='background:{_COLORS[worst]};color:white' title='{_esc(label)}'>"
                        f"{_esc(label)}</td>")
        heat.append("</tr>")
    heat.append("</table>")
    for r in res:  # unbuilt archs and other rows without a dtype
        if r.get("status") == "skip" and "dtype" not in r.get("cell", {}):
            heat.append(f"<p>{_esc(r['id'])} ({_esc(r['gate'])}): skipped: {_esc(r['reason'])}</p>")
    compile_secs = [r["compile_seconds"] for r in res if r.get("gate") == "compile" and r.get("compile_seconds")]
    perf = report.get("perf") or {}
    perf_groups = [(f"{p['dtype']} {p['shape']}", [p["ours_tflops"], p["peer_tflops"]])
                   for p in perf.get("results", [])]
    skips = "".join(f"<tr><td>{_esc(k)}</td><td>{v}</td></tr>" for k, v in s["skips_by_reason"].items())
    fails = "".join(f"<li><code>{_esc(r['id'])}</code> ({_esc(r['gate'])}): {_esc(r.get('reason', ''))}</li>"
                    for r in res if r["status"] == "fail") or "<li>none</li>"
    mutants = "".join(f"<tr><td>{_esc(m['mutant'])}</td><td>{_esc(m['kind'])}</td><td>{'yes' if m['caught'] else 'NO'}"
                      f"</td><td>{_esc(m['by'])}</td></tr>" for m in report.get("mutants") or [])
    env = report.get("environment", {})
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>cutedsl-backend validation {_esc(s['run_id'])}</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1200px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:4px 8px;font-size:12px}} .heat td{{text-align:center}}
.ok{{color:{_COLORS['pass']}}} .bad{{color:{_COLORS['fail']}}}</style></head><body>
<h1>cutedsl-backend validation: {_esc(s['run_id'])}</h1>
<p class="{'ok' if s['ok'] else 'bad'}"><b>{'PASS' if s['ok'] else 'FAIL'}</b>: {c['pass']} passed, {c['fail']} failed,
{c['skip']} skipped ({s['seconds']} s, tag <code>{_esc(s['tag'])}</code>)</p>
<p>Machine: {_esc(env.get('gpu', 'no GPU'))}; torch {_esc(env.get('torch'))};
nvidia-cutlass-dsl {_esc(env.get('nvidia_cutlass_dsl'))}</p>
<h2>Pass / skip / fail by architecture, dtype and epilogue</h2>{''.join(heat)}
<h2>Skips by reason</h2><table><tr><th>reason</th><th>cells</th></tr>{skips}</table>
<h2>Failures</h2><ul>{fails}</ul>
<h2>Compile times</h2>{_histogram("compile seconds per cell", compile_secs, "cells per bin")}
<h2>Performance (same run, vs the peer)</h2>
{_bar_chart("TFLOP/s per shape", perf_groups, ["cutedsl-backend", perf.get("peer", "peer")], "TFLOP/s")}
<h2>Fault injection</h2><table><tr><th>mutant</th><th>kind</th><th>caught</th><th>by</th></tr>{mutants}</table>
</body></html>
"""
