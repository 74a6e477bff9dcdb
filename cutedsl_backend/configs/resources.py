"""The resource model shared by every architecture: shared memory per pipeline stage, accumulator
registers, the launch's tile count and the split-K workspace, and the constants the kernels
size their buffers with. What differs per architecture (shared-memory capacity, epilogue groups
and sub-tile) is its family's (configs.family). Pure Python."""

from __future__ import annotations

import math

from ..problem import GemmProblem, dtype_bits
from .config import GemmConfig, natural_tile_k

# Bytes reserved in shared memory for pipeline barriers and alignment padding.
SMEM_RESERVED = 1024
# Output tiles staged in shared memory per epilogue warp group before their TMA store.
EPI_STAGES = 4
# Epilogue sub-tile width (columns of the CTA tile stored per step).
EPI_TILE_N = 32


def epilogue_tile_n(tile_n: int) -> int:
    """The epilogue sub-tile width of a ``tile_n`` wide tile: :data:`EPI_TILE_N`, or for the
    sm90a widths that are multiples of 16 only (144, 176, ...: tiles that cut a projection into
    whole waves) the widest of 48 and 16 dividing it (stmatrix stores 16 columns at a time)."""
    for width in (EPI_TILE_N, 48, 16):
        if tile_n % width == 0:
            return width
    raise ValueError(f"tile_n {tile_n}: not a multiple of 16")


# Residual sub-tiles in flight per epilogue warp group when TMA loads them (sm90a): the next
# ones load while the current one is applied. Four: the cooperative epilogue is not overlapped
# with a mainloop, so its loads need the slack; on the 128x256 cooperative and 128x128 ping-pong
# bf16 tiles four cost no more A/B stages than two.
RES_STAGES = 4
# Accumulator registers a thread may hold without spilling (fp32 accumulators): 160 for the
# cooperative 128x320 and ping-pong 128x160 tiles, which compile without local memory.
MAX_ACC_REGS_PER_THREAD = 160
# precise fp8 holds the accumulator three times (the running fp32 sum and two k-tile partials
# that alternate, one in the tensor cores while the other is added) where that fits, else twice
# (one partial: each k-tile's add waits for its WGMMAs; see promoted_acc_copies)
PROMOTED_ACC_COPIES = 3
MAX_ACC_REGS_PER_THREAD_PROMOTED = 192


def ctas_per_mma(cfg: GemmConfig) -> int:
    """sm100a cta_group::2 spreads one MMA tile over a CTA pair."""
    return 2 if cfg.two_cta else 1


def smem_bytes_per_stage(cfg: GemmConfig, problem: GemmProblem) -> int:
    """Per CTA: its share of the A and B tiles (a 2-CTA MMA's pair holds half of each; the gated
    epilogue's gate and up halves together are the B tile)."""
    tile_k = cfg.tile_k or natural_tile_k(problem.dtype)
    return (cfg.tile_m + cfg.tile_n) // ctas_per_mma(cfg) * tile_k * dtype_bits(problem.dtype) // 8


# the widest WGMMA (and TMA box) is 256: the one wider tile (sm90a cooperative, SM90_MAX_TILE_N)
# issues two instructions of half the width
MAX_MMA_N = 256
SM90_MAX_TILE_N = 320


def mma_atom_n(cfg: GemmConfig) -> int:
    """The N of one sm90 WGMMA instruction for ``cfg``'s tile (tile_n, or half of it past 256)."""
    return cfg.tile_n if cfg.tile_n <= MAX_MMA_N else cfg.tile_n // 2


def acc_regs_per_thread(cfg: GemmConfig) -> int:
    """fp32 accumulator registers per math thread on sm90 (sm100 keeps them in TMEM)."""
    threads = 128 * (2 if cfg.schedule == "cooperative" else 1)
    return cfg.tile_m * cfg.tile_n // threads


# Tensor memory: 512 fp32 columns per SM; the accumulator is double-buffered (tile_n columns each).
TMEM_COLUMNS = 512
SM100_ACC_STAGES = 2


