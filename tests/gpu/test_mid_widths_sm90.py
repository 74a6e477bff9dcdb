"""The mid-size sweep's own widths on a Hopper GPU: 128-row tiles 160 and 224 wide
(configs.MidModel.sweep_candidates), which a measured table may name, with clusters, in their
stream-K form and with the last tiles moved to the edge. Numerics against a float64 reference
(output poisoned with NaN) over tails, batches, both operand majors, fused epilogues and FP8
scales. Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.configs import GemmConfig  # noqa: E402

from .operands import check_config_over_shapes, check_fused_epilogue, check_scaled_mm, each_layout  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
WIDE = [GemmConfig(128, 160), GemmConfig(128, 224, cluster_m=2), GemmConfig(128, 160, cluster_n=2),
        GemmConfig(128, 224, stream_k=True), GemmConfig(128, 160, cluster_m=2, edge=True)]
# L, M, N, K: tails in every dimension (N not a multiple of either width), a tile count past a
# whole wave (1024 x 4608: 232 tiles of 160), batches
SHAPES = [(1, 1, 200, 520), (3, 77, 328, 1000), (1, 1024, 4608, 3584), (2, 130, 488, 4104), (1, 700, 1496, 1032)]
SEED = 7160


@pytest.mark.parametrize("cfg", WIDE, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_mid_widths(cfg, dtype, layout):
    check_config_over_shapes(cfg, dtype, layout, SHAPES, SEED)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", WIDE[:2], ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
def test_mid_widths_fused_epilogue(cfg, aligned):
    check_fused_epilogue(cfg, (2, 200, 456, 1064), SEED, aligned, "silu")


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("cfg, fast", [(GemmConfig(128, 160), False), (GemmConfig(128, 160), True),
                                       (GemmConfig(128, 224), True)], ids=["160-precise", "160-fast", "224-fast"])
def test_mid_widths_fp8(kind, cfg, fast):
    """Precise FP8 (two fp32 accumulators) takes the 160-wide tile only: the rules refuse 224."""
    check_scaled_mm(cfg, kind, (320, 4104, 4096), SEED, fast)
