"""Gated MLPs under torch.compile (CPU, our ops given CPU kernels): the fusion pass finds
``act(x @ w_gate^T) * (x @ w_up^T)`` in its 2-D and 3-D ``nn.Linear`` forms, the lowering offers our
gated kernel's configs beside the unfused ops, and the result matches eager; nothing is formed
without the opt-in, or where an intermediate has another user."""

import pytest

torch = pytest.importorskip("torch")

from .conftest import CALLS, as_sm90a, compile_and_code  # noqa: E402


class GatedMLP(torch.nn.Module):
    def __init__(self, act, bias=False):
        super().__init__()
        torch.manual_seed(0)
        self.gate = torch.nn.Linear(64, 128, bias=bias)
        self.up = torch.nn.Linear(64, 128, bias=bias)
        self.act = act

    def forward(self, x):
        return self.act(self.gate(x)) * self.up(x)


ACTS = {"silu": torch.nn.functional.silu, "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
        "relu": torch.relu}


@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("shape", [(32, 64), (2, 16, 64)], ids=["2d", "3d"])
def test_gated_mlp_is_offered_and_matches_eager(inductor, feedback, act, shape, bias):
    import cutedsl_backend.inductor as cbi

    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    model = GatedMLP(ACTS[act], bias).to(torch.bfloat16)
    x = torch.randn(*shape, dtype=torch.bfloat16)
    with torch.no_grad():
        out, code = compile_and_code(model, x)
        ref = model(x)
    offered = feedback.ours("cutedsl_fused_gemm_gated")
    kernels = [d for name, d in offered if name.startswith("cutedsl_gemm_gated_")]
    assert kernels and all(d.startswith("cutedsl gated sm90a_") for d in kernels), feedback.rounds
    assert any("unfused" in name for name, _ in offered)  # measured against the unfused ops
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    assert all(name.startswith("cutedsl_gemm_gated_bias_") == bias for name, _ in offered
               if name.startswith("cutedsl_gemm_gated_")), offered
    if "cutedsl_gemm_gated" in code:  # our kernel won the autotune: the generated code calls it
        assert CALLS[-1][0] == ("gemm_gated_ab_bias" if bias else "gemm_gated_ab") and CALLS[-1][2] == act


def test_not_formed_without_the_opt_in(inductor, feedback):
    model = GatedMLP(ACTS["silu"]).to(torch.bfloat16)
    with torch.no_grad():
        compile_and_code(model, torch.randn(32, 64, dtype=torch.bfloat16))
    assert not [c for c in feedback.ours() if c[0].startswith("cutedsl_gemm_gated_")]


def test_not_formed_where_the_gate_is_used_elsewhere(inductor, feedback):
    import cutedsl_backend.inductor as cbi

    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    model = GatedMLP(ACTS["silu"]).to(torch.bfloat16)

    def both(x):
        g = model.gate(x)
        return torch.nn.functional.silu(g) * model.up(x), g

    with torch.no_grad():
        compile_and_code(both, torch.randn(32, 64, dtype=torch.bfloat16))
    assert not [c for c in feedback.ours() if c[0].startswith("cutedsl_gemm_gated_")]


class FusedGateUp(torch.nn.Module):
    """One (2N, K) weight, gate rows first, split after the GEMM (fused checkpoints)."""

    def __init__(self, bias=False):
        super().__init__()
        torch.manual_seed(0)
        self.gate_up = torch.nn.Linear(64, 256, bias=bias)

    def forward(self, x):
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return torch.nn.functional.silu(g) * u


@pytest.mark.parametrize("bias", [False, True], ids=["", "bias"])
@pytest.mark.parametrize("shape", [(32, 64), (2, 16, 64)], ids=["2d", "3d"])
def test_concatenated_gate_up_weight_is_offered_and_matches_eager(inductor, feedback, shape, bias):
    import cutedsl_backend.inductor as cbi

    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    model = FusedGateUp(bias).to(torch.bfloat16)
    x = torch.randn(*shape, dtype=torch.bfloat16)
    with torch.no_grad():
        out, _ = compile_and_code(model, x)
        ref = model(x)
    ours = [c[0] for c in feedback.ours() if c[0].startswith("cutedsl_gemm_gated_")]
    assert ours and all(name.startswith("cutedsl_gemm_gated_bias_") == bias for name in ours), feedback.rounds
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


def test_dynamic_token_count_offers_the_per_call_dispatcher(inductor, feedback):
    """A symbolic M: one gated choice, the per-call dispatcher (the eager API's config choice from
    each call's shape), and the compiled module serves other token counts."""
    import cutedsl_backend.inductor as cbi

    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    model = GatedMLP(ACTS["silu"]).to(torch.bfloat16)
    fn = torch.compile(model, mode="max-autotune-no-cudagraphs", dynamic=True)
    with torch.no_grad():
        for m in (24, 40):
            x = torch.randn(m, 64, dtype=torch.bfloat16)
            torch.testing.assert_close(fn(x), model(x), rtol=2e-2, atol=2e-2)
    kernels = [d for name, d in feedback.ours("cutedsl_fused_gemm_gated") if name.startswith("cutedsl_gemm_gated_")]
    assert kernels == ["cutedsl gated dispatch"], feedback.rounds


