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


def test_require_gpu_names_each_arch_that_did_not_run():
    from cutedsl_backend.validation.runner import gpu_archs_missing

    results = [{"gate": "gpu", "cell": {"arch": "sm90a"}, "status": "pass"},
               {"gate": "gpu", "cell": {"arch": "sm100a"}, "status": "skip", "reason": "needs sm100"},
               {"gate": "compile", "cell": {"arch": "sm100a"}, "status": "pass"}]
    assert gpu_archs_missing(results, ["sm90a", "sm100a"]) == ["sm100a"]  # one arch ran: not enough
    assert gpu_archs_missing(results, ["sm90a"]) == []
    assert gpu_archs_missing(results, []) == []


def test_merged_report_lists_archs_and_fails_on_an_expected_one_missing(tmp_path):
    import json

    from cutedsl_backend.validation.report import merge_reports

    def part(run_id, arch, status):
        return {"schema": 1, "summary": {"run_id": run_id, "tag": "full", "seconds": 1.0, "ok": True,
                                         "budgets": {"ok": True, "configs": {}, "regressions": []}},
                "environment": {"gpu": "X"},
                "results": [{"id": f"{arch}/c", "gate": "gpu", "cell": {"arch": arch}, "status": status,
                             "reason": "" if status != "skip" else "not run: needs sm100 GPU"}]}
    p1 = tmp_path / "a.json"
    p1.write_text(json.dumps(part("r1", "sm90a", "pass")))
    p2 = tmp_path / "b.json"
    p2.write_text(json.dumps(part("r2", "sm100a", "skip")))
    assert merge_reports(tmp_path / "m1", [p1, p2], expect=["sm90a"]) == 0
    assert merge_reports(tmp_path / "m2", [p1, p2], expect=["sm90a", "sm100a"]) == 1
    merged = json.loads((tmp_path / "m2" / "report.json").read_text())
    assert merged["summary"]["gpu_required_but_missing"] == ["sm100a"]
    assert merged["summary"]["architectures"]["sm100a"]["why_not_run"] == "not run: needs sm100 GPU"
    md = (tmp_path / "m2" / "summary.md").read_text()
    assert "GPU required but not run for: sm100a" in md and "| sm100a | 0 | 0 | 1 | not run: needs sm100 GPU |" in md


def test_the_gated_mlp_sweep_covers_the_gate_up_projections():
    """gated_silu cells: the models' gate_up projections only (N = 2 x intermediate), whose output
    is N / 2 wide (half the output bytes), with a gated config named for the report."""
    from cutedsl_backend.validation.model_shapes import operand_bytes, sweep_cells
    from cutedsl_backend.validation.shape_sweep import _config_choice

    cells = [c for c in sweep_cells("standard") if c[0] == "gated_silu"]
    assert cells and all("gate_up" in proj.name for _, proj, _ in cells)
    assert {proj.model for _, proj, _ in cells} >= {"llama3-8b", "qwen2.5-7b", "deepseek-v3"}
    assert operand_bytes(16, 28672, 4096, "gated_silu") == operand_bytes(16, 28672, 4096, "bfloat16") - 16 * 28672
    name, source, table_m, table_gpu = _config_choice("gated_silu", 16, 28672, 4096, gpu="NVIDIA H200")
    # no measured table takes a gated epilogue
    assert name.startswith("sm90a_") and source == "models" and table_m is None and table_gpu is None


def test_alternate_times_more_rounds_only_where_they_disagree():
    """A stall of one side in the first rounds (ours 3x slower) gets more rounds and the median
    over all of them; rounds that agree are timed once."""
    from cutedsl_backend.validation.shape_sweep import ROUNDS, alternate

    def timer(times):
        it = iter(times)
        return lambda: next(it)

    steady = alternate(timer([1.0, 1.02, 0.99] * 3), timer([1.0] * 9))
    assert len(steady["rounds_ours_ms"]) == ROUNDS == 3
    stalled = alternate(timer([3.0, 2.5, 1.0, 1.0, 1.0, 1.0, 1.01, 1.0, 1.0]), timer([1.0] * 9))
    assert len(stalled["rounds_ours_ms"]) == 6 and stalled["ratio"] == 1.0
    assert stalled["ratio_spread"] == [1.0 / 3.0, 1.0]
    stuck = alternate(timer([3.0, 1.0, 1.0] * 3), timer([1.0] * 9))  # never tight: three sets, then stops
    assert len(stuck["rounds_peer_ms"]) == 9 and stuck["ratio"] == 1.0


