"""The fusion pass: which post-grad graphs become one fused op, with which epilogue; the fused
graph computes what the original did. Graphs are traced with Inductor's own decomposition table
(the post-grad form: gelu and silu decomposed, 16-bit upcasts) on CPU tensors (run for numerics)
and on fake CUDA tensors (the form the GPU sees)."""

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from cutedsl_backend.epilogue import ACTIVATION_NAMES  # noqa: E402
from cutedsl_backend.inductor import ops as iops  # noqa: E402
from cutedsl_backend.inductor.fusion import fuse_epilogues  # noqa: E402

from .conftest import CALLS, assert_close, compile_and_code, forced_ours, rand  # noqa: E402

ACT = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
       "silu": F.silu, "sigmoid": torch.sigmoid, "tanh": torch.tanh}


def post_grad(fn, *args):
    from torch._inductor.decomposition import select_decomp_table
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, decomposition_table=select_decomp_table(), tracing_mode="fake")(*args)


def fused_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and iops.kind_of(n.target) is not None]


def fuse(fn, *args, expect=1):
    gm = post_grad(fn, *args)
    n = fuse_epilogues(gm.graph)
    gm.recompile()
    assert n == expect, gm.graph
    return gm, fused_nodes(gm)


@pytest.mark.parametrize("activation", ACTIVATION_NAMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_activation(inductor, activation, dtype):
    x, w, b = rand(64, 32, dtype=dtype), rand(48, 32, dtype=dtype), rand(48, dtype=dtype)
    fn = (lambda x, w, b: ACT[activation](F.linear(x, w, b)))
    gm, (node,) = fuse(fn, x, w, b)
    assert iops.kind_of(node.target) == (False, True, False)
    assert node.kwargs == {"activation": activation}
    assert_close(gm(x, w, b), ACT[activation](x.double() @ w.double().t() + b.double()), 32, activation)


def test_3d_linear_gelu_then_residual_projection(inductor):
    """A transformer MLP: (B, S, D) -> Linear -> gelu_tanh -> Linear -> + x (residual)."""
    x, w1, b1, w2, b2 = rand(2, 16, 32), rand(64, 32), rand(64), rand(32, 64), rand(32)

    def mlp(x, w1, b1, w2, b2):
        return x + F.linear(F.gelu(F.linear(x, w1, b1), approximate="tanh"), w2, b2)

    gm, nodes = fuse(mlp, x, w1, b1, w2, b2, expect=2)
    kinds = sorted((iops.kind_of(n.target), n.kwargs.get("activation")) for n in nodes)
    assert kinds == [((False, True, False), "gelu_tanh"), ((False, True, True), None)], gm.graph
    # the graph stores h in bf16: the reference rounds it there too (else its rounding errors, summed
    # over the second GEMM's K, are held to a bound made for the output's own rounding)
    h = F.gelu(x.double() @ w1.double().t() + b1.double(), approximate="tanh").to(torch.bfloat16).double()
    assert_close(gm(x, w1, b1, w2, b2), x.double() + h @ w2.double().t() + b2.double(), 64, roundings=2)


def test_mm_fp32_residual_promotes(inductor):
    """bf16 GEMM + fp32 residual: torch promotes the sum to fp32, so the fused op writes fp32."""
    h, w, r = rand(64, 32), rand(48, 32), rand(64, 48, dtype=torch.float32)
    gm, (node,) = fuse(lambda h, w, r: r + h @ w.t(), h, w, r)
    assert iops.kind_of(node.target) == (False, False, True)
    assert node.kwargs == {"out_dtype": torch.float32}
    out = gm(h, w, r)
    assert out.dtype == torch.float32
    assert_close(out.to(torch.bfloat16), r.double() + h.double() @ w.double().t(), 32)


def test_activation_then_cast(inductor):
    x, w = rand(64, 32), rand(48, 32)
    gm, (node,) = fuse(lambda x, w: torch.relu(x @ w.t()).float(), x, w)
    assert node.kwargs == {"activation": "relu", "out_dtype": torch.float32}
    assert gm(x, w).dtype == torch.float32


def test_bf16_residual_with_fp32_output_is_refused(inductor, debug_log):
    """The kernels read a residual of the output dtype or fp32; the rule is named."""
    h, w, r = rand(64, 32), rand(48, 32), rand(64, 48)
    fuse(lambda h, w, r: (r + h @ w.t()).float(), h, w, r, expect=0)
    assert any("residual: dtype" in rec.getMessage() for rec in debug_log.records)


def test_scaled_residual_with_alpha(inductor):
    h, w, r = rand(64, 32), rand(48, 32), rand(64, 48)
    gm, (node,) = fuse(lambda h, w, r: torch.add(h @ w.t(), r, alpha=0.5), h, w, r)
    assert node.kwargs == {"beta": 0.5}
    assert_close(gm(h, w, r), h.double() @ w.double().t() + 0.5 * r.double(), 32)


def test_activation_after_residual_is_not_our_formula(inductor):
    """act(acc + bias) + r: the activation is fused, the residual add stays outside."""
    x, w, b, r = rand(64, 32), rand(48, 32), rand(48), rand(64, 48)
    gm, (node,) = fuse(lambda x, w, b, r: torch.relu(F.linear(x, w, b)) + r, x, w, b, r)
    assert iops.kind_of(node.target) == (False, True, False) and node.kwargs == {"activation": "relu"}
    assert any(n.target is torch.ops.aten.add.Tensor for n in gm.graph.nodes)


@pytest.mark.parametrize("case", ["second_user", "float32", "n_misaligned", "plain_linear"])
def test_not_fused(inductor, case):
    x, w, b = rand(64, 32), rand(48, 32), rand(48)
    if case == "second_user":  # the pre-activation is needed elsewhere (as for backward)
        fn = (lambda x, w, b: (lambda y: (torch.relu(y), y))(F.linear(x, w, b)))
    elif case == "float32":
        x, w, b = x.float(), w.float(), b.float()
        fn = (lambda x, w, b: torch.relu(F.linear(x, w, b)))
    elif case == "n_misaligned":
        w, b = rand(50, 32), rand(50)
        fn = (lambda x, w, b: torch.relu(F.linear(x, w, b)))
    else:  # nothing to fuse: the plain-GEMM candidates cover it
        fn = (lambda x, w, b: F.linear(x, w, b))
    fuse(fn, x, w, b, expect=0)


def test_scaled_mm_epilogue_on_fake_cuda(inductor):
    """The CUDA form: fp8 _scaled_mm with rowwise scales, then bias and gelu."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(64, 32, device="cuda", dtype=torch.float8_e4m3fn)
        b = torch.empty(48, 32, device="cuda", dtype=torch.float8_e4m3fn).t()
        sa = torch.empty(64, 1, device="cuda")
        sb = torch.empty(1, 48, device="cuda")
        bias = torch.empty(48, device="cuda", dtype=torch.bfloat16)

        def fn(a, b, sa, sb, bias):
            return F.gelu(torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16) + bias)

        gm, (node,) = fuse(fn, a, b, sa, sb, bias)
    assert iops.kind_of(node.target) == (True, True, False)
    assert node.kwargs == {"activation": "gelu", "out_dtype": torch.bfloat16}


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_cuda_form_of_decomposed_activations(inductor, activation):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 16, 64, device="cuda", dtype=torch.bfloat16)
        w = torch.empty(128, 64, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(128, device="cuda", dtype=torch.bfloat16)
        gm, (node,) = fuse(lambda x, w, b: ACT[activation](F.linear(x, w, b)), x, w, b)
    assert node.kwargs == {"activation": activation}


def test_compiled_fused_epilogue_autotunes_against_unfused(inductor, feedback):
    x, w, b = rand(256, 128), rand(192, 128), rand(192)
    fn = (lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"))
    out, code = compile_and_code(fn, x, w, b)
    (round_,) = [r for r in feedback.rounds if r[0].startswith("cutedsl_fused_")]
    descs = [d for _, d in round_[1]]
    assert "unfused GEMM + pointwise ops" in descs and any(d.startswith("cutedsl sm90a_") for d in descs)
    assert_close(out, F.gelu(x.double() @ w.double().t() + b.double(), approximate="tanh"), 128, "gelu_tanh",
                 roundings=2)


def test_compiled_mlp_block_forced_fused(inductor):
    x, w1, b1, w2, b2 = rand(2, 64, 128), rand(256, 128), rand(256), rand(128, 256), rand(128)

    def mlp(x, w1, b1, w2, b2):
        return x + F.linear(F.silu(F.linear(x, w1, b1)), w2, b2)

    with forced_ours():
        out, code = compile_and_code(mlp, x, w1, b1, w2, b2)
    assert "extern_kernels.cutedsl_gemm_ab_bias_" in code and "activation='silu'" in code, code
    assert "extern_kernels.cutedsl_gemm_ab_bias_res_" in code, code
    assert ("gemm_ab_bias", CALLS[-2][1], "silu") in CALLS
    h = F.silu(x.double() @ w1.double().t() + b1.double()).to(torch.bfloat16).double()
    assert_close(out, x.double() + h @ w2.double().t() + b2.double(), 256, roundings=2)


def test_pass_starts_the_compiles_the_lowering_benchmarks(inductor, monkeypatch):
    """The fusion pass submits the fused kernel's configs to the compile workers as soon as the
    chain is found; the lowering later binds exactly those (same cache keys, no second compile)."""
    from cutedsl_backend import compiler

    submitted = []
    monkeypatch.setattr(compiler, "precompile_async",
                        lambda problem, cfg, spec=None: submitted.append(compiler.resolve(problem, cfg, spec).digest))
    x, w, b = rand(256, 128), rand(192, 128), rand(192)
    compile_and_code(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), x, w, b)
    n = inductor.state.STATE.top_k
    assert len(submitted) >= 2 * n and submitted[:n] == submitted[n:2 * n], submitted


def test_training_graphs_stay_correct(inductor):
    """Post-grad passes see the forward and backward graphs after partitioning: a pre-activation
    saved for backward has a second user, so that chain is left alone; gradients stay right."""
    x = rand(64, 32).requires_grad_()
    w, b = rand(48, 32).requires_grad_(), rand(48).requires_grad_()
    fn = (lambda x, w, b: F.gelu(F.linear(x, w, b)).float().sum())
    with forced_ours():
        loss = torch.compile(fn, mode="max-autotune-no-cudagraphs")(x, w, b)
        loss.backward()
    grads = [t.grad.clone() for t in (x, w, b)]
    xr, wr, br = (t.detach().float().requires_grad_() for t in (x, w, b))
    F.gelu(F.linear(xr, wr, br)).sum().backward()
    for g, ref in zip(grads, (xr.grad, wr.grad, br.grad)):
        torch.testing.assert_close(g.float(), ref, atol=0.1, rtol=0.05)


@pytest.mark.parametrize("user, expected", [
    ("ATEN,TRITON", "ATEN"),  # ATen only
    ("TRITON", None),  # a setting without ATen is left alone
    ("ATEN", None),
])
def test_unfused_gemm_backends(user, expected):
    """The backends an inlined chain's GEMM is autotuned with (None: Inductor's setting stands)."""
    import torch._inductor.config as config

    from cutedsl_backend.inductor import choices

    with config.patch(max_autotune_gemm_backends=user):
        assert choices.unfused_gemm_backends() == expected
        assert choices.unfused_gemm_backends(4096) == expected


def test_unfused_gemm_backends_keep_inductors_below_prefill_and_when_dynamic():
    """Few tokens (Triton's templates win there) or a symbolic token count: Inductor's setting."""
    import sympy
    import torch._inductor.config as config

    from cutedsl_backend.inductor import choices

    with config.patch(max_autotune_gemm_backends="ATEN,TRITON"):
        assert choices.unfused_gemm_backends(choices.ATEN_ONLY_MIN_M) == "ATEN"
        assert choices.unfused_gemm_backends(sympy.Integer(2048)) == "ATEN"
        assert choices.unfused_gemm_backends(16) is None
        assert choices.unfused_gemm_backends(sympy.Symbol("s0", positive=True, integer=True)) is None
        assert choices.unfused_gemm_backends(2 * sympy.Symbol("s1", positive=True, integer=True)) is None


def test_left_unfused_gemm_gets_aten_templates_only(monkeypatch):
    """A GEMM the fusion pass left unfused (its chain lost before) is offered ATen's templates
    alone; any other GEMM all of them."""
    import torch._inductor.config as config
    from torch._inductor.kernel.mm import aten_mm
    from torch._inductor.virtualized import V

    from cutedsl_backend.inductor import choices
    from cutedsl_backend.inductor.state import NO_PLAIN_CANDIDATES

    class Arg:
        def __init__(self, m):
            self.meta = {"val": torch.empty(m, 64, device="meta")}

    class Node:
        target = "aten.mm.default"

        def __init__(self, lost, m=4096):
            self.meta = {NO_PLAIN_CANDIDATES: True} if lost else {}
            self.args = (Arg(m), Arg(64))

    class Graph:
        current_node = None

    triton_template = object()  # stands for a Triton template (any non-extern template)
    templates = [aten_mm, triton_template]
    graph = Graph()
    with V.set_graph_handler(graph), config.patch(max_autotune_gemm_backends="ATEN,TRITON"):
        graph.current_node = Node(lost=True)
        assert choices.aten_only_where_lost(templates) == [aten_mm]
        assert choices.aten_only_where_lost([triton_template]) == [triton_template]  # never none left
        graph.current_node = Node(lost=False)
        assert choices.aten_only_where_lost(templates) == templates
        graph.current_node = Node(lost=True, m=16)  # few tokens: Triton's templates stay
        assert choices.aten_only_where_lost(templates) == templates


@pytest.mark.parametrize("user, expected", [("ATEN,TRITON", "ATEN")])
def test_unfused_winner_gemm_backends(inductor, monkeypatch, user, expected):
    """When the unfused ops win a fused autotune, their GEMM is lowered with ATen only."""
    import torch._inductor.config as config

    from cutedsl_backend.inductor import lowering

    seen = []
    inline = lowering._inline

    def recording_inline(*args, **kwargs):
        seen.append(config.max_autotune_gemm_backends)
        return inline(*args, **kwargs)

    monkeypatch.setattr(lowering, "_inline", recording_inline)
    x, w, b = rand(256, 128), rand(192, 128), rand(192)
    fn = (lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"))
    with config.patch({"test_configs.autotune_choice_name_regex": "unfused|aten|addmm|triton"}), \
            config.patch(max_autotune_gemm_backends=user):
        out, code = compile_and_code(fn, x, w, b)
    assert seen == [expected], seen
    assert "cutedsl_gemm_ab" not in code  # the unfused ops, not ours
    assert_close(out, F.gelu(x.double() @ w.double().t() + b.double(), approximate="tanh"), 128, "gelu_tanh",
                 roundings=2)


def test_a_symbolic_token_count_is_fused_too(inductor, feedback, caplog):
    """dynamic=True: the chain's M is symbolic in the FX pass; its hint comes from the fake
    tensors' shape environment, so the fused op is offered (not skipped after an error) and
    autotuned against the unfused ops."""
    import logging

    caplog.set_level(logging.DEBUG, logger="cutedsl_backend.inductor")
    d, h = 128, 256
    up, down = torch.nn.Linear(d, h).to(torch.bfloat16), torch.nn.Linear(h, d).to(torch.bfloat16)

    def mlp(x):
        return x + down(torch.nn.functional.silu(up(x)))

    fn = torch.compile(mlp, mode="max-autotune-no-cudagraphs", dynamic=True)
    x = rand(16, d)
    with torch.no_grad():
        out = fn(x)
        ref = mlp(x)
    assert not [r for r in caplog.records if "skipped after" in r.getMessage()], caplog.text[-2000:]
    assert any(name.startswith("cutedsl_fused_gemm") for name, _ in feedback.rounds), feedback.rounds
    assert out.shape == ref.shape


def test_dynamic_mlp_with_fused_chains_compiles_once(inductor, feedback):
    """dynamic=True: a SiLU MLP whose chains the pass fuses (offered as the per-call dispatcher) is
    compiled once and serves every token count; no guard on M from our pass or lowerings."""
    from torch._dynamo.utils import counters

    from cutedsl_backend.validation.bench_inductor import residual_mlp

    torch.manual_seed(0)
    mod = residual_mlp(128, 256, "silu").to(torch.bfloat16).eval()
    counters.clear()
    fn = torch.compile(mod, mode="max-autotune-no-cudagraphs", dynamic=True)
    with torch.no_grad():
        for m in (16, 48, 512):
            x = rand(m, 128)
            torch.testing.assert_close(fn(x).float(), mod(x).float(), atol=0.1, rtol=0.05)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert any(c[0].startswith("cutedsl_") for c in feedback.ours()), feedback.rounds


def test_unfused_choice_reads_symbolic_extents_from_hints(monkeypatch):
    """A torch whose subgraph choice takes its symbolic extents' values from the (symbolic) example
    inputs guards the graph on the hint (torch 2.11: a dynamic module recompiled per M): while our
    unfused choice is made, those values come from the size hints; a torch that reads concrete
    benchmark inputs is left as it is."""
    from types import SimpleNamespace

    from torch._inductor.codegen.subgraph import SubgraphChoiceCaller
    from torch._inductor.virtualized import V

    from cutedsl_backend.inductor.lowering import _sym_values_from_hints

    def reads_example_inputs(self):  # the guarding form: int() of symbolic sizes
        return [int(d) for x in self.example_inputs for d in x.shape]

    def reads_benchmark_inputs(self):
        return [int(d) for x in self.benchmark_inputs for d in x.shape]

    hints = {"s0": 48, "s1": 7}
    sizevars = SimpleNamespace(optimization_hint=lambda s, fallback=None: hints.get(str(s), fallback))
    choice = SimpleNamespace(sym_inputs=["s0", "s1"])
    for method, patched in ((reads_example_inputs, True), (reads_benchmark_inputs, False)):
        monkeypatch.setattr(SubgraphChoiceCaller, "_compute_sym_input_values", method)
        with V.set_graph_handler(SimpleNamespace(sizevars=sizevars)), _sym_values_from_hints():
            inside = SubgraphChoiceCaller._compute_sym_input_values
            if patched:
                assert inside is not method and inside(choice) == [48, 7]
            else:
                assert inside is method
        assert SubgraphChoiceCaller._compute_sym_input_values is method


def test_every_candidate_of_a_fused_autotune_is_device_timed_on_a_gpu(monkeypatch):
    """On a CUDA device, select_against_unfused puts the device timing on the unfused choice and
    on each of ours (with the op and kwargs each runs) and benchmarks the unfused choice first;
    on another device it leaves Inductor's timing alone."""
    from types import SimpleNamespace

    from cutedsl_backend.inductor import device_timing, lowering

    installed = []
    monkeypatch.setattr(device_timing, "install_on_subgraph", lambda c: installed.append(("subgraph", c)))
    monkeypatch.setattr(device_timing, "install_on_ours",
                        lambda c, op, kwargs: installed.append(("ours", c, op, kwargs)))
    order = []
    monkeypatch.setattr(lowering, "_select", lambda name, choices, inputs, layout: (order.extend(choices) or "node",
                                                                                    choices[1]))
    unfused = SimpleNamespace(name="unfused")
    ours = [SimpleNamespace(name=f"ours{i}", kwargs={"kernel_config": f"c{i}"}) for i in range(2)]
    for device, timed in (("cuda", True), ("cpu", False)):
        installed.clear(), order.clear()
        inputs = [SimpleNamespace(get_device=lambda d=device: torch.device(d))]
        node, winner = lowering.select_against_unfused("n", unfused, ours, "op", inputs, None, 0.0)
        assert (node, winner) == ("node", ours[0]) and order == [unfused, *ours]
        expected = [("subgraph", unfused)] + [("ours", c, "op", c.kwargs) for c in ours]
        assert installed == (expected if timed else [])
