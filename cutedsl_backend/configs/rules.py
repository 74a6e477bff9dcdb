"""Whether a config can run a problem: the rules every architecture shares, then its family's
(configs.family), then shared memory. Pure Python; raises UnsupportedGemmError naming the rule."""

from __future__ import annotations

import math
from typing import Iterable, Optional

from ..problem import ALIGN_BYTES, GemmProblem, UnsupportedGemmError, dtype_bits
from .config import MAX_SPLITS, RASTERS, SCHEDULES, SHORT_A_ROWS, GemmConfig, natural_tile_k
from .families import FAMILIES, epilogue_smem_bytes, family, max_stages
from .resources import EPI_TILE_N, SMEM_RESERVED, STREAM_K_MAX_CLUSTERS, smem_bytes_per_stage, split_k_workspace


def check_config(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> None:
    """Raise UnsupportedGemmError naming the first rule ``cfg`` breaks for ``problem`` (with the
    shared memory an ``epilogue`` EpilogueSpec needs)."""
    fam = family(cfg.arch)
    if cfg.arch != problem.arch:
        raise UnsupportedGemmError(
            f"config arch {cfg.arch} does not match the problem's arch {problem.arch}"
        )
    if cfg.schedule not in SCHEDULES:
        raise UnsupportedGemmError(f"schedule {cfg.schedule!r}: must be one of {SCHEDULES}")
    if cfg.raster not in RASTERS:
        raise UnsupportedGemmError(f"raster {cfg.raster!r}: must be one of {RASTERS}")
    if not (1 <= cfg.group <= 64):
        raise UnsupportedGemmError(f"group {cfg.group}: must be in 1..64")
    if not (1 <= cfg.splits <= MAX_SPLITS):
        raise UnsupportedGemmError(f"splits {cfg.splits}: must be in 1..{MAX_SPLITS}")
    shape = (cfg.cluster_m, cfg.cluster_n)
    if shape not in fam.cluster_shapes:
        elsewhere = [f.arch for f in FAMILIES.values() if shape in f.four_row_clusters]
        if elsewhere:
            raise UnsupportedGemmError(f"cluster {cfg.cluster_m}x{cfg.cluster_n}: four-row clusters are verified "
                                       f"on {', '.join(elsewhere)} only, not {cfg.arch}")
        raise UnsupportedGemmError(f"cluster {cfg.cluster_m}x{cfg.cluster_n}: must be one of "
                                   + ", ".join(f"{m}x{n}" for m, n in fam.cluster_shapes))
    tile_k = cfg.tile_k or natural_tile_k(problem.dtype)
    if tile_k != natural_tile_k(problem.dtype):
        raise UnsupportedGemmError(
            f"tile_k {tile_k}: must be {natural_tile_k(problem.dtype)} (128 bytes) for {problem.dtype}"
        )
    if cfg.a_rows:
        if not fam.short_a_loads or problem.a_major != "k":
            raise UnsupportedGemmError("a_rows: loading fewer rows of A than the tile is for sm90a with a K-major A")
        if cfg.a_rows in SHORT_A_ROWS:
            if cfg.cluster_n != 1:
                raise UnsupportedGemmError(
                    f"a_rows {cfg.a_rows}: under 8 rows A is not multicast (cluster_n 1): a cluster along N "
                    "splits A's box between its CTAs, untested with loads under one 8-row swizzle atom")
        elif cfg.a_rows % 8 or not (8 <= cfg.a_rows <= min(64, cfg.tile_m)):
            raise UnsupportedGemmError(
                f"a_rows {cfg.a_rows}: must be 1, 2, 4 or a multiple of 8 in 8..{min(64, cfg.tile_m)}")
        if problem.m > cfg.a_rows:
            raise UnsupportedGemmError(
                f"a_rows {cfg.a_rows}: the problem's M={problem.m} is larger (rows past a_rows would not be loaded)")
    if cfg.swap_ab or problem.c_major == "m":
        if cfg.swap_ab != (problem.c_major == "m"):
            raise UnsupportedGemmError("swap_ab: a swap-AB config runs on the swapped problem (GemmProblem.swapped, "
                                       "whose output is column-major), and only such a config does")
        if not fam.swap_ab:
            raise UnsupportedGemmError(f"swap_ab: not implemented for {cfg.arch}")
        if epilogue is not None and (epilogue.residual or epilogue.gated):
            raise UnsupportedGemmError("swap_ab: takes no residual and no gated epilogue (its output is transposed)")
    if cfg.edge:
        if cfg.arch != "sm90a":
            raise UnsupportedGemmError(f"edge: edge-aligned last tiles are implemented for sm90a only, not {cfg.arch}")
        # the moved last tile's TMA copies start where the edge puts them: along a tensor's
        # contiguous dimension that must be a whole 16-byte unit (on an H100 an output of 1001
        # columns, the last tile moved back by 23, faulted with an illegal instruction); the
        # operands moved along their contiguous dimension are held to the same
        out_n = problem.n // output_halves(epilogue)
        moved = [("the output", out_n if problem.c_major == "n" else problem.m, problem.out_dtype)]
        if problem.a_major == "m":
            moved.append(("A", problem.m, problem.dtype))
        if problem.b_major == "n":
            moved.append(("B", problem.n, problem.dtype_b))
        for what, lead, dtype in moved:
            unit = ALIGN_BYTES * 8 // dtype_bits(dtype)
            if lead % unit:
                raise UnsupportedGemmError(
                    f"edge: {what}'s contiguous extent ({lead}) must be a multiple of {unit} elements (16 bytes) "
                    "to move its last tile back to the edge")
    if cfg.splits > 1:
        if not fam.split_k:
            raise UnsupportedGemmError("splits: split-K is implemented for sm90a only")
        k_tiles = math.ceil(problem.k / tile_k)
        if split_k_workspace(problem, cfg)[1] >= 1 << 31:
            raise UnsupportedGemmError(f"splits {cfg.splits}: the split-K workspace would exceed 2^31 elements")
        if cfg.splits > k_tiles:
            raise UnsupportedGemmError(
                f"splits {cfg.splits}: more K slices than the {k_tiles} k-tiles of K={problem.k} "
                "(a slice would be empty)")
    if cfg.stream_k:
        if not fam.split_k or cfg.arch != "sm90a":
            raise UnsupportedGemmError(f"stream_k: implemented for sm90a only, not {cfg.arch}")
        if cfg.splits > 1:
            raise UnsupportedGemmError("stream_k: takes no splits (it divides the K ranges itself)")
        if cfg.swap_ab or (epilogue is not None and getattr(epilogue, "gated", None)):
            # the kernel would take them; no GPU test has run stream-K with either
            raise UnsupportedGemmError("stream_k: not with swap_ab or the gated epilogue (not verified on a GPU)")
        if cfg.edge:
            # a moved last tile overlaps the one before it, and stream-K cuts the two at other K
            # points: the overlap's bits would depend on which tile's store lands last
            raise UnsupportedGemmError("stream_k: not with edge (overlapping tiles summed in different orders)")
        # sized for the most pieces a GPU of up to STREAM_K_MAX_CLUSTERS persistent clusters cuts a tile into
        if split_k_workspace(problem, cfg, STREAM_K_MAX_CLUSTERS)[1] >= 1 << 31:
            raise UnsupportedGemmError("stream_k: its workspace would exceed 2^31 elements (a problem this large "
                                       "has tiles enough for every SM)")
    max_n, min_n = fam.max_tile_n(cfg), fam.min_tile_n
    if cfg.tile_n % fam.tile_n_step or not (min_n <= cfg.tile_n <= max_n):
        raise UnsupportedGemmError(
            f"tile_n {cfg.tile_n}: must be a multiple of {fam.tile_n_step} in {min_n}..{max_n}")
    fam.check(cfg, problem)
    if epilogue is not None and getattr(epilogue, "gated", None):
        if not fam.gated:
            raise UnsupportedGemmError(f"gated: the gated epilogue is not implemented for {cfg.arch}")
        if problem.b_major != "k":
            raise UnsupportedGemmError("gated: the weights must be K-major ((N, K) row-major, as nn.Linear has them)")
        if cfg.tile_n % (2 * EPI_TILE_N) or cfg.tile_n > 256:
            raise UnsupportedGemmError(
                f"gated: tile_n {cfg.tile_n} must be a multiple of {2 * EPI_TILE_N} up to 256 (gate and up halves "
                "of whole epilogue sub-tiles, one MMA along N)")
    stages = cfg.stages or max_stages(cfg, problem, epilogue)
    need = stages * smem_bytes_per_stage(cfg, problem) + epilogue_smem_bytes(cfg, problem, epilogue)
    need += SMEM_RESERVED
    if stages < 2 or need > fam.smem_capacity:
        raise UnsupportedGemmError(
            f"shared memory: {stages} stages of {cfg.tile_m}x{cfg.tile_n}x{tile_k} need {need} bytes,"
            f" over the {fam.smem_capacity} available (or fewer than 2 stages fit)"
        )


def output_halves(epilogue) -> int:
    """2 for the gated epilogue, whose output is half its problem's N wide (in tiles half the
    config's), else 1."""
    return 2 if epilogue is not None and getattr(epilogue, "gated", None) else 1


def is_valid(cfg: GemmConfig, problem: GemmProblem) -> bool:
    return fits(cfg, problem, None)


def valid_configs(problem: GemmProblem, space: Optional[Iterable[GemmConfig]] = None) -> list[GemmConfig]:
    return [c for c in (space or family(problem.arch).space()) if is_valid(c, problem)]


def kernel_view(problem: GemmProblem, config: Optional[GemmConfig], epilogue) -> tuple:
    """(problem, epilogue) as the kernel compiles them: a swap-AB config given the caller's problem
    (row-major output) compiles for the swapped one (GemmProblem.swapped, EpilogueSpec.swapped)."""
    if config is not None and config.swap_ab and problem.c_major == "n":
        return problem.swapped(), None if epilogue is None else epilogue.swapped()
    return problem, epilogue


def fits(cfg: GemmConfig, problem: GemmProblem, epilogue) -> bool:
    """check_config passes (with the ``epilogue`` EpilogueSpec's shared memory), on the problem as
    the kernel would run it (:func:`kernel_view`; an epilogue with no swapped form, e.g. a gated
    one with its column bias, does not fit a swap-AB config)."""
    try:
        problem, epilogue = kernel_view(problem, cfg, epilogue)
        check_config(cfg, problem, epilogue)
    except UnsupportedGemmError:
        return False
    return True
