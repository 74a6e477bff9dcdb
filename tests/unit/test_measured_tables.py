"""Measured config tables (configs.measured): which problems an entry serves, how a table is made
from sweep rows, how the ranking uses it, and that the shipped tables hold valid configs."""

import json

import pytest

from cutedsl_backend.configs import GemmConfig, default_config, is_valid, rank_configs
from cutedsl_backend.configs.edge import EDGE_TILES
from cutedsl_backend.configs.measured import (
    MEASURED,
    MeasuredEntry,
    MeasuredTable,
    MeasuredTables,
    table_from_sweeps,
)
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem

GPU = "NVIDIA Test GPU"
SWAP = GemmConfig(64, 192, schedule="pingpong", swap_ab=True)
COOP = GemmConfig(128, 192, cluster_n=2)


def linear(m, n=3584, k=3584, batch=1):
    return GemmProblem(m, n, k, batch, "bfloat16", "bfloat16", "k", "k", "sm90a")


def table(*entries, gpu=GPU):
    return MeasuredTable(gpu, "sm90a", "16bit", "unit test", tuple(entries))


def entry(m, config, n=3584, k=3584):
    return MeasuredEntry(n, k, m, config, 0.010, 0.011, 0.012)


def tune(out_dir, **kw):
    """validation.tune.tune without its waves sweeps (their tests: test_wave_sweeps.py)."""
    from cutedsl_backend.validation.tune import tune as tune_all

    return tune_all(out_dir, **{"waves_ms": (), "fp8_waves_ms": (), **kw})


def test_an_entry_serves_the_token_counts_up_to_its_m_within_sqrt2():
    t = table(entry(384, COOP))
    assert t.choice(linear(384)) == COOP
    assert t.choice(linear(300)) == COOP and t.choice(linear(272)) == COOP  # 384 / 272 < sqrt(2)
    assert t.choice(linear(271)) is None  # farther below
    assert t.choice(linear(385)) is None  # above: more work than was measured
    t = table(entry(384, SWAP))
    assert t.choice(linear(300)) == SWAP and t.choice(linear(192)) is None


def test_a_few_tokens_are_not_served_by_a_mid_size_measurement():
    """A config measured at 128 tokens has one tile at 16 too, where the problem is bound by the
    weights' bandwidth and the decode configs win (the H100 A/B measured such cells at 0.65-0.75x
    cuBLAS against the models' ~1.0x): only M within sqrt(2) below a measured M."""
    t = table(entry(128, GemmConfig(128, 128)))
    assert t.choice(linear(128)) is not None and t.choice(linear(91)) is not None
    assert t.choice(linear(90)) is None and t.choice(linear(64)) is None and t.choice(linear(1)) is None


def test_a_few_token_entry_serves_every_m_that_loads_the_same_rows_of_a():
    """A few-token config does the same work at every M within the rows of A it loads: an entry
    at 16 tokens (16 rows) serves 1-16, at 32 17-32, at 64 (the whole 64-row tile) 33-64."""
    a16 = GemmConfig(64, 32, schedule="pingpong", a_rows=16)
    a32 = GemmConfig(64, 64, schedule="pingpong", splits=2, a_rows=32)
    a0 = GemmConfig(64, 128, schedule="pingpong")
    t = table(entry(16, a16), entry(32, a32), entry(64, a0))
    assert [t.choice(linear(m)) for m in (1, 2, 7, 16)] == [a16] * 4
    assert [t.choice(linear(m)) for m in (17, 24, 32)] == [a32] * 3
    assert [t.choice(linear(m)) for m in (33, 40, 64)] == [a0] * 3
    # a 16-token entry whose config loads the whole tile: other rows than a 1-token problem's loads
    assert table(entry(16, a0)).choice(linear(1)) is None and table(entry(16, a0)).choice(linear(12)) == a0
    # an entry at 64 whose config loads 32 rows is not a config for 64 tokens: nothing below sqrt(2)
    assert table(entry(64, a32)).choice(linear(20)) is None
    # neither a swap-AB tile of fewer tokens than measured, a 128-row or a mid-size-measured config:
    # only the sqrt(2) rule
    for cfg in (GemmConfig(64, 32, schedule="pingpong", swap_ab=True), GemmConfig(128, 128)):
        assert table(entry(64, cfg)).choice(linear(40)) is None
    assert table(entry(96, GemmConfig(64, 128, schedule="pingpong"))).choice(linear(64)) is None


