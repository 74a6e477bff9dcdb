"""The Blackwell (sm100a) family: TMA + tcgen05 UMMA into tensor memory, one schedule (an MMA warp
feeding a double-buffered accumulator), 1-CTA and 2-CTA (cta_group::2) MMAs."""

from __future__ import annotations

from typing import Optional

from ..problem import GemmProblem, UnsupportedGemmError, dtype_bits
from .config import RASTERS, GemmConfig
from .family import ArchFamily
from .resources import MAX_MMA_N, SM100_ACC_STAGES, TMEM_COLUMNS, ctas_per_mma

# the gated kernel's epilogue sub-tile width on CTA tiles of more than 64 rows: a thread holds the
# gate's and the up's fragments and their per-column vectors (at 32 columns the split-K and FP8
# forms spilled)
GATED_EPI_N = 16


def epilogue_cta_tile(cta_m: int, cta_n: int, gated: bool) -> tuple:
    """The (rows, columns) CTA tile the sm100a kernel hands the DSL's epilogue-tile rule (``cta_n``:
    the output tile's width). Gated tiles of more than 64 rows ask for GATED_EPI_N columns: a
    thread holds two fragments (gate and up) and their per-column vectors; a 64-row tile's thread
    holds half as many columns already."""
    return (cta_m, GATED_EPI_N) if gated and cta_m > 64 else (cta_m, cta_n)


def sm100_epilogue_tile(cfg: GemmConfig, out_bits: int = 16, c_major: str = "n", gated: bool = False) -> tuple:
    """(rows, columns) of the sm100a kernel's epilogue sub-tile: the DSL's choice
    (cutlass.utils.blackwell_helpers.compute_epilogue_tile_size without a source tensor, which the
    kernel calls at trace time) restated in pure Python, so that the shared-memory rule counts the
    staging buffers the kernel allocates (a CI test compares the two over the config space)."""
    cta_m, cta_n = epilogue_cta_tile(cfg.tile_m // ctas_per_mma(cfg), cfg.tile_n // (2 if gated else 1), gated)
    warp_m, warp_n = (2, 2) if (cta_m == 64 and cfg.two_cta) else (4, 1)
    rows = min(cta_m, 32 * warp_m)
    per_step = 4096 // rows  # the DSL's target: 4096 elements per sub-tile
    while cta_n % per_step:
        per_step //= 2
    floor = 8 * warp_n if c_major == "m" else 128 // out_bits * warp_n  # a 16-byte TMA store row
    cols = min(cta_n, max(per_step, floor, 8 * warp_n))
    return rows, cols if cta_n % cols == 0 else cta_n


class Sm100Family(ArchFamily):
    arch = "sm100a"
    compile_flag = "sm_100a"
    kernel = "cutedsl_backend.kernels.sm100:Sm100Gemm"
    split_k = True  # compile-verified only: no Blackwell GPU has run it
    swap_ab = True  # the same: the epilogue stores a column-major output (compile-verified)
    gated = True  # the same: two half-width MMAs per k-block, gate and up (kernels/sm100.py)

    def max_tile_n(self, cfg: GemmConfig) -> int:
        return MAX_MMA_N

    def epilogue_tile(self, cfg: GemmConfig, problem: Optional[GemmProblem] = None,
                      epilogue=None) -> tuple[int, int]:
        if problem is None:  # the sub-tile follows the output's dtype and major
            raise ValueError("the sm100a epilogue tile depends on the problem's output: pass it")
        return sm100_epilogue_tile(cfg, dtype_bits(problem.out_dtype), problem.c_major,
                                   bool(epilogue is not None and epilogue.gated))

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
