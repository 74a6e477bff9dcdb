"""Never break a compile: in the modes whose generated code calls extern kernels through C shims
(the C++ wrapper, AOTInductor), our kernels are not offered, the INFO log says why, and the
compile that works without us still works with us enabled (on CPU tensors; the GPU host runs the
same code path)."""

import logging

import pytest

torch = pytest.importorskip("torch")

from .conftest import rand  # noqa: E402


def _model():
    from cutedsl_backend.validation.bench_inductor import residual_mlp

    torch.manual_seed(0)
    return residual_mlp(64, 128, "gelu").to(torch.bfloat16).eval()


def test_cpp_wrapper_offers_nothing_and_says_why(inductor, feedback, caplog):
    import torch._inductor.config as config

    caplog.set_level(logging.INFO, logger="cutedsl_backend.inductor")
    a, b = rand(128, 64), rand(64, 96)
    with config.patch(cpp_wrapper=True):
        out = torch.compile(lambda a, b: torch.relu(a @ b), mode="max-autotune-no-cudagraphs")(a, b)
    torch.testing.assert_close(out, torch.relu(a @ b))
    assert feedback.ours() == []
    assert any("cpp_wrapper: our extern kernels have no C shim" in r.getMessage() for r in caplog.records)


def test_the_same_graph_without_cpp_wrapper_is_offered(inductor, feedback):
    """The control: the mode gate, not the graph, keeps our candidates out above."""
    a, b = rand(128, 64), rand(64, 96)
    torch.compile(lambda a, b: torch.relu(a @ b), mode="max-autotune-no-cudagraphs")(a, b)
    assert feedback.ours()


def test_aot_inductor_compiles_packages_loads_and_runs(inductor, feedback, caplog, tmp_path):
    import torch._inductor.config as config

    caplog.set_level(logging.INFO, logger="cutedsl_backend.inductor")
    model = _model()
    x = rand(32, 64)
    with torch.no_grad():
        ref = model(x)
        exported = torch.export.export(model, (x,))
        with config.patch(max_autotune=True):
            path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "mlp.pt2"))
        loaded = torch._inductor.aoti_load_package(path)
        out = loaded(x)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)
    assert feedback.ours() == []
    assert any("AOTInductor: our extern kernels have no C shim" in r.getMessage() for r in caplog.records)
