"""Persistent tile scheduling shared by the sm90 and sm100 kernels (device-side, CuTe DSL).

The launch grid is (cluster_m, cluster_n, P): P persistent clusters, each looping over cluster
tiles ``idx = blockIdx.z, blockIdx.z + P, ...``. A linear cluster-tile index is mapped to
(m, n, l) with grouped rasterization: inside a group of ``group`` cluster rows (raster "n") or
columns (raster "m"), consecutive indices walk the short side first, so clusters that run at the
same time share operand panels in L2. Partial groups at the edge are handled exactly (no tile is
dropped or visited twice when the tile count does not divide by the group).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32


class TileGrid:
    """Host-side description of the cluster-tile grid of one GEMM launch over ``out`` (M, N, L)
    with CTA tiles of ``cta_tile_m`` x ``cfg.tile_n`` and ``cfg``'s cluster and rasterization."""

    def __init__(self, out, cta_tile_m: int, cfg, tile_n: int = 0):
        """``tile_n``: the output tile's width where it is not cfg.tile_n (the gated epilogue's half)."""
        self.cluster_m = cfg.cluster_m
        self.cluster_n = cfg.cluster_n
        tiles_m = cute.ceil_div(out.shape[0], cta_tile_m)
        tiles_n = cute.ceil_div(out.shape[1], tile_n or cfg.tile_n)
        self.clusters_m = (tiles_m + cfg.cluster_m - 1) // cfg.cluster_m
        self.clusters_n = (tiles_n + cfg.cluster_n - 1) // cfg.cluster_n
        self.batch = out.shape[2]

    def total(self):
        return self.clusters_m * self.clusters_n * self.batch

    def launch_grid(self, max_clusters):
        """(cluster_m, cluster_n, P): P persistent clusters, no more than there are cluster tiles."""
        return (self.cluster_m, self.cluster_n, cutlass.min(self.total(), max_clusters))


@cute.jit
def cluster_tile_coord(idx: Int32, clusters_m: Int32, clusters_n: Int32, group: cutlass.Constexpr,
                       raster_m: cutlass.Constexpr):
    """Linear cluster-tile index -> (cluster_tile_m, cluster_tile_n, batch)."""
    per_batch = clusters_m * clusters_n
    l = idx // per_batch
    r = idx - l * per_batch
    # "major" is the grouped side, "minor" the side walked inside a group.
    major_count = clusters_n if cutlass.const_expr(raster_m) else clusters_m
    minor_count = clusters_m if cutlass.const_expr(raster_m) else clusters_n
    width = group * minor_count
    group_id = r // width
    first = group_id * group
    rows = cutlass.min(major_count - first, group)
    within = r - group_id * width
    major = first + within % rows
    minor = within // rows
    cm = minor if cutlass.const_expr(raster_m) else major
    cn = major if cutlass.const_expr(raster_m) else minor
    return cm, cn, l


@cute.jit
def edge_shift(tile: Int32, size: cutlass.Constexpr, extent: Int32):
    """How far (zero or negative) tile number ``tile`` of ``size`` elements moves its origin so
    that it ends inside ``extent`` (GemmConfig.edge): the last, partial tile then overlaps the one
    before it instead of reaching past the edge, where TMA would fill its loads out of bounds.
    Zero where the extent is shorter than a tile (nothing to overlap), where the tile ends inside,
    and for a cluster's padding tile wholly past the edge (its stores are clipped, as unmoved)."""
    shift = Int32(0)
    origin = tile * size
    if extent >= size and origin < extent:
        shift = cutlass.min(extent - size - origin, Int32(0))
    return shift


@cute.jit
def loaded_tile(tile: Int32, tiles: Int32):
    """The operand tile CTA tile number ``tile`` loads, of ``tiles`` along that mode: its own, or
    the last one for a cluster's CTA wholly past the grid's edge (a cluster of two along M over an
    odd number of tile rows launches one such CTA per cluster column). Its own would be a TMA box
    wholly out of bounds, which TMA fills with zeros far slower than it loads (on the H100, FP8
    4096 x 29568 weights, 128 x 128 tiles in 2 x 1 clusters: the same launch took 492 us at 896
    tokens, a padding CTA in every fourth cluster, against 383 us at 1024 tokens, none), and its
    cluster partner waits for its share of their multicast operand. The padding CTA's results are
    stored nowhere: its output box lies wholly outside the output, and TMA clips it."""
    return cutlass.min(tile, tiles - 1)

