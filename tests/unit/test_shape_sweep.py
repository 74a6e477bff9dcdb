"""The perf sweep's cells, summary and report rendering (CPU: synthetic measurements)."""

import json
import math

import pytest

from cutedsl_backend.validation import model_shapes as ms
from cutedsl_backend.validation.shape_sweep import MIN_CELL_RATIO, cell_seed, summarize


def test_sweep_covers_six_families_and_the_whole_m_range():
    families = {p.model.split("-")[0] for p in ms.MODEL_PROJECTIONS}
    assert len(families) >= 6, families
    assert {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048,
            3072, 4096, 8192, 16384} <= set(ms.M_ALL)
    full = ms.sweep_cells("full", ("bfloat16",))
    assert {m for _, _, m in full} >= set(ms.M_ALL[:20]) | set(ms.M_ODD)
    quick, standard = ms.sweep_cells("quick", ("bfloat16",)), ms.sweep_cells("standard", ("bfloat16",))
    assert 0 < len(quick) < len(standard) < len(full)
    # standard: every model family is represented
    assert {p.model for _, p, _ in standard} >= {p.model for p in ms.unique_shapes(ms.MODEL_PROJECTIONS)}
    for tag in ("quick", "standard", "full"):
        assert all(2 * m * p.n * p.k <= ms.MAX_FLOPS[tag] for _, p, m in ms.sweep_cells(tag))
    # every shape is something the kernels take: K and N 16-byte aligned for fp8 and 16-bit
    assert all(p.k % 16 == 0 and p.n % 8 == 0 for p in ms.MODEL_PROJECTIONS)


def test_cell_seed_is_replayable_and_distinct():
    assert cell_seed("bfloat16", 4096, 4096, 16) == cell_seed("bfloat16", 4096, 4096, 16)
    seeds = {cell_seed(d, p.n, p.k, m) for d, p, m in ms.sweep_cells("standard")}
    assert len(seeds) > 0.99 * len(ms.sweep_cells("standard"))


def _rows():
    rows = []
    for i, (d, p, m) in enumerate(ms.sweep_cells("quick", ("bfloat16", "fp8_rowwise"))):
        ratio = 0.7 + 0.05 * (i % 10)
        rows.append({"id": f"sm90a/sweep/{d}/{m}x{p.n}x{p.k}", "gate": "perf", "cell": {"arch": "sm90a", "dtype": d},
                     "dtype": d, "model": p.model, "projection": p.name, "m": m, "n": p.n, "k": p.k,
                     "ratio": ratio, "correct": i != 3, "ours_tbps": 3.0 * ratio, "peer_tbps": 3.0,
                     "status": "pass" if ratio >= MIN_CELL_RATIO and i != 3 else "fail", "reason": ""})
    return rows


def test_summary_geomeans_and_gate_counts():
    rows = _rows()
    s = summarize(rows)
    bf = [r for r in rows if r["dtype"] == "bfloat16"]
    assert s["bfloat16"]["cells"] == len(bf)
    assert math.isclose(s["bfloat16"]["geomean"], math.exp(sum(math.log(r["ratio"]) for r in bf) / len(bf)))
    small = [r["ratio"] for r in bf if r["m"] <= 64]
    assert math.isclose(s["bfloat16"]["geomean_m_le_64"], math.exp(sum(map(math.log, small)) / len(small)))
    assert s["bfloat16"]["below_gate"] == sum(r["ratio"] < MIN_CELL_RATIO for r in bf)
    assert s["bfloat16"]["wrong"] == 1
    assert s["bfloat16"]["worst"]["ratio"] == min(r["ratio"] for r in bf)


def _report(perf):
    results = [
        {"id": "sm100a/compile/x", "gate": "compile", "cell": {"arch": "sm100a", "dtype": "bfloat16",
                                                              "out_dtype": "bfloat16", "epilogue": "none"},
         "status": "pass", "reason": "", "compile_seconds": 1.2},
        {"id": "sm100a/gpu/x", "gate": "gpu", "cell": {"arch": "sm100a", "dtype": "bfloat16", "out_dtype": "bfloat16",
                                                      "epilogue": "none"},
         "status": "skip", "reason": "not run: needs sm100 GPU"},
        {"id": "sm90a/compile/x", "gate": "compile", "cell": {"arch": "sm90a", "dtype": "bfloat16",
                                                             "out_dtype": "bfloat16", "epilogue": "none"},
         "status": "pass", "reason": "", "compile_seconds": 0.9},
        {"id": "sm90a/gpu/x", "gate": "gpu", "cell": {"arch": "sm90a", "dtype": "bfloat16", "out_dtype": "bfloat16",
                                                     "epilogue": "none"}, "status": "pass", "reason": ""},
    ] + (perf["results"] if perf else [])
    summary = {"run_id": "r", "tag": "quick", "seconds": 1, "ok": False, "skips_by_reason": {"not run: x": 1},
               "budgets": {"ok": True, "configs": {}}}
    return {"summary": summary, "environment": {}, "results": results, "perf": perf, "mutants": []}


def test_markdown_and_html_show_the_sweep_and_what_ran():
    pytest.importorskip("matplotlib", reason="the report's charts need matplotlib (a test dependency)")
    from cutedsl_backend.validation.report import html, markdown

    rows = _rows()
    perf = {"results": rows, "summary": summarize(rows), "tag": "quick", "gate_min_ratio": MIN_CELL_RATIO,
            "peer": {"16-bit": "cuBLAS"}, "timing": "graphs", "hbm_tbps": 4.8}
    md = markdown(_report(perf))
    assert "## Performance sweep" in md and "### bfloat16: peer time / our time" in md
    assert "| llama3-8b o (4096x4096) |" in md and " **F**" in md
    page = html(_report(perf))
    assert page.count("data:image/png;base64,") >= 2 * 2 + 1  # heatmap + bandwidth per dtype, histogram
    # sm100a passed its compile gate but its GPU half never ran: not painted as passed
    sm100 = page.split("<th>sm100a bfloat16-&gt;bfloat16</th>")[1].split("</tr>")[0]
    assert "#d4a017" in sm100 and "#3c9a5f" not in sm100
    sm90 = page.split("<th>sm90a bfloat16-&gt;bfloat16</th>")[1].split("</tr>")[0]
    assert "#3c9a5f" in sm90
    json.dumps(_report(perf))  # the report stays JSON


def test_html_without_a_sweep_says_so():
    from cutedsl_backend.validation.report import html

    assert "No performance sweep in this run" in html(_report(None))
