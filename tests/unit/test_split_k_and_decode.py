"""Split-K and short A loads as config data, and the decode picks: the names round-trip, the rules
name what they refuse, the workspace sizes and K slices are what the kernels assume, and the
decode cost model picks per token bucket what it measured best (CPU only)."""

import math

import pytest

from cutedsl_backend.configs import (
    DECODE_MODEL,
    MAX_SPLITS,
    GemmConfig,
    check_config,
    decode_choice,
    default_config,
    k_slices,
    launch_tiles,
    split_k_workspace,
)
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError


def prob(m, n, k, dtype="bfloat16", a_major="k", b_major="k", arch="sm90a", batch=1, out=None):
    return GemmProblem(m, n, k, batch, dtype, out or ("bfloat16" if dtype.startswith("float8") else dtype),
                       a_major, b_major, arch)


@pytest.mark.parametrize("cfg", [GemmConfig(64, 96, schedule="pingpong", splits=3, a_rows=16),
                                 GemmConfig(128, 128, cluster_m=2, splits=16),
                                 GemmConfig(64, 64, schedule="pingpong", a_rows=32)], ids=lambda c: c.name)
def test_names_round_trip(cfg):
    assert GemmConfig.from_name(cfg.name) == cfg
    assert cfg.shape != cfg.replace(splits=1, a_rows=0).shape


def test_rules_refuse_by_name():
    p = prob(16, 4096, 4096)
    with pytest.raises(UnsupportedGemmError, match="splits 17"):
        check_config(GemmConfig(64, 64, schedule="pingpong", splits=MAX_SPLITS + 1), p)
    with pytest.raises(UnsupportedGemmError, match="more K slices than the 2 k-tiles"):
        check_config(GemmConfig(64, 64, schedule="pingpong", splits=3), prob(16, 4096, 128))
    check_config(GemmConfig(128, 128, arch="sm100a", splits=2), prob(16, 4096, 4096, arch="sm100a"))  # both archs
    with pytest.raises(UnsupportedGemmError, match="a_rows"):
        check_config(GemmConfig(128, 128, arch="sm100a", a_rows=16), prob(16, 4096, 4096, arch="sm100a"))
    with pytest.raises(UnsupportedGemmError, match="M=24 is larger"):
        check_config(GemmConfig(64, 64, schedule="pingpong", a_rows=16), prob(24, 4096, 4096))
    with pytest.raises(UnsupportedGemmError, match="K-major A"):
        check_config(GemmConfig(64, 64, schedule="pingpong", a_rows=16), prob(16, 4096, 4096, a_major="m"))
    with pytest.raises(UnsupportedGemmError, match="multiple of 8"):
        check_config(GemmConfig(64, 64, schedule="pingpong", a_rows=12), prob(8, 4096, 4096))
    check_config(GemmConfig(64, 64, schedule="pingpong", splits=2, a_rows=16), p)  # valid


@pytest.mark.parametrize("m,n,cfg", [(16, 4096, GemmConfig(64, 96, schedule="pingpong", splits=3)),
                                     (300, 1000, GemmConfig(128, 128, cluster_m=2, cluster_n=2, splits=2)),
                                     (1, 8, GemmConfig(64, 64, schedule="pingpong"))])
def test_workspace_sizes(m, n, cfg):
    p = prob(m, n, 4096, batch=3)
    tiles = (math.ceil(math.ceil(m / cfg.tile_m) / cfg.cluster_m) * cfg.cluster_m
             * math.ceil(math.ceil(n / cfg.tile_n) / cfg.cluster_n) * cfg.cluster_n * 3)
    assert launch_tiles(p, cfg) == tiles
    if cfg.splits == 1:
        assert split_k_workspace(p, cfg) == (0, 0)
    else:
        assert split_k_workspace(p, cfg) == (tiles, tiles * cfg.splits * cfg.tile_m * cfg.tile_n)


