"""Stream-K on a Hopper GPU: the launch's k-tiles dealt out evenly over the persistent clusters, a
tile cut between shares summed from fp32 partials in share order. Numerics against a float64
reference (output poisoned with NaN) over tails, batches, both operand majors, tiles cut into one
to dozens of pieces, clusters, fused epilogues and FP8 scales (fast and precise accumulation);
bitwise determinism; the workspace's counters left at zero across shapes and configs. Skipped,
with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.validation.tolerances import compare  # noqa: E402

from .operands import (  # noqa: E402
    check_bitwise_deterministic,
    check_config_over_shapes,
    check_fused_epilogue,
    check_scaled_mm,
    each_layout,
)
from .operands import layout_operands as operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
STREAM_K = [GemmConfig(64, 96, schedule="pingpong", stream_k=True),
            GemmConfig(64, 64, schedule="pingpong", stream_k=True, a_rows=16),
            GemmConfig(128, 128, schedule="cooperative", stream_k=True),
            GemmConfig(128, 192, cluster_m=2, stream_k=True),
            GemmConfig(128, 64, schedule="pingpong", cluster_n=2, stream_k=True)]
# L, M, N, K: tails in every dimension; fewer tiles than SMs (a tile cut into dozens of pieces:
# 16 x 256 x 8192), about a wave, several waves, batches
SHAPES = [(1, 1, 200, 520), (1, 16, 256, 8192), (1, 16, 4608, 3584), (3, 77, 328, 1000), (1, 320, 4096, 4096),
          (2, 130, 264, 4104), (1, 700, 1496, 1032)]
SEED = 6260


def _a_rows_fit(cfg, shapes):
    """The shapes a config takes (a_rows: M at most the rows it loads)."""
    return [s for s in shapes if not cfg.a_rows or s[1] <= cfg.a_rows]


@pytest.mark.parametrize("cfg", STREAM_K, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_stream_k(cfg, dtype, layout):
    if cfg.a_rows and layout[0] != "k":
        pytest.skip("not run: a_rows configs take a K-major A only (the rules refuse the rest)")
    check_config_over_shapes(cfg, dtype, layout, _a_rows_fit(cfg, SHAPES), SEED)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", [STREAM_K[0], STREAM_K[2], STREAM_K[3]], ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_stream_k_fused_epilogue(cfg, aligned, activation):
    check_fused_epilogue(cfg, (2, 24, 456, 1064), SEED, aligned, activation)


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
@pytest.mark.parametrize("cfg", [STREAM_K[0], STREAM_K[3]], ids=lambda c: c.name)
@pytest.mark.parametrize("mnk", [(16, 1032, 3072), (320, 4096, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_stream_k_fp8(kind, fast, cfg, mnk):
    check_scaled_mm(cfg, kind, mnk, SEED, fast)


def test_stream_k_bitwise_deterministic():
    """Many launches (which CTA finishes a tile last varies): the same bits, and right."""
    check_bitwise_deterministic(STREAM_K[0], 16, 4608, 3584, SEED)


def test_stream_k_counters_reset_across_shapes_and_configs():
    """Stream-K launches leave the counters at zero for each other and for split-K launches on the
    same stream's workspace."""
    cfgs = [STREAM_K[0], GemmConfig(64, 32, schedule="pingpong", splits=4), STREAM_K[2]]
    problems = [operands(1, M, N, K, torch.bfloat16, "k", "k", seed=SEED + M) for M, N, K in
                ((8, 2048, 4096), (100, 520, 3000), (33, 4096, 1024))]
    for rep in range(3):
        for cfg in cfgs:
            for a, b, _ in problems:
                out = cb.gemm(a[0], b[0], config=cfg)
                m = compare(out, a[0].double() @ b[0].double(), "bfloat16", a.shape[2])
                assert m["ok"], (rep, cfg.name, tuple(a.shape), m)
