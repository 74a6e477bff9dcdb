"""Input rules and config rules (pure Python: no GPU, no DSL)."""

import dataclasses

import pytest

from cutedsl_backend.configs import (
    GemmConfig,
    check_config,
    config_space,
    default_config,
    heuristic_score,
    is_valid,
    max_stages,
    mma_atom_n,
    quick_configs,
    rank_configs,
    resolve_config,
)
from cutedsl_backend.configs.as_run import as_run
from cutedsl_backend.problem import (
    GemmProblem,
    Operand,
    UnsupportedGemmError,
    arch_for_capability,
    bias_kind,
    check_aligned,
    check_epilogue_dtype,
    make_problem,
    operand_major,
    scale_kind,
)


def test_error_is_value_error():
    assert issubclass(UnsupportedGemmError, ValueError)


@pytest.mark.parametrize("kw, rule", [
    (dict(m=64, n=64, k=100, dtype="bfloat16"), "alignment"),            # A row stride 100*2 B
    (dict(m=100, n=64, k=64, dtype="bfloat16", a_major="m"), "alignment"),
    (dict(m=64, n=100, k=64, dtype="float16"), "alignment"),             # B and out rows
    (dict(m=64, n=64, k=64, dtype="float32"), "dtype"),
    (dict(m=64, n=64, k=64, dtype="bfloat16", out_dtype="float16"), "out_dtype"),
    (dict(m=64, n=64, k=64, dtype="bfloat16", a_major="x"), "layout"),
    (dict(m=64, n=64, k=64, dtype="bfloat16", arch="sm80"), "arch"),
    (dict(m=-1, n=64, k=64, dtype="bfloat16"), "shape"),
    (dict(m=64, n=64, k=64, dtype="int8"), "dtype"),
])
def test_bad_problems_name_the_rule(kw, rule):
    with pytest.raises(UnsupportedGemmError, match=rule):
        make_problem(**kw)


def test_good_problems():
    p = make_problem(333, 264, 520, dtype="bfloat16")
    assert p.out_dtype == "bfloat16" and p.a_major == "k" and p.b_major == "n"
    p = make_problem(64, 64, 100, dtype="float16", a_major="m", b_major="n", out_dtype="float32")
    assert p.out_dtype == "float32"
    import torch

    assert make_problem(8, 8, 8, dtype=torch.float16).dtype == "float16"


def test_strided_rules():
    """The operand rules the eager API and Inductor share (problem.py), on concrete sizes."""
    a = Operand((1, 64, 1040), (0, 1040, 1), "bfloat16", 0)
    assert operand_major(a, "a", "k", "m") == "k"
    check_aligned(a, "a", -1)
    with pytest.raises(UnsupportedGemmError, match="alignment: a stride 1001"):
        check_aligned(Operand((2, 64, 1001), (64 * 1001, 1001, 1), "bfloat16", 0), "a", -1)
    with pytest.raises(UnsupportedGemmError, match="unit stride"):
        operand_major(Operand((1, 8, 8), (0, 8, 2), "bfloat16"), "a", "k", "m")
    with pytest.raises(UnsupportedGemmError, match="16-byte aligned address"):
        check_aligned(Operand((64, 1040), (1040, 1), "bfloat16", 4), "a", -1)
    # extent 1: its stride is never used (either major; not an alignment question)
    assert operand_major(Operand((1, 512), (3, 1), "float16"), "a", "k", "m") == "k"
    assert operand_major(Operand((512, 1), (1, 3), "float16"), "b", "n", "k") == "k"
    check_aligned(Operand((1, 512), (3, 1), "float16"), "a", -1)
    # column-major: the unit stride is the second-to-last
    assert operand_major(Operand((64, 32), (1, 64), "float16"), "a", "k", "m") == "m"
    # both strides 1 (a contiguous (K, 1) b): the unit stride along the dim of extent > 1 decides
    b = Operand((1000, 1), (1, 1), "bfloat16")
    assert operand_major(b, "b", "n", "k") == "k"
    check_aligned(b, "b", -2)
    assert operand_major(Operand((1, 1000), (1000, 1), "bfloat16"), "a", "k", "m") == "k"
    assert operand_major(Operand((64, 1), (5, 1), "bfloat16"), "a", "k", "m") == "k"  # then its rows: aligned?
    with pytest.raises(UnsupportedGemmError, match="alignment: a stride 5"):
        check_aligned(Operand((64, 1), (5, 1), "bfloat16"), "a", -1)


