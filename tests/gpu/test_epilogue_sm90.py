"""Fused epilogues on the sm90 kernels against the formula in torch (float64 reference):
out = activation(alpha * (A @ B) + bias + beta * residual). Skipped, with the reason, without
an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig, quick_configs  # noqa: E402
from cutedsl_backend.epilogue import ACTIVATION_NAMES, reference  # noqa: E402
from cutedsl_backend.validation.tolerances import compare  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("fused")]
CONFIGS = [quick_configs("sm90a")[0], quick_configs("sm90a")[3]]  # cooperative, pingpong
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def operands(L, M, N, K, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = K ** -0.25  # keep A @ B ~ N(0, 1): activations are tested away from saturation
    a = (torch.randn(L, M, K, device="cuda", generator=g) * s).to(dtype)
    b = (torch.randn(L, K, N, device="cuda", generator=g) * s).to(dtype)
    return a, b, g


def check(out, ref, K, activation=None):
    m = compare(out, ref, str(out.dtype).replace("torch.", ""), K, activation=activation)
    assert m["ok"], m


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("activation", ACTIVATION_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_bias_activation(cfg, activation, dtype):
    a, b, g = operands(1, 1000, 2056, 776, DTYPES[dtype], seed=len(activation))
    bias = torch.randn(2056, device="cuda", generator=g).to(DTYPES[dtype])
    out = torch.full((1000, 2056), float("nan"), device="cuda", dtype=DTYPES[dtype])
    cb.gemm(a[0], b[0], bias=bias, activation=activation, config=cfg, out=out)
    ref = reference(a[0].double() @ b[0].double(), bias=bias.double(), activation=activation)
    check(out, ref, 776, activation)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_bias_residual_alpha_beta(cfg, dtype):
    dt = DTYPES[dtype]
    a, b, g = operands(2, 328, 456, 264, dt, seed=1)
    bias = torch.randn(328, 1, device="cuda", generator=g, dtype=torch.float32)  # fp32 bias, per row
    res = torch.randn(2, 328, 456, device="cuda", generator=g).to(dt)
    out = torch.full((2, 328, 456), float("nan"), device="cuda", dtype=dt)
    cb.gemm(a, b, bias=bias, residual=res, alpha=0.75, beta=-1.5, config=cfg, out=out)
    ref = reference(a.double() @ b.double(), bias=bias.double(), residual=res.double(), alpha=0.75, beta=-1.5)
    check(out, ref, 264)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("res_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
def test_residual_tma_and_gathered(cfg, res_dtype, aligned):
    """An aligned residual is TMA-loaded, a misaligned one (data one element in) gathered; both
    exact over tails, batches and many tiles per CTA."""
    from cutedsl_backend.operands import EpilogueOperands, prepare

    a, b, g = operands(2, 1000, 2056, 776, torch.bfloat16, seed=4)
    wide = torch.randn(2, 1000, 2056 + 8, device="cuda", generator=g).to(getattr(torch, res_dtype))
    res = wide[..., :2056].contiguous() if aligned else wide[..., 1:2057]
    out = torch.full((2, 1000, 2056), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a, b, residual=res, alpha=0.5, beta=2.0, config=cfg, out=out)
    check(out, reference(a.double() @ b.double(), residual=res.double(), alpha=0.5, beta=2.0), 776)
    problem, *_ = prepare(a, b, None, None)
    assert EpilogueOperands(problem, a.device, None, res, None, None, None).spec.residual_tma == aligned


def test_wide_tile_with_the_whole_epilogue():
    """128x320 (two WGMMAs per k-block, ten epilogue sub-tiles): bias, gelu_tanh and a TMA residual
    over tails and batches, B K-major."""
    a, b, g = operands(2, 1000, 2056, 776, torch.bfloat16, seed=12)
    b = b.transpose(1, 2).contiguous().transpose(1, 2)  # K-major
    bias = torch.randn(2056, device="cuda", generator=g).to(torch.bfloat16)
    res = torch.randn(2, 1000, 2056, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((2, 1000, 2056), float("nan"), device="cuda", dtype=torch.bfloat16)
    cfg = GemmConfig(128, 320, cluster_m=2)
    cb.gemm(a, b, bias=bias, residual=res, activation="gelu_tanh", beta=0.5, config=cfg, out=out)
    ref = reference(a.double() @ b.double(), bias=bias.double(), residual=res.double(), beta=0.5,
                    activation="gelu_tanh")
    check(out, ref, 776, "gelu_tanh")


def test_residual_broadcast_strided_and_fp32_output():
    a, b, g = operands(3, 200, 392, 520, torch.bfloat16, seed=2)
    res2d = torch.randn(392, 200, device="cuda", generator=g).t()  # fp32, N not contiguous: copied
    out = cb.gemm(a, b, residual=res2d, beta=0.5, out_dtype=torch.float32, activation="relu")
    ref = reference(a.double() @ b.double(), residual=res2d.double(), beta=0.5, activation="relu")
    check(out, ref, 520, "relu")
    res_rows = torch.randn(200, 400, device="cuda", generator=g)[:, :392]  # row stride 400
    out = cb.gemm(a[0], b[0], residual=res_rows, out_dtype=torch.float32)
    check(out, reference(a[0].double() @ b[0].double(), residual=res_rows.double()), 520)


def test_nan_and_inf_flow_through_the_epilogue():
    a, b, g = operands(1, 256, 256, 256, torch.bfloat16, seed=3)
    a[0, 5, 7] = float("nan")
    a[0, 9, 3] = float("inf")
    bias = torch.randn(256, device="cuda", generator=g).to(torch.bfloat16)
    for act in (None, "relu", "gelu", "silu", "tanh"):
        out = cb.gemm(a[0], b[0], bias=bias, activation=act)
        ref = reference(a[0].double() @ b[0].double(), bias=bias.double(), activation=act)
        assert torch.equal(torch.isnan(out), torch.isnan(ref)), act
        assert torch.equal(torch.isinf(out), torch.isinf(ref)), act


def test_k0_with_epilogue_is_the_epilogue_of_zero():
    a = torch.randn(64, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(0, 128, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(128, device="cuda", dtype=torch.bfloat16)
    out = cb.gemm(a, b, bias=bias, activation="silu")
    torch.testing.assert_close(out, torch.nn.functional.silu(bias.float()).to(torch.bfloat16).expand(64, 128))


def test_bad_epilogue_inputs_name_the_rule():
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(cb.UnsupportedGemmError, match="bias: shape"):
        cb.gemm(a, b, bias=torch.randn(64, device="cuda", dtype=torch.bfloat16))  # M-long, not N
    with pytest.raises(cb.UnsupportedGemmError, match="bias: dtype"):
        cb.gemm(a, b, bias=torch.randn(128, device="cuda", dtype=torch.float16))
    with pytest.raises(cb.UnsupportedGemmError, match="residual: shape"):
        cb.gemm(a, b, residual=torch.randn(128, 64, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(cb.UnsupportedGemmError, match="activation"):
        cb.gemm(a, b, activation="swish")
    with pytest.raises(cb.UnsupportedGemmError, match="device"):
        cb.gemm(a, b, bias=torch.randn(128, dtype=torch.bfloat16))


def test_custom_op_with_epilogue_under_compile():
    a, b, g = operands(1, 256, 512, 320, torch.bfloat16, seed=4)
    bias = torch.randn(512, device="cuda", generator=g).to(torch.bfloat16)
    f = torch.compile(lambda x, y, z: torch.ops.cutedsl.gemm(x, y, z, None, "gelu_tanh"), fullgraph=True)
    out = f(a[0], b[0], bias)
    check(out, reference(a[0].double() @ b[0].double(), bias=bias.double(), activation="gelu_tanh"), 320,
          "gelu_tanh")
