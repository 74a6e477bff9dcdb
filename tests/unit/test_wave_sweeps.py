"""The waves sweep on the CPU (``sweep-decode --space waves``): which tile widths it tries per
cell (those that fill the SMs' waves better than the cell's table entry or pick), that it skips
the cells where none does and times every candidate (its command line: test_table_updates.py);
and that a sweep times
a config the precompile's probe problem outgrows in the cells that take it."""

import json
from pathlib import Path
from unittest import mock

import pytest

from cutedsl_backend.configs import GemmConfig, wave_efficiency
from cutedsl_backend.configs.measured import MeasuredEntry, MeasuredTable
from cutedsl_backend.problem import GemmProblem
from cutedsl_backend.validation import sweep_spaces as sp

KV_A = (576, 7168)  # deepseek-v3's kv_a projection
GPU = "NVIDIA Test GPU"


def reference_gemm(a, b, *, config, out):
    """cb.gemm's result on the CPU (what a sweep checks against float64), whatever the config."""
    return out.copy_((a.float() @ b.float()).to(out.dtype))


def table(*entries):
    return MeasuredTable(GPU, "sm90a", "16bit", "unit test", tuple(entries))


def test_wave_widths_are_tried_where_they_fill_the_waves_better():
    served = GemmConfig(128, 192, cluster_m=2)
    t = table(MeasuredEntry(*KV_A, 4096, served, 0.06, 0.05, 0.06))
    cands = sp.wave_candidates(t, *KV_A, 4096)
    assert cands[0] == served
    tried = cands[1:]
    # 144 columns: 4 x 32 = 128 tiles, one wave of 132 SMs (192: 3 x 32 = 96, 0.73 of one)
    assert GemmConfig(128, 144) in tried
    problem = GemmProblem(4096, *KV_A, b_major="k")
    base = wave_efficiency(served, problem)
    assert all(wave_efficiency(c, problem) > base + sp.WAVE_GAIN for c in tried)
    assert {(c.cluster_m, c.cluster_n) for c in tried} == {(1, 1), (2, 1), (1, 2)}
    assert all(c.tile_m == 128 and c.schedule == "cooperative" and c.tile_n in sp.WAVE_WIDTHS for c in tried)


def test_an_entry_measured_at_another_m_is_weighed_against_the_pick():
    # the 4096-token entry serves 3000 tokens: the sweep at 3000 times the models' pick beside it
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.validation.sweep_spaces import sweep_problem

    served = GemmConfig(128, 192, cluster_m=2)
    t = table(MeasuredEntry(*KV_A, 4096, served, 0.06, 0.05, 0.06))
    problem, spec = sweep_problem("bfloat16", 3000, *KV_A)
    cands = sp.wave_candidates(t, *KV_A, 3000)
    assert cands[:2] == [served, default_config(problem, epilogue=spec).tiling()]
    # at the entry's own M only the widths join it
    assert all(c.tile_n in sp.WAVE_WIDTHS for c in sp.wave_candidates(t, *KV_A, 4096)[1:])


def test_a_cell_whose_tiles_already_fill_the_waves_tries_nothing_new():
    # 8192 x 8192 at 4096 tokens: 32 x 32 tiles of 128 x 256, 1024 = 7.76 waves
    full = GemmConfig(128, 256, cluster_m=2)
    t = table(MeasuredEntry(8192, 8192, 4096, full, 0.3, 0.3, 0.3))
    assert sp.wave_candidates(t, 8192, 8192, 4096) == [full]


def test_the_waves_sweep_skips_cells_without_candidates_and_times_every_candidate():
    import cutedsl_backend as cb
    from cutedsl_backend.validation import tuning_sweeps as ts

    ran = []

    def gemm(a, b, *, config, out):
        ran.append(config)
        return reference_gemm(a, b, config=config, out=out)

    with mock.patch.object(ts, "precompile", lambda pairs, workers=None: [(p[1].name, 0.0, None) for p in pairs]), \
            mock.patch.object(cb, "gemm", gemm):
        rows = ts.sweep_decode(ms=(200,), space="waves", prior=table(), models=["deepseek-v3"], log=lambda *a: None,
                               device="cpu", timer=lambda fn: (fn(), 1.0)[1])
    cells = {(r["n"], r["k"]) for r in rows}
    assert cells and all(len(sp.wave_candidates(table(), n, k, 200)) > 1 for n, k in cells)
    for row in rows:
        assert set(row["times"]) >= {c.name for c in sp.wave_candidates(table(), row["n"], row["k"], 200)}
    assert any(c.tile_n in sp.WAVE_WIDTHS for c in ran)
    with pytest.raises(ValueError, match="above 64"):
        ts.sweep_decode(ms=(48,), space="waves", prior=table(), models=["deepseek-v3"], device="cpu",
                        timer=lambda fn: 1.0)


