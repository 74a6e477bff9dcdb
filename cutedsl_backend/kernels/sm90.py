"""Hopper (sm90a) GEMM: TMA loads, WGMMA, warp specialization, persistent clusters.

Warp groups of one CTA (384 threads):
  - WG0, the producer: its first warp issues TMA loads of A and B k-blocks into a
    ``stages``-deep shared-memory ring (multicast across the cluster), for every tile the
    CTA owns, in order.
  - WG1 and WG2, the math groups: WGMMA from shared memory into fp32 register accumulators,
    then the epilogue (registers -> shared memory -> TMA store, clipped at the M/N edges). An
    aligned residual arrives by TMA too, RES_STAGES epilogue sub-tiles ahead of its use (the first
    ones requested when the tile's mainloop starts) and is read from shared memory with ldmatrix.
    * cooperative: both groups work on the same tile, each on half of its rows;
    * pingpong: the groups take alternate tiles, so one group's epilogue overlaps the other's
      mainloop; each skips the ring stages that belong to the other's tiles.

Tails: TMA zero-fills out-of-bounds loads (K, M and N tails contribute zeros to the dot
products) and clips out-of-bounds stores, so any M, N, K is exact; the host rules only demand
16-byte aligned strides.
"""

from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float32, Int32
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait

try:  # DSL >= 4.8 moved it; older releases only have the cutlass.utils name
    from cutlass.memory import SmemAllocator
except ImportError:  # pragma: no cover - depends on the installed DSL
    from cutlass.utils import SmemAllocator

from ..configs import RES_STAGES
from . import epilogue as epi
from .scheduler import cluster_tile_coord, edge_shift, loaded_tile
from .sm90_launch import THREADS_PER_WG, Sm90Launch
from .split_k import reduce_partials, reduce_pieces, stream_k_max_pieces, stream_k_shares

PRODUCER_REGS = 40
MATH_REGS = 232


def _issue_k_tile(tiled_mma, ab_pipeline, tCrA, tCrB, num_k_blocks: int, read_state, frag):
    """Precise fp8: wait for the next ring stage and issue its WGMMAs into ``frag`` (zeroed
    first, while the previous batch still runs). Returns the advanced read state."""
    frag.fill(0.0)
    ab_pipeline.consumer_wait(read_state)
    cute.nvgpu.warpgroup.fence()
    for kb in range(num_k_blocks):
        coord = (None, None, kb, read_state.index)
        cute.gemm(tiled_mma, frag, tCrA[coord], tCrB[coord], frag)
    cute.nvgpu.warpgroup.commit_group()
    read_state.advance()
    return read_state


def _retire_k_tile(ab_pipeline, release_state, acc, frag, pending: int):
    """Precise fp8: once all but the newest ``pending`` WGMMA batches are done, release the oldest
    batch's stage and add its partial ``frag`` into the fp32 ``acc``. Returns the release state."""
    cute.nvgpu.warpgroup.wait_group(pending)
    ab_pipeline.consumer_release(release_state)
    release_state.advance()
    acc.store(acc.load() + frag.load())
    return release_state


