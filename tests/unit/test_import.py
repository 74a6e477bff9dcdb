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


def test_public_op_names_the_rule_and_refuses_a_backward():
    """CPU tensors reach gemm()'s device rule (not the dispatcher's missing-kernel error); a backward
    through the op raises instead of leaving the gradients empty; the op is tagged PT2-compliant."""
    import pytest

    torch = pytest.importorskip("torch")
    from cutedsl_backend import UnsupportedGemmError, ops

    with pytest.raises(UnsupportedGemmError, match="device: a and b must be CUDA tensors"):
        torch.ops.cutedsl.gemm(torch.randn(8, 16), torch.randn(16, 4))
    assert torch.Tag.pt2_compliant_tag in ops.gemm_op.tags
    lib = torch.library.Library("cutedsl", "FRAGMENT")  # a CPU stand-in for the kernel
    lib.impl("gemm", lambda a, b, *rest, **kw: a @ b, "CPU")
    try:
        x = torch.randn(8, 16, requires_grad=True)
        y = torch.ops.cutedsl.gemm(x, torch.randn(16, 4))
        with pytest.raises(RuntimeError, match="has no backward"):
            y.sum().backward()
    finally:
        lib._destroy()
