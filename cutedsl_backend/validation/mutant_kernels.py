"""Deliberately broken kernels for the fault injection (validation.mutants): a CuTe DSL kernel that is no
GEMM (the "kernel without HGMMA" mutant's real cubin) and the sm90a GEMM with realistic bugs."""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda
import cutlass.cute as cute
from cutlass import Float32, Int32


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


# ---------------------------------------------------------------- realistic bugs in the GEMM kernel
# Subclasses of the sm90a kernel, each with one bug of the kind a kernel change could bring; the
# GPU numerics must catch every one (validation.mutants.kernel_mutant runs them).

def sm90_mutants() -> dict:
    """name -> kernel class with that bug (imports the DSL kernel module: call where it is installed)."""
    from ..kernels.epilogue import StoreHandshake
    from ..kernels.sm90 import Sm90Gemm

    class DroppedLastKTile(Sm90Gemm):
        """The mainloop stops one k-tile short (an off-by-one in the K loop bound)."""

        @cute.jit
        def _k_range(self, split: Int32, k_tiles: Int32):
            first, count = Sm90Gemm._k_range(self, split, k_tiles)
            return first, count - 1

    class OperandMutant(Sm90Gemm):
        """The kernel launched on operands a bug changed: ``mutate`` (trace time) returns
        (mA, mC, mScaleA, mScaleB) and ``mutate_up`` the gated kernel's up weights (mB2) as the
        buggy kernel would see them."""

        def mutate(self, mA, mC, mScaleA, mScaleB):
            return mA, mC, mScaleA, mScaleB

        def mutate_up(self, mB, mB2):
            return mB2

        @cute.jit
        def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
                     mBias: Optional[cute.Tensor], mScaleA: Optional[cute.Tensor],
                     mScaleB: Optional[cute.Tensor], mRes: Optional[cute.Tensor],
                     mWork: Optional[cute.Tensor], mCounters: Optional[cute.Tensor],
                     alpha: Float32, beta: Float32, max_clusters: Int32, stream: cuda.CUstream,
                     mB2: Optional[cute.Tensor] = None):
            mA, mC, mScaleA, mScaleB = self.mutate(mA, mC, mScaleA, mScaleB)
            Sm90Gemm.__call__(self, mA, mB, mC, mBias, mScaleA, mScaleB, mRes, mWork, mCounters,
                              alpha, beta, max_clusters, stream, self.mutate_up(mB, mB2))

    class UnwrittenLastRow(OperandMutant):
        """The output's M extent one row short (a tail predicate off by one): the last row is
        never stored."""

        def mutate(self, mA, mC, mScaleA, mScaleB):
            shorter = cute.make_tensor(mC.iterator, cute.make_layout(
                (mC.shape[0] - 1, mC.shape[1], mC.shape[2]), stride=mC.stride))
            return mA, shorter, mScaleA, mScaleB

    class SkippedFirstSlice(Sm90Gemm):
        """Split-K: slice 0's K range shifted onto slice 1's (a wrong slice offset)."""

        @cute.jit
        def _k_range(self, split: Int32, k_tiles: Int32):
            first, count = Sm90Gemm._k_range(self, split, k_tiles)
            if split == 0:
                first = first + count
            return first, count

    class UnwrittenLastColumn(OperandMutant):
        """The output's N extent one 16-byte vector short (the N tail predicate off by one at the
        granularity the TMA store writes rows in: an extent one element short was measured on the
        H200 to leave every column written)."""

        def mutate(self, mA, mC, mScaleA, mScaleB):
            vector = 16 * 8 // mC.element_type.width
            narrower = cute.make_tensor(mC.iterator, cute.make_layout(
                (mC.shape[0], mC.shape[1] - vector, mC.shape[2]), stride=mC.stride))
            return mA, narrower, mScaleA, mScaleB

    class WrongBatchOffset(OperandMutant):
        """A's batch offset computed with half its batch stride (a wrong batch offset): batch l
        reads rows from the middle of batch l - 1 (in bounds, so the numerics, not a fault, catch it)."""

        def mutate(self, mA, mC, mScaleA, mScaleB):
            misplaced = cute.make_tensor(mA.iterator, cute.make_layout(
                mA.shape, stride=(mA.stride[0], mA.stride[1], mA.stride[2] // 2)))
            return misplaced, mC, mScaleA, mScaleB

    class ScalesOnTheWrongAxis(OperandMutant):
        """FP8 rowwise: A's per-row scales applied per column and B's per row (the two vectors
        swapped; a square problem keeps their lengths equal)."""

        def mutate(self, mA, mC, mScaleA, mScaleB):
            return mA, mC, mScaleB, mScaleA

    class NoBarrierHandshake(StoreHandshake):
        @staticmethod
        def handoff(epi_sync):
            pass

    class MissingStoreBarrier(Sm90Gemm):
        """The epilogue's barrier before each TMA store left out: the store warp copies the
        sub-tile out of shared memory while the other warps may still be writing it."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.stores = NoBarrierHandshake()

    class UpReadFromGate(OperandMutant):
        """Gated: the up half loaded through the gate's tensor (the second weight descriptor
        built from the first weight)."""

        def mutate_up(self, mB, mB2):
            return mB

    class ShortUpExtent(OperandMutant):
        """Gated: the up weights' N extent one 16-byte vector short (the second descriptor's
        extent off by a vector): its last rows load as zeros."""

        def mutate_up(self, mB, mB2):
            vector = 16 * 8 // mB2.element_type.width
            return cute.make_tensor(mB2.iterator, cute.make_layout(
                (mB2.shape[0] - vector, mB2.shape[1], mB2.shape[2]), stride=mB2.stride))

    return {"dropped last k-tile": DroppedLastKTile, "unwritten last row": UnwrittenLastRow,
            "split-K slice offset": SkippedFirstSlice, "unwritten last column": UnwrittenLastColumn,
            "wrong batch offset": WrongBatchOffset, "fp8 scales on the wrong axis": ScalesOnTheWrongAxis,
            "missing epilogue barrier": MissingStoreBarrier, "gated: up read from the gate weights": UpReadFromGate,
            "gated: up weights' extent one vector short": ShortUpExtent}
