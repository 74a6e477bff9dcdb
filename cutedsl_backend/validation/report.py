"""Report writers: JSON (schema in docs/report-schema.md), JUnit XML and a Markdown summary."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from html import escape
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import quoteattr


def load_report(path) -> dict:
    """A report.json, or one stored gzip-compressed (``report.json.gz``, as docs/results keeps them)."""
    path = Path(path)
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)


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
           *(f"Machine: {e.get('gpu', 'no GPU')}; torch {e.get('torch')}; "
             f"nvidia-cutlass-dsl {e.get('nvidia_cutlass_dsl')}; python {e.get('python')}"
             for e in env.get("parts", [env])), ""]
    missing = s.get("gpu_required_but_missing")
    if missing:
        archs = ", ".join(missing) if isinstance(missing, list) else "any arch"
        out += [f"**GPU required but not run for: {archs}.**", ""]
    if s.get("architectures"):
        out += ["## Architectures", "", "| arch | GPU cells passed | failed | not run | why not run |",
                "|---|---|---|---|---|"]
        for arch, a in s["architectures"].items():
            out.append(f"| {arch} | {a['pass']} | {a['fail']} | {a['skip']} | {a['why_not_run'] or '-'} |")
        out.append("")
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
        out += perf_markdown(report["perf"])
    if "fuzz" in report and not report["fuzz"]:
        out += ["", "## Fuzzer: not run (no GPU)"]
    if report.get("fuzz"):
        fz = report["fuzz"]
        gated, scaled = fz.get("gated_cases", 0), fz.get("scaled_cases", 0)
        out += ["", f"## Fuzzer: {fz['cases']} gemm, {gated} gemm_gated and {scaled} scaled_mm random calls, "
                f"{len(fz['findings'])} findings", "", f"Replay: `python -m cutedsl_backend fuzz --seed {fz['seed']} "
                f"--cases {fz['cases']} --gated-cases {gated} --scaled-cases {scaled}`"]
        out += [f"- {f}" for f in fz["findings"][:20]]
    if report.get("mutants"):
        mu = report["mutants"]
        ran = [m for m in mu if not m.get("skipped")]
        out += ["", f"## Fault injection: {sum(m['caught'] for m in ran)}/{len(ran)} mutants caught"
                + (f", {len(mu) - len(ran)} not run" if len(ran) < len(mu) else ""), "",
                "| mutant | kind | caught | by |", "|---|---|---|---|"]
        out += [f"| {m['mutant']} | {m['kind']} | {'not run' if m.get('skipped') else 'yes' if m['caught'] else 'NO'}"
                f" | {m['by']} |" for m in mu]
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


def architectures(results: list, expected) -> dict:
    """Per arch (``expected`` ones first): its GPU cells passed / failed / not run, and why not
    (the skip reasons), from merged results."""
    out: dict = {}
    for arch in list(expected) + sorted({r["cell"].get("arch") for r in results} - set(expected) - {None}):
        gpu = [r for r in results if r["gate"] == "gpu" and r["cell"].get("arch") == arch]
        c = Counter(r["status"] for r in gpu)
        ran = c["pass"] + c["fail"] > 0
        reasons = sorted({r.get("reason", "") for r in gpu if r["status"] == "skip"})
        out[arch] = {"pass": c["pass"], "fail": c["fail"], "skip": c["skip"], "gpu_ran": ran,
                     "why_not_run": "" if ran else ("; ".join(reasons) or "no report of this arch")}
    return out


def _merged_perf(sweeps: list):
    if not sweeps:
        return None
    merged = dict(sweeps[0])
    merged["results"] = [r for sw in sweeps for r in sw.get("results", [])]
    summary: dict = {}
    for sw in sweeps:
        for dtype, v in (sw.get("summary") or {}).items():
            summary.setdefault(dtype, v)
    merged["summary"] = summary
    return merged


def merge_reports(out_dir, report_paths, expect=()) -> int:
    """One report from several (a release: one per GPU kind); fails if any part failed or an
    arch of ``expect`` ran no GPU cell in any part (its front page lists, per arch, what ran)."""
    parts = [load_report(p) for p in report_paths]
    results = [r | {"run": p["summary"]["run_id"]} for p in parts for r in p["results"]]
    skips = Counter(r["reason"] for r in results if r["status"] == "skip")
    budgets = {"ok": all(p["summary"]["budgets"]["ok"] for p in parts), "configs": {},
               "regressions": [x for p in parts for x in p["summary"]["budgets"].get("regressions", [])],
               "improvements": []}
    for p in parts:
        for k, v in p["summary"]["budgets"]["configs"].items():
            budgets["configs"][f"{p['summary']['run_id']}:{k}"] = v
    archs = architectures(results, expect)
    missing = [a for a in expect if not archs[a]["gpu_ran"]]
    ok = all(p["summary"]["ok"] for p in parts) and not missing
    merged = {
        "schema": 1,
        "summary": {"run_id": "merged-" + "+".join(p["summary"]["run_id"] for p in parts),
                    "tag": ",".join(sorted({p["summary"]["tag"] for p in parts})),
                    "seconds": round(sum(p["summary"]["seconds"] for p in parts), 1),
                    "counts": dict(Counter(r["status"] for r in results)), "skips_by_reason": dict(skips),
                    "budgets": budgets, "ok": ok, "parts": [p["summary"] for p in parts],
                    "architectures": archs, "gpu_required_but_missing": missing},
        "environment": {"parts": [p["environment"] for p in parts],
                        "gpu": ", ".join(str(p["environment"].get("gpu", "no GPU")) for p in parts)},
        "results": results,
        # the perf sweeps run on sm90a GPUs only: one part's sweep is carried whole (several
        # sweeps: their rows together, each dtype's summary from the first part that has it)
        "perf": _merged_perf([p.get("perf") for p in parts if p.get("perf")]),
        # the fuzzer and the mutants run on each GPU part: every part's, in part order
        "mutants": [m | {"run": p["summary"]["run_id"]} for p in parts for m in p.get("mutants") or []],
        "fuzz": next((p["fuzz"] for p in parts if p.get("fuzz")), None),
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_reports(merged, out)
    print((out / "summary.md").read_text())
    return 0 if ok else 1


# ----------------------------------------------------------------------------- HTML

_COLORS = {"pass": "#3c9a5f", "fail": "#c0392b", "skip": "#9aa0a6", "compile-only": "#d4a017"}


def _esc(x) -> str:
    return escape(str(x))


def launch_units(row: dict, num_sms: int) -> Optional[tuple]:
    """(work units, waves) of a sweep row's launch on ``num_sms`` SMs: its config's CTA tiles (of
    the swapped problem for a swap-AB config) times its K slices; None for a stream-K config (its
    shares balance the SMs) or a config name this build does not parse."""
    from ..configs import GemmConfig
    from ..configs.resources import launch_tiles
    from ..problem import GemmProblem, UnsupportedGemmError

    try:
        cfg = GemmConfig.from_name(row["config"])
    except (KeyError, TypeError, UnsupportedGemmError):
        return None
    if cfg.stream_k:
        return None
    problem = GemmProblem(row["m"], row["n"], row["k"], 1, "bfloat16", "bfloat16", "k", "k", cfg.arch)
    units = launch_tiles(problem.swapped() if cfg.swap_ab else problem, cfg) * cfg.splits
    return units, units / num_sms


def below_gate_markdown(perf: dict, limit: int = 40) -> list:
    """The cells below the gate, slowest first (up to ``limit`` per dtype): our time and the peer's,
    the config and its launch's work units and waves on this GPU's SMs (a last wave left mostly
    idle costs the whole wave), and where this GPU's measured table serves the cell, the best
    candidate of its tuning sweep against that sweep's peer (near it: the choice was not what
    lost; low too: no config the sweep had keeps up there)."""
    num_sms = perf.get("num_sms")
    rows = sorted((r for r in perf.get("results", []) if "ratio" in r and r["ratio"] < perf.get("gate_min_ratio", 0)),
                  key=lambda r: r["ratio"])
    out = []
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        sel = [r for r in rows if r["dtype"] == dtype]
        out += ["", f"### {dtype}: cells below the gate ({len(sel)}; the slowest {min(limit, len(sel))})", "",
                "| cell | ratio | ours us | peer us | config | units / waves | best in its tuning sweep |",
                "|---|---|---|---|---|---|---|"]
        for r in sel[:limit]:
            units = launch_units(r, num_sms) if num_sms else None
            fill = "-" if units is None else f"{units[0]} / {units[1]:.2f}"
            us = [f"{r[key] * 1e3:.1f}" if r.get(key) else "-" for key in ("ours_ms", "peer_ms")]
            tuned = r.get("tuned_best_ratio")
            best = "-" if not tuned else f"{tuned['ratio']:.2f} (M = {tuned['m']})"
            out.append(f"| {r['model']} {r['projection']} {r['m']}x{r['n']}x{r['k']} | {r['ratio']:.2f} | "
                       f"{us[0]} | {us[1]} | `{r.get('config', '-')}` | {fill} | {best} |")
    return out


def _tables_note(perf: dict) -> str:
    """Which measured config tables ranked the sweep's cells, where not all of them (an A/B's half)."""
    if not perf.get("tables", True):
        return " Configs: the cost models alone (no measured table)."
    if not perf.get("borrowed_tables", True):
        return " Configs: this GPU model's own measured tables only (none borrowed)."
    return ""


def perf_markdown(perf: dict) -> list:
    """The sweep in Markdown: per dtype its summary, the cells below the gate, then ratio tables
    (projection x M)."""
    at = f" at M = {', '.join(map(str, perf['ms']))}" if perf.get("ms") else ""
    out = ["", f"## Performance sweep (tag `{perf.get('tag')}`{at}; {perf.get('timing', '')})", "",
           f"Peer: {perf.get('peer')}; a cell fails below {perf.get('gate_min_ratio')}x or with a wrong result."
           + _tables_note(perf), "",
           "| dtype | cells | geomean | M <= 64 | 65-1023 | >= 1024 | worst | below gate | wrong |",
           "|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for dtype, v in (perf.get("summary") or {}).items():
        out.append(f"| {dtype} | {v['cells']} | {fmt(v['geomean'])} | {fmt(v['geomean_m_le_64'])} | "
                   f"{fmt(v['geomean_m_65_1023'])} | {fmt(v['geomean_m_ge_1024'])} | {v['worst']['ratio']:.3f} "
                   f"({v['worst']['cell']}) | {v['below_gate']} | {v['wrong']} |")
    served = {d: v for d, v in (perf.get("summary") or {}).items() if v.get("table_cells")}
    if served:
        out += ["", "Cells whose config came from a measured config table (`configs/tables/`: measured on "
                "these projections, in sample where at the cell's own M; the rest of them served by the entry "
                "at the next measured M up, out of sample; where it differs from the cost models' pick; "
                "borrowed: measured on another GPU model of the same die) and the other cells (the cost models):",
                "", "| dtype | table cells | of them from another M | of them borrowed | geomean | other cells "
                "| geomean |", "|---|---|---|---|---|---|---|"]
        out += [f"| {d} | {v['table_cells']} | {v.get('table_cells_other_m', '-')} | "
                f"{v.get('table_cells_borrowed', '-')} | {fmt(v['geomean_table'])} | "
                f"{v['cells'] - v['table_cells']} | {fmt(v['geomean_models'])} |" for d, v in served.items()]
    out += below_gate_markdown(perf)
    rows = [r for r in perf.get("results", []) if "ratio" in r]
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        sel = [r for r in rows if r["dtype"] == dtype]
        ms = sorted({r["m"] for r in sel})
        out += ["", f"### {dtype}: peer time / our time", "",
                "| projection (N x K) | " + " | ".join(f"M={m}" for m in ms) + " |",
                "|---|" + "---|" * len(ms)]
        for label in dict.fromkeys(f"{r['model']} {r['projection']} ({r['n']}x{r['k']})" for r in sel):
            by_m = {r["m"]: r for r in sel if f"{r['model']} {r['projection']} ({r['n']}x{r['k']})" == label}
            cells = []
            for m in ms:
                r = by_m.get(m)
                cells.append("" if r is None else f"{r['ratio']:.2f}" + ("" if r["status"] == "pass" else " **F**"))
            out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def _state(statuses: Counter, gpu_ran: bool) -> str:
    """What a matrix cell shows: failed anywhere, passed with its GPU half run, or compile-only."""
    if statuses["fail"]:
        return "fail"
    if not statuses["pass"]:
        return "skip"
    return "pass" if gpu_ran else "compile-only"


def html(report: dict) -> str:
    """A self-contained page: summary, the matrix by what actually ran, skips, failures, compile
    times, the perf sweep (heatmaps and bandwidth per dtype), fault injection."""
    from . import charts

    s = report["summary"]
    res = report["results"]
    c = Counter(r["status"] for r in res)
    # matrix: rows arch dtype->out, columns epilogue; compile and GPU gates of a cell together
    grid: dict = defaultdict(lambda: defaultdict(Counter))
    gpu_ran: dict = defaultdict(bool)
    cols = []
    for r in res:
        cell = r.get("cell", {})
        if "dtype" not in cell or r["gate"] not in ("compile", "gpu"):
            continue
        row = f"{cell['arch']} {cell['dtype']}->{cell.get('out_dtype', cell['dtype'])}"
        col = cell.get("epilogue", "none")
        if col not in cols:
            cols.append(col)
        grid[row][col][r["status"]] += 1
        if r["gate"] == "gpu" and r["status"] != "skip":
            gpu_ran[(row, col)] = True
    legend = ("<p>Colours: <span style='background:#3c9a5f;color:white'>&nbsp;passed on the GPU&nbsp;</span> "
              "<span style='background:#d4a017;color:white'>&nbsp;compile gates passed, GPU not run&nbsp;</span> "
              "<span style='background:#c0392b;color:white'>&nbsp;failed&nbsp;</span> "
              "<span style='background:#9aa0a6;color:white'>&nbsp;not run&nbsp;</span></p>")
    heat = [legend, "<table class='heat'><tr><th>arch dtype->out</th>"
            + "".join(f"<th>{_esc(x)}</th>" for x in cols) + "</tr>"]
    for row in sorted(grid):
        heat.append(f"<tr><th>{_esc(row)}</th>")
        for col in cols:
            cnt = grid[row].get(col)
            if not cnt:
                heat.append("<td></td>")
                continue
            state = _state(cnt, gpu_ran[(row, col)])
            label = " ".join(f"{k}:{v}" for k, v in sorted(cnt.items()))
            heat.append(f"<td style='background:{_COLORS[state]};color:white' title='{_esc(label)}'>"
                        f"{_esc(label)}</td>")
        heat.append("</tr>")
    heat.append("</table>")
    for r in res:  # unbuilt archs and other rows without a dtype
        if r.get("status") == "skip" and "dtype" not in r.get("cell", {}):
            heat.append(f"<p>{_esc(r['id'])} ({_esc(r['gate'])}): skipped: {_esc(r['reason'])}</p>")
    compile_secs = [r["compile_seconds"] for r in res if r.get("gate") == "compile" and r.get("compile_seconds")]
    perf = report.get("perf") or {}
    perf_html = ["<p><em>No performance sweep in this run (it needs an sm90 GPU and the standard or full tag)."
                 "</em></p>"] if not perf.get("results") else []
    rows = perf.get("results", [])
    for dtype in dict.fromkeys(r["dtype"] for r in rows):
        perf_html.append(f"<h3>{_esc(dtype)}</h3>")
        perf_html.append(charts.ratio_heatmap(rows, dtype, perf.get("gate_min_ratio", 0.9)))
        perf_html.append(charts.bandwidth_plot(rows, dtype, perf.get("hbm_tbps")))
    summary_md = "\n".join(perf_markdown(perf)[4:4 + 2 + len(perf.get("summary") or {})]) if perf else ""
    skips = "".join(f"<tr><td>{_esc(k)}</td><td>{v}</td></tr>" for k, v in s["skips_by_reason"].items())
    fails = "".join(f"<li><code>{_esc(r['id'])}</code> ({_esc(r['gate'])}): {_esc(r.get('reason', ''))}</li>"
                    for r in res if r["status"] == "fail") or "<li>none</li>"
    mutants = "".join(f"<tr><td>{_esc(m['mutant'])}</td><td>{_esc(m['kind'])}</td><td>{'yes' if m['caught'] else 'NO'}"
                      f"</td><td>{_esc(m['by'])}</td></tr>" for m in report.get("mutants") or [])
    fz = report.get("fuzz")
    fuzz_html = "<h2>Fuzzer</h2><p>not run (no GPU)</p>"
    if fz:
        fuzz_html = (f"<h2>Fuzzer</h2><p>{fz['cases']} gemm, {fz.get('gated_cases', 0)} gemm_gated and "
                     f"{fz.get('scaled_cases', 0)} scaled_mm random calls "
                     f"(seed {fz['seed']}), {len(fz['findings'])} findings"
                     + "".join(f"<br><code>{_esc(f)}</code>" for f in fz["findings"][:20]) + "</p>")
    env = report.get("environment", {})
    machines = "".join(f"<p>Machine: {_esc(e.get('gpu', 'no GPU'))}; torch {_esc(e.get('torch'))}; "
                       f"nvidia-cutlass-dsl {_esc(e.get('nvidia_cutlass_dsl'))}</p>" for e in env.get("parts", [env]))
    archs = s.get("architectures") or {}
    arch_html = ("<h2>Architectures</h2><table><tr><th>arch</th><th>GPU cells passed</th><th>failed</th>"
                 "<th>not run</th><th>why not run</th></tr>" + "".join(
                     f"<tr><td>{_esc(k)}</td><td>{a['pass']}</td><td>{a['fail']}</td><td>{a['skip']}</td>"
                     f"<td>{_esc(a['why_not_run'] or '-')}</td></tr>" for k, a in archs.items()) + "</table>"
                 ) if archs else ""
    missing = s.get("gpu_required_but_missing")
    missing_names = ", ".join(missing) if isinstance(missing, list) else "any arch"
    missing_html = ""
    if missing:
        missing_html = f"<p class=\"bad\"><b>GPU required but not run for: {_esc(missing_names)}.</b></p>"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>cutedsl-backend validation {_esc(s['run_id'])}</title>
<style>body{{font-family:sans-serif;margin:24px;max-width:1400px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:4px 8px;font-size:12px}} .heat td{{text-align:center}}
.ok{{color:{_COLORS['pass']}}} .bad{{color:{_COLORS['fail']}}} img{{max-width:100%}}</style></head><body>
<h1>cutedsl-backend validation: {_esc(s['run_id'])}</h1>
<p class="{'ok' if s['ok'] else 'bad'}"><b>{'PASS' if s['ok'] else 'FAIL'}</b>: {c['pass']} passed, {c['fail']} failed,
{c['skip']} skipped ({s['seconds']} s, tag <code>{_esc(s['tag'])}</code>)</p>
{machines}{missing_html}{arch_html}
<h2>Matrix by architecture, dtype and epilogue</h2>{''.join(heat)}
<h2>Skips by reason</h2><table><tr><th>reason</th><th>cells</th></tr>{skips}</table>
<h2>Failures</h2><ul>{fails}</ul>
<h2>Compile times</h2>{charts.histogram(compile_secs, "compile time per cell", "seconds")}
<h2>Performance sweep (same run, vs the peer)</h2><pre>{_esc(summary_md)}</pre>
{''.join(perf_html)}
{fuzz_html}
<h2>Fault injection</h2><table><tr><th>mutant</th><th>kind</th><th>caught</th><th>by</th></tr>{mutants}</table>
</body></html>
"""
