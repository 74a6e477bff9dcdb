"""The fuzzer's cases and oracle on the CPU (the fuzz itself needs the GPU: tests/gpu/test_fuzz_sm90.py):
cases replay from (seed, index), cover the input kinds it promises, and torch's float64 result
(or torch's refusal) is the oracle."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.validation.fuzz import draw, torch_reference  # noqa: E402


def _survey(draw_case, reference, count: int, operands: tuple) -> tuple:
    """Over cases 0..count-1 of seed 11: the kinds drawn (an operand's view named by its last
    word), how many the oracle refuses and how many it computes (always in float64)."""
    notes, refused, results = set(), 0, 0
    for i in range(count):
        case = draw_case(11, i, device="cpu")
        notes.update(n.split()[-1] if n.startswith(tuple(f"{o} " for o in operands)) else n for n in case.notes)
        ref = reference(case)
        if ref is None:
            refused += 1
        else:
            results += 1
            assert ref.dtype == torch.float64
    return notes, refused, results


def test_cases_replay():
    a, b = draw(3, 17, device="cpu"), draw(3, 17, device="cpu")
    assert a.describe() == b.describe() and torch.equal(a.a, b.a)


def test_cases_cover_the_input_kinds_and_torch_refusals():
    notes, refused, results = _survey(draw, torch_reference, 400, ("a", "b", "residual"))
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


def _outcomes(run, draw_case, count: int) -> list:
    """What ``run`` says of the first ``count`` cases of seed 5 (None where the call was right)."""
    return [run(draw_case(5, i, device="cpu")) for i in range(count)]


def test_the_fuzz_passes_a_right_implementation_and_catches_a_wrong_one(monkeypatch):
    """The harness can fail: a stand-in that drops the bias is caught, torch's own semantics are not."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation import fuzz as fz

    monkeypatch.setattr(cb, "gemm", _torch_gemm)
    right = _outcomes(fz.run_case, draw, 120)
    assert [f for f in right if f] == []
    monkeypatch.setattr(cb, "gemm", lambda *a, **k: _torch_gemm(*a, **k, drop_bias=True))
    wrong = _outcomes(fz.run_case, draw, 120)
    assert any(f and "wrong result" in f for f in wrong)
    monkeypatch.setattr(cb, "gemm", lambda *a, **k: (_ for _ in ()).throw(KeyError("x")))
    assert "KeyError" in fz.run_case(draw(5, 0, device="cpu"))


def test_gated_cases_replay():
    from cutedsl_backend.validation.fuzz_gated import draw_gated

    a, b = draw_gated(3, 17, device="cpu"), draw_gated(3, 17, device="cpu")
    assert a.describe() == b.describe() and torch.equal(a.a, b.a)


def test_gated_cases_cover_the_input_kinds_and_torch_refusals():
    from cutedsl_backend.validation.fuzz_gated import draw_gated, gated_reference

    notes, refused, results = _survey(draw_gated, gated_reference, 500, ("a", "w_gate", "w_up"))
    for kind in ("transposed", "offset", "expanded", "strided", "concatenated", "padded w_gate_up", "float8_e4m3fn",
                 "rowwise scales", "tensorwise scales", "biases", "gate bias", "concatenated bias",
                 "bias of a wrong length", "weight shape mismatch", "out", "strided out", "out of another shape",
                 "requires grad on a", "config"):
        assert kind in notes, (kind, sorted(notes))
    assert refused > 0 and results > refused  # most draws are calls torch computes


def _torch_gated(a, w_gate=None, w_up=None, *, w_gate_up=None, activation="silu", bias_gate=None, bias_up=None,
                 bias_gate_up=None, scale_a=None, scale_gate=None, scale_up=None, scale_gate_up=None, out_dtype=None,
                 use_fast_accum=False, out=None, config=None, drop_bias=False, swap_halves=False):
    """A stand-in for cutedsl_backend.gemm_gated with its documented semantics, written apart from
    the fuzzer's oracle: one GEMM on the concatenated [gate | up] weight (scaled per row), the
    [b_gate | b_up] bias added, the result split into gate and up."""
    import cutedsl_backend as cb
    from cutedsl_backend.epilogue import GATED_ACTIVATIONS, torch_activation

    def refuse(why):
        raise cb.UnsupportedGemmError(why)

    if activation not in GATED_ACTIVATIONS:
        refuse("activation")
    if w_gate_up is None:
        if w_gate.shape != w_up.shape:
            refuse("weights")
        w_gate_up = torch.cat([w_gate, w_up])
    if w_gate_up.shape[0] % 2 or w_gate_up.shape[1] != a.shape[-1]:
        refuse("shape")
    n = w_gate_up.shape[0] // 2
    x, w = a.detach().double(), w_gate_up.double()
    if scale_a is not None:
        s = scale_gate_up if scale_gate_up is not None else torch.cat(
            [scale_gate.reshape(-1).expand(n), scale_up.reshape(-1).expand(n)])
        w = w * s.double().reshape(-1).expand(2 * n)[:, None]
        x = x * scale_a.double()
    zeros = torch.zeros(n, dtype=torch.float64)
    if bias_gate_up is None:
        bias_up = None if drop_bias else bias_up
        bias_gate_up = torch.cat([zeros if b is None else b.double() for b in (bias_gate, bias_up)])
    if tuple(bias_gate_up.shape) != (2 * n,):
        refuse("bias")
    if swap_halves:  # a bug: the concatenated bias read up-first
        bias_gate_up = torch.cat([bias_gate_up[n:], bias_gate_up[:n]])
    y = x @ w.t() + bias_gate_up.double()
    y = (torch_activation(activation)(y[..., :n]) * y[..., n:]).to(
        out_dtype or (torch.bfloat16 if scale_a is not None else a.dtype))
    if out is not None:
        if tuple(out.shape) != tuple(y.shape):
            refuse("out shape")
        return out.copy_(y)
    return y


