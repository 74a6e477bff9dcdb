"""Swap-AB (GemmConfig.swap_ab) without a GPU: the swapped problem, the config's name and key, the
rules that say where it applies, and the kernel's view of a call (operands transposed, the
output column-major, bias and scales on the exchanged axes), on CPU tensors."""

import pytest

from cutedsl_backend.configs import GemmConfig, check_config
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError


def test_swapped_problem():
    p = GemmProblem(192, 8192, 28672, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    s = p.swapped()
    assert (s.m, s.n, s.k, s.batch) == (8192, 192, 28672, 1)
    assert (s.a_major, s.b_major, s.c_major) == ("k", "k", "m")  # K-major weights and tokens
    assert s.swapped() == p
    q = GemmProblem(100, 264, 520, 3, "float16", "float32", "m", "n", "sm90a")
    assert (q.swapped().a_major, q.swapped().b_major) == ("m", "n")
    fp8 = GemmProblem(64, 128, 256, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a", b_dtype="float8_e5m2")
    assert (fp8.swapped().dtype, fp8.swapped().dtype_b) == ("float8_e5m2", "float8_e4m3fn")
    assert "c_major=m" in s.describe() and "c_major" not in p.describe()


def test_config_name_and_key():
    cfg = GemmConfig(128, 192, splits=2, swap_ab=True)
    assert cfg.name.endswith("_k2_swap") and GemmConfig.from_name(cfg.name) == cfg
    plain = GemmConfig(128, 192, splits=2)
    assert GemmConfig.from_name(plain.name) == plain and not GemmConfig.from_name(plain.name).swap_ab
    assert plain.key() != cfg.key() and len(plain.key()) == len(cfg.key()) - 1  # older keys unchanged
    assert plain.shape != cfg.shape


def test_rules():
    p = GemmProblem(192, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    cfg = GemmConfig(128, 192, swap_ab=True)
    check_config(cfg, p.swapped(), EpilogueSpec(bias="row", activation="silu"))
    with pytest.raises(UnsupportedGemmError, match="swap_ab: a swap-AB config runs on the swapped problem"):
        check_config(cfg, p)
    with pytest.raises(UnsupportedGemmError, match="swap_ab: a swap-AB config runs on the swapped problem"):
        check_config(GemmConfig(128, 192), p.swapped())
    with pytest.raises(UnsupportedGemmError, match="no residual"):
        check_config(cfg, p.swapped(), EpilogueSpec(residual=True))
    p100 = GemmProblem(192, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm100a")
    check_config(GemmConfig(128, 192, arch="sm100a", swap_ab=True), p100.swapped())  # the same host logic
    # a column-major output's contiguous extent is its M: the alignment rule follows it
    GemmProblem(8192, 190, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a", c_major="m").check()
    with pytest.raises(UnsupportedGemmError, match="contiguous extent of out"):
        GemmProblem(190, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a", c_major="m").check()


def test_kernel_view_of_a_call():
    torch = pytest.importorskip("torch")
    from cutedsl_backend.operands import EpilogueOperands, descriptor, kernel_views
    from cutedsl_backend.plan import swapped_view

    L, M, N, K = 2, 40, 64, 96
    a3 = torch.randn(L, M, K, dtype=torch.bfloat16)
    b3 = torch.randn(L, N, K, dtype=torch.bfloat16).transpose(1, 2)  # (L, K, N), K-major
    out3 = torch.empty(L, M, N, dtype=torch.bfloat16)
    p = GemmProblem(M, N, K, L, "bfloat16", "bfloat16", "k", "k", "sm90a", packed=False)
    dev = torch.device("cpu")
    bias = torch.randn(N, dtype=torch.bfloat16)
    args = (bias, None, "silu", None, None)
    epi = EpilogueOperands(p, dev, *args)
    kp, ka3, kb3, kout3, kepi = swapped_view(p, a3, b3, out3, epi, args, dev)
    assert kp == p.swapped() and kepi.spec.bias == "row" and kepi.spec.activation == "silu"
    assert ka3.shape == (L, N, K) and ka3.stride(2) == 1 and ka3.data_ptr() == b3.data_ptr()
    assert kb3.shape == (L, K, M) and kb3.stride(1) == 1 and kb3.data_ptr() == a3.data_ptr()
    # the kernel's (M_k, N_k, L) output is column-major and is the row-major result's memory
    _, _, kc = kernel_views(kp, ka3, kb3.transpose(1, 2), kout3)
    assert kc.shape == (N, M, L) and kc.stride() == (1, N, M * N) and kc.data_ptr() == out3.data_ptr()
    (rows, cols, batch), strides = descriptor(kout3, kp.c_major == "n", 8)
    assert (rows, cols, batch) == (N, M, L) and strides == (N, M * N)
    # a row bias of the result becomes a column bias of the kernel's; the scales exchange axes
    row_bias = torch.randn(M, 1, dtype=torch.float32)
    args = (row_bias, None, None, None, None)
    assert swapped_view(p, a3, b3, out3, EpilogueOperands(p, dev, *args), args, dev)[4].spec.bias == "col"
    fp = GemmProblem(M, N, K, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a", packed=False)
    sa, sb = torch.rand(M, 1), torch.rand(1, N)
    args = (None, None, None, sa, sb)
    kepi = swapped_view(fp, a3[:1].to(torch.float8_e4m3fn), b3[:1].to(torch.float8_e4m3fn), out3[:1],
                        EpilogueOperands(fp, dev, *args), args, dev)[4]
    assert (kepi.spec.scale_a, kepi.spec.scale_b) == ("row", "col")
    assert kepi.scale_a.data_ptr() == sb.data_ptr() and kepi.scale_b.data_ptr() == sa.data_ptr()
    with pytest.raises(UnsupportedGemmError, match="swap_ab: takes no residual"):
        args = (None, torch.randn(M, N, dtype=torch.bfloat16), None, None, None)
        swapped_view(p, a3, b3, out3, EpilogueOperands(p, dev, *args), args, dev)


def test_swap_sweep_candidates_are_valid_where_they_are_measured():
    """sweep-decode --space swap measures these; each must be a valid config of the swapped problem
    at decode and mid token counts (an invalid one would silently drop out of the sweep)."""
    from cutedsl_backend.configs import is_valid
    from cutedsl_backend.validation.sweep_spaces import swap_candidates

    cands = swap_candidates()
    assert len({c.name for c in cands}) == len(cands) and all(c.swap_ab for c in cands)
    for m, n, k in ((1, 4096, 4096), (16, 8192, 28672), (192, 8192, 8192), (512, 57344, 8192)):
        p = GemmProblem(m, n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a").swapped()
        assert [c.name for c in cands if not is_valid(c, p)] == [], (m, n, k)


def test_swapped_epilogue_and_fits_on_the_callers_problem():
    from cutedsl_backend.configs import fits

    spec = EpilogueSpec(bias="col", activation="silu", scale_a="row", scale_b="scalar")
    s = spec.swapped()
    assert (s.bias, s.scale_a, s.scale_b, s.activation) == ("row", "scalar", "col", "silu")
    assert s.swapped() == spec
    p = GemmProblem(192, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    cfg = GemmConfig(128, 192, swap_ab=True)
    # a measured rule or a dispatcher may hand a swap config with the caller's problem: it is
    # checked as it would run (the swapped problem and epilogue)
    assert fits(cfg, p, EpilogueSpec(bias="col")) and fits(cfg, p.swapped(), EpilogueSpec(bias="row"))
    assert not fits(cfg, p, EpilogueSpec(residual=True))
    assert not fits(GemmConfig(128, 192), p.swapped(), None)


@pytest.mark.compile
def test_public_compile_of_a_swap_config_builds_the_swapped_kernel(tmp_path, monkeypatch):
    """compile_gemm / get_kernel / precompile given the caller's problem and a swap-AB config
    compile the kernel of the swapped problem (configs.kernel_view)."""
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    import cutedsl_backend as cb
    from cutedsl_backend.compiler import kernel_view

    p = GemmProblem(192, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    spec = EpilogueSpec(bias="col")
    assert kernel_view(p, GemmConfig(128, 192, swap_ab=True), spec) == (p.swapped(), spec.swapped())
    assert kernel_view(p, GemmConfig(128, 192), spec) == (p, spec)
    assert kernel_view(p.swapped(), GemmConfig(128, 192, swap_ab=True), spec) == (p.swapped(), spec)
    for use_cache in (False, True):
        k = cb.compile_gemm(192, 8192, 4096, dtype="bfloat16", b_major="k", epilogue=spec,
                            config=GemmConfig(128, 192, swap_ab=True), use_cache=use_cache)
        assert k.problem.c_major == "m" and k.problem.m == 8192 and k.sass_counts()["UTMASTG"] > 0


def _linear(m, n, k, **kw):
    return GemmProblem(m, n, k, kw.pop("batch", 1), kw.pop("dtype", "bfloat16"), kw.pop("out", "bfloat16"),
                       kw.pop("a_major", "k"), kw.pop("b_major", "k"), kw.pop("arch", "sm90a"), **kw)


def test_swap_dispatch_where_measured():
    """The dispatcher takes swap-AB where the sweep measured it winning (nn.Linear layout, a few
    hundred tokens, narrow weights) and keeps the mid-size pick where it lost."""
    from cutedsl_backend.configs import SWAP_MODEL, default_config, mid_choice, swap_choice

    # H100 sweep: 192x6144x4096 swap 64x192 0.948x cuBLAS vs the mid pick's 0.824x; 128x4096x14336
    # swap 64x128 k2 1.117x vs 1.021x
    for m, n, k in ((192, 6144, 4096), (128, 4096, 14336), (192, 3584, 14336)):
        p = _linear(m, n, k)
        cfg = default_config(p)
        assert cfg.swap_ab and cfg.tile_n >= m and cfg == swap_choice(p, pick=mid_choice(p)), (m, n, k, cfg.name)
        check_config(cfg, p.swapped())
    # 256x6144x4096: the mid pick (0.943x) stays (best swap measured 0.933x)
    assert not default_config(_linear(256, 6144, 4096)).swap_ab
    # up to 320 tokens (two 160-token tiles; H100 sweep at 320: 4096x4096 0.70x -> 1.08x)
    assert default_config(_linear(320, 4096, 4096)) == GemmConfig(64, 160, schedule="pingpong", swap_ab=True)
    # outside the measured domain: never swapped
    for p in (_linear(64, 4096, 14336), _linear(321, 4096, 14336), _linear(192, 4096, 14336, batch=2),
              _linear(192, 4096, 14336, a_major="m"), _linear(192, 4096, 14336, b_major="n"),
              _linear(192, 4096, 14336, arch="sm100a"), _linear(192, 4100, 14336), _linear(192, 4097, 14336),
              _linear(192, 4096, 14336, out="float32"),  # (fp32 out: not measured)
              _linear(192, 4096, 14336, dtype="float8_e4m3fn", out="bfloat16")):
        assert swap_choice(p) is None and not default_config(p).swap_ab, p.describe()
    # a swapped tile costs less than the same unswapped one; more waves cost more
    p = _linear(192, 6144, 4096)
    c = GemmConfig(64, 192, schedule="pingpong")
    assert SWAP_MODEL.time_us(p, c.replace(swap_ab=True), 132) < SWAP_MODEL.time_us(p.swapped(), c, 132)
    assert SWAP_MODEL.time_us(_linear(192, 24576, 4096), c, 132) > SWAP_MODEL.time_us(p, c, 132)


def test_dispatched_swap_compiles_for_the_swapped_problem(monkeypatch):
    """A call without a config whose pick is swap-AB is compiled (and keyed) for the swapped
    problem, as its launches run it; a key resolved for another problem is refused by the compile."""
    from cutedsl_backend import build, compiler
    from cutedsl_backend.configs import default_config

    p = _linear(192, 6144, 4096)
    assert default_config(p).swap_ab
    target, cfg, _ = compiler.kernel_target(p, None, EpilogueSpec())
    assert cfg.swap_ab and target == p.swapped()
    assert compiler.resolve(p, None, EpilogueSpec()) == compiler.resolve(p.swapped(), cfg, EpilogueSpec())
    with pytest.raises(ValueError, match="is not the problem of kernel key"):
        build.compile_kernel(p, compiler.resolve(p, None, EpilogueSpec()))


def test_swap_dispatch_respects_the_epilogue():
    """A residual (the transposed output cannot take it) keeps the unswapped pick; bias and an
    activation ride along on the swapped axes."""
    from cutedsl_backend.configs import default_config, fits

    p = _linear(192, 6144, 4096)
    res = EpilogueSpec(residual=True, residual_dtype="bfloat16", residual_aligned=True)
    assert not default_config(p, epilogue=res).swap_ab
    spec = EpilogueSpec(bias="col", bias_dtype="bfloat16", activation="gelu")
    cfg = default_config(p, epilogue=spec)
    assert cfg.swap_ab and fits(cfg, p, spec)


def test_no_wide_ping_pong_swap_tile():
    """The 64 x 256 ping-pong swap tile lost wherever it was measured (H100 sweep at 256 tokens,
    H200 validation): never a candidate; at 256 tokens on large weights, where the model took it,
    another tile (or no swap) is picked."""
    from cutedsl_backend.configs import SWAP_MODEL, default_config

    assert not [c for c in SWAP_MODEL.candidates() if c.schedule == "pingpong" and c.tile_n == 256]
    for n, k in ((7168, 18432), (57344, 8192), (8192, 8192)):
        cfg = default_config(_linear(256, n, k))
        assert not (cfg.swap_ab and cfg.schedule == "pingpong" and cfg.tile_n == 256), cfg.name


def test_gated_epilogue_is_never_swapped():
    """A gated epilogue has no swapped form (its column bias would become a row bias, which it
    refuses): the ranking keeps unswapped configs and never raises, with or without biases (the
    H100 GPU suite's gated-bias tests at swap-domain token counts raised here)."""
    from cutedsl_backend.configs import default_config, fits, rank_configs

    for m in (128, 192, 256):
        p = _linear(m, 2 * 4096, 4096)
        for spec in (EpilogueSpec(gated="silu"), EpilogueSpec(gated="silu", bias="col", bias_dtype="bfloat16")):
            assert not default_config(p, epilogue=spec).swap_ab
            assert not any(c.swap_ab for c in rank_configs(p, epilogue=spec))
            assert not fits(GemmConfig(128, 128, swap_ab=True), p, spec)


def test_fp8_swap_dispatch_where_measured():
    """Precise e4m3 with scalar scales and bf16 out at 128-192 tokens takes the swap model's pick
    where it beats FP8_MID_MODEL's (H100 fp8 swap sweep: 192x8192x8192 0.778x -> 0.967x
    torch._scaled_mm, 192x576x7168 0.576x -> 0.977x); rowwise scales, fast accumulation, fp16 or
    fp32 out, no epilogue spec and M outside 128-192 (not measured) never swap."""
    from cutedsl_backend.configs import default_config, mid_choice, swap_choice
    from cutedsl_backend.epilogue import EpilogueSpec

    scalar = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    for m, n, k in ((192, 8192, 8192), (192, 576, 7168), (128, 576, 7168)):
        p = _linear(m, n, k, dtype="float8_e4m3fn", out="bfloat16")
        cfg = default_config(p, epilogue=scalar)
        assert cfg.swap_ab and cfg == swap_choice(p, epilogue=scalar, pick=mid_choice(p, epilogue=scalar)), cfg.name
        check_config(cfg, p.swapped(), scalar)
    rowwise = EpilogueSpec(scale_a="row", scale_b="col")
    p = _linear(192, 8192, 8192, dtype="float8_e4m3fn", out="bfloat16")
    for q, spec in ((p, rowwise), (p, None), (_linear(192, 8192, 8192, dtype="float8_e4m3fn", out="float16"), scalar),
                    (_linear(192, 8192, 8192, dtype="float8_e4m3fn", out="float32"), scalar),
                    (_linear(192, 8192, 8192, dtype="float8_e4m3fn", out="bfloat16", fast_accum=True), scalar),
                    (_linear(256, 8192, 8192, dtype="float8_e4m3fn", out="bfloat16"), scalar),
                    (_linear(96, 8192, 8192, dtype="float8_e4m3fn", out="bfloat16"), scalar)):
        assert swap_choice(q, epilogue=spec) is None and not default_config(q, epilogue=spec).swap_ab, q.describe()


def test_a_token_count_just_above_128_takes_a_160_wide_swap_tile_not_a_padded_192():
    """160-token swap tiles serve 129-160 tokens where the models took 192-token tiles (the H200's
    swap sweep at 160 tokens: 192-token picks 0.776x cuBLAS, 160-token tiles 1.007x): wherever the
    16-bit pick at 160 tokens is a swap tile, it is at most 160 wide, never padded to 192."""
    from cutedsl_backend.configs import SWAP_MODEL, default_config

    assert {c.tile_n for c in SWAP_MODEL.candidates()} >= {160}
    swapped = 0
    for n, k in ((3072, 8192), (57344, 8192), (7168, 16384), (4096, 4096), (14336, 4096), (24576, 1536)):
        cfg = default_config(_linear(160, n, k))
        if cfg.swap_ab:
            swapped += 1
            assert cfg.tile_n == 160, (n, k, cfg.name)
    assert swapped >= 5


def test_fp8_at_192_tokens_may_split_the_tokens_in_two_96_wide_tiles():
    """The FP8 swap model ranks 96-token tiles at the full rate from 161 tokens (the H200's fp8 swap
    sweep at 192 tokens: two 96-token tiles the fastest on most shapes)."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.ranking import FP8_SWAP_MODEL
    from cutedsl_backend.validation.sweep_spaces import sweep_problem

    assert 96 in {c.tile_n for c in FP8_SWAP_MODEL.candidates()}
    problem, spec = sweep_problem("fp8_tensorwise", 192, 4096, 4096)
    cfg = default_config(problem, epilogue=spec, gpu=None)
    assert cfg.swap_ab and cfg.tile_n == 96, cfg.name
    # below 161 tokens two 96-token tiles would pad more than one 160-token tile (unmeasured there)
    for m in (136, 144, 160):
        problem, spec = sweep_problem("fp8_tensorwise", m, 4096, 4096)
        cfg = default_config(problem, epilogue=spec, gpu=None)
        assert cfg.tile_n != 96, (m, cfg.name)



def test_96_tokens_take_a_96_wide_swap_tile_and_192_do_not_split_in_two():
    """16-bit swap-AB starts at 96 tokens with tiles exactly 96 wide (the H200's swap sweep at 96
    tokens: such a tile the fastest on 26 of 29 shapes, the unswapped picks 0.898x cuBLAS); above
    128 tokens they run at the narrow rate, so 161-192 tokens keep one tile (unmeasured in 16 bits)."""
    from cutedsl_backend.configs import SWAP_MODEL, default_config

    assert SWAP_MODEL.min_m == 96 and 96 in {c.tile_n for c in SWAP_MODEL.candidates()}
    picks = [default_config(_linear(96, n, k)) for n, k in ((4096, 4096), (3584, 3584), (37888, 3584), (14336, 4096))]
    assert all(c.swap_ab and c.tile_n == 96 for c in picks), [c.name for c in picks]
    for m in (176, 192):
        for n, k in ((4096, 4096), (8192, 8192), (14336, 4096)):
            cfg = default_config(_linear(m, n, k))
            assert cfg.tile_n != 96, (m, n, k, cfg.name)
