"""Swap-AB on a Hopper GPU (GemmConfig.swap_ab: the kernel computes out^T = b^T @ a^T and stores
it column-major, which is the row-major result): numerics against a float64 reference on
NaN-poisoned outputs over token counts from 1 to a few hundred (not multiples of the tile), tails
in N and K, batches, every operand major, bias per column and per row, activations, alpha, FP8
tensorwise and rowwise scales, split-K (bitwise deterministic), and what it refuses. Skipped,
with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.epilogue import reference  # noqa: E402
from cutedsl_backend.validation.tolerances import compare, compare_fp8  # noqa: E402

from .operands import check_config_over_shapes, each_layout  # noqa: E402
from .operands import layout_operands as operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
SWAP = [GemmConfig(128, 192, swap_ab=True), GemmConfig(128, 128, splits=2, swap_ab=True),
        GemmConfig(64, 256, schedule="pingpong", cluster_m=2, swap_ab=True),
        GemmConfig(64, 128, schedule="pingpong", splits=3, swap_ab=True),
        # four weight tiles share the tokens' panel (B, swapped) by multicast
        GemmConfig(64, 160, schedule="pingpong", splits=2, cluster_m=4, swap_ab=True),
        GemmConfig(128, 96, cluster_m=4, swap_ab=True), GemmConfig(128, 160, cluster_m=4, cluster_n=2, swap_ab=True),
        GemmConfig(64, 96, schedule="pingpong", cluster_m=4, cluster_n=2, edge=True, swap_ab=True)]
# L, M (tokens), N (weights), K; N a multiple of 8 (the kernel's output columns are its rows)
SHAPES = [(1, 1, 264, 520), (1, 16, 4104, 4096), (1, 100, 1000, 776), (1, 192, 8192, 2048), (2, 320, 328, 264),
          (3, 77, 456, 1000)]
SEED = 7070


@pytest.mark.parametrize("cfg", SWAP, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_swap_ab(cfg, dtype, layout):
    check_config_over_shapes(cfg, dtype, layout, SHAPES, SEED, also_fresh=True)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", SWAP[:2] + SWAP[-1:], ids=lambda c: c.name)
@pytest.mark.parametrize("bias_kind", ["col", "row"])
def test_swap_ab_fused_epilogue(cfg, bias_kind):
    L, M, N, K = 1, 96, 456, 1064
    a, b, g = operands(L, M, N, K, torch.bfloat16, "k", "k", seed=SEED)
    bias = torch.randn(N if bias_kind == "col" else (M, 1), device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a[0], b[0], bias=bias, activation="gelu_tanh", alpha=0.5, config=cfg, out=out)
    ref = reference(a[0].double() @ b[0].double(), bias=bias.double(), alpha=0.5, activation="gelu_tanh")
    m = compare(out, ref, "bfloat16", K, activation="gelu_tanh")
    assert m["ok"], m
    out32 = cb.gemm(a[0], b[0], bias=bias.float(), activation="silu", out_dtype=torch.float32, config=cfg)
    ref = reference(a[0].double() @ b[0].double(), bias=bias.double(), activation="silu")
    assert compare(out32, ref, "float32", K, activation="silu")["ok"]


@pytest.mark.parametrize("scales", ["rowwise", "tensorwise"])
def test_swap_ab_fp8(scales):
    M, N, K = 48, 456, 2048
    g = torch.Generator(device="cuda").manual_seed(SEED)
    f8 = torch.float8_e4m3fn
    a8 = (torch.randn(M, K, device="cuda", generator=g) * 2).to(f8)
    b8 = (torch.randn(N, K, device="cuda", generator=g) * 2).to(f8).t()
    if scales == "rowwise":
        sa = torch.rand(M, 1, device="cuda", generator=g) / 16 + 0.01
        sb = torch.rand(1, N, device="cuda", generator=g) / 16 + 0.01
    else:
        sa = torch.rand((), device="cuda", generator=g) / 16 + 0.01
        sb = torch.rand((), device="cuda", generator=g) / 16 + 0.01
    for cfg in (GemmConfig(128, 128, swap_ab=True), GemmConfig(64, 128, schedule="pingpong", splits=2, swap_ab=True),
                GemmConfig(64, 96, schedule="pingpong", splits=2, cluster_m=4, swap_ab=True),
                GemmConfig(64, 64, schedule="pingpong", cluster_m=4, cluster_n=2, swap_ab=True)):
        for fast in (True, False):
            out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            cb.scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast, config=cfg, out=out)
            ref = (a8.double() @ b8.double()) * sa.double() * sb.double()
            assert compare_fp8(out, ref, "bfloat16", K, fast_accum=fast)["ok"], (cfg.name, fast)


def test_swap_ab_split_k_is_deterministic():
    a, b, _ = operands(1, 192, 8192, 8192, torch.bfloat16, "k", "k", seed=SEED + 1)
    cfg = GemmConfig(128, 192, splits=4, swap_ab=True)
    first = cb.gemm(a[0], b[0], config=cfg)
    for _ in range(20):
        assert torch.equal(cb.gemm(a[0], b[0], config=cfg), first)
    assert compare(first, a[0].double() @ b[0].double(), "bfloat16", 8192)["ok"]


def test_swap_ab_refusals_name_the_rule():
    a, b, g = operands(1, 64, 256, 512, torch.bfloat16, "k", "k", seed=SEED + 2)
    res = torch.randn(64, 256, device="cuda", generator=g).to(torch.bfloat16)
    with pytest.raises(cb.UnsupportedGemmError, match="swap_ab: takes no residual"):
        cb.gemm(a[0], b[0], residual=res, config=GemmConfig(128, 128, swap_ab=True))
    odd = torch.randn(64, 512, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(100, 512, device="cuda", generator=g).to(torch.bfloat16).t()  # N = 100: out rows of 200 B
    with pytest.raises(cb.UnsupportedGemmError, match="swap_ab"):
        cb.gemm(odd, w, config=GemmConfig(128, 128, swap_ab=True))


@pytest.mark.parametrize("m", [150, 192])
def test_dispatched_fp8_swap_ab(m):
    """The dispatcher's fp8 swap-AB picks (scaled_mm with scalar scales, bf16 out, config=None):
    the swapped kernel runs (its scales exchanged) and the result is right against float64; with
    rowwise scales the same shape runs unswapped. N and K are no model's projection (no measured
    table stands in for the models)."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.measured import MEASURED
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.plan import PLANS
    from cutedsl_backend.problem import GemmProblem

    N, K = 9728, 8192
    scalar = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    problem = GemmProblem(m, N, K, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a")
    assert default_config(problem, epilogue=scalar).swap_ab
    assert MEASURED.choice(problem, torch.cuda.get_device_name(), scalar) is None
    g = torch.Generator(device="cuda").manual_seed(SEED + 500 + m)
    f8 = torch.float8_e4m3fn
    a = (torch.randn(m, K, device="cuda", generator=g) * 2).to(f8)
    w = (torch.randn(N, K, device="cuda", generator=g) * 2).to(f8)
    sa, sb = torch.rand((), device="cuda", generator=g) + 0.5, torch.rand((), device="cuda", generator=g) + 0.5
    rows, cols = torch.rand(m, 1, device="cuda", generator=g) + 0.5, torch.rand(1, N, device="cuda", generator=g) + 0.5
    exact = a.double() @ w.double().t()
    for scale_a, scale_b, swapped in ((sa, sb, True), (rows, cols, False)):
        out = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        PLANS.clear()
        cb.scaled_mm(a, w.t(), scale_a, scale_b, out=out)
        assert PLANS.newest().swap == swapped
        check = compare_fp8(out, exact * scale_a.double() * scale_b.double(), "bfloat16", K)
        assert check["ok"], (swapped, check)
    # a column bias (a row bias of the swapped kernel) and an activation on the swapped path
    bias = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    PLANS.clear()
    cb.scaled_mm(a, w.t(), sa, sb, bias=bias, activation="gelu_tanh", out=out)
    assert PLANS.newest().swap
    want = reference(exact * sa.double() * sb.double(), bias=bias.double(), activation="gelu_tanh")
    check = compare_fp8(out, want, "bfloat16", K, activation="gelu_tanh")
    assert check["ok"], check


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("m", [128, 150, 192, 229, 288, 320])
def test_dispatched_swap_ab(m):
    """The dispatcher's own swap-AB picks (config=None, nn.Linear layout) over token counts that are
    not tile multiples, plain and with bias + activation, and the fallback to an unswapped config
    when ``out``'s rows cannot take the swapped store (row stride not 16-byte aligned). N is no
    model's projection, so no measured config table (configs.measured) stands in for the models."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.measured import MEASURED
    from cutedsl_backend.plan import PLANS
    from cutedsl_backend.problem import GemmProblem

    N, K = 3712, 14336
    problem = GemmProblem(m, N, K, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    assert default_config(problem).swap_ab
    assert MEASURED.choice(problem, torch.cuda.get_device_name()) is None
    a, b, g = operands(1, m, N, K, torch.bfloat16, "k", "k", seed=SEED + m)
    bias = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
    exact = a[0].double() @ b[0].double()
    out = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    PLANS.clear()
    cb.gemm(a[0], b[0], out=out)
    assert PLANS.newest().swap  # the call ran the swapped kernel
    assert compare(out, exact, "bfloat16", K)["ok"]
    out.fill_(float("nan"))
    cb.gemm(a[0], b[0], bias=bias, activation="silu", out=out)
    assert compare(out, reference(exact, bias=bias.double(), activation="silu"), "bfloat16", K, activation="silu")["ok"]
    wide = torch.full((m, N + 4), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a[0], b[0], out=wide[:, :N])
    assert compare(wide[:, :N], exact, "bfloat16", K)["ok"] and wide[:, N:].isnan().all()