def promoted_acc_copies(cfg: GemmConfig) -> int:
    """Precise fp8's fp32 accumulator copies per thread for ``cfg`` (sm90a): 3 (the sum and two
    alternating k-tile partials, so the tensor cores never wait for an add) where they fit in
    MAX_ACC_REGS_PER_THREAD_PROMOTED, else 2 (one partial: each k-tile's add waits for its WGMMAs,
    the other warp group's WGMMAs fill that gap), else 0 (the tile does not fit)."""
    regs = acc_regs_per_thread(cfg)
    return next((c for c in (PROMOTED_ACC_COPIES, 2) if c * regs <= MAX_ACC_REGS_PER_THREAD_PROMOTED), 0)


def _tiles(problem: GemmProblem, cfg: GemmConfig) -> int:
    return math.ceil(problem.m / cfg.tile_m) * math.ceil(problem.n / cfg.tile_n) * problem.batch


def launch_tiles(problem: GemmProblem, cfg: GemmConfig) -> int:
    """CTA tiles a launch of ``cfg`` covers: the tile grid rounded up to whole clusters along M
    and N (the kernels' TileGrid; a cluster's CTAs past the edge store nothing, load the last
    tile's operands (kernels.scheduler.loaded_tile) and hold an SM). A 2-CTA MMA tile (sm100a) is
    two CTA tiles of half its rows."""
    cta_m = cfg.tile_m // ctas_per_mma(cfg)
    rows = math.ceil(math.ceil(problem.m / cta_m) / cfg.cluster_m) * cfg.cluster_m
    cols = math.ceil(math.ceil(problem.n / cfg.tile_n) / cfg.cluster_n) * cfg.cluster_n
    return rows * cols * problem.batch


# the most persistent clusters the rules size a stream-K workspace for (a GPU of 1024 SMs; the
# H100 and H200 hold 132 one-CTA clusters): the workspace grows with the clusters sharing a tile
STREAM_K_MAX_CLUSTERS = 1024


def split_k_workspace(problem: GemmProblem, cfg: GemmConfig, clusters: int = 0) -> tuple[int, int]:
    """(int32 counters, fp32 elements) of the split-K workspace of ``cfg`` on ``problem``: one
    arrival counter per CTA tile (zero before a launch; the kernel leaves them zero) and one fp32
    partial tile per K slice of every CTA tile (stream-K: per piece, :func:`stream_k_shares`, of
    a launch of at most ``clusters`` persistent clusters; 0: as many as k-tiles, the most pieces
    any GPU could cut a tile into). (0, 0) without either. On sm100a the epilogue's 128 threads
    read the accumulator's 128 tensor-memory lanes, so a CTA tile's partial is sized for 128 rows
    whatever its own."""
    if cfg.splits == 1 and not cfg.stream_k:
        return (0, 0)
    tiles = launch_tiles(problem, cfg)
    rows = cfg.tile_m // ctas_per_mma(cfg) if cfg.arch == "sm90a" else max(128, cfg.tile_m // ctas_per_mma(cfg))
    slots = stream_k_shares(problem, cfg, clusters)[2] if cfg.stream_k else cfg.splits
    return (tiles, tiles * slots * rows * cfg.tile_n)


def stream_k_shares(problem: GemmProblem, cfg: GemmConfig, clusters: int = 0) -> tuple[int, int, int]:
    """Stream-K's division of a launch (GemmConfig.stream_k; the kernels compute the same):
    (k-tiles of all cluster tiles, T; clusters launched, P = min(T, ``clusters``), or T for 0;
    the most pieces a tile's K range is cut into). With q = T // P and r = T % P, the first r
    clusters take q + 1 consecutive k-tiles of the launch (tile after tile), the others q; a
    tile's k-tiles meet at most (k_tiles - 2) // q + 2 shares."""
    k_tiles = math.ceil(problem.k / (cfg.tile_k or natural_tile_k(problem.dtype)))
    total = launch_tiles(problem, cfg) // (cfg.cluster_m * cfg.cluster_n) * k_tiles
    launched = min(total, clusters) if clusters else total
    return total, launched, max(k_tiles - 2, 0) // max(1, total // max(1, launched)) + 2


def k_slices(k_tiles: int, splits: int) -> list[tuple[int, int]]:
    """The [begin, end) k-tile range of each K slice: as even as integers allow (the kernels
    compute slice s as [s * k_tiles // splits, (s + 1) * k_tiles // splits))."""
    return [(s * k_tiles // splits, (s + 1) * k_tiles // splits) for s in range(splits)]
