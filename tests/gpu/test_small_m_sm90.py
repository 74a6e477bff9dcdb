"""The small-M tiles on a Hopper GPU: 32-column tiles (one epilogue sub-tile) and deep pipelines,
over tails, batches, both operand majors, fused epilogues (bias, activation, TMA-loaded and
gathered residual, alpha/beta) and FP8 scales, against a float64 reference; and bitwise
determinism (the same inputs give the same bits). Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402

from .operands import check_config_over_shapes, check_fused_epilogue, check_scaled_mm, each_layout  # noqa: E402
from .operands import layout_operands as operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
NARROW = [GemmConfig(64, 32, schedule="pingpong"), GemmConfig(128, 32, schedule="cooperative"),
          GemmConfig(64, 32, schedule="pingpong", stages=16), GemmConfig(64, 64, schedule="pingpong", stages=12),
          GemmConfig(64, 32, cluster_n=2, schedule="pingpong")]
SHAPES = [(1, 1, 200, 520), (1, 16, 4104, 4096), (3, 77, 328, 264), (1, 192, 1000, 776)]  # L, M, N, K
SEED = 4242


@pytest.mark.parametrize("cfg", NARROW, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_narrow_tiles(cfg, dtype, layout):
    check_config_over_shapes(cfg, dtype, layout, SHAPES, SEED)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", NARROW[:2], ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
def test_narrow_tiles_fused_epilogue(cfg, aligned):
    check_fused_epilogue(cfg, (2, 24, 456, 264), SEED, aligned)


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
def test_narrow_tiles_fp8(kind, fast):
    check_scaled_mm(GemmConfig(64, 32, schedule="pingpong"), kind, (16, 1032, 1024), SEED, fast)


def test_bitwise_deterministic():
    """The same inputs give the same bits, call after call, for the default pick at small M."""
    a, b, _ = operands(1, 16, 4096, 4096, torch.bfloat16, "k", "k", seed=SEED)
    first = cb.gemm(a[0], b[0])
    for _ in range(5):
        assert torch.equal(cb.gemm(a[0], b[0]), first)
