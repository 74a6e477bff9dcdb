"""What our kernels cannot take is not offered, and the DEBUG log says why."""

import pytest

torch = pytest.importorskip("torch")

from .conftest import compile_and_code, rand  # noqa: E402


@pytest.mark.parametrize("case, why", [
    ("float32", "dtype"),
    ("k_misaligned", "alignment"),
    ("n_misaligned", "alignment"),
])
def test_refused_with_reason(inductor, feedback, debug_log, case, why):
    if case == "float32":
        a, b = rand(128, 64, dtype=torch.float32), rand(64, 96, dtype=torch.float32)
    elif case == "k_misaligned":
        a, b = rand(128, 100), rand(100, 96)  # a's row stride 100 is not 16-byte aligned
    else:
        a, b = rand(128, 64), rand(64, 100)
    out, code = compile_and_code(lambda a, b: a @ b, a, b)
    assert feedback.ours() == [] and "cutedsl" not in code
    lines = [r.getMessage() for r in debug_log.records if "not offering" in r.getMessage()]
    assert any(why in line for line in lines), lines
    torch.testing.assert_close(out, a @ b)


def test_cpu_device_refused_by_default_policy(inductor, feedback, debug_log):
    inductor.enable()  # the default device policy: CUDA sm90/sm100 only
    a, b = rand(128, 64), rand(64, 96)
    compile_and_code(lambda a, b: a @ b, a, b)
    assert feedback.ours() == []
    assert any("device: cpu" in r.getMessage() for r in debug_log.records)


def test_nothing_offered_without_max_autotune(inductor, feedback):
    a, b = rand(128, 64), rand(64, 96)
    fn = torch.compile(lambda a, b: torch.nn.functional.gelu(a @ b))
    fn(a, b)
    assert feedback.ours() == []


def test_disabled_offers_nothing(inductor, feedback):
    inductor.disable()
    a, b = rand(128, 64), rand(64, 96)
    out, code = compile_and_code(lambda a, b: torch.relu(a @ b), a, b)
    assert feedback.ours() == [] and "cutedsl" not in code


def test_residual_alignment_is_decided_statically():
    """The fused offer says whether the residual may be TMA-loaded: aligned (L, M, N) or (M, N)
    residuals yes; a 2-D residual broadcast over a batched GEMM, or an odd row stride or offset, no."""
    from cutedsl_backend.inductor.eligibility import Operand, Sizes, check_gemm
    from cutedsl_backend.problem import UnsupportedGemmError

    a2, b2 = Operand((256, 64), (64, 1), "bfloat16"), Operand((64, 128), (128, 1), "bfloat16")
    a3, b3 = Operand((2, 256, 64), (16384, 64, 1), "bfloat16"), Operand((2, 64, 128), (8192, 128, 1), "bfloat16")

    def aligned(a, b, res):
        offer = check_gemm(a, b, arch="sm90a", sizes=Sizes(), residual=res)
        assert offer.epilogue.residual
        return offer.epilogue.residual_aligned

    assert aligned(a2, b2, Operand((256, 128), (128, 1), "bfloat16"))
    assert aligned(a3, b3, Operand((2, 256, 128), (32768, 128, 1), "bfloat16"))
    # a residual broadcast over L or over rows is not fused at all (the eager op would copy it)
    for res in (Operand((256, 128), (128, 1), "bfloat16"), Operand((2, 256, 128), (0, 128, 1), "bfloat16")):
        with pytest.raises(UnsupportedGemmError, match="residual: broadcast"):
            check_gemm(a3, b3, arch="sm90a", sizes=Sizes(), residual=res)
    with pytest.raises(UnsupportedGemmError, match="residual: broadcast"):
        check_gemm(a2, b2, arch="sm90a", sizes=Sizes(), residual=Operand((256, 128), (0, 1), "bfloat16"))
    assert not aligned(a2, b2, Operand((256, 128), (132, 1), "bfloat16"))  # 264-byte rows
    assert not aligned(a2, b2, Operand((256, 128), (128, 1), "bfloat16", offset=1))


def test_swap_ab_is_offered_where_the_dispatcher_swaps():
    """At a few hundred tokens the offer's first config is the dispatcher's swap-AB pick (16-bit,
    and fp8 with scalar scales); fp8 with rowwise scales is offered no swapped config."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.inductor.eligibility import Operand, Sizes, check_gemm

    a = Operand((192, 14336), (14336, 1), "bfloat16")
    w_t = Operand((14336, 3712), (1, 14336), "bfloat16")  # nn.Linear's weight, transposed (K-major)
    offer = check_gemm(a, w_t, arch="sm90a", sizes=Sizes())
    assert offer.configs[0].swap_ab and offer.configs[0] == default_config(offer.problem)
    a8 = Operand((192, 8192), (8192, 1), "float8_e4m3fn")
    w8_t = Operand((8192, 9728), (1, 8192), "float8_e4m3fn")
    scalar = Operand((), (), "float32")
    offer = check_gemm(a8, w8_t, arch="sm90a", sizes=Sizes(), scale_a=scalar, scale_b=scalar)
    assert offer.epilogue.scale_a == "scalar" and offer.configs[0].swap_ab
    assert offer.configs[0] == default_config(offer.problem, epilogue=EpilogueSpec(scale_a="scalar", scale_b="scalar"))
    rows, cols = Operand((192, 1), (1, 1), "float32"), Operand((1, 9728), (9728, 1), "float32")
    offer = check_gemm(a8, w8_t, arch="sm90a", sizes=Sizes(), scale_a=rows, scale_b=cols)
    assert offer.epilogue.scale_a == "row" and not any(c.swap_ab for c in offer.configs)
