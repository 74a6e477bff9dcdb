"""The edge-aligned last tiles policy (configs.edge): off, the dispatcher's picks are what they
were; on, a pick takes GemmConfig.edge exactly where the kernel's problem has a partial last tile
along M or N beyond its first tile (swap-AB: the tokens along N; gated: the output's half tile),
on sm90a only."""

import pytest

from cutedsl_backend.configs import GemmConfig, default_config
from cutedsl_backend.configs.edge import EDGE_TILES, EdgeTiles
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem


def linear(m, n=4096, k=4096, arch="sm90a"):
    return GemmProblem(m, n, k, 1, "bfloat16", "bfloat16", "k", "k", arch)


@pytest.mark.parametrize("m, cfg, edge", [
    (448, GemmConfig(128, 128, cluster_m=2), True),   # 3.5 tiles along M
    (512, GemmConfig(128, 128, cluster_m=2), False),  # whole tiles
    (100, GemmConfig(128, 128), False),               # one tile, shorter than it: nothing to overlap
    (512, GemmConfig(128, 192), True),                # N = 4096 in 192-wide tiles: partial along N
    (288, GemmConfig(64, 160, schedule="pingpong", swap_ab=True), True),   # tokens along N: 1.8 tiles
    (320, GemmConfig(64, 160, schedule="pingpong", swap_ab=True), False),
    (16, GemmConfig(64, 64, schedule="pingpong", splits=2, a_rows=16), False),  # one tile each way
])
def test_a_pick_takes_edge_where_a_last_tile_is_partial(m, cfg, edge):
    policy = EdgeTiles(enabled=True)
    assert policy.apply(cfg, linear(m)) == (cfg.replace(edge=True) if edge else cfg)
    assert EdgeTiles().apply(cfg, linear(m)) == cfg


def test_the_gated_output_tile_is_half_the_config_tile_and_sm100a_is_left_alone():
    policy = EdgeTiles(enabled=True)
    gated = EpilogueSpec(gated="silu")
    # the problem's 2N columns, the output's N in half tiles: N = 14336 in tiles of 128 is whole,
    # of 96 (192 / 2) not; N = 4160 in tiles of 128 is not (2N = 8320 in them would be)
    assert not policy.apply(GemmConfig(128, 256), linear(512, n=2 * 14336), gated).edge
    assert policy.apply(GemmConfig(128, 192), linear(512, n=2 * 14336), gated).edge
    assert policy.apply(GemmConfig(128, 256), linear(512, n=2 * 4160), gated).edge
    assert not policy.apply(GemmConfig(128, 256), linear(128, n=2 * 100), gated).edge  # one tile each way
    cfg = GemmConfig(128, 128, arch="sm100a")
    assert policy.apply(cfg, linear(448, arch="sm100a")) == cfg


def test_the_dispatcher_applies_the_process_policy(monkeypatch):
    problem = linear(449)
    plain = default_config(problem)
    assert not plain.edge and EDGE_TILES.enabled is False
    monkeypatch.setattr(EDGE_TILES, "enabled", True)
    default_config.cache_clear()
    try:
        assert default_config(problem) == plain.replace(edge=True)
    finally:
        monkeypatch.setattr(EDGE_TILES, "enabled", False)
        default_config.cache_clear()
    assert default_config(problem) == plain
