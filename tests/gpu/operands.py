"""Random GEMM operands of a given layout for the GPU tests (a seeded CUDA generator, returned for
the test's further draws)."""

import itertools

import pytest
import torch

# every pair of operand majors, A's and B's (row-major "k" / "n" or column-major), as test ids a?_b?
each_layout = pytest.mark.parametrize("layout", list(itertools.product("km", "nk")), ids=lambda x: f"a{x[0]}_b{x[1]}")


def layout_operands(L, M, N, K, dtype, a_major, b_major, seed):
    """a (L, M, K) and b (L, K, N) in ``dtype``, each row-major ("k" / "n") or column-major in
    its last two dims; and the generator, for more draws."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(L, M, K, device="cuda", generator=g) if a_major == "k" else \
        torch.randn(L, K, M, device="cuda", generator=g).transpose(1, 2)
    b = torch.randn(L, K, N, device="cuda", generator=g) if b_major == "n" else \
        torch.randn(L, N, K, device="cuda", generator=g).transpose(1, 2)
    return a.to(dtype), b.to(dtype), g


def check_config_over_shapes(cfg, dtype: str, layout, shapes, seed, also_fresh=False):
    """``gemm(a, b, config=cfg)`` on each (L, M, N, K) of ``shapes`` with operands of ``layout``
    (an M-major A only where M is a multiple of 8: the 16-byte rule), into a NaN-poisoned ``out``,
    against float64; with ``also_fresh`` a result the plan allocates must hold the same bits."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation.tolerances import compare

    dt = getattr(torch, dtype)
    for i, (L, M, N, K) in enumerate(shapes):
        if layout[0] == "m" and M % 8:
            continue
        a, b, _ = layout_operands(L, M, N, K, dt, *layout, seed=seed + i)
        out = torch.full((L, M, N), float("nan"), device="cuda", dtype=dt)
        cb.gemm(a, b, config=cfg, out=out)
        m = compare(out, a.double() @ b.double(), dtype, K)
        assert m["ok"], (L, M, N, K, m)
        if also_fresh:
            assert torch.equal(cb.gemm(a, b, config=cfg), out), (L, M, N, K)


def check_bitwise_deterministic(cfg, m: int, n: int, k: int, seed, repeats: int = 50):
    """``gemm(a, b, config=cfg)`` (bf16, both row-major (M, K) and (N, K)^T) ``repeats`` more
    times: the same bits every time (which CTA finishes a tile last varies from launch to launch),
    and right against float64."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation.tolerances import compare

    a, b, _ = layout_operands(1, m, n, k, torch.bfloat16, "k", "k", seed=seed)
    first = cb.gemm(a[0], b[0], config=cfg)
    for _ in range(repeats):
        assert torch.equal(cb.gemm(a[0], b[0], config=cfg), first)
    m_ = compare(first, a[0].double() @ b[0].double(), "bfloat16", k)
    assert m_["ok"], m_


def check_fused_epilogue(cfg, shape, seed, aligned: bool, activation: str = "gelu_tanh", bias_kind: str = "col"):
    """``gemm(a, b, bias=, residual=, activation=, alpha=0.5, beta=2.0, config=cfg)`` on (L, M, N,
    K) ``shape`` (bf16, A row-major, B row-major) into a NaN-poisoned ``out``, against float64:
    a bias per column (``bias_kind`` "col") or per row ("row"), a residual that is TMA-loadable
    (``aligned``) or gathered (rows at a 2-byte offset)."""
    import cutedsl_backend as cb
    from cutedsl_backend.epilogue import reference
    from cutedsl_backend.validation.tolerances import compare

    L, M, N, K = shape
    a, b, g = layout_operands(L, M, N, K, torch.bfloat16, "k", "n", seed=seed)
    bias = torch.randn(N if bias_kind == "col" else (M, 1), device="cuda", generator=g).to(torch.bfloat16)
    if aligned:
        res = torch.randn(L, M, N, device="cuda", generator=g).to(torch.bfloat16)
    else:
        res = torch.randn(L, M, N + 1, device="cuda", generator=g).to(torch.bfloat16)[:, :, 1:]
    out = torch.full((L, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a, b, bias=bias, residual=res, activation=activation, alpha=0.5, beta=2.0, config=cfg, out=out)
    ref = reference(a.double() @ b.double(), bias=bias.double(), residual=res.double(), alpha=0.5, beta=2.0,
                    activation=activation)
    m = compare(out, ref, "bfloat16", K, activation=activation)
    assert m["ok"], m


def check_scaled_mm(cfg, kind: str, shape, seed, fast: bool = False):
    """``scaled_mm`` of e4m3 operands (M, N, K ``shape``; B column-major, as torch._scaled_mm
    takes it) with ``kind`` scales ("tensorwise": scalars, "rowwise": per row of A and column of
    B) into a NaN-poisoned bf16 ``out``, ``fast`` accumulation or not, against float64."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation.tolerances import compare_fp8

    M, N, K = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(M, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
    if kind == "tensorwise":
        sa, sb = torch.rand((), device="cuda", generator=g) + 0.5, torch.rand((), device="cuda", generator=g) + 0.5
    else:
        sa = torch.rand(M, 1, device="cuda", generator=g) / 16 + 0.01
        sb = torch.rand(1, N, device="cuda", generator=g) / 16 + 0.01
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast, config=cfg, out=out)
    ref = (a.double() @ b.double()) * sa.double() * sb.double()
    m = compare_fp8(out, ref, "bfloat16", K, fast_accum=fast)
    assert m["ok"], m


def gated_operands(m, n, k, dtype, seed):
    """a (m, k) and nn.Linear-shaped gate and up weights (n, k), scaled so the product is O(1)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    w_gate = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(dtype)
    w_up = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(dtype)
    return a, w_gate, w_up


def gated_reference(a, w_gate, w_up, act, bias_gate=None, bias_up=None):
    """act(a @ w_gate^T + b_gate) * (a @ w_up^T + b_up) in float64 (epilogue.gated_reference)."""
    from cutedsl_backend.epilogue import gated_reference as reference

    return reference(a, w_gate, w_up, act, bias_gate, bias_up)


def check_gated_over_shapes(shapes, act: str, dtype: str, seed, **kwargs):
    """``gemm_gated(a, w_gate, w_up, activation=act, **kwargs)`` on each (M, N, K) of ``shapes``
    into a NaN-poisoned ``out`` (the call must return it), against float64."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation.tolerances import GATED_TERMS, compare

    dt = getattr(torch, dtype)
    for i, (m, n, k) in enumerate(shapes):
        a, wg, wu = gated_operands(m, n, k, dt, seed + i)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        assert cb.gemm_gated(a, wg, wu, activation=act, out=out, **kwargs) is out
        c = compare(out, gated_reference(a, wg, wu, act), dtype, k, activation=act, terms=GATED_TERMS)
        assert c["ok"], (kwargs, m, n, k, c)
