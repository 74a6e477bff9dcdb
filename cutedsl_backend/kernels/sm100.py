"""Blackwell (sm100a) GEMM: TMA loads, tcgen05 UMMA into tensor memory, persistent clusters.

Warps of one CTA (192 threads):
  - warp 5, TMA: loads A and B k-blocks into a ``stages``-deep smem ring (multicast in clusters);
  - warp 4, MMA: one thread issues tcgen05.mma (1-CTA, or cta_group::2 over a CTA pair where the
    pair's leader issues for both) into a double-buffered accumulator in tensor memory;
  - warps 0-3, epilogue: tensor memory -> registers (tcgen05.ld), the shared epilogue formula
    (kernels/epilogue.py, the same code as sm90a), registers -> smem -> TMA store.
Tile order comes from the shared persistent scheduler (kernels/scheduler.py). As on sm90a, TMA
zero-fills out-of-bounds loads and clips stores, so any M, N, K is exact.

The gated epilogue (EpilogueSpec.gated, act(a @ w_gate^T) * (a @ w_up^T)): the config's tile_n
counts gate and up columns together; each k-block issues two MMAs of half that width, one on the
gate rows (mB) and one on the up rows of the same output columns (mB2, a second TMA load into its
own smem ring), into two accumulators in tensor memory; the epilogue reads each output sub-tile's
gate and up fragments side by side and stores the half-wide output tile.

No Blackwell GPU exists here: this family is proven by compiling for sm_100a (UTCHMMA/UTCQMMA,
UTMALDG, no spills, budgets) and by sharing the scheduler, epilogue, configs and host plumbing
with the sm90a family that runs on the H200.
"""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass import Float32, Int32
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.utils.gemm.sm100 import transform_partitioned_tensor_layout

try:  # DSL >= 4.8 moved these; older releases only have the cutlass.utils names
    from cutlass.memory import SmemAllocator
    from cutlass.tensor_utils import LayoutEnum
except ImportError:  # pragma: no cover - depends on the installed DSL
    from cutlass.utils import LayoutEnum, SmemAllocator

from ..configs import EPI_STAGES, SM100_ACC_STAGES, GemmConfig
from ..configs.sm100 import epilogue_cta_tile
from ..epilogue import EpilogueSpec
from . import epilogue as epi
from .scheduler import TileGrid, cluster_tile_coord, loaded_tile
from .split_k import SplitKUnits, arrive, load_sum, store_partial

EPI_WARPS = (0, 1, 2, 3)
MMA_WARP = 4
TMA_WARP = 5
# tensor-memory accumulator buffers: the epilogue of tile i overlaps the MMAs of tile i+1
ACC_STAGES = SM100_ACC_STAGES


