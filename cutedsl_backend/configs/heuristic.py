"""The heuristic that ranks every valid config where no fitted model or measured table picks: a
per-wave roofline score, and the tie-break among configs it scores alike. Pure Python."""

from __future__ import annotations

import math

from ..problem import GemmProblem, dtype_bits
from .config import GemmConfig, natural_tile_k
from .resources import ctas_per_mma, launch_tiles


def heuristic_score(cfg: GemmConfig, problem: GemmProblem, num_sms: int = 132) -> float:
    """Estimated relative time (lower is better) of ``cfg`` on ``problem``.

    A roofline per wave: each wave of persistent tiles costs the larger of its math time and
    its operand traffic; partial last waves, tile padding and a cluster's tiles past the grid's
    edge (they hold an SM) are paid in full. Larger tiles read less operand data per flop,
    clusters cut L2->SM traffic by multicasting. Counting the clusters' padding: on the H200's
    mid-size sweep at 640 tokens (five 128-row tiles, so a cluster of two along M launches six),
    the picks with 2 x 1 clusters measured 0.52-0.82x cuBLAS on seven shapes where the same tile
    with a 1 x 2 cluster was the fastest candidate (0.97-1.08x; the picks now take it, rastered
    along M where the measured best ran along N: on the H100's sweep at 1024 tokens the two
    rasters of the picks' tiles measured within 0.2% in geomean).
    """
    # the tile slots the launch holds: its grid rounded up to whole clusters (as the models count it)
    tiles = launch_tiles(problem, cfg) // ctas_per_mma(cfg)
    waves = math.ceil(tiles / num_sms)
    tile_k = cfg.tile_k or natural_tile_k(problem.dtype)
    k_pad = math.ceil(problem.k / tile_k) * tile_k
    math_per_tile = cfg.tile_m * cfg.tile_n * k_pad
    mcast_a = cfg.cluster_n
    mcast_b = cfg.cluster_m
    bytes_per_tile = (cfg.tile_m / mcast_a + cfg.tile_n / mcast_b) * k_pad * dtype_bits(problem.dtype) / 8
    # ~ bf16 dense rate per SM vs L2 bandwidth per SM: one byte per ~ 128 MACs balances them.
    per_tile = max(math_per_tile, bytes_per_tile * 160)
    # pingpong hides the epilogue; cooperative pays it, more so when K is short.
    epi = cfg.tile_m * cfg.tile_n * (2 if cfg.schedule == "cooperative" else 0.5) * 16
    # small tiles waste issue slots on the tensor cores
    eff = 1.0 if cfg.tile_m * cfg.tile_n >= 128 * 128 else 1.12
    return waves * (per_tile * eff + epi)


def cluster_tie_break(cfg: GemmConfig, problem: GemmProblem) -> tuple:
    """Among configs the heuristic scores alike (a square tile's 2 x 1 and 1 x 2 clusters move the
    same bytes; the rasters, the same too): one whose clusters fit the tile grid (a cluster's CTAs
    past the edge load operands and hold SMs; the waves may still count the same), then the
    cluster along M (the B panel, nn.Linear's weights, multicast over two row tiles), and a cluster
    of two rastered across it (2 x 1 along N, 1 x 2 along M). On the H100's mid-size sweeps (every
    candidate timed on 29 projections per M, no cluster padding): the 128 x 128 tile ran faster in
    2 x 1 than in 1 x 2 (both rastered along N) by 8% / 7% (geomean) in FP8 at 512 / 1024 tokens
    and by 14% / 15% / 10% / 4% in bf16 at 512 / 768 / 1024 / 1536, the 128 x 192 tile by 3-13%;
    2 x 1 along N ran 3.6% faster than 1 x 2 along M (FP8, 1024 tokens, 128 x 128: median 1.6%,
    none more than 1.3% slower), which in turn ran 3-5% faster than 1 x 2 along N; 2 x 1 ran along
    N 0-1.6% faster than along M (bf16, 768-1536 tokens). Other ties (2 x 2 against 2 x 1, 1 x 1
    against 1 x 2) fall to the names' order."""
    if cfg.swap_ab:
        problem = problem.swapped()  # a swap config runs the swapped problem's tile grid
    # the grid without clusters: whole MMA tiles (a 2-CTA tile's CTAs share its rows)
    rows = math.ceil(problem.m / cfg.tile_m) * ctas_per_mma(cfg)
    pads = launch_tiles(problem, cfg) > rows * math.ceil(problem.n / cfg.tile_n) * problem.batch
    paired = "n" if cfg.cluster_m > cfg.cluster_n else "m" if cfg.cluster_n > cfg.cluster_m else None
    return (pads, -cfg.cluster_m, paired is not None and cfg.raster != paired)
