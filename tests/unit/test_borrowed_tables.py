"""Borrowed config tables (configs.measured.BORROWED_TABLES): a GPU model of the same die as a
measured one serves the lender's entries where its own tables hold none, its own first; the
switch for an A/B; and what the perf sweep reports for a cell a borrowed entry served."""

import json

import pytest

from cutedsl_backend.configs import GemmConfig, default_config
from cutedsl_backend.configs.measured import BORROWED_TABLES, MEASURED, MeasuredEntry, MeasuredTable, MeasuredTables
from cutedsl_backend.problem import GemmProblem

LENDER = "NVIDIA Lender"
BORROWER = "NVIDIA Borrower"
OWN = GemmConfig(128, 192, cluster_n=2)
LENT = GemmConfig(128, 128, cluster_m=2)
FEW = GemmConfig(64, 16, schedule="pingpong", cluster_m=4, swap_ab=True)


def linear(m, n=3584, k=3584):
    return GemmProblem(m, n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")


def write(directory, name, gpu, *entries):
    t = MeasuredTable(gpu, "sm90a", "16bit", "unit test", tuple(MeasuredEntry(3584, 3584, m, cfg, 0.010, 0.011, 0.012)
                                                                for m, cfg in entries))
    (directory / name).write_text(json.dumps(t.to_json()))


@pytest.fixture
def tables(tmp_path):
    write(tmp_path, "lender.json", LENDER, (16, FEW), (64, FEW), (256, LENT), (320, LENT), (384, LENT))
    write(tmp_path, "borrower.json", BORROWER, (384, OWN))
    return MeasuredTables(tmp_path, borrowed={BORROWER: (LENDER,)})


def test_a_borrower_serves_its_own_entry_first_and_the_lenders_above_a_few_tokens(tables):
    assert tables.choice(linear(384), BORROWER) == OWN  # its own, though the lender measured 384 too
    # its own first, though the lender measured nearer: 300 tokens, the lender's 320 against its 384
    assert tables.choice(linear(300), BORROWER) == OWN and tables.choice(linear(300), LENDER) == LENT
    assert tables.choice(linear(256), BORROWER) == LENT  # 256: its own entry at 384 is sqrt(2) away
    entry, table = tables.served(linear(256), BORROWER)
    assert table.gpu == LENDER and entry.m == 256
    assert tables.served(linear(384), BORROWER)[1].gpu == BORROWER
    assert tables.bounds(linear(1), BORROWER) == (256, 320, 384)
    # a few-token entry (64 tokens or fewer) is not lent: the weights' bandwidth, which differs, decides there
    for m in (16, 64):
        assert tables.choice(linear(m), LENDER) == FEW and tables.choice(linear(m), BORROWER) is None
    assert tables.bounds(linear(1), LENDER) == (16, 64, 256, 320, 384)
    # lending goes one way, and no further than the GPU models named
    assert tables.choice(linear(384), LENDER) == LENT
    assert tables.choice(linear(256), "NVIDIA Other") is None


def test_borrowing_switched_off_leaves_a_gpu_its_own_tables(tables):
    tables.borrowing = False
    assert tables.choice(linear(384), BORROWER) == OWN
    assert tables.choice(linear(256), BORROWER) is None
    assert tables.bounds(linear(1), BORROWER) == (384,)
    assert tables.state() == {"tables": True, "borrowed_tables": False}
    tables.borrowing = True
    tables.enabled = False  # the models alone: nothing, borrowed or not
    assert tables.choice(linear(256), BORROWER) is None
    assert tables.state() == {"tables": False, "borrowed_tables": False}


def test_the_h200_borrows_the_h100_sxm_tables_only():
    """The same GH100 die, SM count, clocks and power cap; an H100 PCIe (114 SMs) or NVL (a lower
    power cap) would be another model and lends nothing."""
    assert dict(BORROWED_TABLES) == {"NVIDIA H200": ("NVIDIA H100 80GB HBM3",)}
    with pytest.raises(TypeError):
        BORROWED_TABLES["NVIDIA H100 PCIe"] = ("NVIDIA H100 80GB HBM3",)  # type: ignore[index]
    h200 = MEASURED.for_gpu("NVIDIA H200")
    assert [t.gpu for t in h200][:1] == ["NVIDIA H200"]  # its own FP8 table first
    assert {t.operands for t in h200 if t.gpu == "NVIDIA H100 80GB HBM3"} == {"16bit", "fp8_precise"}


def test_the_sweep_reports_a_borrowed_entry_as_borrowed_and_no_tuned_best(monkeypatch):
    """A cell served by a borrowed entry names its lender, and no "best in its tuning sweep": that
    sweep timed another GPU against its own peer."""
    from cutedsl_backend.validation.shape_sweep import _config_choice, _tuned_best_ratio, summarize
    from cutedsl_backend.validation.sweep_spaces import sweep_problem

    h100 = "NVIDIA H100 80GB HBM3"
    sixteen = next(t for t in MEASURED.for_gpu(h100) if t.operands == "16bit")
    # an entry above the few-token range whose config the dispatcher runs in place of the models' pick
    cell = next((e.m, e.n, e.k) for e in sixteen.entries
                if e.m > 64 and _config_choice("bfloat16", e.m, e.n, e.k, gpu=h100)[1] == "measured table")
    name, source, table_m, table_gpu = _config_choice("bfloat16", *cell, gpu="NVIDIA H200")
    assert (source, table_m, table_gpu) == ("borrowed table", cell[0], h100)
    assert name == _config_choice("bfloat16", *cell, gpu=h100)[0]
    assert _tuned_best_ratio("bfloat16", *cell, gpu="NVIDIA H200") is None
    assert _tuned_best_ratio("bfloat16", *cell, gpu=h100) is not None
    monkeypatch.setattr(MEASURED, "borrowing", False)
    default_config.cache_clear()
    try:
        problem, spec = sweep_problem("bfloat16", *cell)
        assert _config_choice("bfloat16", *cell, gpu="NVIDIA H200")[1] == "models"
        assert default_config(problem, epilogue=spec, gpu="NVIDIA H200") == default_config(problem, epilogue=spec)
    finally:
        default_config.cache_clear()
    rows = [{"dtype": "bfloat16", "m": cell[0], "n": cell[1], "k": cell[2], "ratio": 1.1, "model": "x",
             "projection": "p", "config_source": "borrowed table", "table_m": cell[0]},
            {"dtype": "bfloat16", "m": 16, "n": 1, "k": 1, "ratio": 0.9, "model": "x", "projection": "q",
             "config_source": "models", "table_m": None}]
    s = summarize(rows)["bfloat16"]
    assert (s["table_cells"], s["table_cells_borrowed"], s["table_cells_other_m"]) == (1, 1, 0)
    assert s["geomean_table"] == pytest.approx(1.1) and s["geomean_models"] == pytest.approx(0.9)


def test_a_sweep_without_borrowed_tables_says_so():
    """The two halves of the A/B look alike but for this: the report says which tables ranked."""
    from cutedsl_backend.validation.report import perf_markdown

    own = "\n".join(perf_markdown({"tables": True, "borrowed_tables": False, "summary": {}, "results": []}))
    assert "own measured tables only" in own
    both = "\n".join(perf_markdown({"tables": True, "borrowed_tables": True, "summary": {}, "results": []}))
    assert "own measured tables only" not in both and "cost models alone" not in both
    assert "cost models alone" in "\n".join(perf_markdown({"tables": False, "summary": {}, "results": []}))


def test_every_config_an_h200_is_served_fits_its_problem():
    """Around every bound of the tables an H200 looks up (its own and the borrowed), in bf16, fp16
    and fp8 with scalar scales, with and without a bias: the dispatcher's config takes the problem
    as it runs (a borrowed entry is checked against the borrower's problem like its own)."""
    from cutedsl_backend.configs import fits
    from cutedsl_backend.epilogue import EpilogueSpec

    gpu = "NVIDIA H200"
    plain, bias = EpilogueSpec(), EpilogueSpec(bias="col")
    fp8, fp8_bias = EpilogueSpec(scale_a="scalar", scale_b="scalar"), EpilogueSpec(scale_a="scalar", scale_b="scalar",
                                                                                   bias="col")
    checked = 0
    for t in MEASURED.for_gpu(gpu):
        for e in t.entries:
            for m in {e.m, e.m - 1, max(1, int(e.m / 1.41)), e.m + 1}:
                cases = ([("bfloat16", "bfloat16", plain), ("float16", "float16", bias)] if t.operands == "16bit"
                         else [("float8_e4m3fn", "bfloat16", fp8), ("float8_e4m3fn", "bfloat16", fp8_bias)])
                for dtype, out, spec in cases:
                    problem = GemmProblem(m, e.n, e.k, 1, dtype, out, "k", "k", "sm90a")
                    cfg = default_config(problem, epilogue=spec, gpu=gpu)
                    assert fits(cfg, problem, spec), (m, e, cfg.name)
                    checked += 1
    assert checked > 1000
