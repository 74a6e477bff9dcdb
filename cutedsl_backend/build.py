"""The compile of one kernel: fake arguments (dynamic extents and strides, so one kernel serves
every shape), ``cute.compile`` for the target arch (no GPU needed), the cubin. Everything here
shapes generated code: it is part of ``kernel_source_hash``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from .configs import GemmConfig, family
from .kernel import DSL_LOCK, CompiledGemm, KernelKey
from .problem import GemmProblem


def cutlass_dtype(name: str):
    import cutlass

    return {
        "float16": cutlass.Float16,
        "bfloat16": cutlass.BFloat16,
        "float32": cutlass.Float32,
        "float8_e4m3fn": cutlass.Float8E4M3FN,
        "float8_e5m2": cutlass.Float8E5M2,
    }[name]


def fake_args(problem: GemmProblem, epilogue, cfg: GemmConfig) -> tuple:
    """Fake arguments of the kernel's host function: A (M,K,L), B (N,K,L), C (M,N,L; N- or, for a
    swap-AB launch, M-contiguous) with dynamic extents and dynamic 16B-aligned strides; the
    epilogue's vectors (dynamic length, unit stride) and residual (M,N,L: unit stride along N,
    other strides any, or 16-byte aligned when the spec says so) where the spec has them, else
    None; with split-K the fp32 workspace and int32 counters (dynamic length, unit stride), else
    None."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32
    from cutlass.cute.runtime import make_fake_tensor

    in_t = cutlass_dtype(problem.dtype)
    in_b = cutlass_dtype(problem.dtype_b)
    out_t = cutlass_dtype(problem.out_dtype)
    in_align = 128 // in_t.width
    out_align = 128 // out_t.width
    m, n, k, l = (cute.sym_int32() for _ in range(4))

    def strides(major_first: bool, align: int):
        ld = cute.sym_int64(divisibility=align)
        batch = cute.sym_int64(divisibility=align)
        return (1, ld, batch) if major_first else (ld, 1, batch)

    def vector(dtype):
        return make_fake_tensor(cutlass_dtype(dtype), (cute.sym_int32(),), (1,), assumed_align=4)

    a = make_fake_tensor(in_t, (m, k, l), strides(problem.a_major == "m", in_align), assumed_align=16)
    b = make_fake_tensor(in_b, (n, k, l), strides(problem.b_major == "n", in_align), assumed_align=16)
    c = make_fake_tensor(out_t, (m, n, l), strides(problem.c_major == "m", out_align), assumed_align=16)
    e = epilogue
    bias = vector(e.bias_dtype) if e.bias else None
    sa = vector("float32") if e.scale_a else None
    sb = vector("float32") if e.scale_b else None
    res = None
    if e.residual:
        # unit stride along N (the eager API copies other layouts); rows and batches any stride
        res_t = cutlass_dtype(e.residual_dtype)
        if e.residual_tma:  # 16-byte aligned rows, batches and data: loadable by TMA
            res = make_fake_tensor(res_t, (m, n, l), strides(False, 128 // res_t.width), assumed_align=16)
        else:
            res = make_fake_tensor(res_t, (m, n, l), (cute.sym_int64(), 1, cute.sym_int64()),
                                   assumed_align=res_t.width // 8)
    work = counters = None
    if cfg.splits > 1 or cfg.stream_k:
        work = make_fake_tensor(cutlass.Float32, (cute.sym_int32(),), (1,), assumed_align=16)
        counters = make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=16)
    return a, b, c, bias, sa, sb, res, work, counters, Float32(1.0), Float32(0.0)


def gated_weights(problem: GemmProblem, epilogue) -> tuple:
    """The gated epilogue's second weight tensor (up, (N, K, L), K-major like the first), a fake;
    () for every other epilogue (the argument is then absent from the compiled function)."""
    if not getattr(epilogue, "gated", None):
        return ()
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    in_b = cutlass_dtype(problem.dtype_b)
    ld = cute.sym_int64(divisibility=128 // in_b.width)
    batch = cute.sym_int64(divisibility=128 // in_b.width)
    shape = (cute.sym_int32(), cute.sym_int32(), cute.sym_int32())
    return (make_fake_tensor(in_b, shape, (ld, 1, batch), assumed_align=16),)


def kernel_class(arch: str):
    return family(arch).kernel_class()


def compile_kernel(problem: GemmProblem, which: KernelKey, kernel_cls=None) -> CompiledGemm:
    """A fresh ``cute.compile`` of kernel ``which`` (``kernel_cls``: another kernel class than the
    arch's, for the validation's deliberately broken kernels; such compiles are never cached)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.runtime import make_fake_stream

    if KernelKey.of(problem, which.config, which.epilogue) != which:
        # a key resolved for another problem (e.g. a swap-AB config's swapped one) would be stored
        # under a digest whose launches expect another layout
        raise ValueError(f"compile_kernel: {problem.describe()} is not the problem of kernel key {which}")
    cfg, epilogue = which.config, which.epilogue
    kernel = (kernel_cls or kernel_class(problem.arch))(cfg, epilogue, problem.promote_fp8)
    fakes = fake_args(problem, epilogue, cfg)
    with tempfile.TemporaryDirectory() as dump:
        opts = f"--gpu-arch {family(problem.arch).compile_flag} --keep-cubin --dump-dir {dump}"
        with DSL_LOCK:
            t0 = time.perf_counter()
            fn = cute.compile(kernel, *fakes, cutlass.Int32(1), make_fake_stream(), *gated_weights(problem, epilogue),
                              options=opts)
            seconds = time.perf_counter() - t0
        cubin = fn.__cubin__
        if cubin is None:
            cubins = list(Path(dump).glob("*.cubin"))
            cubin = cubins[0].read_bytes() if cubins else b""
    if isinstance(cubin, str):
        cubin = cubin.encode("latin-1")
    return CompiledGemm(problem, cfg, epilogue, which.digest, seconds, bytes(cubin), _fn=fn)
