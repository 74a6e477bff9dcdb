"""The heuristic that ranks every valid config where no fitted model or measured table picks: a
per-wave roofline score, the tie-break among configs it scores alike, and the widths off the
tuning space's 64-column grid it weighs against a pick that leaves waves idle. Pure Python."""

from __future__ import annotations

import math
from typing import Optional

from ..problem import GemmProblem, dtype_bits
from .config import GemmConfig, natural_tile_k
from .measured import stands_for, swept_operands
from .resources import ctas_per_mma, launch_tiles, promoted_acc_copies
from .rules import fits

# 128-row tile widths off the tuning space's 64-column grid (validation.sweep_spaces' waves sweep
# tries them; waves_choice weighs them): steps of 16 between 128, 192 and 256 (144 cuts 576 and
# 4608 columns into whole tiles, as cuBLAS's 144-wide tiles do), and 96 and 112 below 128: at
# 512-2048 tokens cuBLAS's FP8 kernels cut 1536- and 3584-wide weights into 16 and 32 whole tiles
# of 96 and 112 columns (1024 tokens: 256 tiles, 1.94 waves, against 128-wide tiles' 224, 1.70),
# where 128-wide tiles ran at 0.82-0.88x their speed
WAVE_WIDTHS = (96, 112, 144, 160, 176, 208, 224, 240)
# waves_choice takes a width only where the heuristic scores it this much faster than the pick.
# Replayed on the H100's waves sweeps (each width timed beside the picks of the time, 2026-12-07/08;
# the models' picks without tables): it changes 26 of their 144 rows; of the 12 where both picks
# were timed, 11 ran faster (geomean 1.013x -> 1.164x the peer; bf16 at 448 tokens 9 cells, FP8 at
# 2048 two, FP8 at 1024 one 0.847x -> 0.837x); 14 are not scored (one of the two not timed)
WAVES_MIN_GAIN = 0.05
# ... and from the fewest tokens those sweeps timed it at (448; below it the fitted MidModel picks)
WAVES_MIN_M = 448


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


def clusters_pad(cfg: GemmConfig, problem: GemmProblem) -> bool:
    """Whether ``cfg``'s clusters reach past the tile grid of ``problem`` (the swapped problem's for a
    swap config): the launch rounds the grid up to whole clusters, whose extra CTAs hold SMs."""
    if cfg.swap_ab:
        problem = problem.swapped()  # a swap config runs the swapped problem's tile grid
    # the grid without clusters: whole MMA tiles (a 2-CTA tile's CTAs share its rows)
    rows = math.ceil(problem.m / cfg.tile_m) * ctas_per_mma(cfg)
    return launch_tiles(problem, cfg) > rows * math.ceil(problem.n / cfg.tile_n) * problem.batch


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
    pads = clusters_pad(cfg, problem)
    paired = "n" if cfg.cluster_m > cfg.cluster_n else "m" if cfg.cluster_n > cfg.cluster_m else None
    return (pads, -cfg.cluster_m, paired is not None and cfg.raster != paired)


def waves_choice(problem: GemmProblem, pick: GemmConfig, num_sms: int = 132,
                 epilogue=None) -> Optional[GemmConfig]:
    """A 128-row cooperative tile of a :data:`WAVE_WIDTHS` width (no cluster, or 2 x 1 or 1 x 2 where
    it fits the tile grid) in place of ``pick``, a 128-row cooperative tile without K slices or
    swap, where the heuristic scores it at least :data:`WAVES_MIN_GAIN` faster (its waves fill the
    SMs better); else None. Only where the waves sweeps measured: sm90a, from :data:`WAVES_MIN_M`
    tokens, nn.Linear's layout and one batch, a bare GEMM of bf16/fp16 (same out) or of e4m3 -> bf16
    with every k-tile added in fp32 and scalar scales; precise FP8 takes no tile keeping two
    accumulators."""
    if (problem.arch != "sm90a" or problem.m < WAVES_MIN_M or pick.tile_m != 128 or pick.schedule != "cooperative"
            or pick.swap_ab or pick.splits > 1 or pick.stream_k):
        return None
    # the waves sweeps' domain (as the tables'), and bare GEMMs only: they timed no bias or activation
    if swept_operands(problem) is None or not stands_for(epilogue) or (
            epilogue is not None and (epilogue.bias or epilogue.activation)):
        return None
    tiles = [GemmConfig(128, w, cluster_m=cm, cluster_n=cn) for w in WAVE_WIDTHS for cm, cn in ((1, 1), (2, 1), (1, 2))]
    # no cluster past the grid: the H200's padded picks at 640 tokens (heuristic_score's note)
    tiles = [c for c in tiles if fits(c, problem, epilogue) and not clusters_pad(c, problem)
             and not (problem.promote_fp8 and promoted_acc_copies(c) == 2)]
    if not tiles:
        return None
    best = min(tiles, key=lambda c: (heuristic_score(c, problem, num_sms), cluster_tie_break(c, problem), c.name))
    faster = heuristic_score(best, problem, num_sms) <= (1 - WAVES_MIN_GAIN) * heuristic_score(pick, problem, num_sms)
    return best if faster else None
