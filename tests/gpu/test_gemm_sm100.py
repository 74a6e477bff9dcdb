"""sm100a numerics on a Blackwell GPU (compute capability 10.x) against a float64 torch
reference. Collected everywhere; skipped with the reason "needs an sm100 GPU" on any other
device, and listed as not run (never passed) by the validation report."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import quick_configs  # noqa: E402
from cutedsl_backend.epilogue import reference  # noqa: E402
from cutedsl_backend.validation.tolerances import compare, compare_fp8  # noqa: E402

pytestmark = pytest.mark.gpu("sm100")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("cfg", quick_configs("sm100a"), ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 200, 392, 520), (2, 1000, 2056, 776)])
def test_gemm(cfg, dtype, shape):
    L, M, N, K = shape
    dt = DTYPES[dtype]
    a = torch.randn(L, M, K, device="cuda").to(dt)
    b = torch.randn(L, K, N, device="cuda").to(dt)
    out = torch.full((L, M, N), float("nan"), device="cuda", dtype=dt)
    cb.gemm(a, b, config=cfg, out=out)
    m = compare(out, torch.matmul(a.double(), b.double()), dtype, K)
    assert m["ok"], m


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", quick_configs("sm100a")[:4:3], ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_gelu_tanh_epilogue(cfg, dtype):
    M, N, K = 1000, 2056, 784
    s = K ** -0.25
    a = (torch.randn(M, K, device="cuda") * s).to(DTYPES[dtype])
    b = (torch.randn(K, N, device="cuda") * s).to(DTYPES[dtype])
    bias = torch.randn(N, device="cuda").to(DTYPES[dtype])
    out = cb.gemm(a, b, bias=bias, activation="gelu_tanh", config=cfg)
    m = compare(out, reference(a.double() @ b.double(), bias=bias.double(), activation="gelu_tanh"), dtype, K,
                "gelu_tanh")
    assert m["ok"], m


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("cfg", quick_configs("sm100a")[:4:3], ids=lambda c: c.name)
def test_fp8_rowwise_scales(cfg):
    M, N, K = 1000, 2056, 784
    a8 = (torch.randn(M, K, device="cuda") * 2).to(torch.float8_e4m3fn)
    b8 = (torch.randn(N, K, device="cuda") * 2).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(M, 1, device="cuda") + 0.5, torch.rand(1, N, device="cuda") + 0.5
    out = cb.scaled_mm(a8, b8, sa, sb, config=cfg)
    ref = reference(a8.double() @ b8.double(), scale_a=sa.double(), scale_b=sb.double())
    m = compare_fp8(out, ref, "bfloat16", K)
    assert m["ok"], m


SPLIT_K_SM100 = [cb.GemmConfig(128, 128, arch="sm100a", splits=3),
                 cb.GemmConfig(256, 128, cluster_m=2, arch="sm100a", two_cta=True, splits=4)]


@pytest.mark.parametrize("cfg", SPLIT_K_SM100, ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [(1, 16, 4104, 4096), (2, 200, 392, 1000)])
def test_split_k(cfg, shape):
    """Split-K on sm100a: right over tails and batches, and bitwise the same on a repeat."""
    L, M, N, K = shape
    a = torch.randn(L, M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(L, K, N, device="cuda").to(torch.bfloat16)
    out = torch.full((L, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a, b, config=cfg, out=out)
    m = compare(out, torch.matmul(a.double(), b.double()), "bfloat16", K)
    assert m["ok"], m
    assert torch.equal(cb.gemm(a, b, config=cfg), out)
