"""The eager API's memory rules and autograd on a Hopper GPU: each bad input ends in a correct
result (a logged copy) or an UnsupportedGemmError naming the rule, never a wrong result or a
foreign exception; gradients of every epilogue form against float64 (within 2x torch's own error).
Skipped, with the reason, on any machine without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.validation.tolerances import compare  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
SEED = 20261204


def randn(*shape, seed, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g).to(dtype)


def check(out, a, b, bias=None):
    ref = torch.matmul(a.double(), b.double())
    if bias is not None:
        ref = ref + bias.double()
    m = compare(out, ref, str(out.dtype).replace("torch.", ""), a.shape[-1])
    assert m["ok"], m


@pytest.mark.parametrize("which", ["a_rows_expanded", "b_cols_expanded", "a_batch_expanded", "a_overlapping_rows"])
def test_aliasing_inputs_are_computed_on_a_copy(which):
    M, N, K = 192, 256, 320
    a, b = randn(M, K, seed=SEED), randn(K, N, seed=SEED + 1)
    if which == "a_rows_expanded":
        a = randn(1, K, seed=SEED).expand(M, K)
    elif which == "b_cols_expanded":
        b = randn(K, 1, seed=SEED + 1).expand(K, N)
    elif which == "a_batch_expanded":
        a = randn(M, K, seed=SEED).expand(3, M, K)
        b = randn(3, K, N, seed=SEED + 1)
    else:  # rows 8 elements apart: consecutive rows share all but 8 elements
        a = randn(M * 8 + K, seed=SEED).as_strided((M, K), (8, 1))
    out = cb.gemm(a, b)
    torch.cuda.synchronize()
    check(out, a, b)


def test_out_aliasing_an_input_is_refused():
    M = N = K = 256
    a, b = randn(M, K, seed=SEED), randn(K, N, seed=SEED + 1)
    bias = randn(N, seed=SEED + 2)
    for out, what in ((a, "a"), (b, "b")):
        with pytest.raises(cb.UnsupportedGemmError, match=f"out: shares memory with {what}"):
            cb.gemm(a, b, out=out)
    big = randn(2 * M, N, seed=SEED + 3)
    with pytest.raises(cb.UnsupportedGemmError, match="out: shares memory with b"):
        cb.gemm(a, big[:K], out=big[K - 8:K - 8 + M])  # partial overlap with b's last rows
    with pytest.raises(cb.UnsupportedGemmError, match="out: shares memory with residual"):
        res = randn(M, N, seed=SEED + 4)
        cb.gemm(a, b, residual=res, out=res)
    with pytest.raises(cb.UnsupportedGemmError, match="out: shares memory with bias"):
        storage = randn(M * N + N, seed=SEED + 5)
        cb.gemm(a, b, bias=storage[M * N - 8:M * N - 8 + N], out=storage[:M * N].view(M, N))
    # the plan's fast path checks again on every call (same geometry, other memory)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    cb.gemm(a, b, bias=bias, out=out)
    with pytest.raises(cb.UnsupportedGemmError, match="out: shares memory with a"):
        cb.gemm(a, b, bias=bias, out=a)


def test_out_that_overlaps_itself_or_has_another_shape_is_refused():
    M = N = K = 128
    a, b = randn(M, K, seed=SEED), randn(K, N, seed=SEED + 1)
    expanded = torch.empty(1, N, device="cuda", dtype=torch.bfloat16).expand(M, N)
    with pytest.raises(cb.UnsupportedGemmError, match="out: its elements overlap"):
        cb.gemm(a, b, out=expanded)
    rows = torch.empty(M * 8 + N, device="cuda", dtype=torch.bfloat16).as_strided((M, N), (8, 1))
    with pytest.raises(cb.UnsupportedGemmError, match="out: its elements overlap"):
        cb.gemm(a, b, out=rows)
    with pytest.raises(cb.UnsupportedGemmError, match="out: shape must be"):
        cb.gemm(a, b, out=torch.empty(M, N // 2, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(cb.UnsupportedGemmError, match="out: shape must be"):
        cb.gemm(a, b, out=torch.empty(M * N, device="cuda", dtype=torch.bfloat16))


def test_misaligned_bias_is_refused_and_aligned_one_is_exact():
    M, N, K = 128, 256, 128
    a, b = randn(M, K, seed=SEED), randn(K, N, seed=SEED + 1)
    store = randn(N + 2, seed=SEED + 2)
    with pytest.raises(cb.UnsupportedGemmError, match="alignment: bias's data pointer must be 4-byte aligned"):
        cb.gemm(a, b, bias=store[1:N + 1])
    out = cb.gemm(a, b, bias=store[2:N + 2])
    torch.cuda.synchronize()
    check(out, a, b, store[2:N + 2])


def test_requires_grad_without_grad_mode_runs():
    a = randn(64, 128, seed=SEED).requires_grad_()
    b = randn(128, 64, seed=SEED + 1).requires_grad_()
    with torch.no_grad():
        out = cb.gemm(a, b)
    torch.cuda.synchronize()
    check(out, a.detach(), b.detach())


def test_scaled_mm_refuses_inputs_that_require_grad():
    a = randn(64, 128, seed=SEED).to(torch.float8_e4m3fn)
    b = randn(64, 128, seed=SEED + 1).to(torch.float8_e4m3fn).t()
    s = torch.ones((), device="cuda").requires_grad_()
    with pytest.raises(cb.UnsupportedGemmError, match="autograd: scaled_mm has no gradient"):
        cb.scaled_mm(a, b, s, torch.ones((), device="cuda"))


ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"]


def _formula(a, b, bias, res, activation, alpha, beta):
    from cutedsl_backend.epilogue import torch_activation

    z = alpha * (a @ b)
    if bias is not None:
        z = z + bias
    if res is not None:
        z = z + beta * res
    return torch_activation(activation)(z)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("form", ["bias", "batched_residual", "row_bias_3d"])
def test_gradients_within_twice_torch_error(activation, form):
    """bf16 gradients of gemm (eager and the custom op) against a float64 reference: the error is at
    most 2x (plus a small floor) torch's own bf16 autograd error."""
    M, N, K, L = 200, 264, 136, 3
    shapes = {"bias": ((M, K), (K, N), (N,), None),
              "batched_residual": ((L, M, K), (L, K, N), None, (L, M, N)),
              "row_bias_3d": ((L, M, K), (K, N), (M, 1), None)}[form]
    leaves = [None if s is None else randn(*s, seed=SEED + i) for i, s in enumerate(shapes)]
    grad = randn(*((L, M, N) if len(shapes[0]) == 3 else (M, N)), seed=SEED + 9)
    alpha, beta = 0.5, 1.25

    def grads(fn, dtype):
        xs = [None if t is None else t.detach().to(dtype).requires_grad_() for t in leaves]
        y = fn(*xs)
        present = [x for x in xs if x is not None]
        return torch.autograd.grad(y, present, grad.to(dtype))

    ref = grads(lambda *x: _formula(*x, activation, alpha, beta), torch.float64)
    theirs = grads(lambda *x: _formula(*x, activation, alpha, beta), torch.bfloat16)
    for ours_fn in (lambda a, b, bias, res: cb.gemm(a, b, bias=bias, residual=res, activation=activation,
                                                     alpha=alpha, beta=beta),
                    lambda a, b, bias, res: torch.ops.cutedsl.gemm(a, b, bias, res, activation, alpha, beta)):
        ours = grads(ours_fn, torch.bfloat16)
        for o, t, r in zip(ours, theirs, ref):
            assert o.shape == r.shape and o.dtype == torch.bfloat16
            assert torch.isfinite(o).all()
            err_ours = (o.double() - r).norm() / r.norm()
            err_torch = (t.double() - r).norm() / r.norm()
            assert err_ours <= 2 * err_torch + 2 ** -10, (float(err_ours), float(err_torch))