def test_a_config_the_probe_outgrows_is_still_timed_in_its_own_cell():
    """At one token the few-token pick loads one row of A: the rules refuse it for the precompile's
    8-token probe, but the 1-token cell takes it and must time it (else a table update would name
    the fastest of the other candidates without the pick beside them)."""
    import cutedsl_backend as cb
    from cutedsl_backend.configs import is_valid
    from cutedsl_backend.configs.measured import TABLE_DIR
    from cutedsl_backend.validation import tuning_sweeps as ts

    shipped = MeasuredTable.from_json(json.loads((TABLE_DIR / "nvidia-h100-80gb-hbm3-16bit.json").read_text()))

    def precompile(pairs, workers=None):  # the rules' verdict for the probe, as the workers report it
        return [(c.name, 0.0, None if is_valid(c, p) else "UnsupportedGemmError: for the probe") for p, c, _ in pairs]

    with mock.patch.object(ts, "precompile", precompile), mock.patch.object(cb, "gemm", reference_gemm):
        rows = ts.sweep_decode(ms=(1,), space="clusters", prior=shipped, models=["phi3-mini"], log=lambda *a: None,
                               device="cpu", timer=lambda fn: (fn(), 1.0)[1])
    assert rows and all(r["pick"] in r["times"] and "_a1" in r["pick"] for r in rows)


def test_tune_runs_the_waves_sweeps_last_against_the_table_it_measured_so_far(tmp_path):
    """tune: after the mid-size and swap-AB sweeps of a class, its waves sweeps (at ``waves_ms``),
    each given the table the earlier sweeps made (none yet: an empty one); their rows merge with the
    others' cells, a faster width naming the entry."""
    from cutedsl_backend.validation.tune import tune

    wide, base = GemmConfig(128, 144, cluster_n=2), GemmConfig(128, 192, cluster_m=2)
    calls = []

    def sweep(ms, space, models, dtype, log, prior=None):
        calls.append((space, dtype, ms[0], prior))
        times = {base.name: 0.012} if space != "waves" else {base.name: 0.0121, wide.name: 0.010}
        return [{"m": ms[0], "n": 576, "k": 7168, "dtype": dtype, "peer_ms": 0.011, "pick": base.name, "times": times}]

    paths = tune(str(tmp_path), ms=(1024,), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), waves_ms=(1024,),
                 fp8_waves_ms=(2048,), sweep=sweep, log=lambda *a: None, gpu=GPU, versions={})
    assert [(s, d, m) for s, d, m, _ in calls] == [("mid", "bfloat16", 1024), ("waves", "bfloat16", 1024),
                                                   ("waves", "fp8_tensorwise", 2048)]
    bf16_prior, fp8_prior = calls[1][3], calls[2][3]
    assert [(e.m, e.config) for e in bf16_prior.entries] == [(1024, base)]  # the mid sweep's table
    assert fp8_prior.entries == () and fp8_prior.operands == "fp8_precise"  # nothing measured before it
    made = {Path(p).name: MeasuredTable.from_json(json.loads(Path(p).read_text())) for p in paths}
    assert all(t.entries[0].config == wide for t in made.values())  # 17% faster than the entry: named
    assert "--space waves" in made[next(n for n in made if n.endswith("16bit.json"))].source


def test_fp8_at_1024_tokens_tries_the_112_wide_tile_cublas_runs():
    # 3584 x 14336 at 1024 tokens: 128-wide tiles make 8 x 28 = 224 (1.70 waves), 112-wide ones
    # 8 x 32 = 256 (1.94); cuBLAS's FP8 kernel there is 112 wide (H100, probe-configs --peer-kernels)
    cands = sp.wave_candidates(None, 3584, 14336, 1024, dtype="fp8_tensorwise")
    assert cands[0].tile_n == 128  # the models' pick
    tried = cands[1:]
    assert GemmConfig(128, 112, cluster_m=2) in tried
    assert all(c.tile_n != 96 for c in tried)  # 3584 / 96: 38 tiles, no better fill than 128


def _linear(m, n, k, dtype="bfloat16", arch="sm90a"):
    out = "bfloat16" if dtype == "float8_e4m3fn" else dtype
    return GemmProblem(m, n, k, 1, dtype, out, "k", "k", arch)


