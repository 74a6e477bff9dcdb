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
