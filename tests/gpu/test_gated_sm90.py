"""The gated epilogue on a Hopper GPU: ``act(a @ w_gate^T) * (a @ w_up^T)`` in one GEMM against a
float64 reference over tails in M, N and K, every gated activation, both dtypes, both weight forms
(two tensors, one concatenated gate-first tensor), folded leading dims, ``out=``, split-K, short A
loads and several tiles; bitwise determinism; and the inputs it refuses, by name. Skipped, with
the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.epilogue import GATED_ACTIVATIONS, torch_activation  # noqa: E402
from cutedsl_backend.validation.tolerances import GATED_TERMS, compare  # noqa: E402

from .operands import check_gated_over_shapes  # noqa: E402
from .operands import gated_operands as operands  # noqa: E402
from .operands import gated_reference as reference  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("fused")]
SEED = 5150
SHAPES = [(1, 64, 64), (7, 136, 520), (200, 264, 512), (1000, 1024, 256), (4096, 512, 4096)]  # M, N, K


@pytest.mark.parametrize("act", GATED_ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gated_numerics_over_tails(act, dtype):
    check_gated_over_shapes(SHAPES, act, dtype, SEED)


@pytest.mark.parametrize("cfg", [GemmConfig(128, 256, cluster_n=2), GemmConfig(128, 128, schedule="pingpong"),
                                 GemmConfig(64, 128, schedule="pingpong", splits=3),
                                 GemmConfig(64, 64, schedule="pingpong", a_rows=16),
                                 # loads of A under one 8-row swizzle atom (configs.as_run.ShortALoads)
                                 GemmConfig(64, 64, schedule="pingpong", a_rows=1),
                                 GemmConfig(64, 128, schedule="pingpong", splits=2, a_rows=4),
                                 # B multicast: each CTA of a cluster column loads its share of both halves
                                 GemmConfig(128, 256, cluster_m=2), GemmConfig(128, 256, cluster_m=2, cluster_n=2),
                                 GemmConfig(128, 128, cluster_m=2, schedule="pingpong")], ids=lambda c: c.name)
def test_gated_configs(cfg):
    shapes = [(min(16, cfg.a_rows), 264, 1032), (min(13, cfg.a_rows), 1024, 4096)] if cfg.a_rows else SHAPES[1:4]
    check_gated_over_shapes(shapes, "silu", "bfloat16", SEED + 10, config=cfg)


def test_concatenated_weight_and_leading_dims_give_the_same_bits():
    a, wg, wu = operands(200, 264, 520, torch.bfloat16, SEED + 20)
    two = cb.gemm_gated(a, wg, wu)
    one = cb.gemm_gated(a, w_gate_up=torch.cat([wg, wu]))
    assert torch.equal(two, one)
    batched = cb.gemm_gated(a.view(4, 50, 520), wg, wu)
    assert batched.shape == (4, 50, 264) and torch.equal(batched.view(200, 264), two)
    assert torch.equal(torch.ops.cutedsl.gemm_gated(a, wg, wu, "silu"), two)


def test_split_k_is_deterministic():
    a, wg, wu = operands(16, 1024, 4096, torch.bfloat16, SEED + 30)
    cfg = GemmConfig(64, 128, schedule="pingpong", splits=4)
    first = cb.gemm_gated(a, wg, wu, config=cfg)
    for _ in range(3):
        assert torch.equal(cb.gemm_gated(a, wg, wu, config=cfg), first)


def test_refused_inputs_name_the_rule():
    a, wg, wu = operands(64, 128, 64, torch.bfloat16, SEED + 40)
    with pytest.raises(cb.UnsupportedGemmError, match="N=100 must be a multiple of 8"):
        cb.gemm_gated(a, wg[:100], wu[:100])
    with pytest.raises(cb.UnsupportedGemmError, match="autograd: takes the two-weight form"):
        cb.gemm_gated(a.clone().requires_grad_(), w_gate_up=torch.cat([wg, wu]))
    with pytest.raises(cb.UnsupportedGemmError, match="K-contiguous"):
        cb.gemm_gated(a, wg.t().contiguous().t(), wu)
    with pytest.raises(cb.UnsupportedGemmError, match="activation"):
        cb.gemm_gated(a, wg, wu, activation="tanh")
    with pytest.raises(cb.UnsupportedGemmError, match="same shape"):
        cb.gemm_gated(a, wg, wu[:64])


@pytest.mark.parametrize("form", ["both", "gate_only", "concatenated", "fp32"])
def test_gated_biases(form):
    """act(a @ w_gate^T + b_gate) * (a @ w_up^T + b_up), the bias read as one 2N vector."""
    m, n, k = 200, 264, 520
    a, wg, wu = operands(m, n, k, torch.bfloat16, SEED + 50)
    g = torch.Generator(device="cuda").manual_seed(SEED + 51)
    bdt = torch.float32 if form == "fp32" else torch.bfloat16
    bg = torch.randn(n, device="cuda", generator=g).to(bdt)
    bu = torch.randn(n, device="cuda", generator=g).to(bdt)
    if form == "concatenated":
        out = cb.gemm_gated(a, w_gate_up=torch.cat([wg, wu]), bias_gate_up=torch.cat([bg, bu]))
    elif form == "gate_only":
        out = cb.gemm_gated(a, wg, wu, bias_gate=bg)
        bu = torch.zeros_like(bu)
    else:
        out = cb.gemm_gated(a, wg, wu, bias_gate=bg, bias_up=bu)
    ref = torch_activation("silu")(a.double() @ wg.double().t() + bg.double()) * (
        a.double() @ wu.double().t() + bu.double())
    c = compare(out, ref, "bfloat16", k, activation="silu", terms=GATED_TERMS)
    assert c["ok"], (form, c)


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_gated_gradients_within_twice_torchs_error(act, with_bias):
    """Gradients of gemm_gated (a, both weights, both biases) against float64, each within twice
    the error of torch's own bf16 autograd of the unfused formula (quack's rule)."""
    m, n, k = 136, 264, 520
    a, wg, wu = operands(m, n, k, torch.bfloat16, SEED + 60)
    g = torch.Generator(device="cuda").manual_seed(SEED + 61)
    bg = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if with_bias else None
    bu = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if with_bias else None
    grad = torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)
    act_fn = torch_activation(act)

    def grads(fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (a, wg, wu) + ((bg, bu) if with_bias else ())]
        out = fn(*leaves)
        out.backward(grad.to(dtype))
        return [t.grad.double() for t in leaves]

    def unfused(x, w1, w2, b1=None, b2=None):
        return act_fn(torch.nn.functional.linear(x, w1, b1)) * torch.nn.functional.linear(x, w2, b2)

    def ours(x, w1, w2, b1=None, b2=None):
        return cb.gemm_gated(x, w1, w2, activation=act, bias_gate=b1, bias_up=b2)

    ref = grads(unfused, torch.float64)
    theirs = grads(unfused, torch.bfloat16)
    mine = grads(ours, torch.bfloat16)
    for name, r, t, o in zip(("a", "w_gate", "w_up", "bias_gate", "bias_up"), ref, theirs, mine):
        e_t = float((t - r).norm() / r.norm())
        e_o = float((o - r).norm() / r.norm())
        assert e_o <= 2 * e_t + 1e-3, (name, e_o, e_t)


def test_the_custom_op_has_the_same_gradients():
    """torch.ops.cutedsl.gemm_gated's registered autograd (what traced training graphs run) gives
    the eager API's gradients."""
    a, wg, wu = operands(64, 136, 264, torch.bfloat16, SEED + 70)
    grad = torch.randn(64, 136, device="cuda").to(torch.bfloat16)
    out = []
    for fn in (lambda x, w1, w2: cb.gemm_gated(x, w1, w2), lambda x, w1, w2: torch.ops.cutedsl.gemm_gated(x, w1, w2)):
        leaves = [t.detach().clone().requires_grad_() for t in (a, wg, wu)]
        fn(*leaves).backward(grad)
        out.append([t.grad for t in leaves])
    for eager, op in zip(*out):
        assert torch.equal(eager, op)


