"""The Hopper (sm90a) family: TMA + WGMMA, cooperative and ping-pong schedules, tiles up to 256
columns (320 for the cooperative schedule with a K-major B: two 160-wide WGMMAs), register
accumulators, a TMA-loaded residual, split-K and short A loads."""

from __future__ import annotations

from ..problem import GemmProblem, UnsupportedGemmError
from .config import RASTERS, GemmConfig
from .family import ArchFamily
from .resources import (
    MAX_ACC_REGS_PER_THREAD,
    MAX_ACC_REGS_PER_THREAD_PROMOTED,
    MAX_MMA_N,
    SM90_MAX_TILE_N,
    acc_regs_per_thread,
    epilogue_tile_n,
    promoted_acc_copies,
)


class Sm90Family(ArchFamily):
    arch = "sm90a"
    compile_flag = "sm_90a"
    kernel = "cutedsl_backend.kernels.sm90:Sm90Gemm"
    tma_residual = True
    split_k = True
    short_a_loads = True
    swap_ab = True
    gated = True  # compile-verified; its GPU tests: tests/gpu/test_gated_sm90.py
    # the clusters the ranking offers the gated kernel. B multicast (cluster_m 2) passes the GPU
    # tests, but `sweep-gated` (H100, 2026-12-05) found the heuristic's picks no faster with it:
    # offered, they would displace the best tile at M = 2048 / 4096 (1.248x / 1.181x cuBLAS +
    # silu*mul against 1.273x / 1.195x) and leave M = 512's (1.076x, where a 128x128 c2x1 ping-pong
    # tile measured 1.189x) unchanged; a mid-M rule needs more Ms measured first
    gated_ranked_clusters = ((1, 1), (1, 2))
    # one epilogue sub-tile wide tiles (few tokens: more tiles to spread the weights over)
    min_tile_n = 16
    # tile widths in steps of 16 (stmatrix's width): 144 cuts 576 and 4608 columns into whole
    # tiles, as cuBLAS's 144-wide tiles do, where 128 and 192 leave most of a wave idle
    tile_n_step = 16
    # and four row tiles sharing B's panel (4 x 1, 4 x 2): swapped, B is the tokens, which every
    # 64-row weight tile would otherwise read from L2 again; cuBLAS runs 4 x 2 at 80-160 tokens
    four_row_clusters = ((4, 1), (4, 2))
    cluster_shapes = ArchFamily.cluster_shapes + four_row_clusters

    def max_tile_n(self, cfg: GemmConfig) -> int:
        return SM90_MAX_TILE_N if cfg.schedule == "cooperative" else MAX_MMA_N

    def epilogue_groups(self, cfg: GemmConfig) -> int:
        # ping-pong: each math warp group stores its own tiles through its own buffers
        return 2 if cfg.schedule == "pingpong" else 1

    def epilogue_tile(self, cfg: GemmConfig, problem=None, epilogue=None) -> tuple[int, int]:
        rows = 64 if cfg.schedule == "pingpong" else super().epilogue_tile(cfg)[0]
        return (rows, epilogue_tile_n(cfg.tile_n))

    def check(self, cfg: GemmConfig, problem: GemmProblem) -> None:
        if cfg.two_cta:
            raise UnsupportedGemmError("two_cta is an sm100a option")
        if MAX_MMA_N < cfg.tile_n != SM90_MAX_TILE_N:
            raise UnsupportedGemmError(
                f"tile_n {cfg.tile_n}: past {MAX_MMA_N} only {SM90_MAX_TILE_N} (two 160-wide WGMMAs)")
        if cfg.tile_n > MAX_MMA_N and problem.b_major != "k":
            raise UnsupportedGemmError(
                f"tile_n {cfg.tile_n}: wider than one WGMMA ({MAX_MMA_N}), it is split in two, which needs B "
                "K-major (an N-major B's 64-column swizzle blocks do not split at the half)")
        allowed_m = (128, 256) if cfg.schedule == "cooperative" else (64, 128)
        if cfg.tile_m not in allowed_m:
            raise UnsupportedGemmError(
                f"tile_m {cfg.tile_m}: the {cfg.schedule} schedule takes tile_m in {allowed_m}"
            )
        if problem.promote_fp8 and not promoted_acc_copies(cfg):
            raise UnsupportedGemmError(
                f"tile {cfg.tile_m}x{cfg.tile_n} ({cfg.schedule}): precise fp8 keeps at least two fp32 "
                f"accumulators, {2 * acc_regs_per_thread(cfg)} registers per thread, over "
                f"{MAX_ACC_REGS_PER_THREAD_PROMOTED} (use fast_accum=True or a smaller tile)"
            )
        if acc_regs_per_thread(cfg) > MAX_ACC_REGS_PER_THREAD:
            raise UnsupportedGemmError(
                f"tile {cfg.tile_m}x{cfg.tile_n} ({cfg.schedule}) needs "
                f"{acc_regs_per_thread(cfg)} accumulator registers per thread, over "
                f"{MAX_ACC_REGS_PER_THREAD} (it would spill)"
            )

    def space(self) -> list:
        out = []
        for schedule, tms in (("cooperative", (128, 256)), ("pingpong", (64, 128))):
            for tm in tms:
                for tn in (64, 128, 192, 256):
                    for cl in ((1, 1), (2, 1), (1, 2)):
                        for raster in RASTERS:
                            out.append(GemmConfig(tile_m=tm, tile_n=tn, cluster_m=cl[0], cluster_n=cl[1],
                                                  schedule=schedule, raster=raster, arch=self.arch))
        return out

    def quick(self) -> list:
        # both schedules, clusters, small and large tiles
        return [
            GemmConfig(128, 256, cluster_m=2, schedule="cooperative"),
            GemmConfig(128, 128, cluster_n=2, schedule="cooperative", raster="m"),
            GemmConfig(256, 128, schedule="cooperative"),
            GemmConfig(128, 128, schedule="pingpong"),
            GemmConfig(64, 256, cluster_m=2, schedule="pingpong"),
            GemmConfig(64, 64, schedule="pingpong", raster="m", group=1),
        ]


SM90 = Sm90Family()