class FP8GatedMLP(torch.nn.Module):
    """Two FP8 linears through torch._scaled_mm (weights (N, K) e4m3 with their scales) and a SwiGLU."""

    def __init__(self, rowwise):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        for name in ("wg", "wu"):
            self.register_buffer(name, (torch.randn(128, 64, generator=g) * 2).to(torch.float8_e4m3fn))
            s = torch.rand(1, 128, generator=g) / 8 + 0.05 if rowwise else torch.tensor(0.11)
            self.register_buffer("s" + name[1], s)

    def forward(self, x8, sa):
        g = torch._scaled_mm(x8, self.wg.t(), sa, self.sg, out_dtype=torch.bfloat16)
        u = torch._scaled_mm(x8, self.wu.t(), sa, self.su, out_dtype=torch.bfloat16)
        return torch.nn.functional.silu(g) * u


@pytest.mark.parametrize("rowwise", [False, True], ids=["tensorwise", "rowwise"])
def test_fp8_gated_mlp_is_offered_and_matches_eager(inductor, feedback, rowwise):
    import cutedsl_backend.inductor as cbi

    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    model = FP8GatedMLP(rowwise)
    x8 = (torch.randn(32, 64) * 2).to(torch.float8_e4m3fn)
    sa = torch.rand(32, 1) / 8 + 0.05 if rowwise else torch.tensor(0.09)
    with torch.no_grad():
        out, code = compile_and_code(model, x8, sa)
        ref = model(x8, sa)
    ours = [name for name, _ in feedback.ours("cutedsl_fused_gemm_gated")]
    assert any(n.startswith("cutedsl_gemm_gated_scaled_") for n in ours), feedback.rounds
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    if "cutedsl_gemm_gated_scaled" in code:
        assert CALLS[-1][0] == "gemm_gated_ab_scaled"


def test_gated_autotune_is_the_shared_one(inductor, feedback, monkeypatch):
    """The gated chain's autotune goes through the same step as the fused epilogue chains
    (lowering.select_against_unfused: on a GPU every candidate device-timed, counted, on the
    timeline); a gated autotune under Inductor's own timing let our op's host time into a small
    GEMM's time."""
    import cutedsl_backend.inductor as cbi
    from cutedsl_backend.inductor import lowering

    seen = []
    shared = lowering.select_against_unfused

    def spy(name, unfused, ours, op, *rest):
        seen.append((name, op, len(ours)))
        return shared(name, unfused, ours, op, *rest)

    monkeypatch.setattr(lowering, "select_against_unfused", spy)
    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    fused0 = cbi.stats()["fused_autotunes"]
    model = GatedMLP(ACTS["silu"]).to(torch.bfloat16)
    with torch.no_grad():
        compile_and_code(model, torch.randn(32, 64, dtype=torch.bfloat16))
    from cutedsl_backend.inductor.gated_ops import GATED_OP

    assert [(n, op) for n, op, _ in seen] == [("cutedsl_fused_gemm_gated", GATED_OP)] and seen[0][2] >= 1, seen
    assert cbi.stats()["fused_autotunes"] == fused0 + 1


def test_a_lost_gated_chain_offers_no_plain_candidates_for_its_gemms(inductor, feedback, monkeypatch):
    """Where the unfused ops beat our gated kernel they are inlined, and their two GEMMs get no
    plain candidates of ours (as after a lost epilogue chain): they would meet the same peers."""
    import cutedsl_backend.inductor as cbi
    from cutedsl_backend.inductor import lowering

    shared = lowering.select_against_unfused
    lost = []

    def unfused_wins(name, unfused, ours, *rest):
        lost.append(name)
        for caller in ours:  # timed as never finishing: the unfused ops win the autotune
            caller.benchmark = lambda *args, **kwargs: float("inf")
        return shared(name, unfused, ours, *rest)

    monkeypatch.setattr(lowering, "select_against_unfused", unfused_wins)
    cbi.enable(device_arch=as_sm90a, gated_mlp=True)
    model = GatedMLP(ACTS["silu"]).to(torch.bfloat16)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        out, code = compile_and_code(model, x)
    assert lost == ["cutedsl_fused_gemm_gated"]
    # the gated autotune is the only one that offered choices of ours
    offering = [name for name, cs in feedback.rounds if any(c[0].startswith("cutedsl_gemm") for c in cs)]
    assert offering == ["cutedsl_fused_gemm_gated"], feedback.rounds
    assert "cutedsl_gemm" not in code
    torch.testing.assert_close(out.float(), model(x).float(), atol=0.05, rtol=0.05)
