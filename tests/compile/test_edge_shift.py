"""The edge-aligned last tile's shift (kernels.scheduler.edge_shift, GemmConfig.edge), run by the
DSL on the host: the tile origins a TMA view offset by it gives, for extents shorter than a tile,
whole tiles, a partial last tile, and a cluster's padding tile past the edge."""

import pytest

pytestmark = pytest.mark.compile


def test_only_a_partial_last_tile_moves_back_to_end_at_the_edge(capfd):
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32

    from cutedsl_backend.kernels.scheduler import edge_shift

    @cute.jit
    def origins(extent: Int32, tiles: Int32):
        coords = cute.make_identity_tensor((extent, 64, 1))
        for t in cutlass.range(tiles, unroll=1):
            shift = edge_shift(t, 128, extent)
            tiled = cute.local_tile(cute.domain_offset((shift, 0, 0), coords), (128, 64), (None, None, None))
            cute.printf("{} {} {}", extent, t, tiled[(0, 0, t, 0, 0)])

    for extent in (40, 256, 449):
        origins(Int32(extent), Int32(-(-extent // 128) + 1))  # and one padding tile past the edge
    lines = [line.split(" ", 2) for line in capfd.readouterr().out.splitlines() if line[:1].isdigit()]
    got = {(int(e), int(t)): int(o.strip("()").split(",")[0]) for e, t, o in lines}
    assert got == {(40, 0): 0, (40, 1): 128,                    # shorter than a tile: nothing to overlap
                   (256, 0): 0, (256, 1): 128, (256, 2): 256,   # whole tiles (and the padding tile)
                   (449, 0): 0, (449, 1): 128, (449, 2): 256,
                   (449, 3): 449 - 128,                         # the partial last tile ends at the edge
                   (449, 4): 512}, got