class Sm90Gemm(Sm90Launch):
    """One compiled-kernel template: ``cfg`` (resolved: tile_k and stages set) fixes the tiling.

    Call (under ``cute.compile``) with mA (M, K, L), mB (N, K, L), mC (M, N, L) and the number of
    persistent clusters the GPU can hold; with split-K (``cfg.splits`` > 1) also the fp32
    workspace and the int32 counters, zeroed, of configs.split_k_workspace's sizes.

    Work units: ``splits`` x cluster tiles, slice-major (unit = slice * tiles + tile), handed
    out persistently; without split-K a unit is a cluster tile.
    """

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, tma_a: cute.CopyAtom, mA_mkl: cute.Tensor, tma_b: cute.CopyAtom,
               mB_nkl: cute.Tensor, tma_c: cute.CopyAtom, mC_mnl: cute.Tensor,
               tiled_mma: cute.TiledMma, a_smem_staged: cute.ComposedLayout,
               b_smem_staged: cute.ComposedLayout, c_smem_staged: cute.ComposedLayout,
               clusters_m: Int32, clusters_n: Int32, total_clusters: Int32,
               mBias: Optional[cute.Tensor], mScaleA: Optional[cute.Tensor],
               mScaleB: Optional[cute.Tensor], mRes: Optional[cute.Tensor],
               alpha: Float32, beta: Float32, tma_res: Optional[cute.CopyAtom],
               mRes_tma: Optional[cute.Tensor], res_smem_staged: Optional[cute.ComposedLayout],
               mWork: Optional[cute.Tensor], mCounters: Optional[cute.Tensor], total_units: Int32,
               tma_b2: Optional[cute.CopyAtom], mB2_nkl: Optional[cute.Tensor]):
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        wg_idx = cute.arch.make_warp_uniform(tidx // THREADS_PER_WG)
        cta_m, cta_n, first_cluster = cute.arch.block_idx()
        _, _, num_persistent = cute.arch.grid_dim()

        if warp_idx == 0:
            cute.nvgpu.cpasync.prefetch_descriptor(tma_a)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_b)
            cute.nvgpu.cpasync.prefetch_descriptor(tma_c)
            if cutlass.const_expr(self.epilogue.residual_tma):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_res)
            if cutlass.const_expr(self.gated):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_b2)

        cta_layout_mnk = cute.make_layout((self.cfg.cluster_m, self.cfg.cluster_n, 1))
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord = cta_layout_mnk.get_flat_coord(cta_rank)
        a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=1)
        b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord, mode=0)
        a_mcast_mask = a_mcast_mask if self.is_a_mcast else 0
        b_mcast_mask = b_mcast_mask if self.is_b_mcast else 0

        a_smem = self._a_box(a_smem_staged)
        b_smem = cute.slice_(b_smem_staged, (None, None, 0))
        tma_bytes = cute.size_in_bytes(self.a_dtype, a_smem) + cute.size_in_bytes(self.b_dtype, b_smem)

        smem = SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        # One arrive per consumer warp per CTA that multicasts into this one.
        mcast_ctas = self.cfg.cluster_m + self.cfg.cluster_n - 1
        consumer_warps = 4 * (2 if self.cooperative else 1)
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_barriers.data_ptr(),
            num_stages=self.ab_stage,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, mcast_ctas * consumer_warps),
            tx_count=tma_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            defer_sync=True,
        )
        res_bars = None
        if cutlass.const_expr(self.epilogue.residual_tma):
            # one "full" barrier per residual buffer; the group that reads a buffer also refills
            # it, after a barrier over its threads, so no "empty" barrier is needed
            res_bars = storage.res_barriers.data_ptr()
            if warp_idx == 0:
                with cute.arch.elect_one():
                    for i in range(RES_STAGES * self.epi_groups):
                        cute.arch.mbarrier_init(res_bars + i, 1)
                cute.arch.mbarrier_init_fence()
        pipeline_init_arrive(cluster_shape_mn=self.cluster_shape_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem_staged.outer, swizzle=a_smem_staged.inner)
        sB = storage.sB.get_tensor(b_smem_staged.outer, swizzle=b_smem_staged.inner)
        sC = storage.sC.get_tensor(c_smem_staged.outer, swizzle=c_smem_staged.inner)

        # (bM, bK, RestM, RestK, RestL) etc.
        gA = cute.local_tile(mA_mkl, (self.a_rows, self.cfg.tile_k), (None, None, None))
        if cutlass.const_expr(self.gated):
            gB = cute.local_tile(mB_nkl, (self.out_tile_n, self.cfg.tile_k), (None, None, None))
            gB2 = cute.local_tile(mB2_nkl, (self.out_tile_n, self.cfg.tile_k), (None, None, None))
            gC = cute.local_tile(mC_mnl, (self.cfg.tile_m, self.out_tile_n), (None, None, None))
        else:
            gB = cute.local_tile(mB_nkl, cute.slice_(self.tile_shape_mnk, (0, None, None)), (None, None, None))
            gC = cute.local_tile(mC_mnl, cute.slice_(self.tile_shape_mnk, (None, None, 0)), (None, None, None))
        k_tiles = cute.size(gA, mode=[3])
        a_tiles = cute.size(gA, mode=[2])  # A's and B's tiles along M and N: where the loads stop
        b_tiles = cute.size(gB, mode=[2])

        sA_load = sA
        if cutlass.const_expr(self.a_rows != self.cfg.tile_m):
            sA_load = cute.local_tile(sA, (self.a_rows, self.cfg.tile_k), (0, 0, None))
        a_mcast_layout = cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape)
        b_mcast_layout = cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape)
        sB_load, sB_up = sB, None
        if cutlass.const_expr(self.gated):
            # the gate rows into the first half of each stage's B tile, the up rows into the second
            # (each CTA of a cluster column loads its share of both halves and multicasts it)
            sB_load = cute.local_tile(sB, (self.out_tile_n, self.cfg.tile_k), (0, 0, None))
            sB_up = cute.local_tile(sB, (self.out_tile_n, self.cfg.tile_k), (1, 0, None))
        tAsA, tAgA = self._tma_views(tma_a, cluster_coord[1], a_mcast_layout, sA_load, gA)
        tBsB, tBgB = self._tma_views(tma_b, cluster_coord[0], b_mcast_layout, sB_load, gB)
        tB2sB = tB2gB = None
        if cutlass.const_expr(self.gated):
            tB2sB, tB2gB = self._tma_views(tma_b2, cluster_coord[0], b_mcast_layout, sB_up, gB2)
        # the output's extents, for edge-aligned last tiles (GemmConfig.edge)
        extent_m = cute.size(mC_mnl, mode=[0])
        extent_n = cute.size(mC_mnl, mode=[1])

        pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)
        if cutlass.const_expr(self.cfg.pdl):
            # launched before the kernel ahead of it finished: its results (our inputs, the
            # workspace's counters) and its reads of what we overwrite are done after this
            cute.arch.griddepcontrol_wait()

        group = self.cfg.group
        raster_m = self.cfg.raster == "m"
        shares = None
        if cutlass.const_expr(self.cfg.stream_k):
            shares = stream_k_shares(total_units, num_persistent, first_cluster, k_tiles)

        if wg_idx == 0:
            # ------------------------------------------------ producer warp group
            cute.arch.setmaxregister_decrease(PRODUCER_REGS)
            if warp_idx == 0:
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stage)
                idx = first_cluster
                while self._has_work(idx, total_clusters, k_tiles, total_units, num_persistent, shares):
                    tile_idx, k_first, k_count, _, _ = self._work(idx, total_clusters, k_tiles, total_units,
                                                                  num_persistent, shares)
                    cm, cn, l = cluster_tile_coord(tile_idx, clusters_m, clusters_n, group, raster_m)
                    # a CTA past the grid's edge loads the last tile's operands (its stores are clipped)
                    tile_m = loaded_tile(cm * self.cfg.cluster_m + cta_m, a_tiles)
                    tile_n = loaded_tile(cn * self.cfg.cluster_n + cta_n, b_tiles)
                    tAgA_e, tBgB_e, tB2gB_e = tAgA, tBgB, tB2gB
                    if cutlass.const_expr(self.cfg.edge):
                        # the tiles' origins moved back to end at the edge (the same views, offset)
                        dm = edge_shift(tile_m, self.cfg.tile_m, extent_m)
                        dn = edge_shift(tile_n, self.out_tile_n, extent_n)
                        _, tAgA_e = self._tma_views(tma_a, cluster_coord[1], a_mcast_layout, sA_load,
                                                    self._operand_tiles(mA_mkl, dm, self.a_rows))
                        _, tBgB_e = self._tma_views(tma_b, cluster_coord[0], b_mcast_layout, sB_load,
                                                    self._operand_tiles(mB_nkl, dn, self.out_tile_n))
                        if cutlass.const_expr(self.gated):
                            _, tB2gB_e = self._tma_views(tma_b2, cluster_coord[0], b_mcast_layout, sB_up,
                                                         self._operand_tiles(mB2_nkl, dn, self.out_tile_n))
                    tAgA_t = tAgA_e[(None, tile_m, None, l)]
                    tBgB_t = tBgB_e[(None, tile_n, None, l)]
                    tB2gB_t = None
                    if cutlass.const_expr(self.gated):
                        tB2gB_t = tB2gB_e[(None, tile_n, None, l)]
                    for kk in cutlass.range(k_count, unroll=1):
                        k = k_first + kk
                        ab_pipeline.producer_acquire(state)
                        bar = ab_pipeline.producer_get_barrier(state)
                        cute.copy(tma_a, tAgA_t[(None, k)], tAsA[(None, state.index)],
                                  tma_bar_ptr=bar, mcast_mask=a_mcast_mask)
                        cute.copy(tma_b, tBgB_t[(None, k)], tBsB[(None, state.index)],
                                  tma_bar_ptr=bar, mcast_mask=b_mcast_mask)
                        if cutlass.const_expr(self.gated):
                            cute.copy(tma_b2, tB2gB_t[(None, k)], tB2sB[(None, state.index)],
                                      tma_bar_ptr=bar, mcast_mask=b_mcast_mask)
                        ab_pipeline.producer_commit(state)
                        state.advance()
                    idx += num_persistent
                if cutlass.const_expr(self.cfg.pdl):
                    cute.arch.griddepcontrol_launch_dependents()  # every load issued: the next kernel may set up
                ab_pipeline.producer_tail(state)
        else:
            # ------------------------------------------------ math warp groups
            cute.arch.setmaxregister_increase(MATH_REGS)
            math_wg = wg_idx - 1
            # cooperative: both groups on every tile; pingpong: group g takes tiles g, g+2, ...
            my_slot = 0 if self.cooperative else math_wg
            tiles_stride = 1 if self.cooperative else 2
            mma_thread = tidx - THREADS_PER_WG if self.cooperative else tidx - THREADS_PER_WG * wg_idx
            thr_mma = tiled_mma.get_slice(mma_thread)
            tCsA = thr_mma.partition_A(sA)
            tCsB = thr_mma.partition_B(sB)
            tCrA = tiled_mma.make_fragment_A(tCsA)
            tCrB = tiled_mma.make_fragment_B(tCsB)
            if cutlass.const_expr(self.gated):  # gate and up: twice the output tile's width
                acc_shape = thr_mma.partition_C(
                    cute.make_identity_tensor((self.cfg.tile_m, self.cfg.tile_n))).shape
            else:
                acc_shape = thr_mma.partition_C(gC[(None, None, 0, 0, 0)]).shape
            acc = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
            part = cute.make_rmem_tensor(acc_shape, self.acc_dtype) if self.promote else None
            part2 = (cute.make_rmem_tensor(acc_shape, self.acc_dtype)
                     if self.promote and self.promoted_copies == 3 else None)
            num_k_blocks = cute.size(tCrA, mode=[2])

            # epilogue plumbing: this group's smem buffers, barrier and store warp
            epi_sync = pipeline.NamedBarrier(barrier_id=1 + (0 if self.cooperative else math_wg),
                                             num_threads=self.epi_threads)
            epi_thread = mma_thread
            is_store_warp = (warp_idx % 4 == 0) if not self.cooperative else (warp_idx == 4)
            buf_base = 0 if self.cooperative else math_wg * self.epi_stage
            store_pipeline = self.stores.pipeline(self.epi_threads)
            tiled_copy_c_atom = cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(
                    cute.nvgpu.warp.StMatrix8x8x16bOp(self.c_layout.is_m_major_c(), 4),
                    cutlass.Float16 if cutlass.const_expr(self.c_dtype.width == 32) else self.c_dtype),
                tiled_mma)
            tiled_copy_r2s = cute.make_tiled_copy_S(
                sm90_utils.get_smem_store_op(self.c_layout, self.c_dtype, self.acc_dtype), tiled_copy_c_atom)
            thr_r2s = tiled_copy_r2s.get_slice(epi_thread)
            tRS_sC = thr_r2s.partition_D(sC)
            tRS_acc = tiled_copy_r2s.retile(acc)
            frag_shape = cute.shape(thr_r2s.partition_S(sC))[:3]
            tRS_frag = cute.make_rmem_tensor(frag_shape, self.acc_dtype)
            tRS_out = cute.make_rmem_tensor(frag_shape, self.c_dtype)
            tRS_up = cute.make_rmem_tensor(frag_shape, self.acc_dtype) if self.gated else None
            frag_size = cute.size(tRS_frag)
            # tile-local (m, n) of every accumulator, in the same order as tRS_acc
            tRS_coord = tiled_copy_r2s.retile(
                thr_mma.partition_C(cute.make_identity_tensor((self.cfg.tile_m, self.cfg.tile_n))))
            epi_args = epi.EpilogueArgs(mBias, mScaleA, mScaleB, mRes, alpha, beta, mC_mnl)
            s_vec = None
            if cutlass.const_expr(self.vec_elems > 0):
                vec_base = 0 if cutlass.const_expr(self.cooperative) else math_wg * self.vec_elems
                s_vec = cute.make_tensor(storage.s_vec.data_ptr() + vec_base, cute.make_layout(self.vec_elems))
            epi_ops = epi.EpilogueOperands(self.epilogue, epi_args, self.cfg.tile_m, self.cfg.tile_n,
                                           self.epi_threads, s_vec)
            tile_coord = lambda e: (lambda v: tRS_coord[e * frag_size + v])  # noqa: E731
            res_tma = None
            if cutlass.const_expr(self.epilogue.residual_tma):
                sRes = storage.sRes.get_tensor(res_smem_staged.outer, swizzle=res_smem_staged.inner)
                res_tma = epi.residual_tma(
                    tma_res, mRes_tma, sRes, res_bars, self.res_dtype, self.res_layout, tiled_copy_c_atom,
                    epi_thread, frag_shape, (self.cfg.tile_m, self.cfg.tile_n), self.epi_tile,
                    0 if cutlass.const_expr(self.cooperative) else math_wg * RES_STAGES)

            read_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            release_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stage)
            if cutlass.const_expr(not self.cooperative):
                # the other group's first tile occupies the ring before ours
                if math_wg == 1:
                    if self._has_work(first_cluster, total_clusters, k_tiles, total_units, num_persistent, shares):
                        for _ in cutlass.range(self._work(first_cluster, total_clusters, k_tiles, total_units,
                                                          num_persistent, shares)[2], unroll=1):
                            read_state.advance()
                            release_state.advance()
            # pingpong turn-taking (named barriers 3 and 4, 256 threads): a group starts its
            # mainloop only after the other finished waiting on its stages, so no group waits on
            # a ring slot more than one phase ahead (mbarrier parity would alias).
            my_turn = 3 + math_wg
            other_turn = 4 - math_wg
            if cutlass.const_expr(not self.cooperative):
                if math_wg == 1:
                    cute.arch.barrier_arrive(barrier_id=3, number_of_threads=2 * THREADS_PER_WG)
            epi_count = Int32(0)
            split_arrival = None
            if cutlass.const_expr(self.partial_sums):
                arrival_slot = 0 if self.cooperative else math_wg
                split_arrival = cute.make_tensor(storage.split_arrival.data_ptr() + arrival_slot, cute.make_layout(1))
            idx = first_cluster + my_slot * num_persistent
            while self._has_work(idx, total_clusters, k_tiles, total_units, num_persistent, shares):
                tile_idx, _, unit_k, split, pieces = self._work(idx, total_clusters, k_tiles, total_units,
                                                                num_persistent, shares)
                has_next = self._has_work(idx + num_persistent, total_clusters, k_tiles, total_units, num_persistent,
                                          shares)
                cm, cn, l = cluster_tile_coord(tile_idx, clusters_m, clusters_n, group, raster_m)
                tile_m = cm * self.cfg.cluster_m + cta_m
                tile_n = cn * self.cfg.cluster_n + cta_n
                dm = dn = Int32(0)
                if cutlass.const_expr(self.cfg.edge):
                    dm = edge_shift(tile_m, self.cfg.tile_m, extent_m)
                    dn = edge_shift(tile_n, self.out_tile_n, extent_n)
                # epilogue operands requested now, used after the mainloop (their latency hides)
                tile_ops = epi_ops.for_tile(tile_m * self.cfg.tile_m + dm, tile_n * self.out_tile_n + dn, l,
                                            epi_thread)
                tile_ops.prefetch_residual_l2(epi_thread)
                res_tiles = None
                if cutlass.const_expr(res_tma is not None):
                    res_tiles = res_tma.tile(tile_m, tile_n, l, (dm, dn) if cutlass.const_expr(self.cfg.edge) else None)
                if cutlass.const_expr(res_tma is not None and not self.partial_sums):
                    # the first residual sub-tiles load while the mainloop runs
                    if is_store_warp:
                        for e in cutlass.range_constexpr(min(RES_STAGES, res_tma.sub_tiles)):
                            res_tma.issue(res_tiles, e, epi_count + e)

                # ---- mainloop
                if cutlass.const_expr(not self.cooperative):
                    cute.arch.barrier(barrier_id=my_turn, number_of_threads=2 * THREADS_PER_WG)
                acc.fill(0.0)
                tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                cute.nvgpu.warpgroup.fence()
                if cutlass.const_expr(self.promote):
                    # fp8, precise: each k-tile's WGMMAs accumulate into a fresh fragment that is
                    # then added to the fp32 accumulator (the tensor cores' fp8 accumulator keeps
                    # fewer mantissa bits than fp32). Where registers allow, two fragments
                    # alternate, so one k-tile's WGMMAs run while the previous one is added.
                    # (states are reassigned so the DSL carries them through the staged loop)
                    mma_args = (tiled_mma, ab_pipeline, tCrA, tCrB, num_k_blocks)
                    if cutlass.const_expr(self.promoted_copies == 2):
                        # one partial (a tile too large for two): each k-tile's add waits for its
                        # WGMMAs; the other warp group's WGMMAs keep the tensor cores busy meanwhile
                        for _k in cutlass.range(unit_k, unroll=1):
                            read_state = _issue_k_tile(*mma_args, read_state, part)
                            release_state = _retire_k_tile(ab_pipeline, release_state, acc, part, 0)
                    else:
                        read_state = _issue_k_tile(*mma_args, read_state, part)
                        for _k in cutlass.range((unit_k - 1) // 2, unroll=1):
                            read_state = _issue_k_tile(*mma_args, read_state, part2)
                            release_state = _retire_k_tile(ab_pipeline, release_state, acc, part, 1)
                            read_state = _issue_k_tile(*mma_args, read_state, part)
                            release_state = _retire_k_tile(ab_pipeline, release_state, acc, part2, 1)
                        if (unit_k - 1) % 2 == 1:
                            read_state = _issue_k_tile(*mma_args, read_state, part2)
                            release_state = _retire_k_tile(ab_pipeline, release_state, acc, part, 1)
                            release_state = _retire_k_tile(ab_pipeline, release_state, acc, part2, 0)
                        else:
                            release_state = _retire_k_tile(ab_pipeline, release_state, acc, part, 0)
                    if cutlass.const_expr(not self.cooperative):
                        if has_next:
                            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=2 * THREADS_PER_WG)
                else:
                    # keep one WGMMA batch in flight; release a stage once its batch retired
                    for k in cutlass.range(unit_k, unroll=1):
                        ab_pipeline.consumer_wait(read_state)
                        for kb in cutlass.range_constexpr(num_k_blocks):
                            coord = (None, None, kb, read_state.index)
                            cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
                        cute.nvgpu.warpgroup.commit_group()
                        cute.nvgpu.warpgroup.wait_group(1)
                        if k > 0:
                            ab_pipeline.consumer_release(release_state)
                            release_state.advance()
                        read_state.advance()
                    if cutlass.const_expr(not self.cooperative):
                        if has_next:  # the other group has a next tile
                            cute.arch.barrier_arrive(barrier_id=other_turn, number_of_threads=2 * THREADS_PER_WG)
                    cute.nvgpu.warpgroup.wait_group(0)
                    if unit_k > 0:
                        ab_pipeline.consumer_release(release_state)
                        release_state.advance()

                # ---- split-K: partial to the workspace; the tile's last slice sums them all
                finishes_tile = True
                if cutlass.const_expr(self.cfg.splits > 1):
                    cta_tile = tile_idx * (self.cfg.cluster_m * self.cfg.cluster_n) + cta_rank
                    finishes_tile = reduce_partials(acc, mWork, mCounters, cta_tile, split, self.cfg.splits,
                                                    epi_thread, self.epi_threads, epi_sync, split_arrival)
                if cutlass.const_expr(self.cfg.stream_k):
                    # a tile one share covers is finished here; one cut into pieces, by its last
                    finishes_tile = pieces == 1
                    if pieces > 1:
                        finishes_tile = reduce_pieces(
                            acc, mWork, mCounters, tile_idx * (self.cfg.cluster_m * self.cfg.cluster_n) + cta_rank,
                            split, pieces,
                            stream_k_max_pieces(k_tiles, shares),
                            epi_thread, self.epi_threads, epi_sync, split_arrival)

                if finishes_tile:
                    # ---- epilogue: registers -> smem -> TMA store, one epi sub-tile at a time
                    if cutlass.const_expr(res_tma is not None and self.partial_sums):
                        # split-K: only the tile's last slice reads the residual
                        if is_store_warp:
                            for e in cutlass.range_constexpr(min(RES_STAGES, res_tma.sub_tiles)):
                                res_tma.issue(res_tiles, e, epi_count + e)
                    gC_e = gC
                    if cutlass.const_expr(self.cfg.edge):
                        gC_e = cute.local_tile(cute.domain_offset((dm, dn, 0), mC_mnl),
                                               (self.cfg.tile_m, self.out_tile_n), (None, None, None))
                    gC_tile = cute.zipped_divide(gC_e[(None, None, tile_m, tile_n, l)], self.epi_tile)
                    bSG_sC, bSG_gC = cute.nvgpu.cpasync.tma_partition(
                        tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_tile)
                    epi_tiles = cute.size(gC_tile, mode=[1])
                    epi_grid = gC_tile.shape[1]
                    epi_order = cute.make_layout(epi_grid, stride=(epi_grid[1], 1))
                    if cutlass.const_expr(epi_ops.staged):
                        tile_ops.stage()
                        epi_sync.arrive_and_wait()
                    # a gathered residual is read one sub-tile ahead of its use
                    res_next = None
                    if cutlass.const_expr(res_tma is None):
                        res_next = tile_ops.gather_residual(frag_shape, tile_coord(0))
                    for e in cutlass.range_constexpr(epi_tiles):
                        res_cur = res_next
                        if cutlass.const_expr(res_tma is not None):
                            res_cur = res_tma.read(epi_count)
                        elif cutlass.const_expr(e + 1 < epi_tiles):
                            res_next = tile_ops.gather_residual(frag_shape, tile_coord(e + 1))
                        if cutlass.const_expr(self.gated):
                            # output sub-tile (row r, column c) of the half-wide output tile: the
                            # gate at sub-tile (r, c) of the accumulators, up at (r, c + half)
                            sub_n = self.out_tile_n // self.epi_tile[1]
                            e_gate = (e // sub_n) * (2 * sub_n) + e % sub_n
                            for v in cutlass.range_constexpr(frag_size):
                                tRS_frag[v] = tRS_acc[e_gate * frag_size + v]
                                tRS_up[v] = tRS_acc[(e_gate + sub_n) * frag_size + v]
                            tRS_out.store(tile_ops.apply_gated(tRS_frag, tRS_up, tile_coord(e_gate)).to(self.c_dtype))
                        else:
                            for v in cutlass.range_constexpr(frag_size):
                                tRS_frag[v] = tRS_acc[e * frag_size + v]
                            tRS_out.store(tile_ops.apply(tRS_frag, tile_coord(e), res_cur).to(self.c_dtype))
                        buf = buf_base + epi_count % self.epi_stage
                        cute.copy(tiled_copy_r2s, tRS_out, tRS_sC[(None, None, None, buf)])
                        cute.arch.fence_proxy("async.shared", space="cta")
                        if is_store_warp:
                            self.stores.before_barrier(store_pipeline)
                        self.stores.handoff(epi_sync)
                        if is_store_warp:
                            cute.copy(tma_c, bSG_sC[(None, buf)], bSG_gC[(None, epi_order.get_hier_coord(e))])
                            store_pipeline.producer_commit()
                            if cutlass.const_expr(res_tma is not None and e + RES_STAGES < epi_tiles):
                                # every thread has read this sub-tile's residual buffer: refill it
                                res_tma.issue(res_tiles, e + RES_STAGES, epi_count + RES_STAGES)
                        epi_count += 1

                if cutlass.const_expr(not self.cooperative):
                    # skip the other group's next tile in the ring
                    if has_next:
                        for _ in cutlass.range(self._work(idx + num_persistent, total_clusters, k_tiles,
                                                          total_units, num_persistent, shares)[2], unroll=1):
                            read_state.advance()
                            release_state.advance()
                idx += tiles_stride * num_persistent
            if is_store_warp:
                store_pipeline.producer_tail()
