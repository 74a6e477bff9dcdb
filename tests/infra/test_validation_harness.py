"""The validation harness: budgets gate, reports, matrix, and the repo wiring (README, CI, nox)."""

import gzip
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from cutedsl_backend.validation.budgets import check_budgets, load_budgets
from cutedsl_backend.validation.matrix import TAGS, cells, unbuilt_archs
from cutedsl_backend.validation.report import load_report, write_reports

ROOT = Path(__file__).resolve().parents[2]


def _res(cfg, secs, arch="sm90a"):
    return {"id": f"{arch}/x/{cfg}", "gate": "compile", "status": "pass", "compile_seconds": secs,
            "cell": {"arch": arch, "config": cfg}}


def test_budget_gate_passes_fails_and_proposes():
    b = load_budgets()
    ok = check_budgets([_res("a", 1.0), _res("a", 1.2), _res("b", 0.8)], b)
    assert ok["ok"] and ok["configs"]["a/gemm"]["median_s"] == 1.1
    slow = check_budgets([_res("a", 4.0), _res("a", 4.5), _res("a", 1.0)], b)
    assert not slow["ok"] and slow["regressions"]
    spike = check_budgets([_res("a", 1.0), _res("a", 1.0), _res("a", 9.0)], b)
    assert not spike["ok"]  # one cell over the per-cell ceiling
    fast = check_budgets([_res("a", 0.2), _res("a", 0.3)], b)
    assert fast["improvements"] and fast["proposed"]["families"]["sm90a/gemm"]["measured_median_s"] == 0.25


def test_matrix_tags_and_archs():
    q, s, f = (cells(t, ("sm90a",)) for t in TAGS)
    assert 0 < len(q) < len(s) < len(f)
    assert len({c.id for c in s}) == len(s)
    both = cells("quick", ("sm90a", "sm100a"))
    assert {c.arch for c in both} == {"sm90a", "sm100a"} and unbuilt_archs(("sm90a", "sm100a")) == {}
    # every sm100a quick cell family: 16-bit and fp8, plain and fused, 1-CTA and 2-CTA
    sm100 = [c for c in both if c.arch == "sm100a"]
    assert {c.config.two_cta for c in sm100} == {False, True}
    assert {c.dtype for c in sm100} >= {"bfloat16", "float16", "float8_e4m3fn"}
    assert len({c.epilogue for c in sm100}) >= 6


def test_reports_are_written_and_count_skips(tmp_path):
    results = [
        _res("a", 1.0),
        {"id": "sm90a/x/a", "gate": "gpu", "status": "skip", "reason": "not run: needs sm90 GPU",
         "cell": {"arch": "sm90a", "dtype": "bfloat16", "out_dtype": "bfloat16", "epilogue": "none"}},
        {"id": "sm90a/x/b", "gate": "gpu", "status": "fail", "reason": "numerics off",
         "cell": {"arch": "sm90a"}},
        # a perf cell names no output dtype or epilogue (a real H200 report with such cells once crashed the page)
        {"id": "sm90a/perf/bfloat16/8x8x8", "gate": "perf", "status": "pass", "reason": "",
         "cell": {"arch": "sm90a", "dtype": "bfloat16"}},
    ]
    b = check_budgets(results[:1], load_budgets())
    report = {"schema": 1, "environment": {"python": "3"}, "results": results, "perf": None,
              "summary": {"run_id": "t", "tag": "quick", "seconds": 1.0, "ok": False,
                          "skips_by_reason": {"not run: needs sm90 GPU": 1}, "budgets": b}}
    paths = write_reports(report, tmp_path)
    md = paths["markdown"].read_text()
    assert "FAIL" in md and "not run: needs sm90 GPU | 1" in md and "numerics off" in md
    root = ET.parse(paths["junit"]).getroot()
    assert root.get("tests") == "4" and root.get("failures") == "1" and root.get("skipped") == "1"
    assert json.loads(paths["json"].read_text())["summary"]["run_id"] == "t"
    page = paths["html"].read_text()
    assert page.startswith("<!doctype html>") and "not run: needs sm90 GPU" in page
    # the compile-time histogram: a matplotlib chart, or the line saying how to draw it
    assert "data:image/png;base64," in page or "matplotlib is not installed" in page
    assert "http" not in page.replace("http-equiv", "")  # self-contained: nothing fetched
    # docs/results keeps reports gzip-compressed: they load the same
    gz = tmp_path / "stored" / "report.json.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(paths["json"].read_bytes()))
    assert load_report(gz) == load_report(paths["json"]) == json.loads(paths["json"].read_text())


def test_readme_commands_and_ci_agree():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    m = re.search(r"<!-- test-command -->\s*```(?:bash|sh)?\n(.+?)\n```", readme, re.S)
    assert m, "README must mark its test command"
    test_cmd = m.group(1).strip()
    assert test_cmd in ci, "'.ci/run' must call the README's test command"
    assert re.search(r"<!-- main-command -->\s*```", readme)


def test_nox_sessions_exist():
    text = (ROOT / "noxfile.py").read_text()
    for name in ("def tests", "def lint", "def compile_matrix", "def gpu", "def bench", "def validate",
                 "def compile_versions"):
        assert name in text


def test_fuzz_findings_fail_the_report_and_replay(tmp_path, monkeypatch):
    """The fuzzer's run is a gate: its findings fail the report, which prints the replay command."""
    from cutedsl_backend.validation import fuzz as fuzz_mod
    from cutedsl_backend.validation import runner

    monkeypatch.setattr(fuzz_mod, "fuzz", lambda seed, cases, log=print, gated_cases=None, scaled_cases=None: [
        "case 3: wrong result"])
    fz = runner.fuzz_gate("quick")
    assert fz["cases"] == runner.FUZZ_CASES["quick"] and fz["findings"] == ["case 3: wrong result"]
    assert fz["seed"] == runner.fuzz_gate("quick")["seed"]  # fixed per tag: replayable
    report = {"schema": 1, "environment": {}, "results": [], "perf": None, "fuzz": fz,
              "summary": {"run_id": "t", "tag": "quick", "seconds": 1.0, "ok": False,
                          "skips_by_reason": {}, "budgets": check_budgets([], load_budgets())}}
    paths = write_reports(report, tmp_path)
    md = paths["markdown"].read_text()
    assert (f"fuzz --seed {fz['seed']} --cases {fz['cases']} --gated-cases {fz['gated_cases']} "
            f"--scaled-cases {fz['scaled_cases']}") in md
    assert "case 3: wrong result" in md
    assert "case 3: wrong result" in paths["html"].read_text()
