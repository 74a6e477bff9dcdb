"""gemm_gated's operand rules that need no GPU: the two weight forms, the bias forms and their
2N layout (the gate's N values first), and the refusals, each by name."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.gated import _bias, _weights  # noqa: E402
from cutedsl_backend.problem import UnsupportedGemmError  # noqa: E402


def test_weight_forms():
    wg, wu = torch.randn(16, 64), torch.randn(16, 64)
    g, u = _weights(wg, wu, None)
    assert g is wg and u is wu
    g, u = _weights(None, None, torch.cat([wg, wu]))
    assert torch.equal(g, wg) and torch.equal(u, wu) and g.data_ptr() != u.data_ptr()
    for args in ((wg, None, None), (None, None, None), (wg, wu, torch.cat([wg, wu])), (None, wu, None)):
        with pytest.raises(UnsupportedGemmError, match="weights: pass w_gate and w_up, or w_gate_up"):
            _weights(*args)
    with pytest.raises(UnsupportedGemmError, match="w_gate_up: must be a 2-D"):
        _weights(None, None, torch.randn(15, 64))
    with pytest.raises(UnsupportedGemmError, match="same shape"):
        _weights(wg, wu[:8], None)


def test_bias_forms_and_layout():
    n, dev = 16, torch.device("cpu")
    bg, bu = torch.randn(n, dtype=torch.bfloat16), torch.randn(n, dtype=torch.bfloat16)
    assert _bias(None, None, None, n, torch.bfloat16, dev) is None
    assert torch.equal(_bias(bg, bu, None, n, torch.bfloat16, dev), torch.cat([bg, bu]))
    only_gate = _bias(bg, None, None, n, torch.bfloat16, dev)
    assert torch.equal(only_gate[:n], bg) and not only_gate[n:].any()
    both = torch.cat([bg, bu])
    assert torch.equal(_bias(None, None, both, n, torch.bfloat16, dev), both)
    assert _bias(bg.float(), None, None, n, torch.bfloat16, dev).dtype == torch.float32
    with pytest.raises(UnsupportedGemmError, match="not both"):
        _bias(bg, None, both, n, torch.bfloat16, dev)
    with pytest.raises(UnsupportedGemmError, match=r"bias_gate: must be a \(16,\) tensor"):
        _bias(bg[:8], None, None, n, torch.bfloat16, dev)
    with pytest.raises(UnsupportedGemmError, match="dtype"):
        _bias(bg.half(), None, None, n, torch.bfloat16, dev)


def test_mixed_bias_dtypes_are_kept_exact():
    bg, bu = torch.randn(16, dtype=torch.bfloat16), torch.randn(16)
    both = _bias(bg, bu, None, 16, torch.bfloat16, torch.device("cpu"))
    assert both.dtype == torch.float32 and torch.equal(both[16:], bu)


def test_k0_is_the_activation_of_the_biases_and_n0_is_empty():
    """K = 0: both GEMMs are exactly zero, the result act(b_gate) * b_up per column (no kernel, so
    this runs anywhere); N = 0: an empty result of the right shape."""
    import cutedsl_backend as cb
    from cutedsl_backend.epilogue import torch_activation

    a = torch.randn(3, 5, 0, dtype=torch.bfloat16)
    wg, wu = torch.randn(16, 0, dtype=torch.bfloat16), torch.randn(16, 0, dtype=torch.bfloat16)
    bg, bu = torch.randn(16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16)
    got = cb.gemm_gated(a, wg, wu, activation="gelu_tanh", bias_gate=bg, bias_up=bu)
    want = (torch_activation("gelu_tanh")(bg.float()) * bu.float()).to(torch.bfloat16).expand(3, 5, 16)
    assert got.shape == (3, 5, 16) and torch.equal(got, want)
    assert not cb.gemm_gated(a, wg, wu).any()  # no bias: act(0) * 0
    out = torch.full((3, 5, 16), float("nan"), dtype=torch.bfloat16)
    assert cb.gemm_gated(a, wg, wu, bias_gate=bg, bias_up=bu, activation="gelu_tanh", out=out) is out
    assert torch.equal(out, want)
    empty = cb.gemm_gated(torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(0, 8, dtype=torch.bfloat16),
                          torch.randn(0, 8, dtype=torch.bfloat16))
    assert empty.shape == (4, 0)


def test_gated_backward_needs_only_its_own_module():
    """The gated backward's GEMMs go through torch.ops.cutedsl.gemm; importing cutedsl_backend.gated
    before torch (so the package did not register the ops) must still find that op. Meta tensors run
    the op's fake implementation, so the gradients' shapes are checked without a GPU."""
    import subprocess
    import sys

    code = ("import cutedsl_backend.gated as g, torch\n"
            "m = lambda *s: torch.empty(*s, device='meta', dtype=torch.bfloat16)\n"
            "out = g.gated_backward(m(3, 6, 16), m(3, 6, 32), m(16, 32), m(16, 32), None, None, 'silu',\n"
            "                       (True, True, True, False, False))\n"
            "print([tuple(x.shape) if x is not None else None for x in out])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[(3, 6, 32), (16, 32), (16, 32), None, None]", out.stdout


def test_fp8_scale_forms():
    """The gated FP8 scales: A's one or per row; each weight's one or per row, as one 2N [gate | up]
    vector for the kernel (a tensorwise pair is expanded: the two weights' scales differ)."""
    from cutedsl_backend.gated import _scale_kinds, _scale_vectors

    m, n, dev = 6, 4, torch.device("cpu")
    one = lambda v: torch.tensor(v, dtype=torch.float32)  # noqa: E731
    assert _scale_kinds(m, n, one(2.0), one(3.0), one(5.0), None, dev) == ("scalar", "col")
    assert _scale_kinds(m, n, torch.rand(m, 1), torch.rand(n), torch.rand(n, 1), None, dev) == ("row", "col")
    assert _scale_kinds(m, n, one(2.0), None, None, one(7.0), dev) == ("scalar", "scalar")
    assert _scale_kinds(m, n, one(2.0), None, None, torch.rand(2 * n), dev) == ("scalar", "col")
    sa, sb = _scale_vectors(m, n, one(2.0), one(3.0), one(5.0), None)
    assert sa.tolist() == [2.0] and sb.tolist() == [3.0] * n + [5.0] * n
    sg, su = torch.rand(n), torch.rand(n, 1)
    _, sb = _scale_vectors(m, n, one(2.0), sg, su, None)
    assert torch.equal(sb, torch.cat([sg, su.reshape(-1)]))
    with pytest.raises(UnsupportedGemmError, match="scale_a: one element, or 6 contiguous"):
        _scale_kinds(m, n, torch.rand(m + 1), one(1.0), one(1.0), None, dev)
    with pytest.raises(UnsupportedGemmError, match="scale_up: must be a float32"):
        _scale_kinds(m, n, one(1.0), one(1.0), torch.ones((), dtype=torch.bfloat16), None, dev)
    with pytest.raises(UnsupportedGemmError, match="scale_gate: one element, or 4 contiguous"):
        _scale_kinds(m, n, one(1.0), torch.rand(n, 2)[:, 0], one(1.0), None, dev)


def test_fp8_arguments_are_checked_before_any_device_work():
    from cutedsl_backend.gated import gemm_gated

    f8 = torch.randn(8, 16).to(torch.float8_e4m3fn)
    with pytest.raises(UnsupportedGemmError, match="scales: FP8 operands take scale_a"):
        gemm_gated(f8, f8, f8, scale_a=torch.ones(()))
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    with pytest.raises(UnsupportedGemmError, match="scales: only FP8"):
        gemm_gated(x, x, x, scale_gate=torch.ones(()))
    with pytest.raises(UnsupportedGemmError, match="out_dtype: a 16-bit gated GEMM"):
        gemm_gated(x, x, x, out_dtype=torch.float32)
