"""The Inductor integration on the CPU: the real torch.compile path with max-autotune, on CPU
tensors, with ``device_arch`` injected (CPU tensors count as sm90a) and our ops given CPU kernels
that compute the same formula in fp32 (rounded once, as the GPU kernels do) after checking that the
config they are handed exists and fits the problem. What is tested here is the integration:
which candidates are offered, which graphs are fused, what the generated code calls, caching;
the kernels themselves are tested on the GPU (tests/gpu)."""

import contextlib
import logging

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.epilogue import reference  # noqa: E402
from cutedsl_backend.inductor import ops as iops  # noqa: E402
from cutedsl_backend.inductor.eligibility import DISPATCH  # noqa: E402

CALLS: list = []


def _cpu_kernel(kind):
    names = iops.tensor_names(*kind)

    def fn(*args, activation=None, alpha=1.0, beta=1.0, out_dtype=None, fast_accum=False, kernel_config=""):
        t = dict(zip(names, args))
        if kernel_config and kernel_config != DISPATCH:
            GemmConfig.from_name(kernel_config)  # the name the generated code carries must parse
        CALLS.append((iops.op_name(*kind), kernel_config, activation))
        a, b = t["a"].float(), t["b"].float()
        bias = t.get("bias")
        if bias is not None:
            bias = iops.normalize_bias(bias, a.shape[-2], b.shape[-1])
        y = reference(a @ b, bias=bias, residual=t.get("residual"), alpha=alpha, beta=beta,
                      activation=activation, scale_a=t.get("scale_a"), scale_b=t.get("scale_b"))
        return y.to(out_dtype or (torch.bfloat16 if kind[0] else args[0].dtype))

    return fn


_LIB = []


def _cpu_gated(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    from cutedsl_backend.epilogue import torch_activation

    if kernel_config and kernel_config != DISPATCH:
        GemmConfig.from_name(kernel_config)
    CALLS.append(("gemm_gated_ab" if bias_gate_up is None else "gemm_gated_ab_bias", kernel_config, activation))
    g, u = a.float() @ w_gate.float().t(), a.float() @ w_up.float().t()
    if bias_gate_up is not None:
        n = w_gate.shape[0]
        g, u = g + bias_gate_up[:n].float(), u + bias_gate_up[n:].float()
    return (torch_activation(activation)(g) * u).to(a.dtype)


def _cpu_gated_scaled(a, w_gate, w_up, scale_a, scale_gate, scale_up, *, activation, out_dtype, fast_accum,
                      kernel_config=""):
    from cutedsl_backend.epilogue import torch_activation

    if kernel_config and kernel_config != DISPATCH:
        GemmConfig.from_name(kernel_config)
    CALLS.append(("gemm_gated_ab_scaled", kernel_config, activation))
    a32 = a.float() * scale_a.float()
    g = a32 @ (w_gate.float() * scale_gate.float().reshape(-1, 1)).t()
    u = a32 @ (w_up.float() * scale_up.float().reshape(-1, 1)).t()
    return (torch_activation(activation)(g) * u).to(out_dtype)


@pytest.fixture(scope="session", autouse=True)
def cpu_kernels():
    import cutedsl_backend.inductor.gated_mlp  # noqa: F401  (defines the gated op)

    for kind in iops.SIGNATURES:
        torch.library.register_kernel(f"cutedsl::{iops.op_name(*kind)}", "cpu", _cpu_kernel(kind))
    torch.library.register_kernel("cutedsl::gemm_gated_ab", "cpu", _cpu_gated)
    torch.library.register_kernel("cutedsl::gemm_gated_ab_bias", "cpu", _cpu_gated)
    torch.library.register_kernel("cutedsl::gemm_gated_ab_scaled", "cpu", _cpu_gated_scaled)
    yield


def as_sm90a(device):
    return "sm90a"


class Feedback:
    """What Inductor benchmarked: (op name, [choice names and descriptions]) per autotune."""

    def __init__(self):
        self.rounds = []

    def __call__(self, timings, name, input_nodes, choices, *rest):
        self.rounds.append((name, [(c.name, getattr(c, "description", "")) for c in choices]))

    def ours(self, name_prefix=""):
        return [c for n, cs in self.rounds if n.startswith(name_prefix) for c in cs if c[0].startswith("cutedsl_")]


@pytest.fixture
def feedback():
    from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers

    fb = Feedback()
    add_feedback_saver(fb)
    yield fb
    clear_feedback_savers()


@pytest.fixture
def inductor(tmp_path, monkeypatch):
    """max-autotune with the ATen backend on fresh caches, our integration enabled for CPU."""
    import torch._dynamo
    import torch._inductor.config as config
    from torch._inductor.utils import fresh_cache

    import cutedsl_backend.inductor as cbi

    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "kernels"))
    CALLS.clear()
    torch._dynamo.reset()
    with fresh_cache(), config.patch(max_autotune_gemm_backends="ATEN", force_disable_caches=True):
        cbi.enable(device_arch=as_sm90a)
        try:
            yield cbi
        finally:
            cbi.disable()
            torch._dynamo.reset()


@contextlib.contextmanager
def forced_ours():
    """Make our candidate win (Inductor's test hook keeps only choices matching the regex)."""
    import torch._inductor.config as config

    with config.patch({"test_configs.autotune_choice_name_regex": "cutedsl"}):
        yield


def compile_and_code(fn, *args):
    from torch._inductor.utils import run_and_get_code

    compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs")
    out, code = run_and_get_code(compiled, *args)
    return out, "\n".join(code)


@pytest.fixture
def debug_log(caplog):
    caplog.set_level(logging.DEBUG, logger="cutedsl_backend.inductor")
    return caplog


def assert_close(out, ref, k, activation=None, roundings=1):
    """The tolerance policy's bound for ``out`` (its dtype), widened by the number of times the
    graph rounds to that dtype (an unfused graph rounds after the GEMM and after its epilogue)."""
    from cutedsl_backend.validation.tolerances import compare

    m = compare(out, ref, str(out.dtype).replace("torch.", ""), k, activation=activation)
    assert m["max_err_over_allowed"] <= roundings and m["n_nonfinite"] == 0, m


def rand(*shape, dtype=torch.bfloat16, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype)
