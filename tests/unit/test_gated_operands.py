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