@pytest.mark.parametrize("k_tiles", [1, 2, 7, 64, 113])
@pytest.mark.parametrize("splits", [1, 2, 3, 8, 16])
def test_k_slices_cover_k_once_and_evenly(k_tiles, splits):
    if splits > k_tiles:
        return
    sl = k_slices(k_tiles, splits)
    assert sl[0][0] == 0 and sl[-1][1] == k_tiles
    assert all(a[1] == b[0] for a, b in zip(sl, sl[1:]))
    sizes = [e - b for b, e in sl]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("m,a_rows", [(1, 16), (16, 16), (17, 32), (32, 32), (33, 0), (64, 0)])
def test_decode_choice_loads_only_the_rows_m_needs(m, a_rows):
    cfg = decode_choice(prob(m, 4096, 4096))
    assert cfg.schedule == "pingpong" and cfg.tile_m == 64 and cfg.a_rows == a_rows
    # as it runs, the load holds the power of two at or above M up to 8 (configs.as_run.ShortALoads)
    fitted = next((r for r in (1, 2, 4, 8) if m <= r), a_rows)
    assert default_config(prob(m, 4096, 4096)) == cfg.replace(a_rows=fitted)


@pytest.mark.parametrize("m,a_rows", [(1, 1), (2, 2), (3, 4), (4, 4), (5, 8), (8, 8), (9, 16), (16, 16)])
def test_short_a_loads_fit_the_tokens(m, a_rows):
    from cutedsl_backend.configs.as_run import ShortALoads

    on = ShortALoads(enabled=True)
    pick = GemmConfig(64, 64, schedule="pingpong", splits=2, a_rows=16)
    assert on.apply(pick, prob(m, 4096, 4096)).a_rows == a_rows
    assert ShortALoads(enabled=False).apply(pick, prob(m, 4096, 4096)) == pick
    # a config loading every row of its tile keeps doing so (a_rows 0: the mid-size and prefill picks)
    assert on.apply(pick.replace(a_rows=0), prob(m, 4096, 4096)).a_rows == 0
    # A multicast along a cluster of two: no load under 8 rows (the rules refuse it by name)
    clustered = GemmConfig(64, 256, cluster_n=2, schedule="pingpong", a_rows=16)
    assert on.apply(clustered, prob(m, 4096, 4096)).a_rows == min(16, max(8, a_rows))
    with pytest.raises(UnsupportedGemmError, match="not multicast"):
        check_config(clustered.replace(a_rows=1), prob(1, 4096, 4096))
    with pytest.raises(UnsupportedGemmError, match="must be 1, 2, 4 or a multiple of 8"):
        check_config(pick.replace(a_rows=3), prob(1, 4096, 4096))
    # the gated epilogue keeps its loads (right on the GPU under 8 rows, not yet timed)
    gated = EpilogueSpec(gated="silu")
    assert on.apply(pick, prob(m, 8192, 4096), gated) == pick


def test_short_a_loads_key_the_policy_tag():
    """Caches of choices (Inductor's decisions, FX graphs) key on the policies: toggling this one
    must not serve a choice made under the other setting."""
    from cutedsl_backend.configs.as_run import SHORT_A_LOADS, policy_tag

    before = policy_tag()
    SHORT_A_LOADS.enabled = not SHORT_A_LOADS.enabled
    try:
        assert policy_tag() != before
    finally:
        SHORT_A_LOADS.enabled = not SHORT_A_LOADS.enabled
    assert policy_tag() == before


def test_decode_choice_only_where_measured():
    assert decode_choice(prob(65, 4096, 4096)) is None
    assert decode_choice(prob(16, 4096, 4096, arch="sm100a")) is None
    assert decode_choice(prob(16, 4096, 4096, a_major="m")).a_rows == 0
    fp8 = decode_choice(prob(16, 4096, 4096, dtype="float8_e4m3fn"))
    assert fp8 is not None and fp8.a_rows == 16


def test_decode_choice_splits_narrow_weights_and_not_wide_ones():
    # a narrow weight has too few 64-wide tiles to keep the SMs loading: split K
    assert decode_choice(prob(1, 576, 7168)).splits > 1
    assert decode_choice(prob(1, 1536, 7168)).splits > 1
    # a wide one has enough tiles without
    assert decode_choice(prob(16, 57344, 8192)).splits == 1
    # the model: more bytes per SM, slower; a split pays its reduction
    t = DECODE_MODEL.time_us
    p = prob(16, 4096, 4096)
    assert t(p, 64, 2, 132) < t(p, 64, 1, 132) * 2
    assert t(prob(16, 4096, 8192), 64, 1, 132) > t(p, 64, 1, 132)


