"""Clusters over tile grids they do not divide, on a Hopper GPU: a cluster of two along M over an odd
number of tile rows (or along N over an odd number of columns) launches CTAs wholly past the
output's edge, which load the last tile's operands (kernels.scheduler.loaded_tile) and store
nothing. Numerics against float64 on NaN-poisoned outputs followed by a NaN guard that must stay
untouched, the same bits as the same tile without a cluster, with edge-aligned tiles, split-K,
stream-K (numerics only: its shares follow the persistent clusters), every operand major, fused
epilogues (bias, TMA-loaded residual), FP8 scales and the gated epilogue. A padding CTA that stored
at its clamped coordinates would write the last tile's own bits again, which no check here can
tell; the GPU sees its stores only through TMA, which clips them. Skipped, with the reason, without
an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.configs.resources import launch_tiles  # noqa: E402
from cutedsl_backend.problem import GemmProblem  # noqa: E402
from cutedsl_backend.validation.tolerances import compare  # noqa: E402

from .operands import (  # noqa: E402
    check_config_over_shapes,
    check_fused_epilogue,
    check_gated_over_shapes,
    check_scaled_mm,
    each_layout,
)
from .operands import layout_operands as operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
PADDED = [GemmConfig(128, 128, cluster_m=2), GemmConfig(128, 128, cluster_m=2, edge=True),
          GemmConfig(128, 256, cluster_n=2), GemmConfig(128, 128, cluster_m=2, cluster_n=2),
          GemmConfig(64, 192, schedule="pingpong", cluster_m=2),
          GemmConfig(128, 128, cluster_m=2, splits=2)]
# L, M, N, K: 3, 5 and 1 (shorter than one) tile rows of 128 (5, 10, 1 of 64); 5, 1 and 9 columns of 256
SHAPES = [(1, 300, 1200, 520), (2, 600, 200, 264), (1, 40, 2056, 1024)]
SEED = 5151


def launch_pads(cfg, shape) -> bool:
    """Whether a launch of ``cfg`` over (L, M, N, K) ``shape`` holds CTAs past the output's edge."""
    L, M, N, K = shape
    tiles = -(-M // cfg.tile_m) * -(-N // cfg.tile_n) * L
    return launch_tiles(GemmProblem(M, N, K, batch=L), cfg) > tiles


@pytest.mark.parametrize("cfg", PADDED, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_padded_clusters_are_right_and_store_nothing_past_the_output(cfg, dtype, layout):
    dt = getattr(torch, dtype)
    for i, (L, M, N, K) in enumerate(SHAPES):
        if layout[0] == "m" and M % 8:
            continue
        a, b, _ = operands(L, M, N, K, dt, *layout, seed=SEED + i)
        guard = 4096
        buf = torch.full((L * M * N + guard,), float("nan"), device="cuda", dtype=dt)
        out = buf[: L * M * N].view(L, M, N)
        cb.gemm(a, b, config=cfg, out=out)
        m = compare(out, a.double() @ b.double(), dtype, K)
        assert m["ok"], (cfg.name, (L, M, N, K), m)
        assert torch.isnan(buf[L * M * N:]).all(), "a store past the output"
        alone = cfg.replace(cluster_m=1, cluster_n=1)  # the same sums in the same order
        assert torch.equal(cb.gemm(a, b, config=alone), out), (cfg.name, (L, M, N, K))


@pytest.mark.parametrize("cfg", [GemmConfig(128, 128, cluster_m=2, stream_k=True),
                                 GemmConfig(128, 256, cluster_n=2, stream_k=True)], ids=lambda c: c.name)
def test_padded_clusters_stream_k(cfg):
    assert any(launch_pads(cfg, s) for s in SHAPES)
    check_config_over_shapes(cfg, "bfloat16", ("k", "k"), SHAPES, SEED + 13)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", [PADDED[0], PADDED[2]], ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
def test_padded_clusters_fused_epilogue(cfg, aligned):
    check_fused_epilogue(cfg, (2, 300, 1200, 264), SEED + 10, aligned, bias_kind="row")


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("cfg", [PADDED[0], PADDED[1], PADDED[4]], ids=lambda c: c.name)
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
def test_padded_clusters_fp8(cfg, kind):
    check_scaled_mm(cfg, kind, (320, 1032, 1024), SEED + 11)


@pytest.mark.epilogue("fused")
def test_padded_clusters_gated():
    check_gated_over_shapes([(300, 264, 512), (40, 136, 520)], "silu", "bfloat16", SEED + 12,
                            config=GemmConfig(128, 256, cluster_m=2))