def test_epilogue_operand_rules():
    m, n = 64, 48
    assert bias_kind(Operand((n,), (1,), "bfloat16"), m, n) == "col"
    assert bias_kind(Operand((m, 1), (1, 1), "float32"), m, n) == "row"
    with pytest.raises(UnsupportedGemmError, match="bias: shape"):
        bias_kind(Operand((1, n), (n, 1), "bfloat16"), m, n)  # eager: (N,) or (M, 1)
    assert bias_kind(Operand((1, n), (n, 1), "bfloat16"), m, n, row_broadcast=True) == "col"  # addmm's input
    assert bias_kind(Operand((m, n), (0, 1), "bfloat16"), m, n, row_broadcast=True) == "col"
    with pytest.raises(UnsupportedGemmError, match="contiguous"):
        bias_kind(Operand((n,), (2,), "bfloat16"), m, n)
    check_epilogue_dtype("bias", "float32", "bfloat16")
    with pytest.raises(UnsupportedGemmError, match="bias: dtype must be bfloat16 or float32"):
        check_epilogue_dtype("bias", "float16", "bfloat16")
    assert scale_kind(Operand((), (), "float32"), "scale_a", m, n, "row") == "scalar"
    assert scale_kind(Operand((1, 1), (1, 1), "float32"), "scale_b", m, n, "col") == "scalar"
    assert scale_kind(Operand((m, 1), (1, 1), "float32"), "scale_a", m, n, "row") == "row"
    assert scale_kind(Operand((1, n), (n, 1), "float32"), "scale_b", m, n, "col") == "col"
    with pytest.raises(UnsupportedGemmError, match="scale_a: shape"):
        scale_kind(Operand((1, n), (n, 1), "float32"), "scale_a", m, n, "row")  # a column scale as A's
    with pytest.raises(UnsupportedGemmError, match="scale_b: dtype"):
        scale_kind(Operand((1, n), (n, 1), "bfloat16"), "scale_b", m, n, "col")


def test_operand_rules_on_symbolic_sizes():
    """The same rules through Inductor's symbolic extents: alignment must hold for every value."""
    sympy = pytest.importorskip("sympy")
    from cutedsl_backend.problem import Sizes

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    sizes = Sizes()
    a = Operand((s0, 4096), (4096, 1), "bfloat16", 0)
    assert operand_major(a, "a", "k", "m", sizes) == "k"
    check_aligned(a, "a", -1, sizes)
    with pytest.raises(UnsupportedGemmError, match="alignment"):
        check_aligned(Operand((64, s0), (s0, 1), "bfloat16", 0), "a", -1, sizes)  # a dynamic row stride
    check_aligned(Operand((64, 8 * s0), (8 * s0, 1), "bfloat16", 0), "a", -1, sizes)
    assert bias_kind(Operand((s0,), (1,), "float32"), 64, s0, sizes) == "col"


@pytest.mark.parametrize("cap, arch", [((9, 0), "sm90a"), ((10, 0), "sm100a"), ((10, 3), "sm100a")])
def test_capability_dispatch(cap, arch):
    assert arch_for_capability(*cap) == arch


@pytest.mark.parametrize("cap", [(8, 0), (8, 9), (12, 0), (9, 1)])
def test_capability_refused(cap):
    with pytest.raises(UnsupportedGemmError, match="device"):
        arch_for_capability(*cap)