def test_fp8_decode_choice_takes_32_and_160_wide_tiles_and_16_bit_keeps_its_widths():
    """Precise FP8 ranks 32- and 160-wide tiles too (configs.FP8_DECODE_MODEL, from the H100's FP8
    few-token sweep): 128 tiles of 32 without a K split on a 4096-wide projection, 160-wide tiles on
    the widest weights; 16-bit operands keep DECODE_MODEL's widths (where those lost the sweep)."""
    from cutedsl_backend.configs.ranking import DECODE_MODELS, FP8_DECODE_MODEL

    fp8 = "float8_e4m3fn"
    assert DECODE_MODELS["fp8_precise"] is FP8_DECODE_MODEL and {32, 160} <= set(FP8_DECODE_MODEL.widths)
    narrow = decode_choice(prob(16, 4096, 4096, dtype=fp8))
    assert (narrow.tile_n, narrow.splits) == (32, 1)
    assert decode_choice(prob(16, 57344, 8192, dtype=fp8)).tile_n == 160
    sixteen = decode_choice(prob(16, 4096, 4096))
    assert sixteen.tile_n in DECODE_MODEL.widths and sixteen.tile_n != 32
    assert decode_choice(prob(16, 4096, 4096), model=FP8_DECODE_MODEL).tile_n == 32  # an explicit model


def test_decode_choice_respects_the_epilogue():
    spec = EpilogueSpec(residual=True, residual_dtype="bfloat16", residual_aligned=True, bias="col",
                        bias_dtype="bfloat16", activation="silu")
    cfg = decode_choice(prob(8, 4096, 4096), epilogue=spec)
    check_config(cfg, prob(8, 4096, 4096), spec)


def test_mid_sweep_times_wave_filling_widths_the_model_does_not_rank():
    """sweep-decode --space mid (the tables' space) adds 128-row tiles 160 and 224 wide and 64 x 64
    ping-pong tiles (1-2 K slices) to the model's candidates; each is valid where the tables measure
    (16-bit; precise FP8 refuses 224: two fp32 accumulators), and the model's own ranking is
    unchanged (they are unmeasured where no table is)."""
    from cutedsl_backend.configs import MidModel, is_valid
    from cutedsl_backend.configs.ranking import wave_efficiency
    from cutedsl_backend.validation.sweep_spaces import mid_candidates

    cands = mid_candidates()
    added = [c for c in cands if c not in MidModel.candidates()]
    assert len({c.name for c in cands}) == len(cands)
    wide = [c for c in added if c.tile_n > 64]
    assert sorted({c.tile_n for c in wide}) == [160, 224] and all(c.tile_m == 128 for c in wide)
    assert sorted((c.tile_m, c.tile_n, c.schedule, c.splits) for c in added if c.tile_n == 64) == [
        (64, 64, "pingpong", 1), (64, 64, "pingpong", 2)]
    for m, n, k in ((128, 4096, 4096), (256, 4608, 3584), (1024, 7168, 18432), (1536, 57344, 8192)):
        assert [c.name for c in cands if not is_valid(c, prob(m, n, k))] == [], (m, n, k)
    fp8 = prob(512, 4608, 3584, dtype="float8_e4m3fn")
    assert {c.tile_n for c in wide if is_valid(c, fp8)} == {160}
    # what they are for: 4608 x 3584 at 1024 tokens, 192 tiles of 128 x 192 (1.45 waves) against
    # 232 of 128 x 160 (1.76)
    wide = wave_efficiency(GemmConfig(128, 192), prob(1024, 4608, 3584))
    assert wave_efficiency(GemmConfig(128, 160), prob(1024, 4608, 3584)) > wide + 0.1


