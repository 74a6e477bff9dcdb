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
    """Host-and-device description of the cluster-tile grid of one GEMM launch."""

    def __init__(self, tiles_m, tiles_n, batch, cluster_m: int, cluster_n: int, group: int, raster_m: bool):
        self.cluster_m = cluster_m
        self.cluster_n = cluster_n
        self.group = group
        self.raster_m = raster_m
        self.clusters_m = (tiles_m + cluster_m - 1) // cluster_m
        self.clusters_n = (tiles_n + cluster_n - 1) // cluster_n
        self.batch = batch

    def total(self):
        return self.clusters_m * self.clusters_n * self.batch


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