P = GemmProblem(4096, 4096, 4096)


@pytest.mark.parametrize("cfg, rule", [
    (GemmConfig(64, 128, schedule="cooperative"), "tile_m"),
    (GemmConfig(256, 128, schedule="pingpong"), "tile_m"),
    (GemmConfig(128, 256, schedule="pingpong"), "accumulator registers"),
    (GemmConfig(128, 72), "multiple of 16"),
    (GemmConfig(128, 128, cluster_n=4), "cluster"),
    (GemmConfig(128, 128, tile_k=32), "tile_k"),
    (GemmConfig(128, 128, stages=12), "shared memory"),
    (GemmConfig(128, 128, schedule="splitk"), "schedule"),
    (GemmConfig(128, 128, raster="z"), "raster"),
    (GemmConfig(128, 128, two_cta=True), "two_cta"),
])
def test_config_rules(cfg, rule):
    with pytest.raises(UnsupportedGemmError, match=rule):
        check_config(cfg, P)


def test_tiles_wider_than_one_wgmma():
    """128x320 (two 160-wide WGMMAs) is a cooperative sm90a tile for a K-major B, outside the
    tuner's space (only the wave-filling rule below picks it)."""
    k_major = GemmProblem(4096, 14336, 4096, b_major="k")
    wide = GemmConfig(128, 320, cluster_m=2)
    check_config(wide, k_major)
    check_config(wide, GemmProblem(4096, 14336, 4096, dtype="float8_e4m3fn", b_major="k", fast_accum=True))
    assert mma_atom_n(wide) == 160 and mma_atom_n(GemmConfig(128, 256)) == 256
    for cfg, problem, rule in [
        (wide, P, "K-major"),  # B N-major
        (GemmConfig(128, 320, schedule="pingpong"), k_major, "tile_n"),
        (GemmConfig(128, 352), k_major, "tile_n"),
        (GemmConfig(128, 288), k_major, "only 320"),
        (wide, GemmProblem(4096, 14336, 4096, dtype="float8_e4m3fn", b_major="k"), "precise fp8"),
    ]:
        with pytest.raises(UnsupportedGemmError, match=rule):
            check_config(cfg, problem)
    assert all(c.tile_n <= 256 for c in config_space("sm90a"))


def test_the_wide_tile_replaces_128x256_where_it_fills_the_waves_better():
    """Measured on the H200 at the power cap: 128x320 c2x1 won at 4096x14336x4096 (waves 0.987 full
    against 0.970) and lost at 8192^3 (0.955) and 4096x4096x14336 (0.776); the rule follows the
    wave fill."""
    from cutedsl_backend.configs import WIDE_TILE, WIDE_TILE_BASE, wave_efficiency
    from cutedsl_backend.epilogue import EpilogueSpec

    def pick(m, n, k, epilogue=None, **kw):
        return rank_configs(GemmProblem(m, n, k, **kw), epilogue=epilogue)[0]

    k_major = dict(b_major="k")
    fp8_fast = dict(dtype="float8_e4m3fn", b_major="k", fast_accum=True)
    p = GemmProblem(4096, 14336, 4096, b_major="k")
    assert wave_efficiency(WIDE_TILE, p) == pytest.approx(0.987, abs=1e-3)
    assert wave_efficiency(WIDE_TILE_BASE, p) == pytest.approx(0.970, abs=1e-3)
    assert pick(4096, 14336, 4096, **k_major) == WIDE_TILE
    assert pick(4096, 14336, 4096, epilogue=EpilogueSpec(scale_a="row", scale_b="col"), **fp8_fast) == WIDE_TILE
    for m, n, k in [(8192, 8192, 8192), (4096, 4096, 14336), (128, 14336, 4096)]:  # fill worse / one wave
        assert pick(m, n, k, **k_major).tile_n <= 256
        assert pick(m, n, k, **fp8_fast).tile_n <= 256
    assert pick(4096, 14336, 4096).tile_n == 256  # B N-major: the wide tile is invalid
    assert pick(4096, 14336, 4096, dtype="float8_e4m3fn", b_major="k").tile_n <= 256  # precise fp8
    assert pick(4096, 14336, 4096, epilogue=EpilogueSpec(bias="col"), **k_major).tile_n == 256  # not measured
    assert rank_configs(p).count(WIDE_TILE) == 1


