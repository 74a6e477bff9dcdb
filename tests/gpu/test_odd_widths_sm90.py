"""Tiles whose width is a multiple of 16 but not of 32 on a Hopper GPU (112, 144, 176, 208, 240 columns;
16, 80 and 112 tokens swapped): their epilogue stores 48- or 16-column sub-tiles
(configs.resources.epilogue_tile_n). Numerics against a float64 reference (output poisoned with
NaN) over tails, batches, both operand majors, clusters, K slices, stream-K, edge tiles, fused
epilogues with a TMA-loaded and a gathered residual, and FP8 scales; bitwise determinism of the
K-sliced form. Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.configs import GemmConfig  # noqa: E402

from .operands import (  # noqa: E402
    check_bitwise_deterministic,
    check_config_over_shapes,
    check_fused_epilogue,
    check_scaled_mm,
    each_layout,
)

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
ODD = [GemmConfig(128, 144), GemmConfig(128, 144, cluster_n=2), GemmConfig(128, 176, cluster_m=2),
       GemmConfig(128, 112, cluster_m=2),
       GemmConfig(128, 208), GemmConfig(128, 240, edge=True), GemmConfig(128, 144, splits=2),
       GemmConfig(128, 144, stream_k=True), GemmConfig(128, 144, schedule="pingpong"),
       GemmConfig(64, 80, schedule="pingpong", swap_ab=True),
       GemmConfig(64, 112, schedule="pingpong", cluster_m=4, cluster_n=2, swap_ab=True),
       GemmConfig(64, 144, schedule="pingpong", swap_ab=True),
       # 16 tokens per tile, deep pipelines (the few-token tiles cuBLAS runs: 64 x 16, 16 stages)
       GemmConfig(64, 16, schedule="pingpong", cluster_m=4, stages=16, swap_ab=True),
       GemmConfig(64, 16, schedule="pingpong", splits=2, stages=12, swap_ab=True),
       GemmConfig(64, 16, schedule="pingpong", cluster_m=4, cluster_n=2, swap_ab=True),
       # unswapped 16- and 48-wide tiles with four-way multicast of A (both B majors via each_layout)
       GemmConfig(64, 16, schedule="pingpong", cluster_m=4), GemmConfig(64, 48, schedule="pingpong", cluster_m=4,
                                                                         cluster_n=2)]
# the fused epilogue (bias, activation, residual: no swap-AB, which takes no residual)
FUSED = [GemmConfig(128, 144), GemmConfig(128, 208), GemmConfig(128, 144, splits=2),
         GemmConfig(128, 144, schedule="pingpong")]
# L, M, N, K: tails in every dimension (N not a multiple of any width), whole waves of 144-wide
# tiles (4096 x 576, 1024 x 4608), batches
SHAPES = [(1, 1, 200, 520), (3, 77, 328, 1000), (1, 1024, 4608, 3584), (1, 4096, 576, 1024), (2, 130, 488, 4104),
          (1, 700, 1496, 1032)]
SEED = 7144


@pytest.mark.parametrize("cfg", ODD, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_odd_widths(cfg, dtype, layout):
    check_config_over_shapes(cfg, dtype, layout, SHAPES, SEED)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", FUSED, ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
def test_odd_widths_fused_epilogue(cfg, aligned):
    check_fused_epilogue(cfg, (2, 200, 456, 1064), SEED, aligned, "gelu_tanh")


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("cfg, fast", [(GemmConfig(128, 144), False), (GemmConfig(128, 176, cluster_n=2), False),
                                       (GemmConfig(128, 112, cluster_m=2), False), (GemmConfig(128, 240), True),
                                       (GemmConfig(64, 80, schedule="pingpong", swap_ab=True), False),
                                       (GemmConfig(64, 16, schedule="pingpong", cluster_m=4, stages=16, swap_ab=True),
                                        False)],
                         ids=["144-precise", "176-precise", "112-precise", "240-fast", "swap-80", "swap-16"])
def test_odd_widths_fp8(kind, cfg, fast):
    """Precise FP8 (two fp32 accumulators) takes 112, 144 and 176: the rules refuse 240 without fast_accum."""
    check_scaled_mm(cfg, kind, (320, 4104, 4096), SEED, fast)


def test_odd_width_k_slices_are_bitwise_deterministic():
    check_bitwise_deterministic(GemmConfig(128, 144, splits=3), 256, 576, 7168, SEED)


SCALES = pytest.mark.epilogue("scales")


@pytest.mark.parametrize("m, n, k, dtype", [(1000, 4592, 1032, "bfloat16"), (3000, 2304, 2056, "bfloat16"),
                                            pytest.param(2000, 576, 1032, "float8_e4m3fn", marks=SCALES),
                                            pytest.param(1000, 4592, 2056, "float8_e4m3fn", marks=SCALES)])
def test_the_dispatcher_runs_the_models_waves_width_and_is_right(m, n, k, dtype):
    """configs.heuristic.waves_choice as the eager dispatcher runs it, on projections no measured
    table covers (tails in M and N, so the edge-moved last tiles too): the kernel that ran is the
    models' wave-filling width, and its result is right against float64 on a NaN-poisoned output."""
    import cutedsl_backend as cb
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.heuristic import WAVE_WIDTHS
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.plan import PLANS
    from cutedsl_backend.problem import GemmProblem
    from cutedsl_backend.validation.tolerances import compare, compare_fp8

    fp8 = dtype == "float8_e4m3fn"
    spec = EpilogueSpec(scale_a="scalar", scale_b="scalar") if fp8 else None
    problem = GemmProblem(m, n, k, 1, dtype, "bfloat16", "k", "k", "sm90a")
    expected = default_config(problem, epilogue=spec, gpu=torch.cuda.get_device_name())
    if expected.tile_n not in WAVE_WIDTHS:
        pytest.skip(f"not run: {torch.cuda.get_device_name()} dispatches {expected.name} here (a measured table)")
    g = torch.Generator(device="cuda").manual_seed(SEED + m)
    a = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    PLANS.clear()
    if fp8:
        a8, w8 = (a * 2).to(torch.float8_e4m3fn), (w * 2).to(torch.float8_e4m3fn)
        sa, sb = (torch.rand((), device="cuda", generator=g) + 0.5 for _ in range(2))
        cb.scaled_mm(a8, w8.t(), sa, sb, out=out)
        check = compare_fp8(out, (a8.double() @ w8.double().t()) * sa.double() * sb.double(), "bfloat16", k)
    else:
        a16, w16 = a.bfloat16(), w.bfloat16()
        cb.gemm(a16, w16.t(), out=out)
        check = compare(out, a16.double() @ w16.double().t(), "bfloat16", k)
    ran = PLANS.newest().kernel.config
    assert (ran.tile_m, ran.tile_n, ran.cluster_m, ran.cluster_n, ran.schedule) == (
        expected.tile_m, expected.tile_n, expected.cluster_m, expected.cluster_n, expected.schedule), ran.name
    assert check["ok"], check
