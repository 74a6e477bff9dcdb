"""The registered architecture families (a new architecture: its module and one line here), and
the per-config lookups the kernels and the resource model use."""

from __future__ import annotations

from ..problem import ARCHS, GemmProblem, UnsupportedGemmError
from .config import GemmConfig
from .family import ArchFamily
from .sm90 import SM90
from .sm100 import SM100

FAMILIES: dict = {f.arch: f for f in (SM90, SM100)}
assert tuple(FAMILIES) == ARCHS, "problem.ARCHS and the registered families must agree"


def family(arch: str) -> ArchFamily:
    """The family of ``arch`` (UnsupportedGemmError for an unknown one)."""
    try:
        return FAMILIES[arch]
    except KeyError:
        raise UnsupportedGemmError(f"config arch {arch!r}: must be one of {ARCHS}") from None


def epilogue_groups(cfg: GemmConfig) -> int:
    """Warp groups that each own a private set of epilogue buffers."""
    return family(cfg.arch).epilogue_groups(cfg)


def epilogue_tile(cfg: GemmConfig) -> tuple[int, int]:
    """(rows, columns) of the epilogue sub-tile a group stores per step."""
    return family(cfg.arch).epilogue_tile(cfg)


def epilogue_smem_bytes(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> int:
    return family(cfg.arch).epilogue_smem_bytes(cfg, problem, epilogue)


def max_stages(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> int:
    return family(cfg.arch).max_stages(cfg, problem, epilogue)


def resolve_config(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> GemmConfig:
    """``cfg`` with tile_k and stages filled in for ``problem``'s dtypes (and the shared memory
    the ``epilogue`` EpilogueSpec needs)."""
    import dataclasses

    from .config import natural_tile_k

    cfg = dataclasses.replace(cfg, tile_k=cfg.tile_k or natural_tile_k(problem.dtype))
    if not cfg.stages:
        cfg = dataclasses.replace(cfg, stages=max_stages(cfg, problem, epilogue))
    return cfg


def config_space(arch: str = "sm90a") -> list:
    """Every config the tuner may consider for ``arch`` (before the per-problem validity check)."""
    return family(arch).space()


def quick_configs(arch: str = "sm90a") -> list:
    """The configs every CI run compiles: both schedules, clusters, small and large tiles."""
    return family(arch).quick()