def test_smem_fits_and_stage_count():
    cfg = GemmConfig(128, 256)
    s = max_stages(cfg, P)
    assert s == 4  # 48 KiB per stage + 32 KiB epilogue in 227 KiB
    assert is_valid(cfg.replace(stages=4), P) and not is_valid(cfg.replace(stages=5), P)
    assert resolve_config(GemmConfig(128, 128), P).tile_k == 64


def test_space_and_quick_set_are_valid():
    space = config_space("sm90a")
    assert len(space) >= 48
    assert {c.schedule for c in space} == {"cooperative", "pingpong"}
    for c in quick_configs("sm90a"):
        check_config(c, P)
    assert {c.schedule for c in quick_configs("sm90a")} == {"cooperative", "pingpong"}
    assert any(c.cluster_m * c.cluster_n > 1 for c in quick_configs("sm90a"))


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (4096, 14336, 4096), (16, 8192, 8192),
                                   (128, 8192, 8192), (1, 64, 64), (200, 392, 520)])
def test_heuristic_picks_a_valid_config(shape):
    p = GemmProblem(*shape)
    cfg = default_config(p)
    check_config(cfg, p)
    ranked = rank_configs(p)
    assert as_run(ranked[0], p) == cfg  # the best ranked as it runs: partial last tiles moved, A loads fitted
    assert heuristic_score(ranked[0], p) <= heuristic_score(ranked[-1], p)


def test_heuristic_prefers_big_tiles_for_big_problems_and_small_for_decode():
    big = default_config(GemmProblem(8192, 8192, 8192))
    assert big.tile_m * big.tile_n >= 128 * 192
    dec = default_config(GemmProblem(16, 8192, 8192))
    assert dec.tile_m == 64  # a decode GEMM does not pay for 128 rows of padding


def test_config_names_are_unique():
    names = [c.name for c in config_space("sm90a")]
    assert len(names) == len(set(names))


def test_eager_dispatch_follows_the_device_capability(monkeypatch):
    """ops picks the kernel family from the device's compute capability (faked here)."""
    import torch

    from cutedsl_backend import build, operands

    for cap, arch in (((9, 0), "sm90a"), ((10, 0), "sm100a")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None, c=cap: c)
        operands.device_arch.cache_clear()
        assert operands.device_arch(0) == arch
        assert build.kernel_class(arch).__name__ == {"sm90a": "Sm90Gemm", "sm100a": "Sm100Gemm"}[arch]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (8, 9))
    operands.device_arch.cache_clear()
    with pytest.raises(UnsupportedGemmError, match="device"):
        operands.device_arch(0)
    operands.device_arch.cache_clear()


def test_gathered_residual_takes_the_measured_pingpong_override_and_others_do_not():
    from cutedsl_backend.epilogue import EpilogueSpec

    p = GemmProblem(4096, 14336, 4096)
    res = default_config(p, epilogue=EpilogueSpec(residual=True, residual_dtype="bfloat16"))
    assert (res.schedule, res.tile_m, res.tile_n, res.cluster_m) == ("pingpong", 128, 128, 2)
    tma_res = EpilogueSpec(residual=True, residual_dtype="bfloat16", residual_aligned=True)
    for spec in (None, EpilogueSpec(), EpilogueSpec("relu", bias="col", bias_dtype="bfloat16"), tma_res):
        assert default_config(p, epilogue=spec).schedule == "cooperative"
    small = default_config(GemmProblem(256, 8192, 4096), epilogue=EpilogueSpec(residual=True))
    assert small == default_config(GemmProblem(256, 8192, 4096))  # outside the measured shape class


