import subprocess
import sys
import time


def test_import_is_light_and_lazy():
    code = ("import time, sys; t=time.perf_counter(); import cutedsl_backend as c; "
            "dt=time.perf_counter()-t; print(dt); assert 'cutlass' not in sys.modules; "
            "assert 'torch' not in sys.modules; print(c.__all__)")
    best = min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout.split()[0]) for _ in range(3))
    assert best < 1.0, best


def test_public_api():
    import cutedsl_backend as cb

    assert callable(cb.compile_gemm) and callable(cb.gemm)
    assert cb.GemmConfig and issubclass(cb.UnsupportedGemmError, ValueError)
    t = time.perf_counter()
    assert cb.__version__
    assert time.perf_counter() - t < 1


def test_custom_ops_exist_once_imported_after_torch():
    code = ("import torch, sys; import cutedsl_backend; assert 'cutlass' not in sys.modules; "
            "print(torch.ops.cutedsl.gemm.default.name())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "cutedsl::gemm" in out


def test_public_op_traces_and_compiles_fullgraph():
    """torch.ops.cutedsl.gemm (registered with Library.define/impl + register_fake) through
    torch.compile(fullgraph=True); a CPU kernel stands in for the CUDA one for this test."""
    import pytest

    torch = pytest.importorskip("torch")
    from cutedsl_backend import ops

    lib = torch.library.Library("cutedsl", "FRAGMENT")
    lib.impl("gemm", lambda a, b, bias=None, residual=None, activation=None, alpha=1.0, beta=1.0,
             out_dtype=None: alpha * (a @ b) + (0 if bias is None else bias), "CPU")
    try:
        assert ops.gemm_op is torch.ops.cutedsl.gemm.default
        f = torch.compile(lambda x, y, z: torch.ops.cutedsl.gemm(x, y, z) * 2, fullgraph=True)
        x, y, z = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
        torch.testing.assert_close(f(x, y, z), (x @ y + z) * 2)
        with torch._subclasses.fake_tensor.FakeTensorMode():  # the fake gives the result's shape
            assert torch.ops.cutedsl.gemm(torch.empty(3, 8, 16), torch.empty(16, 5)).shape == (3, 8, 5)
    finally:
        lib._destroy()


def test_public_op_names_the_rule_and_is_tagged():
    """CPU tensors reach gemm()'s device rule (not the dispatcher's missing-kernel error); the op is
    tagged PT2-compliant."""
    import pytest

    torch = pytest.importorskip("torch")
    from cutedsl_backend import UnsupportedGemmError, ops

    with pytest.raises(UnsupportedGemmError, match="device: a and b must be CUDA tensors"):
        torch.ops.cutedsl.gemm(torch.randn(8, 16), torch.randn(16, 4))
    assert torch.Tag.pt2_compliant_tag in ops.gemm_op.tags


def _reference_gemm(a, b, bias=None, residual=None, activation=None, alpha=1.0, beta=1.0, out_dtype=None):
    from cutedsl_backend.epilogue import torch_activation

    z = alpha * (a @ b)
    if bias is not None:
        z = z + bias
    if residual is not None:
        z = z + beta * residual
    return torch_activation(activation)(z)


import pytest  # noqa: E402


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
@pytest.mark.parametrize("form", ["2d_col_bias", "3d_by_2d_row_bias", "batched_residual", "2d_by_3d"])
def test_op_backward_matches_torch_autograd(activation, form):
    """The op's registered backward (recomputed pre-activation, torch's derivative of the activation,
    the GEMMs through the op itself) gives torch autograd's gradients of the same formula, float64,
    for every activation and the broadcast forms (bias per column / row, residual, batch)."""
    torch = pytest.importorskip("torch")
    import cutedsl_backend.ops  # noqa: F401  (registers the op and its autograd)

    lib = torch.library.Library("cutedsl", "FRAGMENT")  # the kernel's formula on CPU, float64
    lib.impl("gemm", lambda *args: _reference_gemm(*args).detach(), "CPU")
    g = torch.Generator().manual_seed(1234)

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True)

    try:
        a, b, bias, res = {
            "2d_col_bias": lambda: (t(6, 8), t(8, 5), t(5), None),
            "3d_by_2d_row_bias": lambda: (t(3, 6, 8), t(8, 5), t(6, 1), None),
            "batched_residual": lambda: (t(3, 6, 8), t(3, 8, 5), None, t(6, 5)),
            "2d_by_3d": lambda: (t(6, 8), t(3, 8, 5), t(5), t(3, 6, 5)),
        }[form]()
        alpha, beta = 0.75, 1.5
        grad = torch.randn(_reference_gemm(a, b, bias, res).shape, generator=g, dtype=torch.float64)
        inputs = [x for x in (a, b, bias, res) if x is not None]
        ours = torch.autograd.grad(torch.ops.cutedsl.gemm(a, b, bias, res, activation, alpha, beta), inputs, grad)
        want = torch.autograd.grad(_reference_gemm(a, b, bias, res, activation, alpha, beta), inputs, grad)
        for o, w in zip(ours, want):
            assert o.shape == w.shape
            torch.testing.assert_close(o, w, rtol=1e-5, atol=1e-6)
    finally:
        lib._destroy()
