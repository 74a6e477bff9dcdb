"""Edge-aligned last tiles (GemmConfig.edge) as a dispatch policy: whether the dispatcher's pick
runs with its last tile along M and N moved back to end at the output's edge. Pure Python.

TMA fills the rows a load reaches past the edge slowly: on the H100 the same kernel took 1.1-1.5x
longer at token counts whose last tile is partly out of bounds (288 tokens in 160-token swap-AB
tiles: 27.7 us, against 18.8 us at 320), and within 3% of the full-tile time at 255, 319 and 511
(one row short). The moved tile loads only rows inside. Against the unmoved tiles on the same
H100 (docs/results/h100/2026-12-06/edge-tiles), the cells whose pick moved gained 1.14x in bf16
(geomean of 14; 224 x 4096 x 4096: 21.1 -> 14.6 us, 448 x 28672 x 4096: 226 -> 168 us) and 1.04x
in fp8 (21 cells), every result right; ``sweep-shapes --no-edge-tiles`` is the other half of
that A/B. Only where the output's contiguous extent is whole 16-byte units (configs.rules).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GemmConfig
from .rules import fits, kernel_view, output_halves


@dataclass
class EdgeTiles:
    """``enabled``: the dispatcher's picks (configs.default_config: the eager calls and Inductor's
    per-call dispatch) on sm90a take ``edge`` where the output, as the kernel sees it (swapped for
    a swap-AB config), has a partial last tile along M or N and more than one tile there (a single
    tile has nothing before it to overlap), and the rules let the config take it. So do the
    candidates Inductor autotunes for a static shape (inductor.eligibility.check_gemm)."""

    enabled: bool = True

    def apply(self, cfg: GemmConfig, problem, epilogue=None) -> GemmConfig:
        if not self.enabled or cfg.edge or cfg.arch != "sm90a":
            return cfg
        kernel, _ = kernel_view(problem, cfg, None)
        halves = output_halves(epilogue)
        partial = any(extent > tile and extent % tile
                      for extent, tile in ((kernel.m, cfg.tile_m), (kernel.n // halves, cfg.tile_n // halves)))
        if not partial:
            return cfg
        moved = cfg.replace(edge=True)
        return moved if fits(moved, problem, epilogue) else cfg


# the process's policy (sweep-shapes --no-edge-tiles turns it off for an A/B run, before any pick:
# configs.default_config memoizes its picks)
EDGE_TILES = EdgeTiles()
