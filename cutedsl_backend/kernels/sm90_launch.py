"""Hopper (sm90a) GEMM, host side: the kernel object's configuration and the launch (the MMA
atom, shared-memory layouts, TMA descriptors, the shared-memory struct and the grid) that
kernels.sm90.Sm90Gemm's device code runs under."""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32

try:  # DSL >= 4.8 moved these; older releases only have the cutlass.utils names
    from cutlass.tensor_utils import LayoutEnum
except ImportError:  # pragma: no cover - depends on the installed DSL
    from cutlass.utils import LayoutEnum

from ..configs import (
    EPI_STAGES,
    RES_STAGES,
    GemmConfig,
    epilogue_groups,
    epilogue_tile,
    mma_atom_n,
    promoted_acc_copies,
)
from ..epilogue import EpilogueSpec
from . import epilogue as epi
from .scheduler import TileGrid
from .split_k import SplitKUnits

THREADS_PER_WG = 128


class Sm90Launch(SplitKUnits):
    """The host half of the sm90a kernel: ``cfg`` (resolved: tile_k and stages set), the epilogue
    and the FP8 accumulation mode fix the tiling; ``__call__`` (traced under ``cute.compile``)
    builds what the device code needs and launches the subclass's ``kernel``."""

    def __init__(self, cfg: GemmConfig, epilogue: EpilogueSpec, promote_fp8: bool = False):
        assert cfg.tile_k and cfg.stages, "resolve the config first"
        self.cfg = cfg
        # fp8 without fast accumulation: add each k-tile's WGMMA result into fp32 registers
        self.promote = promote_fp8
        # its fp32 accumulator copies: 3 (two alternating k-tile partials) or 2 (one), by tile size
        self.promoted_copies = promoted_acc_copies(cfg) if promote_fp8 else 1
        # tiles summed from fp32 partials in the workspace: split-K's slices, stream-K's pieces
        self.partial_sums = cfg.splits > 1 or cfg.stream_k
        self.epilogue = epilogue
        self.acc_dtype = cutlass.Float32
        self.cooperative = cfg.schedule == "cooperative"
        self.tile_shape_mnk = (cfg.tile_m, cfg.tile_n, cfg.tile_k)
        self.a_rows = cfg.a_rows or cfg.tile_m
        self.cluster_shape_mn = (cfg.cluster_m, cfg.cluster_n)
        self.ab_stage = cfg.stages
        self.epi_stage = EPI_STAGES
        self.epi_groups = epilogue_groups(cfg)
        self.stores = epi.StoreHandshake()
        self.epi_tile = epilogue_tile(cfg)
        self.num_math_wgs = 2
        self.threads_per_cta = THREADS_PER_WG * (1 + self.num_math_wgs)
        # threads that share one tile's epilogue
        self.epi_threads = THREADS_PER_WG * (2 if self.cooperative else 1)
        self.is_a_mcast = cfg.cluster_n > 1
        self.is_b_mcast = cfg.cluster_m > 1
        # gated epilogue: B's tile is the gate rows in its first half and the up rows of the same
        # output columns in its second (two TMA loads per stage, each multicast over the cluster's
        # cluster_m CTAs like a plain B); the output tile is half as wide
        self.gated = epilogue.gated is not None
        self.out_tile_n = cfg.tile_n // 2 if self.gated else cfg.tile_n

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
                 mBias: Optional[cute.Tensor], mScaleA: Optional[cute.Tensor],
                 mScaleB: Optional[cute.Tensor], mRes: Optional[cute.Tensor],
                 mWork: Optional[cute.Tensor], mCounters: Optional[cute.Tensor],
                 alpha: Float32, beta: Float32, max_clusters: Int32, stream: cuda.CUstream,
                 mB2: Optional[cute.Tensor] = None):
        """``mB2``: the gated epilogue's up weights (N, K, L), ``mB`` then holding the gate's."""
        self.a_dtype = mA.element_type
        self.b_dtype = mB.element_type
        self.c_dtype = mC.element_type
        self.a_layout = LayoutEnum.from_tensor(mA)
        self.b_layout = LayoutEnum.from_tensor(mB)
        self.c_layout = LayoutEnum.from_tensor(mC)

        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype, self.b_dtype,
            self.a_layout.sm90_mma_major_mode(), self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (2, 1, 1) if self.cooperative else (1, 1, 1),
            tiler_mn=(64, mma_atom_n(self.cfg)),
        )
        a_smem_staged = sm90_utils.make_smem_layout_a(
            self.a_layout, self.tile_shape_mnk, self.a_dtype, self.ab_stage)
        b_smem_staged = sm90_utils.make_smem_layout_b(
            self.b_layout, self.tile_shape_mnk, self.b_dtype, self.ab_stage)
        c_smem_staged = sm90_utils.make_smem_layout_epi(
            self.c_dtype, self.c_layout, self.epi_tile, self.epi_stage * self.epi_groups)

        # A's load box: the tile's rows, or only its first a_rows (few tokens: every row past the
        # problem's M would be an out-of-bounds fill; the rows never loaded feed only output rows
        # past M, which are never stored). K-major A: those rows are a prefix of each stage.
        a_box = self._a_box(a_smem_staged)
        tma_a, tma_tensor_a = self._make_tma_load_box(mA, a_box, (self.a_rows, self.cfg.tile_k), self.cfg.cluster_n)
        tma_b2 = tma_tensor_b2 = None
        if cutlass.const_expr(self.gated):
            b_half = self._b_half(b_smem_staged)
            half = (self.out_tile_n, self.cfg.tile_k)
            tma_b, tma_tensor_b = self._make_tma_load_box(mB, b_half, half, self.cfg.cluster_m)
            tma_b2, tma_tensor_b2 = self._make_tma_load_box(mB2, b_half, half, self.cfg.cluster_m)
        else:
            tma_b, tma_tensor_b = self._make_tma_load(
                mB, b_smem_staged, (self.cfg.tile_n, self.cfg.tile_k), self.cfg.cluster_m)
        tma_c, tma_tensor_c = cute.nvgpu.cpasync.make_tiled_tma_atom(
            cute.nvgpu.cpasync.CopyBulkTensorTileS2GOp(), mC,
            cute.slice_(c_smem_staged, (None, None, 0)), self.epi_tile)

        tma_res = tma_tensor_res = res_smem_staged = None
        self.res_dtype = self.c_dtype
        if cutlass.const_expr(self.epilogue.residual_tma):
            self.res_dtype = mRes.element_type
            self.res_layout = LayoutEnum.from_tensor(mRes)
            res_smem_staged = sm90_utils.make_smem_layout_epi(
                self.res_dtype, self.res_layout, self.epi_tile, RES_STAGES * self.epi_groups)
            tma_res, tma_tensor_res = cute.nvgpu.cpasync.make_tiled_tma_atom(
                cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp(), mRes,
                cute.slice_(res_smem_staged, (None, None, 0)), self.epi_tile)

        grid = TileGrid(mC, self.cfg.tile_m, self.cfg, tile_n=self.out_tile_n)

        # per-tile epilogue vectors, one buffer per epilogue group (fits in the barriers' 1 KB block)
        self.vec_elems = self.epilogue.staged_vector_bytes(self.cfg.tile_m, self.cfg.tile_n) // 4
        vec_total = max(1, self.vec_elems * self.epi_groups)

        self.shared_storage = _shared_storage(
            self.ab_stage, vec_total, (self.a_dtype, cute.cosize(a_smem_staged)),
            (self.b_dtype, cute.cosize(b_smem_staged)), (self.c_dtype, cute.cosize(c_smem_staged)),
            (self.res_dtype, cute.cosize(res_smem_staged)) if self.epilogue.residual_tma else None,
            RES_STAGES * self.epi_groups)

        units = grid.total() * self.cfg.splits
        if cutlass.const_expr(self.cfg.stream_k):  # stream-K deals out the launch's k-tiles
            units = grid.total() * cute.ceil_div(cute.size(mA, mode=[1]), self.cfg.tile_k)
        self.kernel(
            tma_a, tma_tensor_a, tma_b, tma_tensor_b, tma_c, tma_tensor_c, self.tiled_mma,
            a_smem_staged, b_smem_staged, c_smem_staged,
            grid.clusters_m, grid.clusters_n, grid.total(),
            mBias, mScaleA, mScaleB, mRes, alpha, beta, tma_res, tma_tensor_res, res_smem_staged,
            mWork, mCounters, units, tma_b2, tma_tensor_b2,
        ).launch(
            grid=(self.cfg.cluster_m, self.cfg.cluster_n, cutlass.min(units, max_clusters)),
            block=[self.threads_per_cta, 1, 1],
            cluster=(self.cfg.cluster_m, self.cfg.cluster_n, 1),
            min_blocks_per_mp=1,
            stream=stream,
            use_pdl=self.cfg.pdl,
        )

    @staticmethod
    def _make_tma_load(tensor, smem_staged, tile, mcast: int):
        return Sm90Launch._make_tma_load_box(tensor, cute.slice_(smem_staged, (None, None, 0)), tile, mcast)

    @staticmethod
    def _make_tma_load_box(tensor, smem_box, tile, mcast: int):
        op = (cute.nvgpu.cpasync.CopyBulkTensorTileG2SOp() if mcast == 1
              else cute.nvgpu.cpasync.CopyBulkTensorTileG2SMulticastOp())
        return cute.nvgpu.cpasync.make_tiled_tma_atom(op, tensor, smem_box, tile, num_multicast=mcast)

    def _a_box(self, a_smem_staged):
        """One stage's smem layout of the rows of A a load fills (the first ``a_rows``)."""
        stage = cute.slice_(a_smem_staged, (None, None, 0))
        if cutlass.const_expr(self.a_rows == self.cfg.tile_m):
            return stage
        return cute.composition(stage, cute.make_layout((self.a_rows, self.cfg.tile_k), stride=(1, self.cfg.tile_m)))

    @staticmethod
    def _tma_views(tma, cluster_coord, mcast_layout, smem, tiles):
        """(smem, gmem) TMA views of an operand's tiles ``tiles`` (rows, K, then the tile indices)
        for this CTA's share of a multicast load into ``smem``'s stages."""
        return cute.nvgpu.cpasync.tma_partition(
            tma, cluster_coord, mcast_layout, cute.group_modes(smem, 0, 2), cute.group_modes(tiles, 0, 2))

    def _operand_tiles(self, tensor, shift, rows: int):
        """The (rows, tile_k) tiles of an operand's TMA view (M or N first, then K and L), their
        origins moved ``shift`` elements along the first mode (GemmConfig.edge; zero: unmoved)."""
        return cute.local_tile(cute.domain_offset((shift, 0, 0), tensor), (rows, self.cfg.tile_k), (None, None, None))

    def _b_half(self, b_smem_staged):
        """One stage's smem layout of half of B's tile (the first tile_n / 2 rows, K-major): the
        box each of the gated epilogue's two weight loads fills."""
        stage = cute.slice_(b_smem_staged, (None, None, 0))
        return cute.composition(
            stage, cute.make_layout((self.out_tile_n, self.cfg.tile_k), stride=(1, self.cfg.tile_n)))


def _shared_storage(ab_stages: int, vec_elems: int, a, b, c, res, res_buffers: int):
    """The kernel's shared-memory struct: (dtype, elements) of the A, B, output and (None without
    a TMA-loaded residual) residual buffers. Built from a field table (this module's annotations
    are strings, so a class body here could not see the arguments)."""
    mem, align = cute.struct.MemRange, cute.struct.Align
    fields = {"ab_barriers": mem[cutlass.Int64, ab_stages * 2], "split_arrival": mem[Int32, 2]}
    if res is not None:
        fields["res_barriers"] = mem[cutlass.Int64, res_buffers]
    fields["s_vec"] = align[mem[Float32, vec_elems], 16]
    for name, (dtype, elems) in (("sA", a), ("sB", b), ("sC", c)) + ((("sRes", res),) if res else ()):
        fields[name] = align[mem[dtype, elems], 1024]
    return cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
