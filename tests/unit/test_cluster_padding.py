"""The cases that check and time clusters over tile grids they do not divide (no GPU): each leaves
CTAs past the output's edge where it means to, and the probe's pairs share one launch."""

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


@pytest.mark.parametrize("case", PADDING_CASES, ids=lambda c: f"{c[1]}-{c[2][0]}x{c[2][1]}")
def test_probe_pairs_one_launch_with_and_without_padding(case):
    dtype, name, padded, full = case
    cfg = GemmConfig.from_name(name)
    problems = [GemmProblem(*s, dtype="float8_e4m3fn" if dtype.startswith("fp8") else dtype) for s in (padded, full)]
    assert launch_tiles(problems[0], cfg) == launch_tiles(problems[1], cfg)
    assert launch_pads(cfg, (1, *padded)) and not launch_pads(cfg, (1, *full))