def test_mid_choice_where_measured():
    from cutedsl_backend.configs import MID_MODEL, MidModel, mid_choice, swap_choice

    for m in (65, 128, 192, 512):
        cfg = mid_choice(prob(m, 8192, 8192))
        # the pick is the mid-size choice unless the swap-AB model beats it there
        assert cfg in MidModel.candidates()
        assert default_config(prob(m, 8192, 8192)) == (swap_choice(prob(m, 8192, 8192), pick=cfg) or cfg)
    assert mid_choice(prob(64, 8192, 8192)) is None and mid_choice(prob(513, 8192, 8192)) is None
    # FP8 e4m3 with fp32 accumulation (torch._scaled_mm's default): its own fitted model, 128-512
    # tokens; fast accumulation and e5m2 were not measured
    from cutedsl_backend.configs import FP8_MID_MODEL, fits

    fp8 = prob(256, 8192, 8192, dtype="float8_e4m3fn")
    scales = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    pick = mid_choice(fp8, epilogue=scales)
    assert pick in MidModel.candidates() and fits(pick, fp8, scales)
    assert pick == mid_choice(fp8, epilogue=scales, model=FP8_MID_MODEL) == default_config(fp8, epilogue=scales)
    # its own model, not the 16-bit one: they differ on a long-K projection at 128 tokens
    long_k = prob(128, 4096, 14336, dtype="float8_e4m3fn")
    assert mid_choice(long_k, epilogue=scales) == mid_choice(long_k, epilogue=scales, model=FP8_MID_MODEL)
    assert mid_choice(long_k, epilogue=scales) != mid_choice(long_k, epilogue=scales, model=MID_MODEL)
    # outside what was measured: few tokens, batches, a gated epilogue
    assert mid_choice(prob(96, 8192, 8192, dtype="float8_e4m3fn")) is None
    assert mid_choice(prob(256, 8192, 8192, dtype="float8_e4m3fn", batch=2)) is None
    assert mid_choice(prob(256, 8192, 8192, dtype="float8_e4m3fn"), epilogue=EpilogueSpec(gated="silu")) is None
    assert mid_choice(GemmProblem(256, 8192, 8192, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a",
                                  fast_accum=True)) is None
    assert mid_choice(GemmProblem(256, 8192, 8192, 1, "float8_e5m2", "bfloat16", "k", "k", "sm90a",
                                  b_dtype="float8_e4m3fn")) is None
    assert mid_choice(prob(256, 8192, 8192, arch="sm100a")) is None
    # the model: the same tile on more K per unit costs more; a split pays its reduction
    p = prob(256, 8192, 8192)
    c = GemmConfig(128, 128)
    assert MID_MODEL.time_us(prob(256, 8192, 16384), c, 132) > MID_MODEL.time_us(p, c, 132)
    spec = EpilogueSpec(residual=True, residual_dtype="bfloat16", residual_aligned=False, activation="gelu")
    check_config(mid_choice(p, epilogue=spec), p, spec)


def test_ranking_lists_each_config_once():
    """The decode / mid-size / swap picks are inserted at the front of the ranked space, which may
    hold them too: each config appears once (the Inductor autotune benchmarks the top few)."""
    from cutedsl_backend.configs import rank_configs

    for p, spec in ((prob(192, 8192, 8192), None), (prob(256, 8192, 8192, dtype="float8_e4m3fn"),
                                                     EpilogueSpec(scale_a="scalar", scale_b="scalar")),
                    (prob(128, 2 * 4096, 4096), EpilogueSpec(gated="silu")), (prob(16, 4096, 4096), None)):
        ranked = rank_configs(p, epilogue=spec)
        assert ranked and len(ranked) == len(set(ranked)), p.describe()


def test_the_dispatcher_fits_a_loads_under_the_process_policy(monkeypatch):
    from cutedsl_backend.configs.as_run import SHORT_A_LOADS

    problem = prob(2, 4096, 4096)
    fitted = default_config(problem)
    assert fitted.a_rows == 2 and SHORT_A_LOADS.enabled is True  # on by default
    monkeypatch.setattr(SHORT_A_LOADS, "enabled", False)
    default_config.cache_clear()
    try:
        assert default_config(problem) == fitted.replace(a_rows=16)
    finally:
        monkeypatch.setattr(SHORT_A_LOADS, "enabled", True)
        default_config.cache_clear()
    assert default_config(problem) == fitted