def test_the_gated_fuzz_passes_a_right_implementation_and_catches_a_wrong_one(monkeypatch):
    """The harness can fail: stand-ins that drop the up bias or read the concatenated bias up-first
    are caught, one with the documented semantics (written apart from the oracle) is not."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation import fuzz_gated as fg

    monkeypatch.setattr(cb, "gemm_gated", _torch_gated)
    right = _outcomes(fg.run_gated_case, fg.draw_gated, 150)
    assert [f for f in right if f] == []
    monkeypatch.setattr(cb, "gemm_gated", lambda *a, **k: _torch_gated(*a, **k, drop_bias=True))
    wrong = _outcomes(fg.run_gated_case, fg.draw_gated, 150)
    assert any(f and "wrong result" in f for f in wrong)
    monkeypatch.setattr(cb, "gemm_gated", lambda *a, **k: _torch_gated(*a, **k, swap_halves=True))
    wrong = _outcomes(fg.run_gated_case, fg.draw_gated, 400)
    assert any(f and "wrong result" in f and "concatenated bias" in f for f in wrong)
    monkeypatch.setattr(cb, "gemm_gated", lambda *a, **k: (_ for _ in ()).throw(KeyError("x")))
    assert "KeyError" in fg.run_gated_case(fg.draw_gated(5, 0, device="cpu"))


def test_scaled_cases_replay():
    from cutedsl_backend.validation.fuzz_scaled import draw_scaled

    a, b = draw_scaled(3, 17, device="cpu"), draw_scaled(3, 17, device="cpu")
    assert a.describe() == b.describe() and torch.equal(a.a.float(), b.a.float())


def test_scaled_cases_cover_the_input_kinds_and_refusals():
    from cutedsl_backend.validation.fuzz_scaled import draw_scaled, scaled_reference

    notes, refused, results = _survey(draw_scaled, scaled_reference, 500, ("a", "w", "b", "residual"))
    for kind in ("transposed", "offset", "expanded", "strided", "float8_e4m3fnxfloat8_e4m3fn",
                 "float8_e5m2xfloat8_e5m2", "tensorwise scales", "one-element scales", "rowwise scales",
                 "wrong shape scales", "wrong dtype scales", "row-major b", "K mismatch", "col bias", "row bias",
                 "bias of a wrong length", "out", "strided out", "out of another shape", "requires grad on residual",
                 "config"):
        assert kind in notes, (kind, sorted(notes))
    assert refused > 0 and results > refused


def _torch_scaled_mm(a, b, scale_a, scale_b, *, bias=None, activation=None, residual=None, beta=1.0,
                     out_dtype=torch.bfloat16, use_fast_accum=False, config=None, out=None, drop_scale_b=False):
    """A stand-in for cutedsl_backend.scaled_mm with its documented semantics, written apart from
    the fuzzer's oracle: scales as (M, 1) / (1, N) columns and rows, refusals by name."""
    import cutedsl_backend as cb
    from cutedsl_backend.epilogue import torch_activation

    def refuse(why):
        raise cb.UnsupportedGemmError(why)

    m, k = a.shape
    if b.shape[0] != k:
        refuse("shape")
    n = b.shape[1]
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        refuse("scale dtype")
    if scale_a.numel() != 1 and tuple(scale_a.shape) != (m, 1):
        refuse("scale_a shape")
    if scale_b.numel() != 1 and tuple(scale_b.shape) != (1, n):
        refuse("scale_b shape")
    sa = scale_a.double().reshape(-1, 1) if scale_a.numel() != 1 else scale_a.double().reshape(())
    sb = scale_b.double().reshape(1, -1) if scale_b.numel() != 1 else scale_b.double().reshape(())
    if drop_scale_b:
        sb = torch.ones((), dtype=torch.float64)
    if residual is not None and residual.requires_grad:
        refuse("autograd")
    y = (a.double() @ b.double()) * sa * sb
    if bias is not None:
        if tuple(bias.shape) not in ((n,), (m, 1)):
            refuse("bias shape")
        y = y + bias.double()
    if residual is not None:
        y = y + beta * residual.double()
    if activation:
        y = torch_activation(activation)(y)
    y = y.to(out_dtype)
    if out is not None:
        if tuple(out.shape) != (m, n):
            refuse("out shape")
        return out.copy_(y)
    return y


def test_the_scaled_fuzz_passes_a_right_implementation_and_catches_a_wrong_one(monkeypatch):
    """The harness can fail: a stand-in that drops scale_b is caught, one with the documented
    semantics (written apart from the oracle) is not, nor is a refusal by name."""
    import cutedsl_backend as cb
    from cutedsl_backend.validation import fuzz_scaled as fs

    monkeypatch.setattr(cb, "scaled_mm", _torch_scaled_mm)
    right = _outcomes(fs.run_scaled_case, fs.draw_scaled, 150)
    assert [f for f in right if f] == []
    monkeypatch.setattr(cb, "scaled_mm", lambda *a, **k: _torch_scaled_mm(*a, **k, drop_scale_b=True))
    wrong = _outcomes(fs.run_scaled_case, fs.draw_scaled, 150)
    assert any(f and "wrong result" in f for f in wrong)
    monkeypatch.setattr(cb, "scaled_mm", lambda *a, **k: (_ for _ in ()).throw(KeyError("x")))
    assert "KeyError" in fs.run_scaled_case(fs.draw_scaled(5, 0, device="cpu"))