def test_token_counts_other_than_the_tags():
    """sweep-shapes --ms: the tag's projections at the given token counts (sorted, once each),
    still within the tag's FLOP budget; nonsense is refused."""
    from cutedsl_backend.validation.model_shapes import MAX_FLOPS, sweep_cells

    standard = sweep_cells("standard", ("bfloat16",))
    between = sweep_cells("standard", ("bfloat16",), ms=(320, 160, 320))
    assert {m for _, _, m in between} == {160, 320}
    assert {p for _, p, _ in between} == {p for _, p, _ in standard}
    assert all(2 * m * p.n * p.k <= MAX_FLOPS["standard"] for _, p, m in between)
    for bad in ((), (0, 16)):
        with pytest.raises(ValueError):
            sweep_cells("standard", ("bfloat16",), ms=bad)


def test_the_standard_tag_measures_between_the_tables_points():
    """The standard perf gate includes token counts strictly between those the config tables are
    measured at (tune's defaults): there a table serves from the next measured M up, and a gate of
    the tables' own points alone would measure them in sample only."""
    import inspect

    from cutedsl_backend.validation.tune import tune

    defaults = {k: v.default for k, v in inspect.signature(tune).parameters.items()}
    measured = {m for key in ("ms", "swap_ms", "fp8_ms", "fp8_swap_ms") for m in defaults[key]}
    between = [m for m in ms.M_STANDARD if min(measured) < m < max(measured) and m not in measured]
    assert len(between) >= 5, between


def test_cold_weights_rotate_through_copies_that_overflow_the_l2():
    """--cold-weights: enough copies that the others stream over twice the L2 between two uses of
    one (each call reads HBM); weights that alone overflow twice the L2, and hot timing, use one."""
    from cutedsl_backend.validation.shape_sweep import weight_copies

    l2 = 50 * 2**20
    assert weight_copies(4096 * 4096 * 2, l2, cold=False) == 1
    for nbytes in (576 * 7168, 4096 * 4096, 4096 * 4096 * 2, 14336 * 4096):
        r = weight_copies(nbytes, l2, cold=True)
        assert (r - 1) * nbytes > 2 * l2 and r <= 32, (nbytes, r)
    assert weight_copies(28672 * 4096 * 2, l2, cold=True) == 1  # 235 MB: HBM anyway
    assert weight_copies(1024, l2, cold=True) == 32  # a tiny weight: capped


def test_cells_below_the_gate_are_listed_with_their_launchs_units_and_waves():
    """The report lists the cells below the gate, slowest first, with their config's work units
    (CTA tiles rounded up to whole clusters, of the swapped problem for swap-AB, times K slices)
    and waves on the GPU's SMs; a stream-K launch balances its SMs (no count)."""
    from cutedsl_backend.validation.report import below_gate_markdown, launch_units

    def cell(m, n, k, ratio, config):
        return {"dtype": "bfloat16", "model": "qwen2.5-7b", "projection": "qkv", "m": m, "n": n, "k": k,
                "ratio": ratio, "ours_ms": 0.057, "peer_ms": 0.0456, "config": config, "status": "fail"}

    coop = "sm90a_cooperative_128x192xauto_c2x1_sauto_rm8"
    assert launch_units(cell(1024, 4608, 3584, 0.8, coop), 132) == (192, 192 / 132)
    assert launch_units(cell(896, 4608, 3584, 0.8, coop), 132)[0] == 192  # 7 row tiles, a cluster of 2: 8
    swap = cell(144, 3584, 4096, 0.62, "sm90a_pingpong_64x160xauto_c1x1_sauto_rn8_k2_swap")
    assert launch_units(swap, 132)[0] == 56 * 1 * 2  # the swapped problem: 3584 / 64 x 144 / 160, 2 slices
    assert launch_units(cell(1024, 4608, 3584, 0.8, "sm90a_cooperative_128x160xauto_c1x1_sauto_rn8_sk"), 132) is None
    rows = [cell(1024, 4608, 3584, 0.76, coop), swap, cell(2048, 4608, 3584, 0.99, coop)]
    text = "\n".join(below_gate_markdown({"results": rows, "gate_min_ratio": 0.9, "num_sms": 132}))
    assert "cells below the gate (2; the slowest 2)" in text
    assert text.index("144x3584x4096") < text.index("1024x4608x3584") and "2048x" not in text
    assert "| 0.76 | 57.0 | 45.6 | `" + coop + "` | 192 / 1.45 | - |" in text  # no table serves it
    assert below_gate_markdown({"results": rows, "gate_min_ratio": 0.9})[-1].endswith("| - | - |")  # no SM count
    # a cell a measured table serves: its tuning sweep's best candidate against that sweep's peer
    rows[1]["tuned_best_ratio"] = {"ratio": 0.8312, "m": 160}
    text = "\n".join(below_gate_markdown({"results": rows, "gate_min_ratio": 0.9, "num_sms": 132}))
    assert "| 112 / 0.85 | 0.83 (M = 160) |" in text
