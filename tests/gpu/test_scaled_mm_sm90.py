"""FP8 scaled GEMM (QGMMA) on sm90 against a float64 reference of the dequantized inputs, and
against torch._scaled_mm. Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.epilogue import reference  # noqa: E402
from cutedsl_backend.validation.seeds import stable_seed  # noqa: E402
from cutedsl_backend.validation.tolerances import compare_fp8  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("scales")]
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
MIXES = [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)]
OUT = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def fp8_operands(M, N, K, da, db, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(da)
    w = (torch.randn(N, K, device="cuda", generator=g) * 2).to(db)
    return a, w.t(), g  # b: (K, N) column-major


def scales(kind, M, N, g):
    if kind == "tensorwise":
        return (torch.rand((), device="cuda", generator=g) + 0.5, torch.rand((), device="cuda", generator=g) + 0.5)
    return (torch.rand(M, 1, device="cuda", generator=g) + 0.5, torch.rand(1, N, device="cuda", generator=g) + 0.5)


def dequant_ref(a, b, sa, sb, **kw):
    return reference(a.double() @ b.double(), scale_a=sa.double(), scale_b=sb.double(), **kw)


@pytest.mark.parametrize("mix", MIXES, ids=lambda m: f"{str(m[0])[-6:]}x{str(m[1])[-6:]}")
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("out", OUT)
@pytest.mark.parametrize("cfg", [None, GemmConfig(64, 128, schedule="pingpong"), GemmConfig(128, 192, cluster_m=2)],
                         ids=["default", "pingpong", "coop128x192"])  # precise 128x192: one k-tile partial
@pytest.mark.parametrize("fast", [False, True], ids=["precise", "fast_accum"])
def test_scaled_mm_numerics(mix, kind, out, cfg, fast):
    M, N, K = 1000, 2056, 784
    a, b, g = fp8_operands(M, N, K, *mix, seed=stable_seed(mix, kind, out))
    sa, sb = scales(kind, M, N, g)
    res = torch.full((M, N), float("nan"), device="cuda", dtype=OUT[out])
    cb.scaled_mm(a, b, sa, sb, out_dtype=OUT[out], config=cfg, out=res, use_fast_accum=fast)
    m = compare_fp8(res, dequant_ref(a, b, sa, sb), out, K, fast_accum=fast)
    assert m["ok"], m


@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast", [False, True], ids=["precise", "fast_accum"])
def test_two_by_two_clusters(kind, fast):
    """Both operands multicast; M and N tile counts odd (part of a cluster idle)."""
    cfg = GemmConfig(128, 256 if fast else 192, cluster_m=2, cluster_n=2)
    M, N, K = 1100, 2056, 784
    a, b, g = fp8_operands(M, N, K, E4M3, E4M3, seed=17)
    sa, sb = scales(kind, M, N, g)
    res = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.scaled_mm(a, b, sa, sb, config=cfg, out=res, use_fast_accum=fast)
    m = compare_fp8(res, dequant_ref(a, b, sa, sb), "bfloat16", K, fast_accum=fast)
    assert m["ok"], m


@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast", [False, True], ids=["precise", "fast_accum"])
def test_matches_torch_scaled_mm(kind, fast):
    M, N, K = 200, 400, 528
    a, b, g = fp8_operands(M, N, K, E4M3, E4M3, seed=9)
    sa, sb = scales(kind, M, N, g)
    ours = cb.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, use_fast_accum=fast)
    theirs = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float32, use_fast_accum=fast)
    m = compare_fp8(ours, theirs.double(), "float32", K, fast_accum=True)
    assert m["ok"] and m["cosine"] > 0.9999, m


def test_scaled_mm_with_fused_epilogue():
    M, N, K = 328, 456, 272
    a, b, g = fp8_operands(M, N, K, E4M3, E4M3, seed=4)
    sa, sb = scales("rowwise", M, N, g)
    sa, sb = sa / 16, sb / 16  # keep the pre-activation near N(0, 1)
    bias = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
    res = torch.randn(M, N, device="cuda", generator=g).to(torch.bfloat16)
    out = cb.scaled_mm(a, b, sa, sb, bias=bias, residual=res, beta=0.5, activation="gelu_tanh",
                       config=GemmConfig(64, 128, schedule="pingpong"))
    m = compare_fp8(out, dequant_ref(a, b, sa, sb, bias=bias.double(), residual=res.double(), beta=0.5,
                                     activation="gelu_tanh"), "bfloat16", K, "gelu_tanh")
    assert m["ok"], m


@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
def test_wide_tile_fast_accum(kind):
    """128x320 (two 160-wide QGMMAs per k-block), fast accumulation; odd tile counts; with and
    without bias + relu."""
    M, N, K = 1100, 2056, 784
    a, b, g = fp8_operands(M, N, K, E4M3, E4M3, seed=23)
    sa, sb = scales(kind, M, N, g)
    cfg = GemmConfig(128, 320, cluster_m=2)
    res = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.scaled_mm(a, b, sa, sb, config=cfg, out=res, use_fast_accum=True)
    m = compare_fp8(res, dequant_ref(a, b, sa, sb), "bfloat16", K, fast_accum=True)
    assert m["ok"], m
    bias = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16) * 100
    res.fill_(float("nan"))
    cb.scaled_mm(a, b, sa, sb, bias=bias, activation="relu", config=cfg, out=res, use_fast_accum=True)
    m = compare_fp8(res, dequant_ref(a, b, sa, sb, bias=bias.double(), activation="relu"), "bfloat16", K,
                    "relu", fast_accum=True)
    assert m["ok"], m


def test_scaled_mm_bad_inputs():
    a, b, g = fp8_operands(64, 64, 64, E4M3, E4M3, seed=1)
    s = torch.ones((), device="cuda")
    with pytest.raises(cb.UnsupportedGemmError, match="layout"):
        cb.scaled_mm(a, b.contiguous(), s, s)  # b row-major
    with pytest.raises(cb.UnsupportedGemmError, match="e5m2 x e5m2"):
        cb.scaled_mm(a.float().to(E5M2), b.float().to(E5M2), s, s)
    with pytest.raises(cb.UnsupportedGemmError, match="scale_a"):
        cb.scaled_mm(a, b, torch.ones(64, device="cuda"), s)
    with pytest.raises(cb.UnsupportedGemmError, match="scale_b"):
        cb.scaled_mm(a, b, s, torch.ones(64, 1, device="cuda"))
    with pytest.raises(cb.UnsupportedGemmError, match="scaled_mm"):
        cb.gemm(a, b)
    with pytest.raises(cb.UnsupportedGemmError, match="float32"):
        cb.scaled_mm(a, b, s.half(), s)
    with pytest.raises(cb.UnsupportedGemmError, match="at least two fp32"):
        cb.scaled_mm(a, b, s, s, config=GemmConfig(128, 256))  # precise fp8 needs smaller tiles
