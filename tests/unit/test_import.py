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