@pytest.mark.parametrize("n", [1, 7, 100])
@pytest.mark.parametrize("batched", [False, True])
def test_output_rows_tma_cannot_store_go_through_a_padded_buffer(n, batched):
    """N * 2 bytes not a multiple of 16 (a GEMV's N = 1, N = 7, 100): the kernel writes padded rows,
    copied into the result (fresh or ``out=``); found by the fuzzer (garbage before)."""
    M, K = 200, 96
    a = randn(*((3,) if batched else ()), M, K, seed=SEED)
    w = randn(n, K, seed=SEED + 1)  # nn.Linear's weight: b = w.t() is K-major
    bias = randn(n, seed=SEED + 2)
    out = cb.gemm(a, w.t(), bias=bias, activation="gelu_tanh")
    assert out.shape == (*a.shape[:-1], n) and out.is_contiguous()
    ref = torch.nn.functional.gelu(torch.matmul(a.double(), w.t().double()) + bias.double(), approximate="tanh")
    m = compare(out, ref, "bfloat16", K, activation="gelu_tanh")
    assert m["ok"], m
    given = torch.full((*a.shape[:-1], n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert cb.gemm(a, w.t(), bias=bias, activation="gelu_tanh", out=given) is given
    assert torch.equal(given, out)


@pytest.mark.parametrize("which", ["rows", "batch_2d", "batch_stride0"])
def test_residual_broadcast_over_rows_or_batches_is_computed_on_a_copy(which):
    """A residual repeated over rows (row stride 0) or batches (2-D under a batched GEMM, batch
    stride 0): computed on a packed copy; found by the fuzzer (wrong before)."""
    L, M, N, K = 2, 264, 128, 40
    a, b = randn(L, M, K, seed=SEED), randn(L, K, N, seed=SEED + 1)
    if which == "rows":
        res = randn(1, N, seed=SEED + 2).expand(M, N)
        a, b = a[0], b[0]
    elif which == "batch_2d":
        res = randn(M, N, seed=SEED + 2)
    else:
        res = randn(1, M, N, seed=SEED + 2).expand(L, M, N)
    out = cb.gemm(a, b, residual=res, beta=0.5, activation="relu", alpha=-1.0)
    ref = torch.relu(-torch.matmul(a.double(), b.double()) + 0.5 * res.double())
    m = compare(out, ref, "bfloat16", K, activation="relu")
    assert m["ok"], m


@pytest.mark.parametrize("case", ["one_row_unaligned_row_stride", "one_row_per_batch", "one_column_b",
                                  "contiguous_one_column_b"])
def test_unit_extent_strides_are_not_alignment_questions(case):
    """A dimension of extent 1 never uses its stride (the kernel's descriptor gets a canonical one),
    so the shared operand rules (problem.check_aligned) accept any stride there: the result must be
    right, on a NaN-poisoned output."""
    K, N = 1000, 264
    if case == "one_row_unaligned_row_stride":
        a = randn(3, 1003, seed=SEED + 20)[0:1, :K]  # row stride 1003 (not 16-byte aligned); aligned start
        b = randn(K, N, seed=SEED + 21)
    elif case == "one_row_per_batch":
        a = randn(4, 8, 1003, seed=SEED + 22)[:, 0:1, :K]  # (4, 1, K), row stride 1003; batches 16-byte aligned
        b = randn(4, K, N, seed=SEED + 23)
    elif case == "one_column_b":
        a = randn(40, K, seed=SEED + 24)
        b = randn(K, 5, seed=SEED + 25)[:, 2:3].expand(K, 1).t().contiguous().t()  # (K, 1), strides (1, K)
        N = 1
    else:
        a = randn(40, K, seed=SEED + 26)
        b = randn(K, 1, seed=SEED + 27)  # (K, 1) contiguous: strides (1, 1)
        N = 1
    out = torch.full((*a.shape[:-1], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cb.gemm(a, b, out=out)
    check(out, a, b)


@pytest.mark.parametrize("shape", [(7, 1), (1, 7, 1), (3, 5, 1)])
def test_one_column_residual(shape):
    """N = 1: a contiguous residual's rows are adjacent (row stride 1, a second unit stride beside
    the column's): the result must be right, on a NaN-poisoned output (a fuzzer finding: two rows
    came out NaN and garbage)."""
    K = 256
    a = randn(*shape[:-2], shape[-2], K, seed=SEED + 40)
    b = randn(K, 1, seed=SEED + 41)
    res = randn(*shape, seed=SEED + 42)
    out = torch.full(torch.broadcast_shapes(shape, (*shape[:-1], 1)), float("nan"), device="cuda",
                     dtype=torch.bfloat16)
    cb.gemm(a, b, residual=res, activation="silu", out=out)
    ref = torch.nn.functional.silu(torch.matmul(a.double(), b.double()) + res.double())
    m = compare(out, ref, "bfloat16", K, activation="silu")
    assert m["ok"], m