def test_the_next_measured_m_at_or_above_serves_and_an_old_models_entry_serves_nothing():
    wide = GemmConfig(128, 256, schedule="cooperative", swap_ab=True)  # 256 tokens a tile
    t = table(entry(256, wide), entry(192, SWAP))
    assert t.choice(linear(192)) == SWAP and t.choice(linear(150)) == SWAP
    assert t.choice(linear(193)) == wide and t.choice(linear(250)) == wide  # 192 is below: too little
    t = table(entry(128, None), entry(256, GemmConfig(128, 128, cluster_m=2)))
    assert t.choice(linear(100)) is None  # a table made before picks were kept: the models serve
    assert t.choice(linear(129)) is None and t.choice(linear(182)) == GemmConfig(128, 128, cluster_m=2)  # sqrt(2)


@pytest.mark.parametrize("problem", [
    linear(384, n=4096),                                      # another projection
    linear(384, batch=2),                                     # batched
    GemmProblem(384, 3584, 3584, 1, "bfloat16", "bfloat16", "k", "n", "sm90a"),  # B row-major
    GemmProblem(384, 3584, 3584, 1, "bfloat16", "float32", "k", "k", "sm90a"),   # fp32 out
    GemmProblem(384, 3584, 3584, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a"),  # another class
    GemmProblem(384, 3584, 3584, 1, "bfloat16", "bfloat16", "m", "k", "sm90a"),  # A column-major
    GemmProblem(384, 3584, 3584, 1, "bfloat16", "bfloat16", "k", "k", "sm90a", c_major="m"),  # out^T
    GemmProblem(384, 3584, 3584, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a",
                b_dtype="float8_e5m2"),                                        # an fp8 mix
    GemmProblem(0, 3584, 3584, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"),  # empty
], ids=["projection", "batch", "layout", "out-dtype", "fp8", "a-major", "c-major", "b-dtype", "empty"])
def test_an_entry_serves_only_what_was_measured(problem):
    assert table(entry(384, COOP)).choice(problem) is None


def test_a_table_serves_its_own_arch_only():
    t = MeasuredTable(GPU, "sm100a", "16bit", "unit test", (entry(384, COOP),))
    assert not t.covers(linear(384)) and t.choice(linear(384)) is None


def test_no_entry_for_a_gated_epilogue_a_residual_or_one_its_config_cannot_take():
    t = table(entry(384, COOP))
    gated = EpilogueSpec(gated="silu")
    from cutedsl_backend.configs import fits

    assert fits(COOP, linear(384), gated)  # the config could run it: the table declines, not the rules
    assert t.choice(linear(384), gated) is None
    assert fits(COOP, linear(384), EpilogueSpec(residual=True))
    assert t.choice(linear(384), EpilogueSpec(residual=True)) is None
    assert t.choice(linear(384), EpilogueSpec(bias="col", activation="silu")) == COOP
    t = table(entry(384, SWAP))
    assert t.choice(linear(384), EpilogueSpec(bias="col", activation="silu")) == SWAP



def _row(m, times, pick, n=3584, k=3584, peer=0.02):
    return {"m": m, "n": n, "k": k, "dtype": "bfloat16", "peer_ms": peer, "pick": pick.name,
            "times": {c.name: t for c, t in times.items()}}


def test_a_table_names_the_fastest_config_where_it_beats_the_models_pick_else_the_pick():
    rows = [_row(384, {COOP: 0.010, SWAP: 0.012}, pick=SWAP),       # 20% faster than the pick: named
            _row(512, {COOP: 0.0198, SWAP: 0.020}, pick=SWAP),      # 1% (noise): the pick is kept
            _row(256, {COOP: 0.020, SWAP: 0.010}, pick=SWAP),       # the pick is fastest
            _row(128, {COOP: 0.020}, pick=SWAP)]                    # the pick did not run: the fastest
    t = table_from_sweeps(rows, GPU, "unit test")
    assert [(e.m, e.config) for e in t.entries] == [(128, COOP), (256, SWAP), (384, COOP), (512, SWAP)]
    e = t.entries[2]
    assert (e.ms, e.model_ms, e.peer_ms) == (0.010, 0.012, 0.02)
    # two sweeps at one M (mid-size and swap-AB rows): every config's fastest, the peers' median
    both = table_from_sweeps([_row(384, {COOP: 0.011}, pick=COOP, peer=0.02),
                              _row(384, {SWAP: 0.010}, pick=COOP, peer=0.03)], GPU, "unit test")
    (e,) = both.entries
    assert (e.config, e.ms, e.peer_ms) == (SWAP, 0.010, pytest.approx(0.025))


def test_a_table_names_its_configs_unmoved():
    """A sweep's rows may name a moved pick (GemmConfig.edge); the table keeps the config, the
    edge policy moves the tiles of whichever config it serves."""
    moved = SWAP.replace(edge=True)
    (e,) = table_from_sweeps([_row(384, {moved: 0.010, COOP: 0.013}, pick=moved)], GPU, "unit test").entries
    assert e.config == SWAP and not e.config.edge


def test_a_table_merges_sweeps_of_the_same_shape():
    rows = [_row(384, {COOP: 0.013, SWAP: 0.012}, pick=SWAP, peer=0.02),
            _row(384, {COOP: 0.010}, pick=SWAP, peer=0.03)]
    (e,) = table_from_sweeps(rows, GPU, "unit test").entries
    assert e.config == COOP and e.ms == 0.010 and e.model_ms == 0.012


def test_a_table_takes_sweeps_of_one_operand_class():
    row = _row(384, {COOP: 0.010}, pick=SWAP)
    fp8 = {**row, "dtype": "fp8_tensorwise"}
    with pytest.raises(ValueError, match="one operand class"):
        table_from_sweeps([row, fp8], GPU, "unit test")
    with pytest.raises(ValueError, match="one operand class"):
        table_from_sweeps([{**row, "dtype": "float16"}], GPU, "unit test")
    assert table_from_sweeps([fp8], GPU, "unit test").operands == "fp8_precise"


def test_an_fp8_table_serves_e4m3_with_scalar_scales_to_bf16():
    t = MeasuredTable(GPU, "sm90a", "fp8_precise", "unit test", (entry(384, COOP),))
    fp8 = GemmProblem(384, 3584, 3584, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a")
    scalar, rowwise = EpilogueSpec(scale_a="scalar", scale_b="scalar"), EpilogueSpec(scale_a="row", scale_b="col")
    assert t.choice(fp8, scalar) == COOP
    assert t.choice(fp8, rowwise) is None  # not measured
    assert t.choice(GemmProblem(384, 3584, 3584, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a",
                                fast_accum=True), scalar) is None  # another class
    assert t.choice(linear(384)) is None


def test_json_round_trip_and_schema(tmp_path):
    t = table(entry(384, COOP), entry(192, SWAP, n=4096, k=4096), entry(256, None))
    assert MeasuredTable.from_json(json.loads(json.dumps(t.to_json()))) == t
    with pytest.raises(ValueError, match="schema"):
        MeasuredTable.from_json({**t.to_json(), "schema": 99})
    (tmp_path / "t.json").write_text(json.dumps(t.to_json()))
    tables = MeasuredTables(tmp_path)
    assert tables.choice(linear(384), GPU) == COOP
    assert tables.choice(linear(384), "NVIDIA Other") is None and tables.choice(linear(384), None) is None
    tables.enabled = False  # the models alone
    assert tables.choice(linear(384), GPU) is None


@pytest.fixture
def measured_other(tmp_path, monkeypatch):
    """A function installing, as the tables MEASURED serves, one entry at ``m`` tokens naming an
    unswapped config other than the models' pick; it returns (models' pick, that config)."""

    def install(m):
        models_pick = default_config(linear(m))
        other = next(c for c in rank_configs(linear(m)) if c != models_pick and not c.swap_ab)
        (tmp_path / "t.json").write_text(json.dumps(table(entry(m, other)).to_json()))
        monkeypatch.setattr(MEASURED, "directory", tmp_path)
        monkeypatch.setattr(MEASURED, "_tables", None)
        default_config.cache_clear()
        return models_pick, other

    yield install
    default_config.cache_clear()


def test_the_ranking_puts_this_gpus_entry_first_and_only_there(measured_other):
    problem = linear(384)
    models_pick, other = measured_other(384)
    assert rank_configs(problem, gpu=GPU)[0] == other
    assert default_config(problem, gpu=GPU) == EDGE_TILES.apply(other, problem)
    assert default_config(problem, gpu="NVIDIA Other") == models_pick
    assert default_config(problem) == models_pick
    ranked = rank_configs(problem, gpu=GPU)
    assert len(ranked) == len(set(ranked))  # listed once


def test_the_shipped_tables_hold_valid_configs_and_say_how_they_were_made():
    tables = [MeasuredTable.from_json(json.loads(p.read_text())) for p in sorted(MEASURED.directory.glob("*.json"))]
    assert tables, "no shipped table"
    for t in tables:
        assert "sweep-decode" in t.source and "config-table" in t.source and t.gpu in t.source
        assert all(e.config is not None for e in t.entries)
        for e in t.entries:
            dtype = "bfloat16" if t.operands == "16bit" else "float8_e4m3fn"
            problem = GemmProblem(e.m, e.n, e.k, 1, dtype, "bfloat16", "k", "k", "sm90a")
            assert t.covers(problem)
            assert is_valid(e.config, problem.swapped() if e.config.swap_ab else problem), e
            assert t.entry(problem) == e  # every entry serves at least its own M
        assert MEASURED.for_gpu(t.gpu)


def test_the_report_says_which_cells_a_measured_table_served():
    from cutedsl_backend.validation.report import perf_markdown
    from cutedsl_backend.validation.shape_sweep import summarize

    def cell(m, ratio, source, table_m=None):
        return {"dtype": "bfloat16", "model": "m", "projection": "p", "n": 4096, "k": 4096, "m": m,
                "ratio": ratio, "status": "pass", "correct": True, "config_source": source, "table_m": table_m}

    rows = [cell(256, 1.0, "measured table", 256), cell(320, 0.95, "measured table", 384), cell(512, 0.81, "models"),
            cell(1024, 0.9, "models")]
    summary = summarize(rows)["bfloat16"]
    # the 320-token cell took the entry measured at 384: a table cell out of sample
    assert summary["table_cells"] == 2 and summary["table_cells_other_m"] == 1
    assert abs(summary["geomean_table"] - 0.95 ** 0.5) < 1e-12
    assert abs(summary["geomean_models"] - (0.81 * 0.9) ** 0.5) < 1e-12
    text = "\n".join(perf_markdown({"summary": {"bfloat16": summary}, "results": rows}))
    assert "| bfloat16 | 2 | 1 | 0 | 0.975 | 2 | 0.854 |" in text
    rows = [{**r, "config_source": "models"} for r in rows]
    assert "measured config table" not in "\n".join(perf_markdown({"summary": summarize(rows), "results": rows}))


def test_the_inductor_dispatch_buckets_take_this_gpus_entry(measured_other):
    """A dynamic-M offer compiles ahead the kernel each token bucket dispatches to: with this
    GPU's table, the entry's config at its bucket."""
    from cutedsl_backend.inductor.eligibility import Offer

    models_pick, other = measured_other(256)

    def buckets(gpu):  # the configs compiled ahead, their edge-moved twins (configs.edge) folded in
        offer = Offer(linear(4096), EpilogueSpec(), (models_pick,), dynamic=True, gpu=gpu)
        return {cfg.replace(edge=False) for _, cfg in offer.dispatch_buckets()}

    assert other not in buckets(None)
    assert other in buckets(GPU)


def test_a_table_file_that_does_not_load_is_skipped(tmp_path, caplog):
    (tmp_path / "bad.json").write_text('{"schema": 99}')
    (tmp_path / "rows.json").write_text('[{"m": 1}]')  # sweep rows, not a table
    (tmp_path / "good.json").write_text(json.dumps(table(entry(384, COOP)).to_json()))
    (tmp_path / "tuned-on.json").write_text('{"gpu": "NVIDIA Test GPU", "models": null}')  # tune's marker
    tables = MeasuredTables(tmp_path)
    assert tables.choice(linear(384), GPU) == COOP
    assert "bad.json" in caplog.text and "rows.json" in caplog.text and "tuned-on" not in caplog.text


def test_the_report_names_a_table_only_for_the_cells_it_serves():
    """fp8 rowwise cells run row/column scales, which no table serves: reported as the models'."""
    from cutedsl_backend.configs.as_run import as_run
    from cutedsl_backend.validation.shape_sweep import _config_choice
    from cutedsl_backend.validation.sweep_spaces import sweep_problem

    gpu = "NVIDIA H100 80GB HBM3"
    fp8 = next(t for t in MEASURED.for_gpu(gpu) if t.operands == "fp8_precise")
    # an entry running another config than the models' pick, as run (configs.as_run fits A loads)
    scalars = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    cell = lambda e: sweep_problem("fp8_tensorwise", e.m, e.n, e.k)[0]  # noqa: E731
    e = next(e for e in fp8.entries if e.config is not None
             and as_run(e.config, cell(e), scalars) != default_config(cell(e), epilogue=scalars))
    served = EDGE_TILES.apply(e.config, cell(e))  # configs.edge
    assert _config_choice("fp8_tensorwise", e.m, e.n, e.k, gpu=gpu) == (served.name, "measured table", e.m, gpu)
    assert _config_choice("fp8_rowwise", e.m, e.n, e.k, gpu=gpu)[1] == "models"


def test_a_cell_a_table_serves_reports_the_best_its_tuning_sweep_measured():
    """The report's context for a slow cell: the serving entry's fastest candidate against its own
    sweep's peer time, and the M it was measured at (the next measured M up for a cell between);
    none where no table serves (other scales, another GPU, a gated epilogue)."""
    from cutedsl_backend.validation.shape_sweep import _tuned_best_ratio

    gpu = "NVIDIA H100 80GB HBM3"
    fp8 = next(t for t in MEASURED.for_gpu(gpu) if t.operands == "fp8_precise")
    e = next(e for e in fp8.entries if e.m == 192 and (e.n, e.k) == (4096, 4096))
    assert _tuned_best_ratio("fp8_tensorwise", 192, 4096, 4096, gpu=gpu) == {"ratio": e.peer_ms / e.ms, "m": 192}
    assert _tuned_best_ratio("fp8_tensorwise", 180, 4096, 4096, gpu=gpu)["m"] == 192
    assert _tuned_best_ratio("fp8_rowwise", 192, 4096, 4096, gpu=gpu) is None
    assert _tuned_best_ratio("fp8_tensorwise", 192, 4096, 4096, gpu="NVIDIA Other") is None
    assert _tuned_best_ratio("gated_silu", 192, 28672, 4096, gpu=gpu) is None
    assert _tuned_best_ratio("float16", 192, 4096, 4096, gpu=gpu) is None  # swept in bf16, against bf16 cuBLAS
    assert _tuned_best_ratio("bfloat16", 192, 4096, 4096, gpu=gpu) is not None


def test_tune_writes_this_gpus_tables_and_a_user_directory_serves_them(tmp_path, monkeypatch):
    """`python -m cutedsl_backend tune`'s logic with the sweeps stood in for: one table per
    operand class, with the commands behind it, served through CUTEDSL_BACKEND_CONFIG_TABLES."""
    from cutedsl_backend.validation.tune import gpu_slug

    calls = []

    def sweep(ms, space, models, dtype, log):
        calls.append((ms, space, dtype))
        (m,) = ms
        pick, best = (SWAP, COOP) if dtype == "bfloat16" else (COOP, GemmConfig(128, 128, cluster_m=2))
        return [{"m": m, "n": 3584, "k": 3584, "dtype": dtype, "peer_ms": 0.02, "pick": pick.name,
                 "times": {pick.name: 0.012, best.name: 0.010}}]

    paths = tune(str(tmp_path), ms=(384,), swap_ms=(192,), fp8_ms=(256,), sweep=sweep, log=lambda *a: None,
                 gpu=GPU, versions={"torch": "t", "nvidia_cutlass_dsl": "d", "cutedsl_backend": "c"}, decode_ms=(16,),
                 fp8_swap_ms=(128,), fp8_decode_ms=(32,))
    assert calls == [((16,), "decode", "bfloat16"), ((384,), "mid", "bfloat16"), ((192,), "swap", "bfloat16"),
                     ((32,), "decode", "fp8_tensorwise"), ((256,), "mid", "fp8_tensorwise"),
                     ((128,), "swap", "fp8_tensorwise")]
    assert [p.name for p in paths] == [f"{gpu_slug(GPU)}-16bit.json", f"{gpu_slug(GPU)}-fp8.json"]
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    sixteen = MeasuredTable.from_json(json.loads(paths[0].read_text()))
    assert sixteen.operands == "16bit"
    assert [(e.m, e.config) for e in sixteen.entries] == [(16, COOP), (192, COOP), (384, COOP)]
    assert "sweep-decode --space swap --dtype bfloat16 --ms 192" in sixteen.source and "config-table" in sixteen.source
    assert (tmp_path / "sweeps" / "sweep-mid-fp8-m256.json").exists()
    fp8_table = MeasuredTable.from_json(json.loads(paths[1].read_text()))
    assert [e.m for e in fp8_table.entries] == [32, 128, 256]
    assert "sweep-decode --space swap --dtype fp8_tensorwise --ms 128" in fp8_table.source
    assert "sweep-decode --space decode --dtype fp8_tensorwise --ms 32" in fp8_table.source
    monkeypatch.setenv("CUTEDSL_BACKEND_CONFIG_TABLES", str(tmp_path))
    tables = MeasuredTables(tmp_path / "no-shipped-tables")
    assert tables.choice(linear(384), GPU) == COOP
    fp8 = GemmProblem(256, 3584, 3584, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a")
    scalar = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    assert tables.choice(fp8, GPU, scalar) == GemmConfig(128, 128, cluster_m=2)


def test_tune_resumes_where_it_stopped_and_only_on_the_same_gpu(tmp_path):
    """A tune stopped during a sweep leaves the table of the sweeps it finished, and a rerun
    measures only the rest."""
    calls = []

    def sweep(ms, space, models, dtype, log):
        calls.append((ms, space))
        if len(calls) == 2:
            raise KeyboardInterrupt  # stopped during its second sweep
        return [{"m": ms[0], "n": 3584, "k": 3584, "dtype": dtype, "peer_ms": 0.02, "pick": SWAP.name,
                 "times": {SWAP.name: 0.012, COOP.name: 0.010}}]

    args = dict(ms=(384,), swap_ms=(192,), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None, gpu=GPU,
                versions={})
    with pytest.raises(KeyboardInterrupt):
        tune(str(tmp_path), **args)
    (stopped,) = (tmp_path).glob("*-16bit.json")  # the table of what the stopped tune measured
    assert [e.m for e in MeasuredTable.from_json(json.loads(stopped.read_text())).entries] == [384]
    (path,) = tune(str(tmp_path), **args)
    assert path == stopped
    assert calls == [((384,), "mid"), ((192,), "swap"), ((192,), "swap")]  # the first sweep's rows kept
    assert [e.m for e in MeasuredTable.from_json(json.loads(path.read_text())).entries] == [192, 384]
    with pytest.raises(ValueError, match="another directory"):
        tune(str(tmp_path), **{**args, "gpu": "NVIDIA Other"})
    with pytest.raises(ValueError, match="another directory"):
        tune(str(tmp_path), **args, models=["llama3-8b"])
    assert len(calls) == 3


def test_tune_with_stream_k_times_its_forms_in_the_mid_size_sweeps_and_a_table_serves_a_winner(tmp_path):
    """tune --stream-k: the mid-size sweeps (only) also time the stream-K forms, their rows kept
    apart (-sk) and named in the table's commands; a stream-K config measured fastest is what the
    table names and the dispatcher runs where it fits (its workspace is the launch's own)."""
    calls = []
    sk = GemmConfig(128, 160, stream_k=True)

    def sweep(ms, space, models, dtype, log, stream_k=False):
        calls.append((ms, space, stream_k))
        best = sk if stream_k else COOP
        return [{"m": ms[0], "n": 4608, "k": 3584, "dtype": dtype, "peer_ms": 0.046, "pick": COOP.name,
                 "times": {COOP.name: 0.057, best.name: 0.045 if stream_k else 0.057}}]

    (path,) = tune(str(tmp_path), ms=(1024,), swap_ms=(192,), fp8_ms=(), fp8_swap_ms=(), sweep=sweep,
                   log=lambda *a: None, gpu=GPU, versions={}, stream_k=True)
    assert calls == [((1024,), "mid", True), ((192,), "swap", False)]
    assert (tmp_path / "sweeps" / "sweep-mid-bf16-m1024-sk.json").exists()
    table = MeasuredTable.from_json(json.loads(path.read_text()))
    assert "--ms 1024 --stream-k" in table.source and "--ms 192 --json" in table.source
    assert [(e.m, e.config) for e in table.entries] == [(192, COOP), (1024, sk)]
    assert table.choice(linear(1000, 4608, 3584)) == sk
    residual = EpilogueSpec(residual=True, residual_dtype="bfloat16", residual_aligned=True)
    assert table.choice(linear(1000, 4608, 3584), residual) is None  # the sweeps measured bare GEMMs
    # a later tune without --stream-k keeps those rows apart and sweeps the plain space again
    tune(str(tmp_path), ms=(1024,), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None,
         gpu=GPU, versions={})
    assert calls[-1] == ((1024,), "mid", False) and (tmp_path / "sweeps" / "sweep-mid-bf16-m1024.json").exists()
    tune(str(tmp_path), ms=(1024,), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None,
         gpu=GPU, versions={}, stream_k=True)
    assert len(calls) == 3  # resumed: the -sk rows kept


def test_tune_without_a_hopper_gpu_says_so():
    with pytest.raises(RuntimeError, match="sm90a"):
        tune("unused", sweep=lambda *a, **k: [])


def test_tunes_bounds_leave_no_gap_and_the_gates_other_token_counts_are_served_from_them():
    """tune's default token counts (per operand class: the mid-size and swap-AB sweeps') are within
    sqrt(2) of each other from the first to the last, so a table made with them has a bound for
    every M in between; the standard perf gate's token counts that are none of them take the next."""
    from cutedsl_backend.configs.measured import MAX_M_RATIO
    from cutedsl_backend.validation import tune
    from cutedsl_backend.validation.model_shapes import M_STANDARD

    for grid in (tune.MID_MS + tune.SWAP_MS, tune.FP8_MID_MS + tune.FP8_SWAP_MS):
        ms = sorted(set(grid))
        assert all(b <= MAX_M_RATIO * (a + 1) for a, b in zip(ms, ms[1:])), ms
        t = table(*(entry(m, GemmConfig(128, 128)) for m in ms))
        between = [m for m in M_STANDARD if m not in ms and ms[0] / MAX_M_RATIO <= m <= ms[-1]]
        assert len(between) >= 6, between
        assert all(t.entry(linear(m)).m == min(b for b in ms if b >= m) for m in between)


def test_bounds_are_the_measured_token_counts_of_the_projection(tmp_path):
    t = table(entry(384, COOP), entry(128, SWAP), entry(256, COOP, n=4096, k=4096))
    (tmp_path / "t.json").write_text(json.dumps(t.to_json()))
    tables = MeasuredTables(tmp_path)
    assert tables.bounds(linear(1), GPU) == (128, 384)
    assert tables.bounds(linear(1, n=4096, k=4096), GPU) == (256,)
    assert tables.bounds(linear(1, batch=2), GPU) == () and tables.bounds(linear(1), "NVIDIA Other") == ()


def test_tune_with_a_prior_table_re_measures_it_at_its_token_counts(tmp_path):
    """tune --prior: the prior table's class is swept at each token count it measured (space
    "prior", the table given to the sweep), and the rows make this GPU's table like any others."""
    prior = table(entry(384, COOP), entry(128, SWAP), gpu="NVIDIA Other")
    (tmp_path / "prior.json").write_text(json.dumps(prior.to_json()))
    calls = []

    def sweep(ms, space, models, dtype, log, prior=None):
        calls.append((ms, space, dtype, prior))
        return [{"m": ms[0], "n": 3584, "k": 3584, "dtype": dtype, "peer_ms": 0.02, "pick": COOP.name,
                 "times": {COOP.name: 0.012, SWAP.name: 0.010}}]

    (path,) = tune(str(tmp_path / "out"), ms=(), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep,
                   log=lambda *a: None, gpu=GPU, versions={}, priors=(str(tmp_path / "prior.json"),))
    assert [(c[0], c[1], c[2]) for c in calls] == [((128,), "prior", "bfloat16"), ((384,), "prior", "bfloat16")]
    assert all(c[3] == prior for c in calls)
    made = MeasuredTable.from_json(json.loads(path.read_text()))
    assert made.gpu == GPU and [(e.m, e.config) for e in made.entries] == [(128, SWAP), (384, SWAP)]
    from cutedsl_backend.validation.tune import load_prior

    digest = load_prior(str(tmp_path / "prior.json"))[1]
    assert "--space prior --dtype bfloat16 --ms 384 --prior prior.json" in made.source and digest in made.source
    assert (tmp_path / "out" / "sweeps" / f"sweep-prior-bf16-m128-{digest}.json").exists()
    # another prior (another content) is swept anew, never served the first one's rows
    other = table(entry(128, COOP), gpu="NVIDIA Other")
    (tmp_path / "prior.json").write_text(json.dumps(other.to_json()))
    tune(str(tmp_path / "out"), ms=(), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None,
         gpu=GPU, versions={}, priors=(str(tmp_path / "prior.json"),))
    assert len(calls) == 3 and calls[-1][3] == other
    # --prior-ms: only those token counts, in the order given (a count the prior lacks is skipped)
    calls.clear()
    (tmp_path / "prior.json").write_text(json.dumps(prior.to_json()))
    tune(str(tmp_path / "part"), ms=(), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None,
         gpu=GPU, versions={}, priors=(str(tmp_path / "prior.json"),), prior_ms=(384, 999, 128))
    assert [c[0] for c in calls] == [(384,), (128,)]
    sm100 = MeasuredTable(GPU, "sm100a", "16bit", "test", prior.entries)
    (tmp_path / "sm100.json").write_text(json.dumps(sm100.to_json()))
    with pytest.raises(ValueError, match="sm90a"):
        tune(str(tmp_path / "out"), ms=(), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None,
             gpu=GPU, versions={}, priors=(str(tmp_path / "sm100.json"),))
    with pytest.raises(ValueError, match="one 16bit"):  # two priors of one class
        tune(str(tmp_path / "out"), ms=(), swap_ms=(), fp8_ms=(), fp8_swap_ms=(), sweep=sweep, log=lambda *a: None,
             gpu=GPU, versions={}, priors=(str(tmp_path / "prior.json"),) * 2)

