"""Numerics of the sm90 kernels on a Hopper GPU against a float64 torch.matmul reference.

Fresh random inputs per case, output poisoned with NaN before each run, tails (M, N, K not
multiples of the tile), batches, both operand majors, strided views. Skipped, with the reason,
on any machine without an sm90 GPU.
"""

import itertools

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig, quick_configs  # noqa: E402
from cutedsl_backend.validation.seeds import stable_seed  # noqa: E402
from cutedsl_backend.validation.tolerances import compare  # noqa: E402

from .operands import layout_operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
LAYOUTS = list(itertools.product(("k", "m"), ("n", "k")))  # (a_major, b_major)


def make_operands(L, M, N, K, dtype, a_major, b_major, seed):
    return layout_operands(L, M, N, K, dtype, a_major, b_major, seed)[:2]


def run_and_check(a, b, out_dtype=None, config=None, squeeze=False):
    if squeeze:
        a, b = a[0], b[0]
    ref = torch.matmul(a.double(), b.double())
    od = out_dtype or a.dtype
    out = torch.full(ref.shape, float("nan"), dtype=od, device="cuda")
    res = cb.gemm(a, b, out_dtype=out_dtype, config=config, out=out)
    torch.cuda.synchronize()
    assert res.data_ptr() == out.data_ptr()
    m = compare(out, ref, str(od).replace("torch.", ""), a.shape[-1])
    assert m["ok"], m
    return m


# tails: M, N, K that are not multiples of any tile (but keep 16-byte aligned strides)
# the last one gives every config several tiles per persistent CTA (both pingpong groups busy)
TAIL_SHAPES = [(1, 200, 392, 520), (3, 328, 456, 264), (2, 1000, 2056, 776)]


@pytest.mark.parametrize("cfg", quick_configs("sm90a"), ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: f"a{x[0]}_b{x[1]}")
def test_quick_configs(cfg, dtype, layout):
    for i, (L, M, N, K) in enumerate(TAIL_SHAPES):
        a, b = make_operands(L, M, N, K, DTYPES[dtype], *layout, seed=stable_seed(cfg.name, dtype, layout, i))
        run_and_check(a, b, config=cfg, squeeze=(L == 1))


# 2x2 clusters multicast both operands; tile counts odd in M and N leave part of a cluster idle
@pytest.mark.parametrize("cfg", [GemmConfig(128, 256, cluster_m=2, cluster_n=2),
                                 GemmConfig(256, 128, cluster_m=2, cluster_n=2),
                                 GemmConfig(64, 128, cluster_m=2, cluster_n=2, schedule="pingpong")],
                         ids=lambda c: c.name)
def test_two_by_two_clusters(cfg):
    for i, (L, M, N, K) in enumerate([(1, 1100, 2056, 776), (1, 2, 4104, 520), (3, 328, 456, 264)]):
        a, b = make_operands(L, M, N, K, torch.bfloat16, "k", "n", seed=31 + i)
        run_and_check(a, b, config=cfg, squeeze=(L == 1))


# 4x1 and 4x2 clusters: four row tiles share B's panel, each CTA loading a quarter of it; tile rows
# (columns) not a multiple of four (two) leave padding CTAs that load the last tile
@pytest.mark.parametrize("cfg", [GemmConfig(128, 128, cluster_m=4),
                                 GemmConfig(64, 96, cluster_m=4, schedule="pingpong"),
                                 GemmConfig(64, 128, cluster_m=4, splits=3, schedule="pingpong"),
                                 GemmConfig(64, 96, cluster_m=4, cluster_n=2, schedule="pingpong"),
                                 GemmConfig(128, 64, cluster_m=4, cluster_n=2, edge=True)],
                         ids=lambda c: c.name)
def test_four_row_clusters(cfg):
    for i, (L, M, N, K) in enumerate([(1, 1100, 2056, 776), (1, 200, 4104, 520), (3, 328, 456, 264)]):
        for layout in (("k", "n"), ("k", "k")):
            a, b = make_operands(L, M, N, K, torch.bfloat16, *layout, seed=41 + i)
            run_and_check(a, b, config=cfg, squeeze=(L == 1))


# 128x320: two 160-wide WGMMAs per k-block, B K-major; tails, batches, both A majors, fp32 output
WIDE_TILES = [GemmConfig(128, 320, cluster_m=2), GemmConfig(128, 320, cluster_n=2)]


@pytest.mark.parametrize("cfg", WIDE_TILES, ids=lambda c: c.name)
@pytest.mark.parametrize("a_major", ["k", "m"])
def test_wide_tile(cfg, a_major):
    for i, (L, M, N, K) in enumerate(TAIL_SHAPES + [(1, 1112, 2056, 784)]):  # M-major A: M a multiple of 8
        a, b = make_operands(L, M, N, K, torch.bfloat16, a_major, "k", seed=41 + i)
        run_and_check(a, b, config=cfg, squeeze=(L == 1))
    a, b = make_operands(2, 136, 648, 392, torch.float16, a_major, "k", seed=40)
    run_and_check(a, b, out_dtype=torch.float32, config=cfg)