def test_the_models_take_a_width_that_fills_the_waves_where_the_heuristic_scores_it_5_percent_faster():
    """configs.heuristic.waves_choice: 576 columns at 4096 tokens are three 192-wide tiles per row
    (96 tiles: 36 SMs idle) or four of 144 (128 tiles): the models' pick takes 144; a pick
    that already fills its waves (8192^3, many waves) keeps its width."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.heuristic import WAVES_MIN_GAIN, heuristic_score, waves_choice

    problem = _linear(4096, *KV_A)
    pick = default_config(problem)
    assert (pick.tile_m, pick.tile_n, pick.schedule) == (128, 144, "cooperative") and not pick.swap_ab
    base = GemmConfig(128, 192, cluster_m=2)
    assert heuristic_score(pick.tiling(), problem) <= (1 - WAVES_MIN_GAIN) * heuristic_score(base, problem)
    big = _linear(8192, 8192, 8192)
    assert waves_choice(big, default_config(big)) is None
    assert default_config(big).tile_n not in sp.WAVE_WIDTHS


def test_the_waves_choice_stays_where_it_was_measured():
    """Only in place of a 128-row cooperative pick (no swap, no K slices), on sm90a, for a bare GEMM
    or FP8 with scalar scales; never a precise FP8 tile keeping two accumulators."""
    from cutedsl_backend.configs.heuristic import waves_choice
    from cutedsl_backend.configs.resources import promoted_acc_copies
    from cutedsl_backend.epilogue import EpilogueSpec

    problem = _linear(4096, *KV_A)
    base = GemmConfig(128, 192, cluster_m=2)
    assert waves_choice(problem, base) is not None
    assert waves_choice(problem, base.replace(swap_ab=True)) is None
    assert waves_choice(problem, base.replace(splits=2)) is None
    assert waves_choice(problem, GemmConfig(64, 192, schedule="pingpong")) is None
    assert waves_choice(_linear(4096, *KV_A, arch="sm100a"), base) is None
    assert waves_choice(problem, base, epilogue=EpilogueSpec(bias="row")) is None
    fp8 = _linear(2048, 1536, 7168, "float8_e4m3fn")
    scalar = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    chosen = waves_choice(fp8, GemmConfig(128, 128, cluster_m=2), epilogue=scalar)
    assert chosen is not None and chosen.tile_n in sp.WAVE_WIDTHS and promoted_acc_copies(chosen) != 2
    rowwise = EpilogueSpec(scale_a="row", scale_b="col")
    assert waves_choice(fp8, GemmConfig(128, 128, cluster_m=2), epilogue=rowwise) is None
    fast = GemmProblem(2048, 1536, 7168, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a", fast_accum=True)
    assert waves_choice(fast, GemmConfig(128, 128, cluster_m=2), epilogue=scalar) is None
    # outside the sweeps' domain: fewer tokens, batches, fp32 out, other layouts
    assert waves_choice(_linear(384, *KV_A), base) is None
    assert waves_choice(GemmProblem(4096, *KV_A, 2, "bfloat16", "bfloat16", "k", "k", "sm90a"), base) is None
    assert waves_choice(GemmProblem(4096, *KV_A, 1, "bfloat16", "float32", "k", "k", "sm90a"), base) is None
    assert waves_choice(GemmProblem(4096, *KV_A, 1, "bfloat16", "bfloat16", "m", "k", "sm90a"), base) is None
    # no cluster past the tile grid: 3968 tokens are 31 row tiles, which a 2 x 1 cluster would pad
    odd = _linear(3968, *KV_A)
    chosen = waves_choice(odd, base)
    assert chosen is not None and chosen.cluster_m == 1, chosen


def test_a_waves_sweep_times_the_pick_the_waves_width_replaced():
    """Without a table the waves sweep's cell holds the models' pick and the pick without the
    waves width (rank_configs(..., waves=False)), so a sweep can measure and undo the choice."""
    from cutedsl_backend.configs import default_config, rank_configs

    cands = sp.wave_candidates(None, *KV_A, 4096)
    problem = _linear(4096, *KV_A)
    pick, unwaved = default_config(problem).tiling(), rank_configs(problem, waves=False)[0].tiling()
    assert pick != unwaved and pick in cands and unwaved in cands


def test_a_tables_entry_ranks_ahead_of_the_waves_width(tmp_path, monkeypatch):
    from cutedsl_backend.configs import default_config, rank_configs
    from cutedsl_backend.configs.measured import MEASURED

    problem = _linear(4096, *KV_A)
    named = GemmConfig(128, 192, cluster_m=2)
    (tmp_path / "t.json").write_text(json.dumps(table(MeasuredEntry(*KV_A, 4096, named, 0.1, 0.1, 0.1)).to_json()))
    monkeypatch.setattr(MEASURED, "directory", tmp_path)
    monkeypatch.setattr(MEASURED, "_tables", None)
    default_config.cache_clear()
    try:
        assert rank_configs(problem, gpu=GPU)[0] == named
        assert rank_configs(problem, gpu="NVIDIA Other")[0].tile_n == 144
    finally:
        default_config.cache_clear()
