"""Report writers: JSON (schema in docs/report-schema.md), JUnit XML and a Markdown summary."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from xml.sax.saxutils import quoteattr


def write_reports(report: dict, out_dir: Path) -> dict:
    out_dir = Path(out_dir)
    paths = {
        "json": out_dir / "report.json",
        "junit": out_dir / "junit.xml",
        "markdown": out_dir / "summary.md",
        "budgets_proposal": out_dir / "budgets.proposed.json",
    }
    paths["json"].write_text(json.dumps(report, indent=1, default=str))
    paths["junit"].write_text(junit(report))
    paths["markdown"].write_text(markdown(report))
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
