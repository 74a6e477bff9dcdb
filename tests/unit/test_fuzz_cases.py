"""The fuzzer's cases and oracle on the CPU (the fuzz itself needs the GPU: tests/gpu/test_fuzz_sm90.py):
cases replay from (seed, index), cover the input kinds it promises, and torch's float64 result
(or torch's refusal) is the oracle."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.validation.fuzz import draw, torch_reference  # noqa: E402


def test_cases_replay():
    a, b = draw(3, 17, device="cpu"), draw(3, 17, device="cpu")
    assert a.describe() == b.describe() and torch.equal(a.a, b.a)


def test_cases_cover_the_input_kinds_and_torch_refusals():
    notes, refused, results = set(), 0, 0
    for i in range(400):
        case = draw(11, i, device="cpu")
        notes.update(n.split()[-1] if n.startswith(("a ", "b ", "residual ")) else n for n in case.notes)
        ref = torch_reference(case)
        if ref is None:
            refused += 1
        else:
            results += 1
            assert ref.dtype == torch.float64
    for kind in ("transposed", "offset", "expanded", "strided", "col bias", "row bias", "out", "strided out",
                 "out of another shape", "bias at a 2-byte offset", "K mismatch", "swap-AB"):
        assert kind in notes, (kind, sorted(notes))
    assert refused > 0 and results > 300


def _torch_gemm(a, b, *, bias=None, activation=None, residual=None, alpha=1.0, beta=1.0, out_dtype=None, out=None,
                config=None, drop_bias=False):
    """A stand-in for cutedsl_backend.gemm with torch's semantics (what the fuzz expects)."""
    import cutedsl_backend as cb
    from cutedsl_backend.epilogue import torch_activation

    if a.shape[-1] != b.shape[-2]:
        raise cb.UnsupportedGemmError("shape")
    y = torch.matmul(a.float(), b.float()) * alpha
    if bias is not None and not drop_bias:
        y = y + bias.float()
    if residual is not None:
        y = y + beta * residual.float()
    if activation:
        y = torch_activation(activation)(y)
    y = y.to(out_dtype or a.dtype)
    if out is not None:
        if tuple(out.shape) != tuple(y.shape):
            raise cb.UnsupportedGemmError("out shape")
        out.copy_(y)
        return out
    return y


def test_the_fuzz_passes_a_right_implementation_and_catches_a_wrong_one(monkeypatch):
    """The harness can fail: a stand-in that drops the bias is caught, torch's own semantics are not."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation import fuzz as fz

    monkeypatch.setattr(cb, "gemm", _torch_gemm)
    right = [fz.run_case(draw(5, i, device="cpu")) for i in range(120)]
    assert [f for f in right if f] == []
    monkeypatch.setattr(cb, "gemm", lambda *a, **k: _torch_gemm(*a, **k, drop_bias=True))
    wrong = [fz.run_case(draw(5, i, device="cpu")) for i in range(120)]
    assert any(f and "wrong result" in f for f in wrong)
    monkeypatch.setattr(cb, "gemm", lambda *a, **k: (_ for _ in ()).throw(KeyError("x")))
    assert "KeyError" in fz.run_case(draw(5, 0, device="cpu"))


def test_gated_cases_replay_and_leave_the_gemm_cases_as_they_were():
    from cutedsl_backend.validation.fuzz_gated import draw_gated

    a, b = draw_gated(3, 17, device="cpu"), draw_gated(3, 17, device="cpu")
    assert a.describe() == b.describe() and torch.equal(a.a, b.a)
    # the gemm cases draw from their own streams: a gated case in between changes none of them
    before = draw(3, 5, device="cpu").describe()
    draw_gated(3, 5, device="cpu")
    assert draw(3, 5, device="cpu").describe() == before


def test_gated_cases_cover_the_input_kinds_and_torch_refusals():
    from cutedsl_backend.validation.fuzz_gated import draw_gated, gated_reference

    notes, refused, results = set(), 0, 0
    for i in range(500):
        case = draw_gated(11, i, device="cpu")
        notes.update(n.split()[-1] if n.startswith(("a ", "w_gate ", "w_up ")) else n for n in case.notes)
        ref = gated_reference(case)
        if ref is None:
            refused += 1
        else:
            results += 1
            assert ref.dtype == torch.float64
    for kind in ("transposed", "offset", "expanded", "strided", "concatenated", "padded w_gate_up", "float8_e4m3fn",
                 "rowwise scales", "tensorwise scales", "biases", "gate bias", "concatenated bias",
                 "bias of a wrong length", "weight shape mismatch", "out", "strided out", "out of another shape",
                 "requires grad on a", "config"):
        assert kind in notes, (kind, sorted(notes))
    assert refused > 0 and results > 350


def _torch_gated(a, w_gate=None, w_up=None, *, w_gate_up=None, activation="silu", bias_gate=None, bias_up=None,
                 bias_gate_up=None, scale_a=None, scale_gate=None, scale_up=None, scale_gate_up=None, out_dtype=None,
                 use_fast_accum=False, out=None, config=None, drop_bias=False):
    """A stand-in for cutedsl_backend.gemm_gated with torch's semantics (what the fuzz expects)."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation.fuzz_gated import GatedCase, gated_reference

    kwargs = {k: v for k, v in dict(w_gate=w_gate, w_up=w_up, w_gate_up=w_gate_up, bias_gate=bias_gate,
                                    bias_up=None if drop_bias else bias_up, bias_gate_up=bias_gate_up,
                                    scale_a=scale_a, scale_gate=scale_gate, scale_up=scale_up,
                                    scale_gate_up=scale_gate_up).items() if v is not None}
    ref = gated_reference(GatedCase(0, a, {**kwargs, "activation": activation}))
    if ref is None:
        raise cb.UnsupportedGemmError("refused")
    y = ref.to(out_dtype or (torch.bfloat16 if scale_a is not None else a.dtype))
    if out is not None:
        if tuple(out.shape) != tuple(y.shape):
            raise cb.UnsupportedGemmError("out shape")
        return out.copy_(y)
    return y


def test_the_gated_fuzz_passes_a_right_implementation_and_catches_a_wrong_one(monkeypatch):
    """The harness can fail: a stand-in that drops the up bias is caught, torch's semantics are not."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation import fuzz_gated as fg

    monkeypatch.setattr(cb, "gemm_gated", _torch_gated)
    right = [fg.run_gated_case(fg.draw_gated(5, i, device="cpu")) for i in range(150)]
    assert [f for f in right if f] == []
    monkeypatch.setattr(cb, "gemm_gated", lambda *a, **k: _torch_gated(*a, **k, drop_bias=True))
    wrong = [fg.run_gated_case(fg.draw_gated(5, i, device="cpu")) for i in range(150)]
    assert any(f and "wrong result" in f for f in wrong)
    monkeypatch.setattr(cb, "gemm_gated", lambda *a, **k: (_ for _ in ()).throw(KeyError("x")))
    assert "KeyError" in fg.run_gated_case(fg.draw_gated(5, 0, device="cpu"))
