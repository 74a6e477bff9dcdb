"""The cases that check and time launches reaching past the output's edge (no GPU): each GPU test
config meets CTAs wholly past it where it means to, and each of the probe's pairs is one launch
that covers more than the smaller shape's output and exactly the larger one's."""

import math

import pytest

from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.configs.resources import launch_tiles
from cutedsl_backend.problem import GemmProblem
from cutedsl_backend.validation.probes import PADDING_CASES

pytest.importorskip("torch")
from tests.gpu.test_cluster_padding_sm90 import PADDED, SHAPES, launch_pads  # noqa: E402


@pytest.mark.parametrize("cfg", PADDED, ids=lambda c: c.name)
def test_every_gpu_test_config_meets_a_padded_launch(cfg):
    assert any(launch_pads(cfg, s) for s in SHAPES)
    assert not launch_pads(cfg, (1, 4 * cfg.tile_m, 4 * cfg.tile_n, 64))


def _launched_area(cfg, m, n, k, dtype):
    """(launched tile area, output area) on the problem as the kernel runs it (swap-AB: swapped)."""
    problem = GemmProblem(m, n, k, dtype="float8_e4m3fn" if dtype.startswith("fp8") else dtype)
    if cfg.swap_ab:
        problem = problem.swapped()
    return launch_tiles(problem, cfg) * cfg.tile_m * cfg.tile_n, problem.m * problem.n


@pytest.mark.parametrize("case", PADDING_CASES, ids=lambda c: f"{c[1]}-{c[2][0]}x{c[2][1]}")
def test_probe_pairs_one_launch_past_the_edge_and_within_it(case):
    dtype, name, smaller, larger = case
    cfg = GemmConfig.from_name(name)
    (launched_s, area_s), (launched_l, area_l) = (_launched_area(cfg, *s, dtype) for s in (smaller, larger))
    assert launched_s == launched_l and area_s < launched_s and area_l == launched_l
    assert math.prod(smaller) < math.prod(larger)


def test_square_tiles_cluster_along_m_rastered_along_n_where_no_row_pads():
    """The heuristic scores a 128 x 128 tile's 2 x 1 and 1 x 2 clusters alike; the H100's sweeps
    measured 2 x 1 rastered along N the faster (heuristic.cluster_tie_break). FP8 at 2048 tokens
    (16 row tiles) takes it (1536 x 7168 takes a width that fills the waves instead:
    heuristic.waves_choice); at 896 (7 row tiles) a 2 x 1 cluster would pad M, so it does not."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.heuristic import cluster_tie_break
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.problem import make_problem

    scales = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    for n, k in ((3584, 14336), (1536, 7168), (10240, 8192)):
        cfg = default_config(make_problem(2048, n, k, dtype="float8_e4m3fn", b_major="k"), epilogue=scales)
        width = 96 if n == 1536 else 128
        assert (cfg.tile_m, cfg.tile_n, cfg.cluster_m, cfg.cluster_n, cfg.raster)[:2] == (128, width), cfg.name
        if width == 128:
            assert (cfg.cluster_m, cfg.cluster_n, cfg.raster) == (2, 1, "n"), cfg.name
        odd = default_config(make_problem(896, n, k, dtype="float8_e4m3fn", b_major="k"), epilogue=scales)
        assert math.ceil(896 / odd.tile_m) % odd.cluster_m == 0, odd.name
    square = [GemmConfig(128, 128, cluster_m=cm, cluster_n=cn, raster=r) for cm, cn in ((1, 2), (2, 1), (1, 1))
              for r in ("m", "n")]
    even, odd = (make_problem(m, 4096, 4096, dtype="float8_e4m3fn", b_major="k") for m in (2048, 896))

    def order(problem):
        ranked = sorted(square, key=lambda c: (cluster_tie_break(c, problem), c.name))
        return [(c.cluster_m, c.cluster_n, c.raster) for c in ranked]

    assert order(even) == [(2, 1, "n"), (2, 1, "m"), (1, 1, "m"), (1, 1, "n"), (1, 2, "m"), (1, 2, "n")]
    assert order(odd) == [(1, 1, "m"), (1, 1, "n"), (1, 2, "m"), (1, 2, "n"), (2, 1, "n"), (2, 1, "m")]


def test_the_tie_break_counts_padding_past_whole_mma_tiles_batches_and_swapped_grids():
    from cutedsl_backend.configs.heuristic import cluster_tie_break
    from cutedsl_backend.problem import make_problem

    # sm100a 2-CTA: a 256-row MMA tile is two CTAs of 128 rows; 1664 tokens = 6.5 such tiles, so 7
    # MMA tiles (14 CTA rows) whether or not the cluster is 2 x 1: no cluster padding
    p = make_problem(1664, 576, 1024, dtype="bfloat16", arch="sm100a", batch=2, b_major="k")
    two_cta = GemmConfig(256, 128, cluster_m=2, two_cta=True, arch="sm100a")
    assert cluster_tie_break(two_cta, p)[0] is False
    # N = 576 in 64-wide tiles is 9 columns: a 2 x 2 cluster pads one, in every batch
    assert cluster_tie_break(GemmConfig(256, 64, cluster_m=2, cluster_n=2, two_cta=True, arch="sm100a"), p)[0]
    # swap-AB: the weights are the rows; 576 = 9 rows of 64 pad a cluster of two along them
    swap = GemmConfig(64, 64, schedule="pingpong", cluster_m=2, swap_ab=True)
    q = make_problem(128, 576, 1024, dtype="bfloat16", b_major="k")
    assert cluster_tie_break(swap, q)[0] and not cluster_tie_break(swap.replace(cluster_m=1, cluster_n=2), q)[0]
