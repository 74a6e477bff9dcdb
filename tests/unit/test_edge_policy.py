"""The edge-aligned last tiles policy (configs.edge): off, the dispatcher's picks are what they
were; on, a pick takes GemmConfig.edge exactly where the kernel's problem has a partial last tile
along M or N beyond its first tile (swap-AB: the tokens along N; gated: the output's half tile),
on sm90a only."""

import pytest

from cutedsl_backend.configs import GemmConfig, default_config
from cutedsl_backend.configs.edge import EDGE_TILES, EdgeTiles
from cutedsl_backend.configs.rules import check_config
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError


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
    assert EdgeTiles(enabled=False).apply(cfg, linear(m)) == cfg


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
    moved = default_config(problem)
    assert moved.edge and EDGE_TILES.enabled is True  # on by default
    monkeypatch.setattr(EDGE_TILES, "enabled", False)
    default_config.cache_clear()
    try:
        assert default_config(problem) == moved.replace(edge=False)
    finally:
        monkeypatch.setattr(EDGE_TILES, "enabled", True)
        default_config.cache_clear()
    assert default_config(problem) == moved


@pytest.mark.parametrize("n", [1001, 2050, 4100])
def test_no_edge_where_the_outputs_rows_are_not_whole_16_byte_units(n):
    """The moved tile's TMA store would start off a 16-byte unit (an H100 faulted there): the
    rules refuse such a config by name and the policy leaves the pick unmoved."""
    cfg = GemmConfig(128, 128, cluster_m=2)
    problem = linear(449, n=n)
    with pytest.raises(UnsupportedGemmError, match="edge: the output's contiguous extent"):
        check_config(cfg.replace(edge=True), problem)
    assert EdgeTiles().apply(cfg, problem) == cfg
    # float32 output: 4-element units (4100 is whole units of them)
    wide = GemmProblem(449, n, 4096, 1, "bfloat16", "float32", "k", "k", "sm90a")
    assert EdgeTiles().apply(cfg, wide).edge == (n % 4 == 0)
    assert EdgeTiles().apply(cfg, linear(449, n=1008)).edge


@pytest.mark.parametrize("a_major, b_major, m, n, moves", [
    ("m", "k", 449, 4096, False),   # an M-major A (a padded stride) whose M is not whole 16-byte units
    ("m", "k", 456, 4096, True),
    ("k", "n", 512, 1000, True),    # an N-major B: N = 1000 is whole units
    ("k", "n", 449, 4100, False),   # (4100 % 8: not; nor the output's rows)
])
def test_no_edge_where_a_moved_operand_starts_off_a_16_byte_unit(a_major, b_major, m, n, moves):
    """The last tile's loads move with it: an operand contiguous along the moved dimension is held
    to the output's rule."""
    cfg = GemmConfig(128, 128, cluster_m=2)
    problem = GemmProblem(m, n, 4096, 1, "bfloat16", "bfloat16", a_major, b_major, "sm90a")
    assert EdgeTiles().apply(cfg, problem).edge == moves
    if not moves:
        with pytest.raises(UnsupportedGemmError, match="edge: (A|B|the output)'s contiguous extent"):
            check_config(cfg.replace(edge=True), problem)


def test_inductor_offers_a_static_shape_its_candidates_moved_and_a_dynamic_one_the_dispatcher():
    """A static M is the one that runs: the autotuned candidates take the policy as the eager
    pick does (the first is the dispatcher's pick); a symbolic M's runtime dispatch applies it per
    call, so the offer's configs stay as ranked."""
    import sympy

    from cutedsl_backend.inductor.eligibility import Operand, Sizes, check_gemm

    a, w_t = Operand((449, 4096), (4096, 1), "bfloat16"), Operand((4096, 4096), (1, 4096), "bfloat16")
    offer = check_gemm(a, w_t, arch="sm90a", sizes=Sizes())
    assert offer.configs[0] == default_config(offer.problem) and offer.configs[0].edge
    assert all(c == EdgeTiles().apply(c.replace(edge=False), offer.problem) for c in offer.configs)
    m = sympy.Symbol("s0", positive=True, integer=True)

    class ShapeEnv:  # a symbolic token count hinted at 449, as a pass's fake tensors give it
        @staticmethod
        def size_hint(x, allow_none=False):
            return int(x.subs(m, 449))

    dyn = check_gemm(Operand((m, 4096), (4096, 1), "bfloat16"), w_t, arch="sm90a", sizes=Sizes(shape_env=ShapeEnv()))
    assert dyn.dynamic and not any(c.edge for c in dyn.configs)