def test_expanded_activations_are_computed_on_a_copy():
    """An activation row broadcast over M (a zero stride: TMA cannot describe it) is computed on a
    packed copy, and a later call of the same geometry with other data reads that call's data."""
    k, n = 264, 136
    _, wg, wu = operands(8, n, k, torch.bfloat16, SEED + 80)
    for seed in (SEED + 81, SEED + 82):
        row = torch.randn(1, k, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
        a = row.to(torch.bfloat16).expand(48, k)
        out = cb.gemm_gated(a, wg, wu)
        c = compare(out, reference(a, wg, wu, "silu"), "bfloat16", k, activation="silu", terms=GATED_TERMS)
        assert c["ok"], (seed, c)


def test_leading_dims_of_the_same_row_count_get_their_own_result_shape():
    """(2, 8, K), (4, 4, K) and (16, K): 16 rows each, each result shaped like its input (the plan
    is keyed on the input's shape, not only its folded rows)."""
    a, wg, wu = operands(16, 136, 264, torch.bfloat16, SEED + 90)
    flat = cb.gemm_gated(a, wg, wu)
    for shape in ((2, 8, 264), (4, 4, 264), (16, 264)):
        got = cb.gemm_gated(a.view(shape), wg, wu)
        assert got.shape == (*shape[:-1], 136) and torch.equal(got.reshape(16, 136), flat)


@pytest.mark.parametrize("scales", ["rowwise", "tensorwise"])
@pytest.mark.parametrize("form", ["two_weights", "concatenated"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast_accum", "precise"])
def test_gated_fp8(scales, form, fast):
    """FP8 operands with their scales: act(s_a s_gate (a @ w_gate^T) + b_gate) * (s_a s_up (a @
    w_up^T) + b_up) against the float64 product of the dequantized inputs (compare_fp8), with
    a column bias, over a tail M and a decode M."""
    from cutedsl_backend.validation.tolerances import compare_fp8

    f8 = torch.float8_e4m3fn
    g = torch.Generator(device="cuda").manual_seed(SEED + 31)
    for m, n, k in ((200, 264, 1024), (16, 512, 2048)):
        a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(f8)
        wg, wu = ((torch.randn(n, k, device="cuda", generator=g) * 2).to(f8) for _ in range(2))
        if scales == "rowwise":
            sa = torch.rand(m, 1, device="cuda", generator=g) / 16 + 0.01
            sg, su = (torch.rand(n, device="cuda", generator=g) / 16 + 0.01 for _ in range(2))
        else:
            sa, sg, su = (torch.rand((), device="cuda", generator=g) / 16 + 0.01 for _ in range(3))
        bias = torch.randn(2 * n, device="cuda", generator=g).to(torch.bfloat16)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        if form == "two_weights":
            cb.gemm_gated(a, wg, wu, activation="silu", scale_a=sa, scale_gate=sg, scale_up=su, bias_gate=bias[:n],
                          bias_up=bias[n:], use_fast_accum=fast, out=out)
        else:
            s_gu = torch.cat([sg.reshape(-1).expand(n), su.reshape(-1).expand(n)]).contiguous()
            cb.gemm_gated(a, w_gate_up=torch.cat([wg, wu]), activation="silu", scale_a=sa, scale_gate_up=s_gu,
                          bias_gate_up=bias, use_fast_accum=fast, out=out)
        da = a.double() * sa.double().reshape(-1, 1) if scales == "rowwise" else a.double() * sa.double()
        gate = da @ (wg.double() * sg.double().reshape(-1, 1)).t() + bias[:n].double()
        up = da @ (wu.double() * su.double().reshape(-1, 1)).t() + bias[n:].double()
        ref = torch_activation("silu")(gate) * up
        m_ = compare_fp8(out, ref, "bfloat16", k, activation="silu", fast_accum=fast, terms=GATED_TERMS)
        assert m_["ok"], (m, n, k, m_)


def test_gated_fp8_refusals_name_the_rule():
    f8 = torch.float8_e4m3fn
    a = torch.randn(64, 128, device="cuda").to(f8)
    w = torch.randn(64, 128, device="cuda").to(f8)
    one = torch.ones((), device="cuda")
    with pytest.raises(cb.UnsupportedGemmError, match="scales: FP8 operands take"):
        cb.gemm_gated(a, w, w)
    with pytest.raises(cb.UnsupportedGemmError, match="scale_gate: one element"):
        cb.gemm_gated(a, w, w, scale_a=one, scale_gate=torch.ones(3, device="cuda"), scale_up=one)
    with pytest.raises(cb.UnsupportedGemmError, match="scales: only FP8"):
        x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
        cb.gemm_gated(x, x, x, scale_a=one)
