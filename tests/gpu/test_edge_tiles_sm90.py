"""Edge-aligned last tiles on a Hopper GPU (GemmConfig.edge: the last tile along M and N starts
where it ends at the output's edge, overlapping the tile before it, so no TMA load is out of
bounds): numerics against a float64 reference on NaN-poisoned outputs where the last tile is
partial by 1 row to nearly a whole tile, shorter than a tile, or whole; along M and N, with
batches, every operand major, clusters (the multicast operand's origin is shared), split-K,
swap-AB (the tokens along N), fused epilogues with a TMA-loaded and a gathered residual and per-row
values (bias, FP8 row scales: read at the moved origin), the gated epilogue; bitwise determinism
and the same bits as the unmoved tiles. Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402

from .operands import (  # noqa: E402
    check_config_over_shapes,
    check_fused_epilogue,
    check_gated_over_shapes,
    check_scaled_mm,
    each_layout,
)
from .operands import layout_operands as operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
EDGE = [GemmConfig(128, 128, cluster_m=2, edge=True), GemmConfig(128, 256, cluster_n=2, edge=True),
        GemmConfig(64, 128, schedule="pingpong", splits=2, edge=True),
        GemmConfig(64, 160, schedule="pingpong", swap_ab=True, edge=True),
        GemmConfig(128, 128, cluster_m=2, swap_ab=True, edge=True)]
# L, M, N, K: the last tile 1 row short, 1 row long, about half, shorter than a tile, whole
SHAPES = [(1, 255, 264, 520), (1, 449, 1000, 776), (2, 288, 4104, 1024), (1, 40, 200, 264), (3, 256, 512, 256),
          (1, 1000, 2056, 4096)]
SEED = 9191


@pytest.mark.parametrize("cfg", EDGE, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_edge_tiles(cfg, dtype, layout):
    check_config_over_shapes(cfg, dtype, layout, SHAPES, SEED, also_fresh=True)


@pytest.mark.parametrize("cfg", [c for c in EDGE if not c.swap_ab], ids=lambda c: c.name)
def test_edge_tiles_at_an_unaligned_output_width(cfg):
    """N not a multiple of 8: the moved last tile's TMA store would start off a 16-byte unit (on
    an H100 every such config faulted with an illegal instruction, poisoning the process), so
    the config is refused by name; the dispatcher's pick for the same call leaves its tiles
    unmoved and is right."""
    from cutedsl_backend.problem import UnsupportedGemmError

    a, b, _ = operands(1, 449, 1001, 776, torch.bfloat16, "k", "k", seed=SEED + 5)
    with pytest.raises(UnsupportedGemmError, match="edge: the output's contiguous extent"):
        cb.gemm(a[0], b[0], config=cfg)
    for unmoved in (cfg.replace(edge=False), None):  # None: the dispatcher's pick
        check_config_over_shapes(unmoved, "bfloat16", ("k", "k"), [(1, 449, 1001, 776), (2, 300, 2050, 264)],
                                 SEED + 5)


@pytest.mark.parametrize("cfg", EDGE, ids=lambda c: c.name)
def test_edge_tiles_give_the_bits_of_the_unmoved_tiles(cfg):
    """A row the moved tile computes again is the same sum in the same order: the outputs equal
    the unmoved config's, bit for bit, call after call."""
    a, b, _ = operands(1, 449, 1032, 1024, torch.bfloat16, "k", "k", seed=SEED + 1)
    moved = cb.gemm(a[0], b[0], config=cfg)
    assert torch.equal(moved, cb.gemm(a[0], b[0], config=cfg.replace(edge=False)))
    for _ in range(3):
        assert torch.equal(cb.gemm(a[0], b[0], config=cfg), moved)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", [EDGE[0], EDGE[2]], ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
@pytest.mark.parametrize("bias_kind", ["col", "row"])
def test_edge_tiles_fused_epilogue(cfg, aligned, bias_kind):
    check_fused_epilogue(cfg, (2, 200, 456, 264), SEED + 2, aligned, bias_kind=bias_kind)


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("cfg", [EDGE[0], EDGE[2], GemmConfig(128, 160, swap_ab=True, edge=True)],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
def test_edge_tiles_fp8(cfg, kind):
    check_scaled_mm(cfg, kind, (144, 1032, 1024), SEED + 3)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", [GemmConfig(128, 256, cluster_m=2, edge=True),
                                 GemmConfig(64, 128, schedule="pingpong", splits=2, edge=True)],
                         ids=lambda c: c.name)
def test_edge_tiles_gated(cfg):
    check_gated_over_shapes([(200, 264, 512), (449, 1000, 256), (40, 136, 520)], "silu", "bfloat16", SEED + 4,
                            config=cfg)