def test_staged_epilogue_vectors_count_against_shared_memory():
    from cutedsl_backend.configs import epilogue_smem_bytes
    from cutedsl_backend.epilogue import EpilogueSpec

    p = GemmProblem(4096, 4096, 4096, 1, "float8_e4m3fn", "bfloat16", "k", "k")
    cfg = GemmConfig(128, 128)
    rowwise_bias = EpilogueSpec(bias="col", scale_a="row", scale_b="col")
    assert epilogue_smem_bytes(cfg, p, rowwise_bias) - epilogue_smem_bytes(cfg, p) == 4 * (128 + 128 + 128)
    assert EpilogueSpec(scale_a="scalar", scale_b="scalar").staged_vector_bytes(128, 128) == 0


def test_config_names_round_trip():
    from cutedsl_backend.configs import GemmConfig

    for arch in ("sm90a", "sm100a"):
        for cfg in config_space(arch) + [c.replace(stages=4, tile_k=64) for c in config_space(arch)[:3]]:
            assert GemmConfig.from_name(cfg.name) == cfg
    with pytest.raises(UnsupportedGemmError, match="config name"):
        GemmConfig.from_name("sm90a_cooperative_128x256")


def test_edge_aligned_tiles_are_named_keyed_apart_and_sm90a_only():
    """GemmConfig.edge: its own name and kernel key (the keys of configs without it, and so the
    disk cache's entries, are what they were before the field), and refused for sm100a by name."""
    from cutedsl_backend.configs import GemmConfig, check_config

    swap = GemmConfig(64, 160, schedule="pingpong", swap_ab=True)
    for cfg in (GemmConfig(128, 128, cluster_m=2, splits=2), swap):
        edge = cfg.replace(edge=True)
        assert edge.name == cfg.name + "_edge" and GemmConfig.from_name(edge.name) == edge
        assert edge.key() != cfg.key() and edge.shape != cfg.shape
    assert GemmConfig(128, 128).key() == dataclasses.astuple(GemmConfig(128, 128))[:-4]
    assert swap.key() == dataclasses.astuple(swap)[:-3]
    assert swap.replace(edge=True).key() == dataclasses.astuple(swap.replace(edge=True))[:-2]
    problem = GemmProblem(448, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm100a")
    with pytest.raises(UnsupportedGemmError, match="edge"):
        check_config(GemmConfig(128, 128, arch="sm100a", edge=True), problem)


def test_stream_k_configs_are_named_keyed_apart_and_refused_where_not_built():
    """GemmConfig.stream_k: its own name and key (the others' keys unchanged), sm90a only, never
    with K slices, and a workspace under 2^31 elements."""
    from cutedsl_backend.configs import GemmConfig, check_config

    for cfg in (GemmConfig(64, 96, schedule="pingpong", a_rows=16), GemmConfig(128, 192, cluster_m=2, edge=True),
                GemmConfig(128, 160, splits=2)):
        sk = cfg.replace(stream_k=True, splits=1)
        assert sk.name == cfg.replace(splits=1).name + "_sk" and GemmConfig.from_name(sk.name) == sk
        assert sk.key() == dataclasses.astuple(sk)[:-1] and sk.key() != cfg.key() and sk.shape != cfg.shape
    problem = GemmProblem(16, 4608, 3584, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    check_config(GemmConfig(64, 96, schedule="pingpong", stream_k=True), problem)
    with pytest.raises(UnsupportedGemmError, match="stream_k: takes no splits"):
        check_config(GemmConfig(64, 96, schedule="pingpong", stream_k=True, splits=2), problem)
    with pytest.raises(UnsupportedGemmError, match="stream_k: not with swap_ab"):
        check_config(GemmConfig(128, 160, swap_ab=True, stream_k=True), problem.swapped())
    # nor with the last tiles moved, and so the edge policy leaves a stream-K pick (a table's) unmoved
    from cutedsl_backend.configs.as_run import as_run

    mid = GemmProblem(1000, 4608, 3584, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    with pytest.raises(UnsupportedGemmError, match="stream_k: not with edge"):
        check_config(GemmConfig(128, 160, stream_k=True, edge=True), mid)
    assert as_run(GemmConfig(128, 160, stream_k=True), mid) == GemmConfig(128, 160, stream_k=True)
    assert as_run(GemmConfig(128, 160), mid) == GemmConfig(128, 160, edge=True)
    with pytest.raises(UnsupportedGemmError, match="stream_k: implemented for sm90a only"):
        check_config(GemmConfig(128, 128, arch="sm100a", stream_k=True),
                     GemmProblem(16, 4608, 3584, 1, "bfloat16", "bfloat16", "k", "k", "sm100a"))
    with pytest.raises(UnsupportedGemmError, match="stream_k: its workspace"):
        check_config(GemmConfig(128, 128, stream_k=True),
                     GemmProblem(65536, 65536, 65536, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"))


def _stream_k_pieces(total: int, clusters: int, k_tiles: int) -> dict:
    """The kernels' stream-K walk (kernels.split_k.stream_k_work), in Python: {tile: [(cluster,
    first k-tile, k-tiles, piece, pieces)]} over every cluster's work items s * clusters + c."""
    q, r = divmod(total, clusters)
    start = lambda c: c * q + min(c, r)  # noqa: E731
    owner = lambda x: x // (q + 1) if x < r * (q + 1) else r + (x - r * (q + 1)) // q  # noqa: E731
    out = {}
    for c in range(clusters):
        s = 0
        while True:
            begin, end = start(c), start(c + 1)
            tile = begin // k_tiles + s
            first = max(begin, tile * k_tiles)
            count = min(end, tile * k_tiles + k_tiles) - first
            if count <= 0:
                break
            first_owner = owner(tile * k_tiles)
            pieces = owner(tile * k_tiles + k_tiles - 1) - first_owner + 1
            out.setdefault(tile, []).append((c, first - tile * k_tiles, count, c - first_owner, pieces))
            s += 1
    return out


@pytest.mark.parametrize("tiles, k_tiles, clusters", [(48, 56, 132), (3, 128, 132), (72, 56, 132), (1, 1, 132),
                                                      (66, 32, 66), (500, 7, 132), (2, 1, 132), (132, 64, 132)])
def test_stream_k_shares_cover_every_k_tile_once_in_piece_order(tiles, k_tiles, clusters):
    """Every tile's k-tiles are covered once, by pieces numbered 0.. in K order and share order,
    each knowing the tile's piece count; no tile has more pieces than the workspace holds
    (configs.stream_k_shares), and the shares differ in length by at most one k-tile."""
    from cutedsl_backend.configs import GemmConfig, stream_k_shares

    cfg = GemmConfig(64, 64, schedule="pingpong", stream_k=True)
    problem = GemmProblem(64, 64 * tiles, 64 * k_tiles, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    total, launched, max_pieces = stream_k_shares(problem, cfg, clusters)
    assert total == tiles * k_tiles and launched == min(total, clusters)
    walk = _stream_k_pieces(total, launched, k_tiles)
    assert sorted(walk) == list(range(tiles))
    for tile, pieces in walk.items():
        assert [p[3] for p in pieces] == list(range(len(pieces))) and {p[4] for p in pieces} == {len(pieces)}
        assert [p[0] for p in pieces] == sorted(p[0] for p in pieces)
        ks = [k for _, first, count, _, _ in pieces for k in range(first, first + count)]
        assert ks == list(range(k_tiles)), tile
        assert len(pieces) <= max_pieces
    q, r = divmod(total, launched)
    lengths = [q + (c < r) for c in range(launched)]
    assert max(lengths) - min(lengths) <= 1 and min(lengths) >= 1


def test_tma_residual_buffers_count_against_shared_memory_on_sm90_only():
    from cutedsl_backend.configs import RES_STAGES, epilogue_smem_bytes
    from cutedsl_backend.epilogue import EpilogueSpec

    p = GemmProblem(4096, 4096, 4096)
    gathered = EpilogueSpec(residual=True, residual_dtype="bfloat16")
    tma = EpilogueSpec(residual=True, residual_dtype="bfloat16", residual_aligned=True)
    assert tma.residual_tma and not gathered.residual_tma and tma.key() != gathered.key()
    pp = GemmConfig(128, 128, schedule="pingpong")  # two groups of 64x32 sub-tiles
    assert epilogue_smem_bytes(pp, p, tma) - epilogue_smem_bytes(pp, p, gathered) == 2 * RES_STAGES * 64 * 32 * 2
    coop = GemmConfig(128, 256)  # one group of 128x32 sub-tiles
    assert epilogue_smem_bytes(coop, p, tma) - epilogue_smem_bytes(coop, p, gathered) == RES_STAGES * 128 * 32 * 2
    b = GemmProblem(4096, 4096, 4096, arch="sm100a")
    c100 = GemmConfig(128, 128, arch="sm100a")
    assert epilogue_smem_bytes(c100, b, tma) == epilogue_smem_bytes(c100, b, gathered)


def test_residual_alignment_rule():
    torch = pytest.importorskip("torch")
    from cutedsl_backend.epilogue import residual_aligned

    base = torch.empty(2, 64, 136, dtype=torch.bfloat16)
    view = lambda t: t.permute(1, 2, 0)  # noqa: E731  (L, M, N) -> (M, N, L)
    assert residual_aligned(view(base[..., :128]), 2)  # rows of 272 bytes, batches aligned
    assert not residual_aligned(view(base[..., 1:129]), 2)  # data one element in
    assert not residual_aligned(view(torch.empty(2, 64, 132, dtype=torch.bfloat16)[..., :128]), 2)  # 264 B rows
    bcast = torch.empty(64, 128, dtype=torch.bfloat16).unsqueeze(0).expand(2, 64, 128)
    assert not residual_aligned(view(bcast), 2) and residual_aligned(view(bcast[:1]), 1)


def test_static_and_eager_residual_checks_agree():
    """The Inductor check (layouts) and the eager one (tensors) apply the same rule: on tensors
    whose storage starts 16-byte aligned they decide alike."""
    torch = pytest.importorskip("torch")
    from cutedsl_backend.epilogue import residual_aligned
    from cutedsl_backend.inductor.eligibility import Sizes, _residual_aligned, operand_from_fake

    base3 = torch.empty(2, 64, 136, dtype=torch.bfloat16)
    cases = [  # (residual (L, M, N) or (M, N), GEMM batch)
        (base3[..., :128], 2), (base3[..., 1:129], 2), (base3[:, :, :128].contiguous(), 2),
        (torch.empty(2, 64, 132, dtype=torch.bfloat16)[..., :128], 2),
        (torch.empty(64, 128, dtype=torch.bfloat16), 2), (torch.empty(64, 128, dtype=torch.float32), 1),
        (torch.empty(64, 130, dtype=torch.float32)[:, 2:], 1), (torch.empty(64, 129, dtype=torch.float16)[:, :128], 1),
    ]
    for res, batch in cases:
        assert res.untyped_storage().data_ptr() % 16 == 0
        res3 = res if res.dim() == 3 else res.unsqueeze(0).expand(batch, *res.shape)
        eager = residual_aligned(res3.permute(1, 2, 0), batch)
        static = _residual_aligned(operand_from_fake(res), 3 if batch > 1 else 2, Sizes())
        assert eager == static, (res.shape, res.stride(), res.storage_offset(), batch)
    assert residual_aligned(base3[..., :128].permute(1, 2, 0), 2)  # the rule is not vacuous


def test_precise_fp8_accumulator_copies():
    """Precise fp8 keeps the fp32 sum and k-tile partials: two partials where they fit, else one
    (a larger tile); tiles that fit neither are refused naming the rule. One-partial tiles rank
    after the overlapped (three-copy) ones, except the measured override: cooperative 128x192 c2x1
    for large precise problems (M >= 4096, N >= 8192)."""
    from cutedsl_backend.configs import check_config, promoted_acc_copies, rank_configs, tuned_choice
    from cutedsl_backend.problem import make_problem

    assert promoted_acc_copies(GemmConfig(128, 128)) == 3  # 64 registers a copy per thread
    assert promoted_acc_copies(GemmConfig(128, 192)) == 2
    assert promoted_acc_copies(GemmConfig(64, 192, schedule="pingpong")) == 2
    assert promoted_acc_copies(GemmConfig(128, 256)) == 0
    p = make_problem(8192, 8192, 8192, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16")
    check_config(GemmConfig(128, 192), p)
    with pytest.raises(UnsupportedGemmError, match="at least two fp32 accumulators, 256 registers"):
        check_config(GemmConfig(128, 256), p)
    fast = make_problem(8192, 8192, 8192, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16", fast_accum=True)
    check_config(GemmConfig(128, 256), fast)  # fast accumulation keeps one accumulator
    ranked = rank_configs(p)
    assert ranked[0].name == "sm90a_cooperative_128x192xauto_c2x1_sauto_rn8"
    twos = [i for i, c in enumerate(ranked[1:]) if promoted_acc_copies(c) == 2]
    assert twos and min(twos) > max(i for i, c in enumerate(ranked[1:]) if promoted_acc_copies(c) == 3)
    # outside the measured class, and for fast accumulation, the heuristic's overlapped tiles
    small = make_problem(2048, 1024, 8192, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16")
    assert promoted_acc_copies(rank_configs(small)[0]) == 3
    assert tuned_choice(fast) is None and tuned_choice(small) is None and tuned_choice(p) == ranked[0]
    # only the class the sweep measured: e4m3 -> bf16, scales only, K >= 4096
    from cutedsl_backend.epilogue import EpilogueSpec

    scales = EpilogueSpec(scale_a="row", scale_b="col")
    assert tuned_choice(p, scales) == ranked[0]
    assert tuned_choice(p, EpilogueSpec(scale_a="row", scale_b="col", bias="col")) is None
    assert tuned_choice(p, EpilogueSpec(scale_a="row", scale_b="col", activation="relu")) is None
    for other in (dict(k=2048), dict(out_dtype="float32"), dict(dtype="float8_e5m2", b_dtype="float8_e4m3fn")):
        kw = dict(m=8192, n=8192, k=8192, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16") | other
        assert tuned_choice(make_problem(kw.pop("m"), kw.pop("n"), kw.pop("k"), **kw)) is None, other


def test_the_heuristic_pays_for_a_clusters_tiles_past_the_grid():
    """At 640 tokens (five 128-row tiles) a cluster of two along M launches six rows: the H200's
    mid-size sweep measured such picks at 0.52-0.82x cuBLAS where the same tile clustered along N
    was the fastest (0.97-1.08x). The picks there no longer pad M to a whole cluster."""
    import math

    from cutedsl_backend.configs import default_config

    for n, k in ((6144, 4096), (28672, 4096), (14336, 4096), (4608, 3584), (28672, 3584), (9216, 3072)):
        cfg = default_config(GemmProblem(640, n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"))
        assert math.ceil(640 / cfg.tile_m) % cfg.cluster_m == 0, (n, k, cfg.name)
