"""The extern kernels' direct path (inductor.ops.direct): for CUDA tensors it makes the eager call
the op makes (same tensors in the same roles, same scalars, the config its choice names), without
the dispatcher; other tensors go through the op. Checked on CPU tensors that say they are CUDA
tensors, with the eager calls recorded."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.inductor import ops as iops  # noqa: E402
from cutedsl_backend.inductor.eligibility import DISPATCH  # noqa: E402


class Cudaish(torch.Tensor):
    @property
    def is_cuda(self):
        return True


@pytest.mark.parametrize("kind", iops.SIGNATURES, ids=lambda k: iops.op_name(*k))
def test_direct_call_matches_the_ops_eager_call(kind, monkeypatch):
    from cutedsl_backend import ops as eager

    calls = {}

    def record(name):
        def fn(*args, **kwargs):
            calls[name] = (args, kwargs)
            return "result"
        return fn

    monkeypatch.setattr(eager, "gemm", record("gemm"))
    monkeypatch.setattr(eager, "scaled_mm", record("scaled_mm"))
    names = iops.tensor_names(*kind)
    shapes = {"a": (8, 16), "b": (16, 24), "scale_a": (8, 1), "scale_b": (1, 24), "bias": (24,),
              "residual": (8, 24)}
    tensors = {n: torch.randn(shapes[n]).as_subclass(Cudaish) for n in names}
    cfg = GemmConfig(64, 64, schedule="pingpong", a_rows=16)
    fn = iops.direct(kind)
    out = fn(*(tensors[n] for n in names), activation="silu", alpha=0.5, beta=2.0, out_dtype=torch.float32,
             fast_accum=True, kernel_config=cfg.name)
    assert out == "result"
    scaled, has_bias, has_res = kind
    args, kw = calls["scaled_mm" if scaled else "gemm"]
    assert args[0] is tensors["a"] and args[1] is tensors["b"]
    if scaled:
        assert args[2] is tensors["scale_a"] and args[3] is tensors["scale_b"]
        assert kw["use_fast_accum"] is True and kw["out_dtype"] == torch.float32 and "alpha" not in kw
    else:
        assert kw["alpha"] == 0.5 and kw["out_dtype"] == torch.float32
    assert kw["bias"] is tensors.get("bias") and kw["residual"] is tensors.get("residual")
    assert kw["activation"] == "silu" and kw["beta"] == 2.0
    assert kw["config"] == cfg  # 8 rows fit the 16 the config loads
    calls.clear()
    fn(*(tensors[n] for n in names), kernel_config=DISPATCH)
    assert calls["scaled_mm" if scaled else "gemm"][1]["config"] is None  # the per-call dispatcher


def test_direct_call_drops_short_a_loads_for_more_rows(monkeypatch):
    from cutedsl_backend import ops as eager

    seen = []
    monkeypatch.setattr(eager, "gemm", lambda *a, **kw: seen.append(kw["config"]))
    cfg = GemmConfig(64, 64, schedule="pingpong", a_rows=16)
    fn = iops.direct((False, False, False))
    fn(torch.randn(40, 16).as_subclass(Cudaish), torch.randn(16, 24).as_subclass(Cudaish), kernel_config=cfg.name)
    assert seen == [cfg.replace(a_rows=0)]


def test_direct_call_of_other_tensors_goes_through_the_op(monkeypatch):
    seen = []

    class Op:
        def __call__(self, *args, **kwargs):
            seen.append((len(args), kwargs["kernel_config"]))
            return "op"

    monkeypatch.setitem(iops._OVERLOADS, (False, True, False), Op())
    fn = iops.direct((False, True, False))
    assert fn(torch.randn(8, 16), torch.randn(16, 24), torch.randn(24), kernel_config="x") == "op"
    assert seen == [(3, "x")]


def test_direct_call_hands_a_column_bias_as_a_vector(monkeypatch):
    """Inductor hands a column bias as (N,), (1, N) or a row-stride-0 (M, N) expansion; the eager
    call gets the (N,) vector (the 1-D one untouched, without a per-call reshape)."""
    from cutedsl_backend import ops as eager

    seen = []
    monkeypatch.setattr(eager, "gemm", lambda *a, **kw: seen.append(kw["bias"]))
    fn = iops.direct((False, True, False))
    a, b = torch.randn(8, 16).as_subclass(Cudaish), torch.randn(16, 24).as_subclass(Cudaish)
    vec = torch.randn(24)
    for bias in (vec, vec.reshape(1, 24), vec.expand(8, 24)):
        fn(a, b, bias, kernel_config="")
    assert seen[0] is vec
    assert all(s.shape == (24,) and s.data_ptr() == vec.data_ptr() for s in seen[1:])
