"""The Blackwell (sm100a) family: TMA + tcgen05 UMMA into tensor memory, one schedule (an MMA warp
feeding a double-buffered accumulator), 1-CTA and 2-CTA (cta_group::2) MMAs."""

from __future__ import annotations

from ..problem import GemmProblem, UnsupportedGemmError
from .config import RASTERS, GemmConfig
from .family import ArchFamily
from .resources import MAX_MMA_N, SM100_ACC_STAGES, TMEM_COLUMNS


class Sm100Family(ArchFamily):
    arch = "sm100a"
    compile_flag = "sm_100a"
    kernel = "cutedsl_backend.kernels.sm100:Sm100Gemm"
    split_k = True  # compile-verified only: no Blackwell GPU has run it
    swap_ab = True  # the same: the epilogue stores a column-major output (compile-verified)
    gated = True  # the same: two half-width MMAs per k-block, gate and up (kernels/sm100.py)

    def max_tile_n(self, cfg: GemmConfig) -> int:
        return MAX_MMA_N

    def check(self, cfg: GemmConfig, problem: GemmProblem) -> None:
        if cfg.schedule != "cooperative":
            raise UnsupportedGemmError(
                "schedule: sm100a has one schedule (an MMA warp feeding double-buffered tensor memory); "
                "use 'cooperative'")
        allowed_m = (128, 256) if cfg.two_cta else (64, 128)
        if cfg.tile_m not in allowed_m:
            raise UnsupportedGemmError(
                f"tile_m {cfg.tile_m}: sm100a {'2-CTA' if cfg.two_cta else '1-CTA'} MMA takes tile_m in {allowed_m}")
        if cfg.two_cta and cfg.cluster_m % 2:
            raise UnsupportedGemmError("cluster: 2-CTA (cta_group::2) needs cluster_m a multiple of 2")
        if cfg.tile_n * SM100_ACC_STAGES > TMEM_COLUMNS:
            raise UnsupportedGemmError(
                f"tile_n {cfg.tile_n}: {SM100_ACC_STAGES} accumulators need {cfg.tile_n * SM100_ACC_STAGES} "
                f"tensor-memory columns, over {TMEM_COLUMNS}")

    def space(self) -> list:
        out = []
        for two_cta, tms, clusters in ((False, (64, 128), ((1, 1), (1, 2), (2, 1))),
                                       (True, (128, 256), ((2, 1), (2, 2)))):
            for tm in tms:
                for tn in (64, 128, 192, 256):
                    for cl in clusters:
                        for raster in RASTERS:
                            out.append(GemmConfig(tile_m=tm, tile_n=tn, cluster_m=cl[0], cluster_n=cl[1],
                                                  raster=raster, arch=self.arch, two_cta=two_cta))
        return out

    def quick(self) -> list:
        return [
            GemmConfig(128, 192, arch="sm100a"),
            GemmConfig(128, 128, cluster_n=2, arch="sm100a", raster="m"),
            GemmConfig(64, 128, cluster_n=2, arch="sm100a", group=1),
            GemmConfig(256, 128, cluster_m=2, arch="sm100a", two_cta=True),
            GemmConfig(256, 192, cluster_m=2, arch="sm100a", two_cta=True),
        ]


SM100 = Sm100Family()