@pytest.mark.parametrize("cfg", [quick_configs("sm90a")[0], quick_configs("sm90a")[3]], ids=lambda c: c.name)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: f"a{x[0]}_b{x[1]}")
def test_fp32_output(cfg, layout):
    a, b = make_operands(2, 136, 264, 392, torch.bfloat16, *layout, seed=7)
    run_and_check(a, b, out_dtype=torch.float32, config=cfg)


@pytest.mark.parametrize("shape", [
    (1, 1, 4096, 4096), (1, 16, 8192, 1024), (1, 127, 256, 8), (1, 4096, 4096, 4096),
    (4, 512, 1024, 2048), (1, 129, 129 * 8, 65 * 8), (1, 3000, 2056, 1000), (1, 8, 8, 8),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_default_config_shapes(shape, dtype):
    L, M, N, K = shape
    a, b = make_operands(L, M, N, K, DTYPES[dtype], "k", "n", seed=M * 7 + N)
    run_and_check(a, b, squeeze=(L == 1))


def test_strided_views_and_broadcast():
    base_a = torch.randn(300, 1040, device="cuda").to(torch.bfloat16)
    base_b = torch.randn(1032, 776, device="cuda").to(torch.bfloat16)
    a = base_a[:, 8:1008]  # leading stride 1040 != K
    b = base_b[:1000, 8:760]
    run_and_check(a.unsqueeze(0), b.unsqueeze(0), squeeze=True)
    # (L, M, K) @ (K, N): folded into one GEMM; (M, K) @ (L, K, N): broadcast
    a3 = torch.randn(3, 100, 264, device="cuda").to(torch.float16)
    b2 = torch.randn(264, 136, device="cuda").to(torch.float16)
    out = cb.gemm(a3, b2)
    torch.testing.assert_close(out.double(), torch.matmul(a3.double(), b2.double()), rtol=4e-3, atol=4e-2)
    b3 = torch.randn(3, 264, 136, device="cuda").to(torch.float16)
    out = cb.gemm(a3[0], b3)
    torch.testing.assert_close(out.double(), torch.matmul(a3[0].double(), b3.double()), rtol=4e-3, atol=4e-2)


def test_empty_and_k0():
    a = torch.randn(0, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    assert cb.gemm(a, b).shape == (0, 128)
    a = torch.randn(32, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(0, 128, device="cuda", dtype=torch.bfloat16)
    out = cb.gemm(a, b)
    assert out.shape == (32, 128) and bool((out == 0).all())


def test_nan_inf_propagate():
    a, b = make_operands(1, 256, 256, 256, torch.bfloat16, "k", "n", seed=3)
    a[0, 5, 7] = float("nan")
    a[0, 9, 3] = float("inf")
    out = cb.gemm(a[0], b[0])
    ref = torch.matmul(a[0].double(), b[0].double())
    assert torch.equal(torch.isnan(out), torch.isnan(ref))
    assert torch.equal(torch.isinf(out), torch.isinf(ref))


def test_bad_inputs_on_gpu():
    a = torch.randn(64, 100, device="cuda", dtype=torch.bfloat16)  # K=100: row stride not 16B aligned
    b = torch.randn(100, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(cb.UnsupportedGemmError, match="alignment"):
        cb.gemm(a, b)
    with pytest.raises(cb.UnsupportedGemmError, match="device"):
        cb.gemm(a.cpu(), b.cpu())
    with pytest.raises(cb.UnsupportedGemmError, match="dtype"):
        cb.gemm(torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda"))
    with pytest.raises(cb.UnsupportedGemmError, match="shape"):
        cb.gemm(torch.randn(64, 64, device="cuda", dtype=torch.half),
                torch.randn(72, 64, device="cuda", dtype=torch.half))


def test_custom_op_traces_and_matches():
    from cutedsl_backend import ops

    a, b = make_operands(1, 256, 512, 320, torch.bfloat16, "k", "n", seed=11)
    f = torch.compile(lambda x, y: torch.ops.cutedsl.gemm(x, y) * 2, fullgraph=True)
    out = f(a[0], b[0])
    ref = torch.matmul(a[0].double(), b[0].double()) * 2
    m = compare(out, ref, "bfloat16", 320)
    assert m["ok"], m
    assert ops.gemm_op is not None


def _space():
    from cutedsl_backend.configs import valid_configs
    from cutedsl_backend.problem import GemmProblem

    p = GemmProblem(1000, 1048, 776, 1, "bfloat16", "bfloat16", "k", "n", "sm90a")
    return [c for c in valid_configs(p) if c.raster == "n"]


@pytest.mark.parametrize("cfg", _space(), ids=lambda c: c.name)
def test_every_config_in_the_space(cfg):
    """Every valid config agrees with the reference on a tail shape with many tiles per CTA."""
    a, b = make_operands(1, 1000, 2056, 776, torch.bfloat16, "k", "n", seed=5)
    run_and_check(a, b, config=cfg, squeeze=True)
