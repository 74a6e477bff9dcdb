"""An architecture family: what a config may be on one GPU architecture and what the kernels of
that architecture need (shared-memory capacity, epilogue groups and sub-tile, the tile rules,
the config space tuned over, the quick set every CI run compiles, the kernel class and its
compile flag). configs/sm90.py and configs/sm100.py define the two families; a new architecture
is one such module plus its registration in configs/families.py."""

from __future__ import annotations

from typing import Optional

from ..problem import GemmProblem, dtype_bits
from .config import GemmConfig
from .resources import EPI_STAGES, EPI_TILE_N, RES_STAGES, SMEM_RESERVED, ctas_per_mma, smem_bytes_per_stage


class ArchFamily:
    """One architecture's rules. Subclasses set the class attributes and override ``check``,
    ``space``, ``quick`` and where they differ ``epilogue_groups`` / ``epilogue_tile``."""

    arch: str = ""
    compile_flag: str = ""  # --gpu-arch of cute.compile
    kernel: str = ""  # "module:Class" of the kernel, imported when a kernel is compiled
    smem_capacity: int = 232448  # bytes a CTA may use (the 227 KiB opt-in limit)
    tma_residual: bool = False  # a 16-byte aligned residual is loaded by TMA (else gathered)
    split_k: bool = False  # the kernel takes K slices (GemmConfig.splits)
    short_a_loads: bool = False  # the kernel loads only GemmConfig.a_rows rows of A
    swap_ab: bool = False  # the kernel stores a column-major output (GemmConfig.swap_ab)
    gated: bool = False  # the kernel takes the gated epilogue (EpilogueSpec.gated)
    # the thread-block clusters (cluster_m, cluster_n) the kernel takes (A multicast along N, B along M)
    cluster_shapes: tuple = ((1, 1), (2, 1), (1, 2), (2, 2))
    four_row_clusters: tuple = ()  # those of cluster_shapes with four row tiles
    # the clusters (cluster_m, cluster_n) the ranking offers the gated kernel; None: every one it takes
    gated_ranked_clusters: Optional[tuple] = None
    min_tile_n: int = 2 * EPI_TILE_N
    tile_n_step: int = EPI_TILE_N  # tile_n is a multiple of this

    def max_tile_n(self, cfg: GemmConfig) -> int:
        raise NotImplementedError

    def kernel_class(self):
        import importlib

        module, name = self.kernel.split(":")
        return getattr(importlib.import_module(module), name)

    def epilogue_groups(self, cfg: GemmConfig) -> int:
        """Warp groups that each own a private set of epilogue buffers."""
        return 1

    def epilogue_tile(self, cfg: GemmConfig, problem: Optional[GemmProblem] = None,
                      epilogue=None) -> tuple[int, int]:
        """(rows, columns) of the epilogue sub-tile a group stores per step (for ``problem`` and
        its ``epilogue`` where the family's sub-tile depends on them)."""
        return (min(128, cfg.tile_m // ctas_per_mma(cfg)), EPI_TILE_N)

    def epilogue_smem_bytes(self, cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> int:
        """The output staging buffers, plus the per-tile vectors ``epilogue`` (an EpilogueSpec)
        stages and a TMA-loaded residual's buffers, per epilogue group."""
        em, en = self.epilogue_tile(cfg, problem, epilogue)
        vectors = epilogue.staged_vector_bytes(cfg.tile_m // ctas_per_mma(cfg), cfg.tile_n) if epilogue else 0
        residual = 0
        if epilogue is not None and epilogue.residual_tma and self.tma_residual:
            residual = em * en * dtype_bits(epilogue.residual_dtype) // 8 * RES_STAGES
        per_group = em * en * dtype_bits(problem.out_dtype) // 8 * EPI_STAGES + vectors + residual
        return per_group * self.epilogue_groups(cfg)

    def max_stages(self, cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> int:
        """As many A/B pipeline stages as fit beside the epilogue's buffers (at most 8)."""
        cap = self.smem_capacity - SMEM_RESERVED - self.epilogue_smem_bytes(cfg, problem, epilogue)
        return max(0, min(8, cap // smem_bytes_per_stage(cfg, problem)))

    def check(self, cfg: GemmConfig, problem: GemmProblem) -> None:
        """Raise UnsupportedGemmError naming the first architecture rule ``cfg`` breaks."""
        raise NotImplementedError

    def space(self) -> list:
        """Every config the tuner may consider (before the per-problem validity check)."""
        raise NotImplementedError

    def quick(self) -> list:
        """The configs every CI run compiles."""
        raise NotImplementedError

    def tuned(self, problem: GemmProblem, epilogue=None) -> Optional[GemmConfig]:
        """A measured override for the problem's shape class (see configs.tuning), if any."""
        return None