class Sm100Gemm(SplitKUnits):
    """Same host signature as Sm90Gemm: (mA, mB, mC, mBias, mScaleA, mScaleB, mRes, mWork, mCounters,
    alpha, beta, max_clusters, stream[, mB2]); ``cfg`` resolved (tile_k and stages set)."""

    def __init__(self, cfg: GemmConfig, epilogue: EpilogueSpec, promote_fp8: bool = False):
        assert cfg.tile_k and cfg.stages, "resolve the config first"
        self.cfg = cfg
        self.epilogue = epilogue
        # tcgen05 accumulates fp8 in fp32 tensor memory: no promotion step is needed
        self.acc_dtype = cutlass.Float32
        self.two_cta = cfg.two_cta
        self.cta_group = tcgen05.CtaGroup.TWO if cfg.two_cta else tcgen05.CtaGroup.ONE
        self.gated = epilogue.gated is not None
        # the output tile's width: the gated epilogue's gate and up halves are two MMAs of half the width
        self.out_tile_n = cfg.tile_n // 2 if self.gated else cfg.tile_n
        # accumulators in tensor memory: gated, the gate's at 2i and the up's at 2i + 1 of stage i
        self.acc_buffers = ACC_STAGES * (2 if self.gated else 1)
        self.mma_tiler_mn = (cfg.tile_m, self.out_tile_n)
        self.cluster_shape_mn = (cfg.cluster_m, cfg.cluster_n)
        self.ab_stage = cfg.stages
        self.threads_per_cta = 32 * (len(EPI_WARPS) + 2)

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
        self.a_major = LayoutEnum.from_tensor(mA).mma_major_mode()
        self.b_major = LayoutEnum.from_tensor(mB).mma_major_mode()
        self.c_layout = LayoutEnum.from_tensor(mC)

        tiled_mma = sm100_utils.make_trivial_tiled_mma(
            self.a_dtype, self.a_major, self.b_major, self.acc_dtype, self.cta_group, self.mma_tiler_mn)
        inst_k = cute.size(tiled_mma.shape_mnk, mode=[2])
        self.mma_tiler = (self.cfg.tile_m, self.out_tile_n, inst_k * 4)
        pair = cute.size(tiled_mma.thr_id.shape)
        self.cta_tile_shape_mnk = (self.cfg.tile_m // pair, self.out_tile_n, self.mma_tiler[2])
        self.cluster_layout_vmnk = cute.tiled_divide(
            cute.make_layout((*self.cluster_shape_mn, 1)), (tiled_mma.thr_id.shape,))
        self.num_mcast_ctas_a = cute.size(self.cluster_layout_vmnk.shape[2])
        self.num_mcast_ctas_b = cute.size(self.cluster_layout_vmnk.shape[1])
        self.is_a_mcast = self.num_mcast_ctas_a > 1
        self.is_b_mcast = self.num_mcast_ctas_b > 1
        # the gated epilogue's narrower sub-tiles (configs.sm100.epilogue_cta_tile, which the
        # shared-memory rule uses too)
        epi_cta_tile = (*epilogue_cta_tile(*self.cta_tile_shape_mnk[:2], self.gated), self.cta_tile_shape_mnk[2])
        self.epi_tile = sm100_utils.compute_epilogue_tile_shape(epi_cta_tile, self.two_cta, self.c_layout, self.c_dtype)

        a_smem_staged = sm100_utils.make_smem_layout_a(tiled_mma, self.mma_tiler, self.a_dtype, self.ab_stage)
        b_smem_staged = sm100_utils.make_smem_layout_b(tiled_mma, self.mma_tiler, self.b_dtype, self.ab_stage)
        c_smem_staged = sm100_utils.make_smem_layout_epi(self.c_dtype, self.c_layout, self.epi_tile, EPI_STAGES)
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])
        acc_fake = tiled_mma.make_fragment_C(cute.append(acc_shape, self.acc_buffers))
        self.num_tmem_cols = utils.get_num_tmem_alloc_cols(acc_fake, arch="sm_100")

        a_op = sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mn, tiled_mma.thr_id)
        a_smem = cute.slice_(a_smem_staged, (None, None, None, 0))
        tma_a, tma_tensor_a = cute.nvgpu.make_tiled_tma_atom_A(
            a_op, mA, a_smem, self.mma_tiler, tiled_mma, self.cluster_layout_vmnk.shape)
        b_op = sm100_utils.cluster_shape_to_tma_atom_B(self.cluster_shape_mn, tiled_mma.thr_id)
        b_smem = cute.slice_(b_smem_staged, (None, None, None, 0))
        tma_b, tma_tensor_b = cute.nvgpu.make_tiled_tma_atom_B(
            b_op, mB, b_smem, self.mma_tiler, tiled_mma, self.cluster_layout_vmnk.shape)
        b_loads = 1
        tma_b2 = tma_tensor_b2 = None
        if cutlass.const_expr(self.gated):
            tma_b2, tma_tensor_b2 = cute.nvgpu.make_tiled_tma_atom_B(
                b_op, mB2, b_smem, self.mma_tiler, tiled_mma, self.cluster_layout_vmnk.shape)
            b_loads = 2
        self.tma_bytes = (cute.size_in_bytes(self.a_dtype, a_smem) + cute.size_in_bytes(self.b_dtype, b_smem) * b_loads
                          ) * pair
        tma_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mC, cute.select(c_smem_staged, mode=[0, 1]), self.epi_tile)

        grid = TileGrid(mC, self.cta_tile_shape_mnk[0], self.cfg, tile_n=self.out_tile_n)

        @cute.struct
        class SharedStorage:
            ab_barriers: cute.struct.MemRange[cutlass.Int64, self.ab_stage * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, ACC_STAGES * 2]
            tmem_dealloc_mbar: cutlass.Int64
            tmem_holding_buf: cutlass.Int32
            split_arrival: cutlass.Int32

        self.shared_storage = SharedStorage

        units = grid.total() * self.cfg.splits
        self.kernel(
            tiled_mma, tma_a, tma_tensor_a, tma_b, tma_tensor_b, tma_c, tma_tensor_c, mC,
            self.cluster_layout_vmnk, a_smem_staged, b_smem_staged, c_smem_staged, self.epi_tile,
            grid.clusters_m, grid.clusters_n, grid.total(),
            mBias, mScaleA, mScaleB, mRes, alpha, beta, mWork, mCounters, units, tma_b2, tma_tensor_b2,
        ).launch(
            grid=(self.cfg.cluster_m, self.cfg.cluster_n, cutlass.min(units, max_clusters)),
            block=[self.threads_per_cta, 1, 1],
            cluster=(self.cfg.cluster_m, self.cfg.cluster_n, 1),
            min_blocks_per_mp=1,  # one persistent CTA per SM: let the compiler use the registers
            stream=stream,
            use_pdl=self.cfg.pdl,
        )

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA_mkl: cute.Tensor,
               tma_b: cute.CopyAtom, mB_nkl: cute.Tensor, tma_c: cute.CopyAtom, mC_tma: cute.Tensor,
               mC_mnl: cute.Tensor, cluster_layout_vmnk: cute.Layout,
               a_smem_staged: cute.ComposedLayout, b_smem_staged: cute.ComposedLayout,
               c_smem_staged: cute.ComposedLayout, epi_tile: cute.Tile,
               clusters_m: Int32, clusters_n: Int32, total_clusters: Int32,
               mBias: Optional[cute.Tensor], mScaleA: Optional[cute.Tensor],
               mScaleB: Optional[cute.Tensor], mRes: Optional[cute.Tensor],
               alpha: Float32, beta: Float32, mWork: Optional[cute.Tensor], mCounters: Optional[cute.Tensor],
               total_units: Int32, tma_b2: Optional[cute.CopyAtom], mB2_nkl: Optional[cute.Tensor]):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        cta_m, cta_n, first_cluster = cute.arch.block_idx()
        _, _, num_persistent = cute.arch.grid_dim()
        pair = cute.size(tiled_mma.thr_id.shape)
        mma_coord_v = cta_m % pair
        is_leader_cta = mma_coord_v == 0
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_vmnk = cluster_layout_vmnk.get_flat_coord(cta_rank)

        if warp_idx == TMA_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_c)
            if cutlass.const_expr(self.gated):
                cpasync.prefetch_descriptor(tma_b2)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ab_barriers.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.num_mcast_ctas_a + self.num_mcast_ctas_b - 1),
            tx_count=self.tma_bytes,
            cta_layout_vmnk=cluster_layout_vmnk,
            defer_sync=True,
        ).make_participants()
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_barriers.data_ptr(),
            num_stages=ACC_STAGES,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, len(EPI_WARPS) * pair),
            cta_layout_vmnk=cluster_layout_vmnk,
            defer_sync=True,
        )
        tmem = utils.TmemAllocator(
            storage.tmem_holding_buf.ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=2, num_threads=32 * (len(EPI_WARPS) + 1)),
            allocator_warp_id=EPI_WARPS[0],
            is_two_cta=self.two_cta,
            two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc_mbar.ptr,
        )
        pipeline_init_arrive(cluster_shape_mn=cluster_layout_vmnk, is_relaxed=True)

        sA = smem.allocate_tensor(element_type=self.a_dtype, layout=a_smem_staged.outer, byte_alignment=128,
                                  swizzle=a_smem_staged.inner)
        sB = smem.allocate_tensor(element_type=self.b_dtype, layout=b_smem_staged.outer, byte_alignment=128,
                                  swizzle=b_smem_staged.inner)
        sC = smem.allocate_tensor(element_type=self.c_dtype, layout=c_smem_staged.outer, byte_alignment=128,
                                  swizzle=c_smem_staged.inner)
        sB2 = None
        if cutlass.const_expr(self.gated):  # the up rows' ring, beside the gate rows' (sB)
            sB2 = smem.allocate_tensor(element_type=self.b_dtype, layout=b_smem_staged.outer, byte_alignment=128,
                                       swizzle=b_smem_staged.inner)

        a_mcast_mask = None
        b_mcast_mask = None
        if cutlass.const_expr(self.is_a_mcast or self.is_b_mcast or self.two_cta):
            a_mcast_mask = cpasync.create_tma_multicast_mask(cluster_layout_vmnk, cluster_coord_vmnk, mcast_mode=2)
            b_mcast_mask = cpasync.create_tma_multicast_mask(cluster_layout_vmnk, cluster_coord_vmnk, mcast_mode=1)

        gA = cute.local_tile(mA_mkl, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None, None))
        gB = cute.local_tile(mB_nkl, cute.slice_(self.mma_tiler, (0, None, None)), (None, None, None))
        gC = cute.local_tile(mC_tma, cute.slice_(self.mma_tiler, (None, None, 0)), (None, None, None))
        # global (m, n, l) of every output element, partitioned exactly like gC
        cC = cute.local_tile(cute.make_identity_tensor(mC_mnl.shape), cute.slice_(self.mma_tiler, (None, None, 0)),
                             (None, None, None))
        k_tiles = cute.size(gA, mode=[3])
        a_tiles = cute.size(gA, mode=[2])  # A's and B's MMA tiles along M and N: where the loads stop
        b_tiles = cute.size(gB, mode=[2])
        thr_mma = tiled_mma.get_slice(mma_coord_v)
        tCgA = thr_mma.partition_A(gA)
        tCgB = thr_mma.partition_B(gB)
        tCgC = thr_mma.partition_C(gC)
        tCcC = thr_mma.partition_C(cC)

        tAsA, tAgA = cpasync.tma_partition(
            tma_a, cluster_coord_vmnk[2], cute.make_layout(cute.slice_(cluster_layout_vmnk, (0, 0, None, 0)).shape),
            cute.group_modes(sA, 0, 3), cute.group_modes(tCgA, 0, 3))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, cluster_coord_vmnk[1], cute.make_layout(cute.slice_(cluster_layout_vmnk, (0, None, 0, 0)).shape),
            cute.group_modes(sB, 0, 3), cute.group_modes(tCgB, 0, 3))
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        tB2sB2 = tB2gB2 = tCrB2 = None
        if cutlass.const_expr(self.gated):
            gB2 = cute.local_tile(mB2_nkl, cute.slice_(self.mma_tiler, (0, None, None)), (None, None, None))
            tB2sB2, tB2gB2 = cpasync.tma_partition(
                tma_b2, cluster_coord_vmnk[1],
                cute.make_layout(cute.slice_(cluster_layout_vmnk, (0, None, 0, 0)).shape),
                cute.group_modes(sB2, 0, 3), cute.group_modes(thr_mma.partition_B(gB2), 0, 3))
            tCrB2 = tiled_mma.make_fragment_B(sB2)
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])
        acc_fake = tiled_mma.make_fragment_C(cute.append(acc_shape, self.acc_buffers))

        pipeline_init_wait(cluster_shape_mn=cluster_layout_vmnk)
        if cutlass.const_expr(self.cfg.pdl):
            cute.arch.griddepcontrol_wait()  # as the sm90 kernel: the kernel before us is done after this
        group = self.cfg.group
        raster_m = self.cfg.raster == "m"

        if warp_idx == TMA_WARP:
            idx = first_cluster
            while idx < total_units:
                split, tile_idx = self._unit(idx, total_clusters)
                k_first, k_count = self._k_range(split, k_tiles)
                cm, cn, l = cluster_tile_coord(tile_idx, clusters_m, clusters_n, group, raster_m)
                # a CTA past the grid's edge loads the last tile's operands (its stores are clipped)
                mma_m = loaded_tile((cm * self.cfg.cluster_m + cta_m) // pair, a_tiles)
                tile_n = loaded_tile(cn * self.cfg.cluster_n + cta_n, b_tiles)
                tAgA_t = tAgA[(None, mma_m, None, l)]
                tBgB_t = tBgB[(None, tile_n, None, l)]
                tB2gB2_t = None
                if cutlass.const_expr(self.gated):
                    tB2gB2_t = tB2gB2[(None, tile_n, None, l)]
                ab_producer.reset()
                peek = ab_producer.try_acquire()
                for _k in cutlass.range(0, k_count, 1, unroll=1):
                    handle = ab_producer.acquire_and_advance(peek)
                    k = handle.count
                    if cutlass.const_expr(self.cfg.splits > 1):
                        k = k_first + handle.count
                    cute.copy(tma_a, tAgA_t[(None, k)], tAsA[(None, handle.index)],
                              tma_bar_ptr=handle.barrier, mcast_mask=a_mcast_mask)
                    cute.copy(tma_b, tBgB_t[(None, k)], tBsB[(None, handle.index)],
                              tma_bar_ptr=handle.barrier, mcast_mask=b_mcast_mask)
                    if cutlass.const_expr(self.gated):
                        cute.copy(tma_b2, tB2gB2_t[(None, k)], tB2sB2[(None, handle.index)],
                                  tma_bar_ptr=handle.barrier, mcast_mask=b_mcast_mask)
                    peek = cutlass.Boolean(1)
                    if handle.count + 1 < k_count:
                        peek = ab_producer.try_acquire()
                idx += num_persistent
            if cutlass.const_expr(self.cfg.pdl):
                cute.arch.griddepcontrol_launch_dependents()  # every load issued: the next kernel may set up
            ab_producer.tail()

        if warp_idx == MMA_WARP:
            tmem.wait_for_alloc()
            tCtAcc_base = cute.make_tensor(tmem.retrieve_ptr(self.acc_dtype), acc_fake.layout)
            acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, ACC_STAGES)
            idx = first_cluster
            while idx < total_units:
                split, _tile = self._unit(idx, total_clusters)
                k_count = self._k_range(split, k_tiles)[1]
                tCtAcc = tCtAcc_base[(None, None, None, acc_state.index)]
                tCtUp = None
                if cutlass.const_expr(self.gated):
                    tCtAcc = tCtAcc_base[(None, None, None, 2 * acc_state.index)]
                    tCtUp = tCtAcc_base[(None, None, None, 2 * acc_state.index + 1)]
                ab_consumer.reset()
                peek = cutlass.Boolean(1)
                if is_leader_cta:
                    peek = ab_consumer.try_wait()
                    acc_pipeline.producer_acquire(acc_state)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
                for _k in cutlass.range(k_count):
                    if is_leader_cta:
                        handle = ab_consumer.wait_and_advance(peek)
                        for kb in cutlass.range(cute.size(tCrA, mode=[2]), unroll_full=True):
                            coord = (None, None, kb, handle.index)
                            cute.gemm(tiled_mma, tCtAcc, tCrA[coord], tCrB[coord], tCtAcc)
                            if cutlass.const_expr(self.gated):
                                cute.gemm(tiled_mma, tCtUp, tCrA[coord], tCrB2[coord], tCtUp)
                            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                        handle.release()
                        peek = cutlass.Boolean(1)
                        if handle.count + 1 < k_count:
                            peek = ab_consumer.try_wait()
                if is_leader_cta:
                    acc_pipeline.producer_commit(acc_state)
                acc_state.advance()
                idx += num_persistent
            acc_pipeline.producer_tail(acc_state)

        if warp_idx < MMA_WARP:
            tmem.allocate(self.num_tmem_cols)
            tmem.wait_for_alloc()
            tmem_ptr = tmem.retrieve_ptr(self.acc_dtype)
            tCtAcc_base = cute.make_tensor(tmem_ptr, acc_fake.layout)
            epi_args = epi.EpilogueArgs(mBias, mScaleA, mScaleB, mRes, alpha, beta, mC_mnl)
            # coordinates below are the output's own (origin 0), vectors read from global memory:
            # the epilogue warps overlap the next tile's MMAs through the double-buffered accumulator
            epi_ops = epi.EpilogueOperands(self.epilogue, epi_args, self.cta_tile_shape_mnk[0],
                                           self.out_tile_n, 32 * len(EPI_WARPS))
            # ---- epilogue: tensor memory -> registers -> the shared formula -> smem -> TMA store
            tCgC_mn = transform_partitioned_tensor_layout(tCgC)
            tCcC_mn = transform_partitioned_tensor_layout(tCcC)
            tCtAcc_mn = transform_partitioned_tensor_layout(tCtAcc_base)
            t2r_atom = sm100_utils.get_tmem_load_op(self.cta_tile_shape_mnk, self.c_layout, self.c_dtype,
                                                    self.acc_dtype, epi_tile, self.two_cta)
            tAcc_epi = cute.flat_divide(tCtAcc_mn, epi_tile)
            tiled_t2r = tcgen05.make_tmem_copy(t2r_atom, tAcc_epi[(None, None, 0, 0, 0)])
            thr_t2r = tiled_t2r.get_slice(tidx)
            tTR_tAcc_all = thr_t2r.partition_S(tAcc_epi)
            tCgC_epi = cute.flat_divide(tCgC_mn, epi_tile)
            tTR_gC = thr_t2r.partition_D(tCgC_epi)
            tTR_cC_all = thr_t2r.partition_D(cute.flat_divide(tCcC_mn, epi_tile))
            tTR_rAcc = cute.make_rmem_tensor(tTR_gC[(None, None, None, 0, 0, 0, 0, 0)].shape, self.acc_dtype)
            tTR_rUp = cute.make_rmem_tensor(tTR_rAcc.shape, self.acc_dtype) if self.gated else None
            tTR_rC = cute.make_rmem_tensor(tTR_rAcc.shape, self.c_dtype)
            r2s_atom = sm100_utils.get_smem_store_op(self.c_layout, self.c_dtype, self.acc_dtype, tiled_t2r)
            tiled_r2s = cute.make_tiled_copy_D(r2s_atom, tiled_t2r)
            thr_r2s = tiled_r2s.get_slice(tidx)
            tRS_sC = thr_r2s.partition_D(sC)
            tRS_rC = tiled_r2s.retile(tTR_rC)
            bSG_sC, bSG_gC_all = cpasync.tma_partition(
                tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), cute.group_modes(tCgC_epi, 0, 2))
            epi_sync = pipeline.NamedBarrier(barrier_id=1, num_threads=32 * len(EPI_WARPS))
            stores = epi.StoreHandshake()
            store_pipeline = stores.pipeline(32 * len(EPI_WARPS))
            acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, ACC_STAGES)
            epi_count = Int32(0)
            group = self.cfg.group
            raster_m = self.cfg.raster == "m"
            split_arrival = None
            if cutlass.const_expr(self.cfg.splits > 1):
                split_arrival = cute.make_tensor(storage.split_arrival.ptr, cute.make_layout(1))
            epi_threads = 32 * len(EPI_WARPS)
            idx = first_cluster
            while idx < total_units:
                split, tile_idx = self._unit(idx, total_clusters)
                cm, cn, l = cluster_tile_coord(tile_idx, clusters_m, clusters_n, group, raster_m)
                tile = ((cm * self.cfg.cluster_m + cta_m) // pair, cn * self.cfg.cluster_n + cta_n, l)
                bSG_gC = cute.group_modes(bSG_gC_all[(None, None, None, *tile)], 1, 3)
                tTR_cC = cute.group_modes(tTR_cC_all[(None, None, None, None, None, *tile)], 3, 5)
                tTR_tAcc = cute.group_modes(tTR_tAcc_all[(None, None, None, None, None, acc_state.index)], 3, 5)
                tTR_tUp = None
                if cutlass.const_expr(self.gated):
                    tTR_tAcc = cute.group_modes(tTR_tAcc_all[(None, None, None, None, None, 2 * acc_state.index)], 3, 5)
                    tTR_tUp = cute.group_modes(
                        tTR_tAcc_all[(None, None, None, None, None, 2 * acc_state.index + 1)], 3, 5)
                tile_ops = epi_ops.for_tile(Int32(0), Int32(0), l, tidx)
                acc_pipeline.consumer_wait(acc_state)
                parts = cute.size(tTR_tAcc.shape, mode=[3])
                # workspace parts of a split-K slice: gated, the up's parts follow the gate's
                acc_parts = 2 * parts if self.gated else parts
                finishes_tile = True
                if cutlass.const_expr(self.cfg.splits > 1):
                    # split-K: this slice's accumulator to the workspace, part by part, the tensor
                    # memory released, then the tile's last slice sums all slices and stores
                    cta_tile = tile_idx * (self.cfg.cluster_m * self.cfg.cluster_n) + cta_rank
                    for s in cutlass.range_constexpr(parts):
                        cute.copy(tiled_t2r, tTR_tAcc[(None, None, None, s)], tTR_rAcc)
                        store_partial(tTR_rAcc, mWork, cta_tile, split, Int32(s), self.cfg.splits, acc_parts, tidx,
                                      epi_threads)
                        if cutlass.const_expr(self.gated):
                            cute.copy(tiled_t2r, tTR_tUp[(None, None, None, s)], tTR_rUp)
                            store_partial(tTR_rUp, mWork, cta_tile, split, Int32(parts + s), self.cfg.splits,
                                          acc_parts, tidx, epi_threads)
                    with cute.arch.elect_one():
                        acc_pipeline.consumer_release(acc_state)
                    finishes_tile = arrive(mCounters, cta_tile, self.cfg.splits, tidx, epi_sync, split_arrival)
                if finishes_tile:
                    for s in cutlass.range_constexpr(parts):
                        if cutlass.const_expr(self.cfg.splits > 1):
                            load_sum(tTR_rAcc, mWork, cta_tile, Int32(s), self.cfg.splits, acc_parts, tidx,
                                     epi_threads)
                            if cutlass.const_expr(self.gated):
                                load_sum(tTR_rUp, mWork, cta_tile, Int32(parts + s), self.cfg.splits, acc_parts, tidx,
                                         epi_threads)
                        else:
                            cute.copy(tiled_t2r, tTR_tAcc[(None, None, None, s)], tTR_rAcc)
                            if cutlass.const_expr(self.gated):
                                cute.copy(tiled_t2r, tTR_tUp[(None, None, None, s)], tTR_rUp)
                        coords = tTR_cC[(None, None, None, s)]
                        coord_of = lambda v: (coords[v][0], coords[v][1])  # noqa: E731
                        if cutlass.const_expr(self.gated):
                            x = tile_ops.apply_gated(tTR_rAcc, tTR_rUp, coord_of)
                        else:
                            x = tile_ops.apply(tTR_rAcc, coord_of)
                        tTR_rC.store(x.to(self.c_dtype))
                        buf = epi_count % EPI_STAGES
                        cute.copy(tiled_r2s, tRS_rC, tRS_sC[(None, None, None, buf)])
                        cute.arch.fence_proxy("async.shared", space="cta")
                        if warp_idx == EPI_WARPS[0]:
                            stores.before_barrier(store_pipeline)
                        stores.handoff(epi_sync)
                        if warp_idx == EPI_WARPS[0]:
                            cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, s)])
                            store_pipeline.producer_commit()
                        epi_count += 1
                if cutlass.const_expr(self.cfg.splits == 1):
                    with cute.arch.elect_one():
                        acc_pipeline.consumer_release(acc_state)
                acc_state.advance()
                idx += num_persistent
            store_pipeline.producer_tail()
            tmem.relinquish_alloc_permit()
            tmem.free(tmem_ptr)
