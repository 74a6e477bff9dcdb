"""Tile widths in steps of 16 on sm90a (144, 176, 208, 240; 80 and 112 tokens swapped): their
epilogue sub-tile, the rules that take them and the ones that refuse them. Pure Python."""

import pytest

from cutedsl_backend.configs import GemmConfig, check_config, epilogue_smem_bytes, epilogue_tile
from cutedsl_backend.configs.resources import epilogue_tile_n
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError

K_MAJOR = GemmProblem(4096, 576, 7168, b_major="k")


@pytest.mark.parametrize("tile_n, sub", [(64, 32), (256, 32), (320, 32), (144, 48), (240, 48), (80, 16),
                                         (112, 16), (176, 16), (208, 16)])
def test_epilogue_sub_tile_divides_the_tile(tile_n, sub):
    assert epilogue_tile_n(tile_n) == sub and tile_n % sub == 0


def test_epilogue_sub_tile_refuses_widths_off_the_16_grid():
    with pytest.raises(ValueError, match="multiple of 16"):
        epilogue_tile_n(72)


@pytest.mark.parametrize("cfg, tile", [
    (GemmConfig(128, 144), (128, 48)),
    (GemmConfig(128, 208, cluster_m=2), (128, 16)),
    (GemmConfig(128, 144, schedule="pingpong"), (64, 48)),
    (GemmConfig(64, 80, schedule="pingpong"), (64, 16)),
    (GemmConfig(128, 256), (128, 32)),
])
def test_sm90_epilogue_tile(cfg, tile):
    assert epilogue_tile(cfg) == tile


@pytest.mark.parametrize("width", [144, 176, 208, 240])
@pytest.mark.parametrize("b_major", ["k", "n"])
def test_sm90_takes_the_16_step_widths(width, b_major):
    check_config(GemmConfig(128, width), GemmProblem(1024, 4608, 3584, b_major=b_major))


def test_sm90_takes_16_token_swap_tiles_with_deep_pipelines():
    # cuBLAS's few-token tile: 64 weight rows x 16 tokens, 16 stages (64 x 16 x 64 bf16: 10 KB each)
    problem = GemmProblem(16, 4608, 3584, b_major="k").swapped()
    check_config(GemmConfig(64, 16, schedule="pingpong", cluster_m=4, stages=16, swap_ab=True), problem)
    assert epilogue_tile(GemmConfig(64, 16, schedule="pingpong")) == (64, 16)


def test_the_16_step_widths_count_their_sub_tiles_in_shared_memory():
    # 4 staged sub-tiles of 128 x 48 bf16 against 128 x 32
    assert epilogue_smem_bytes(GemmConfig(128, 144), K_MAJOR) == 4 * 128 * 48 * 2
    assert epilogue_smem_bytes(GemmConfig(128, 128), K_MAJOR) == 4 * 128 * 32 * 2


@pytest.mark.parametrize("cfg, problem, rule", [
    (GemmConfig(128, 72), K_MAJOR, "multiple of 16"),
    (GemmConfig(64, 8, schedule="pingpong"), K_MAJOR, "in 16..256"),
    (GemmConfig(128, 144, arch="sm100a"), GemmProblem(4096, 576, 7168, b_major="k", arch="sm100a"), "multiple of 32"),
    # precise fp8 keeps two fp32 accumulators: 128 x 240 needs 240 registers per thread
    (GemmConfig(128, 240), GemmProblem(1024, 4608, 3584, dtype="float8_e4m3fn", b_major="k"), "precise fp8"),
])
def test_widths_refused_name_the_rule(cfg, problem, rule):
    with pytest.raises(UnsupportedGemmError, match=rule):
        check_config(cfg, problem)
