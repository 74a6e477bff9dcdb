"""A CuTe DSL kernel that is no GEMM: the "kernel without HGMMA" mutant's real cubin."""

from __future__ import annotations

import cutlass.cute as cute


@cute.kernel
def copy_kernel(src: cute.Tensor, dst: cute.Tensor):
    t, _, _ = cute.arch.thread_idx()
    b, _, _ = cute.arch.block_idx()
    i = b * 128 + t
    if i < cute.size(src):
        dst[i] = src[i]


@cute.jit
def launch_copy(src: cute.Tensor, dst: cute.Tensor):
    copy_kernel(src, dst).launch(grid=(cute.ceil_div(cute.size(src), 128), 1, 1), block=(128, 1, 1))
