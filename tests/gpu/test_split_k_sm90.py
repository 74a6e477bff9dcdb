"""Split-K on a Hopper GPU: K cut into slices whose fp32 partials are summed in slice order by the
tile's last slice. Numerics against a float64 reference (output poisoned with NaN) over tails,
batches, both operand majors, uneven slices, fused epilogues (bias, activation, TMA-loaded and
gathered residual, alpha/beta) and FP8 scales; bitwise determinism (the same inputs give the same
bits, whichever CTA finishes a tile last); the workspace's counters left at zero (launch after
launch, shape after shape, on two streams). Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.epilogue import reference  # noqa: E402
from cutedsl_backend.validation.bench import graph_of  # noqa: E402
from cutedsl_backend.validation.tolerances import compare, compare_fp8  # noqa: E402

from .operands import (  # noqa: E402
    check_bitwise_deterministic,
    check_config_over_shapes,
    check_fused_epilogue,
    check_scaled_mm,
    each_layout,
)
from .operands import layout_operands as operands  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
SPLIT = [GemmConfig(64, 32, schedule="pingpong", splits=4), GemmConfig(64, 128, schedule="pingpong", splits=3),
         GemmConfig(128, 64, schedule="cooperative", splits=5), GemmConfig(128, 128, cluster_m=2, splits=2),
         GemmConfig(64, 64, cluster_n=2, schedule="pingpong", splits=7)]
# L, M, N, K: tails in every dimension, K not a multiple of the slices' k-tiles, batches
SHAPES = [(1, 1, 200, 520), (1, 16, 4104, 4096), (3, 77, 328, 1000), (1, 192, 1000, 776), (2, 130, 264, 4104)]
SEED = 5150


@pytest.mark.parametrize("cfg", SPLIT, ids=lambda c: c.name)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@each_layout
def test_split_k(cfg, dtype, layout):
    check_config_over_shapes(cfg, dtype, layout, SHAPES, SEED)


@pytest.mark.parametrize("cfg", SPLIT[:3], ids=lambda c: c.name)
def test_split_k_fp32_out(cfg):
    a, b, _ = operands(1, 40, 520, 2048, torch.bfloat16, "k", "k", seed=SEED)
    out = torch.full((1, 40, 520), float("nan"), device="cuda", dtype=torch.float32)
    cb.gemm(a, b, config=cfg, out=out, out_dtype=torch.float32)
    m = compare(out, a.double() @ b.double(), "float32", 2048)
    assert m["ok"], m


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", SPLIT[:3], ids=lambda c: c.name)
@pytest.mark.parametrize("aligned", [True, False], ids=["tma", "gathered"])
@pytest.mark.parametrize("activation", ["gelu_tanh", "silu", "relu"])
def test_split_k_fused_epilogue(cfg, aligned, activation):
    check_fused_epilogue(cfg, (2, 24, 456, 1064), SEED, aligned, activation)


@pytest.mark.epilogue("fused")
def test_split_k_row_bias():
    M, N, K = 72, 304, 2000
    a, b, g = operands(1, M, N, K, torch.float16, "k", "k", seed=SEED)
    bias = torch.randn(M, 1, device="cuda", generator=g).to(torch.float16)
    out = torch.full((1, M, N), float("nan"), device="cuda", dtype=torch.float16)
    cb.gemm(a, b, bias=bias, config=SPLIT[1], out=out)
    m = compare(out, a.double() @ b.double() + bias.double(), "float16", K)
    assert m["ok"], m


@pytest.mark.epilogue("scales")
@pytest.mark.parametrize("kind", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "precise"])
@pytest.mark.parametrize("cfg", [GemmConfig(64, 32, schedule="pingpong", splits=4),
                                 GemmConfig(128, 128, schedule="cooperative", splits=3)], ids=lambda c: c.name)
def test_split_k_fp8(kind, fast, cfg):
    check_scaled_mm(cfg, kind, (16, 1032, 3072), SEED, fast)


def test_split_k_bitwise_deterministic():
    """Many launches (which CTA finishes a tile last varies from launch to launch): the same bits."""
    check_bitwise_deterministic(GemmConfig(64, 64, schedule="pingpong", splits=8), 16, 4096, 8192, SEED)


def test_split_k_counters_reset_across_shapes_and_streams():
    """The kernels leave the workspace's counters at zero: launches of other shapes and configs on
    the same workspace, and on a second stream with its own, stay right; so do graph replays."""
    cfgs = [GemmConfig(64, 32, schedule="pingpong", splits=4), GemmConfig(128, 64, schedule="cooperative", splits=5)]
    problems = [operands(1, M, N, K, torch.bfloat16, "k", "k", seed=SEED + M) for M, N, K in
                ((8, 2048, 4096), (100, 520, 3000), (33, 4096, 1024))]
    side = torch.cuda.Stream()
    for rep in range(3):
        for cfg in cfgs:
            for a, b, _ in problems:
                for stream in (torch.cuda.current_stream(), side):
                    with torch.cuda.stream(stream):
                        out = cb.gemm(a[0], b[0], config=cfg)
                    torch.cuda.synchronize()
                    m = compare(out, a[0].double() @ b[0].double(), "bfloat16", a.shape[2])
                    assert m["ok"], (rep, cfg.name, tuple(a.shape), m)
    a, b, _ = problems[0]
    out = torch.full((2048, 2048), float("nan"), device="cuda", dtype=torch.bfloat16)[:8]
    graph = graph_of(lambda: cb.gemm(a[0], b[0], config=cfgs[0], out=out), calls=3)
    for _ in range(5):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert compare(out, a[0].double() @ b[0].double(), "bfloat16", 4096)["ok"]



def test_split_k_captured_before_any_eager_launch():
    """A capture whose stream has no workspace large enough gets buffers of its own inside the
    capture (its counters zeroed by a node of the graph): replays stay right, and an eager launch
    afterwards (which must not use the capture's buffers) too."""
    a, b, _ = operands(1, 24, 6144, 8192, torch.bfloat16, "k", "k", seed=SEED + 7)
    cfg = GemmConfig(64, 64, schedule="pingpong", splits=6)
    ref = a[0].double() @ b[0].double()
    side = torch.cuda.Stream()
    from cutedsl_backend.configs import split_k_workspace
    from cutedsl_backend.plan import PLANS
    from cutedsl_backend.problem import GemmProblem

    need = split_k_workspace(GemmProblem(24, 6144, 8192, 1, "bfloat16", "bfloat16", "k", "n", "sm90a"), cfg)
    assert PLANS.workspaces.capacity(a.device, side.cuda_stream)[0] < need[1], "the stream's buffers already fit"
    out = torch.full((24, 6144), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        cb.gemm(a[0], b[0], config=cfg, out=out)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert compare(out, ref, "bfloat16", 8192)["ok"]
    with torch.cuda.stream(side):
        eager = cb.gemm(a[0], b[0], config=cfg)
    torch.cuda.synchronize()
    assert torch.equal(eager, out)


def test_split_k_workspace_growth_keeps_only_what_a_graph_captured():
    """A stream's workspace grows to the next power of two: the pair it replaces is released
    unless a CUDA graph captured it (the graph keeps its pointers)."""
    import weakref

    from cutedsl_backend.workspace import SplitKWorkspaces

    dev, side, ws = torch.device("cuda"), torch.cuda.Stream(), SplitKWorkspaces()
    first = ws.get(dev, side.cuda_stream, 64, 1 << 16)
    gone = weakref.ref(first[0])
    del first
    second = ws.get(dev, side.cuda_stream, 64, 1 << 18)  # grows: nothing captured the first pair
    assert gone() is None and ws.capacity(dev, side.cuda_stream) == (1 << 18, 64)
    kept = weakref.ref(second[0])
    x = torch.zeros(8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph, stream=side):
        assert ws.get(dev, side.cuda_stream, 64, 1 << 17)[0] is second[0]  # large enough: the capture uses it
        x.add_(1)
    del second
    ws.get(dev, side.cuda_stream, 64, 1 << 20)
    assert kept() is not None, "a pair a graph captured stays alive"
    graph.replay()
    torch.cuda.synchronize()
    assert x.sum().item() == 8


def test_split_k_workspace_released_on_the_default_stream_waits_for_its_launches():
    """A pair released while launches queued on the default stream (handle 0) may still use it is
    not handed to another stream's allocation until they are done (the allocator waits on the
    launch stream, not on a stream that stands for handle 0)."""
    from cutedsl_backend.workspace import SplitKWorkspaces

    dev, ws = torch.device("cuda"), SplitKWorkspaces()
    stream = torch.cuda.default_stream().cuda_stream
    floats = 1 << 20
    with torch.cuda.stream(torch.cuda.default_stream()):
        first = ws.get(dev, stream, 64, floats)
        old = first[0].data_ptr()
        torch.cuda._sleep(400_000_000)  # the default stream busy for a few hundred ms
        first[0].add_(1.0)  # a queued launch that uses the pair
        del first
        ws.get(dev, stream, 64, floats * 4)  # grows: the first pair is released
        held, ptrs = [], []
        for _ in range(40):  # every pooled stream (the helper allocated on one of them)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):
                held.append(torch.empty(floats, dtype=torch.float32, device=dev))
                ptrs.append(held[-1].data_ptr())
        busy = not torch.cuda.default_stream().query()
    torch.cuda.synchronize()
    assert busy, "the default stream finished before the check (sleep too short on this GPU)"
    assert old not in ptrs, "a released pair went to another stream while launches still used it"


def test_split_k_under_inductor_cudagraph_trees():
    """torch.compile's CUDA-graph trees (mode="reduce-overhead") check that nothing allocated in
    their pool during warm-up or recording stays alive untracked: the op's split-K workspace must
    not (a decode shape, whose default config splits K)."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.problem import GemmProblem

    M, N, K = 16, 4096, 8192
    assert default_config(GemmProblem(M, N, K, 1, "bfloat16", "bfloat16", "k", "n", "sm90a")).splits > 1
    a, b, _ = operands(1, M, N, K, torch.bfloat16, "k", "n", seed=SEED + 8)
    f = torch.compile(lambda x, w: torch.ops.cutedsl.gemm(x, w) * 2, mode="reduce-overhead")
    ref = 2 * (a[0].double() @ b[0].double())
    for _ in range(4):  # warm-up, recording, replays
        got = f(a[0], b[0])
        assert compare(got, ref, "bfloat16", K)["ok"]
    torch._dynamo.reset()


# loads of fewer rows of A than the tile (a_rows >= M): the rows never loaded hold stale shared
# memory, which must reach no stored output
A_ROWS = [GemmConfig(64, 128, schedule="pingpong", splits=4, a_rows=16), GemmConfig(64, 256, cluster_n=2,
          schedule="pingpong", a_rows=8), GemmConfig(128, 64, schedule="cooperative", splits=2, a_rows=32),
          GemmConfig(64, 64, schedule="pingpong", a_rows=48),
          # under one 8-row swizzle atom (configs.as_run.ShortALoads fits the few-token picks' loads to M)
          GemmConfig(64, 64, schedule="pingpong", splits=2, a_rows=1),
          GemmConfig(64, 96, schedule="pingpong", a_rows=2),
          GemmConfig(64, 128, schedule="pingpong", splits=3, a_rows=4)]


@pytest.mark.parametrize("cfg", A_ROWS, ids=lambda c: c.name)
@pytest.mark.parametrize("b_major", "nk")
def test_a_rows(cfg, b_major):
    for i, (L, M, N, K) in enumerate([(1, 1, 200, 520), (1, 8, 4104, 4096), (3, 5, 328, 1000), (2, 8, 264, 4104),
                                      (1, 2, 4104, 2056), (2, 3, 264, 1032), (1, 4, 1000, 4096)]):
        if M > cfg.a_rows:
            continue
        # first something else through the same kernel, so the rows not loaded hold stale values
        big, bw, _ = operands(1, cfg.a_rows, N, K, torch.bfloat16, "k", b_major, seed=SEED - i)
        cb.gemm(big * 1000, bw, config=cfg)
        a, b, _ = operands(L, M, N, K, torch.bfloat16, "k", b_major, seed=SEED + i)
        out = torch.full((L, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        cb.gemm(a, b, config=cfg, out=out)
        m = compare(out, a.double() @ b.double(), "bfloat16", K)
        assert m["ok"], (L, M, N, K, m)


def _fused_silu_is_right(m, n, k, cfg, seed):
    """bias + SiLU + residual through ``cfg`` on fresh bf16 operands, checked against float64;
    returns the operands' generator (for what the caller draws next)."""
    a, b, g = operands(1, m, n, k, torch.bfloat16, "k", "k", seed=seed)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    res = torch.randn(1, m, n, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((1, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a, b, bias=bias, residual=res, activation="silu", config=cfg, out=out)
    ref = reference(a.double() @ b.double(), bias=bias.double(), residual=res.double(), activation="silu")
    assert compare(out, ref, "bfloat16", k, activation="silu")["ok"]
    return g


def _fp8_rowwise_operands(m, n, k, g):
    """FP8 a (m, k) and b (k, n, a transposed view) and rowwise / columnwise fp32 scales."""
    f8 = torch.float8_e4m3fn
    a8 = (torch.randn(m, k, device="cuda", generator=g) * 2).to(f8)
    b8 = (torch.randn(n, k, device="cuda", generator=g) * 2).to(f8).t()
    sa = torch.rand(m, 1, device="cuda", generator=g) / 16 + 0.01
    sb = torch.rand(1, n, device="cuda", generator=g) / 16 + 0.01
    return a8, b8, sa, sb


@pytest.mark.epilogue("fused")
def test_a_rows_fused_and_fp8():
    cfg = A_ROWS[0]
    M, N, K = 16, 456, 1064
    g = _fused_silu_is_right(M, N, K, cfg, SEED)
    a8, b8, sa, sb = _fp8_rowwise_operands(M, N, 2048, g)
    for fast in (True, False):
        out8 = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        cb.scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast, config=cfg, out=out8)
        ref8 = (a8.double() @ b8.double()) * sa.double() * sb.double()
        assert compare_fp8(out8, ref8, "bfloat16", 2048, fast_accum=fast)["ok"], fast


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("m", [1, 2, 3, 4, 7])
def test_fitted_a_loads_fused_and_fp8(m):
    """The few-token picks at 1-8 tokens loading the power of two of rows at or above M
    (configs.as_run.ShortALoads): right with fused epilogues and FP8 tensorwise / rowwise scales."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.as_run import ShortALoads
    from cutedsl_backend.configs.config import fitted_a_rows
    from cutedsl_backend.problem import GemmProblem

    N, K = 1032, 4104
    fit = ShortALoads(enabled=True)
    problem = GemmProblem(m, N, K, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    cfg = fit.apply(default_config(problem), problem)
    assert cfg.a_rows == fitted_a_rows(m)
    g = _fused_silu_is_right(m, N, K, cfg, SEED + m)
    K8 = 4096  # FP8 rows are whole 16-byte units only where K is a multiple of 16
    a8, b8, *rowwise = _fp8_rowwise_operands(m, N, K8, g)
    scales = [rowwise, (torch.tensor(0.03, device="cuda"), torch.tensor(0.05, device="cuda"))]
    for sa, sb in scales:
        problem8 = GemmProblem(m, N, K8, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a")
        cfg8 = fit.apply(default_config(problem8), problem8)
        assert cfg8.a_rows == fitted_a_rows(m)
        out8 = torch.full((m, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        cb.scaled_mm(a8, b8, sa, sb, out_dtype=torch.bfloat16, config=cfg8, out=out8)
        ref8 = (a8.double() @ b8.double()) * sa.double() * sb.double()
        assert compare_fp8(out8, ref8, "bfloat16", K8, fast_accum=False)["ok"], sa.shape


def test_a_rows_refused_past_m():
    a, b, _ = operands(1, 24, 256, 512, torch.bfloat16, "k", "k", seed=SEED)
    with pytest.raises(cb.UnsupportedGemmError, match="a_rows"):
        cb.gemm(a[0], b[0], config=GemmConfig(64, 64, schedule="pingpong", a_rows=16))
