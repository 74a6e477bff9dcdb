"""The tolerance policy must pass honest results and catch wrong ones (NaN never passes)."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.validation.tolerances import compare, tolerance  # noqa: E402


def _case(out_dtype, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(64, k, generator=g).to(torch.bfloat16)
    b = torch.randn(k, 96, generator=g).to(torch.bfloat16)
    ref = a.double() @ b.double()
    out = (a.float() @ b.float()).to(getattr(torch, out_dtype))
    return out, ref


@pytest.mark.parametrize("od", ["bfloat16", "float16", "float32"])
def test_honest_result_passes(od):
    out, ref = _case(od)
    assert compare(out, ref, od, 512)["ok"]


@pytest.mark.parametrize("od", ["bfloat16", "float16", "float32"])
def test_wrong_results_fail(od):
    out, ref = _case(od)
    for corrupt in (
        lambda o: o.index_fill_(0, torch.tensor([3]), 0.0),       # an unwritten row
        lambda o: o.mul_(1.02),                                   # a 2% scale error
        lambda o: o.index_fill_(1, torch.tensor([95]), float("nan")),  # NaN in a tail column
        lambda o: o.copy_(o.flip(0)),                             # transposed/misplaced tile
    ):
        bad = out.clone()
        corrupt(bad)
        assert not compare(bad, ref, od, 512)["ok"]


def test_nan_never_passes_even_where_tolerance_is_loose():
    out, ref = _case("bfloat16")
    out[0, 0] = float("nan")
    m = compare(out, ref, "bfloat16", 512)
    assert not m["ok"] and m["n_nonfinite"] == 1


def test_nan_in_reference_must_match():
    out, ref = _case("float32")
    ref[1, 1] = float("nan")
    out[1, 1] = float("nan")
    assert compare(out, ref, "float32", 512)["ok"]


def test_tolerance_grows_with_k_and_output_precision():
    assert tolerance("bfloat16", 4096).atol > tolerance("float16", 4096).atol > tolerance("float32", 4096).atol
    assert tolerance("float32", 16384).atol > tolerance("float32", 64).atol


def test_fp8_policy_accepts_reduced_precision_accumulation_and_catches_bugs():
    from cutedsl_backend.validation.tolerances import compare_fp8

    g = torch.Generator().manual_seed(1)
    a = (torch.randn(64, 256, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(256, 96, generator=g) * 2).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(64, 1, generator=g) + 0.5, torch.rand(1, 96, generator=g) + 0.5
    ref = (a.double() @ b.double()) * sa.double() * sb.double()
    # a tensor-core-like result: ~2^-12 relative noise on top of the exact value
    noisy = ref * (1 + 2.0**-12 * torch.randn(ref.shape, generator=g, dtype=torch.float64))
    assert compare_fp8(noisy.float(), ref, "float32", 256)["ok"]
    assert compare_fp8(noisy.to(torch.bfloat16), ref, "bfloat16", 256)["ok"]
    ignored_scale = (a.double() @ b.double()) * sa.double()  # scale_b dropped
    assert not compare_fp8(ignored_scale.float(), ref, "float32", 256)["ok"]
    wrong_axis = (a.double() @ b.double()) * sa.double().flip(0) * sb.double()  # rows' scales misplaced
    assert not compare_fp8(wrong_axis.float(), ref, "float32", 256)["ok"]
    bad = noisy.float().clone()
    bad[3, 4] = float("nan")
    assert not compare_fp8(bad, ref, "float32", 256)["ok"]


def test_fp8_fast_accumulation_term_grows_with_k_and_still_catches_a_scale_error():
    from cutedsl_backend.validation.tolerances import compare_fp8

    assert tolerance("bfloat16", 4096, tc_acc_len=4096).atol > tolerance("bfloat16", 4096, tc_acc_len=128).atol
    assert tolerance("bfloat16", 4096, tc_acc_len=4096).rel_l2 > tolerance("bfloat16", 4096).rel_l2
    g = torch.Generator().manual_seed(2)
    ref = torch.randn(128, 256, generator=g, dtype=torch.float64)
    # fast accumulation: a 14-bit accumulator's error over K=4096 products, sqrt(K) * 2^-14 * rms
    noisy = ref + 64 * 2.0**-14 * torch.randn(ref.shape, generator=g, dtype=torch.float64)
    assert compare_fp8(noisy.float(), ref, "float32", 4096, fast_accum=True)["ok"]
    assert not compare_fp8(noisy.float(), ref, "float32", 4096, fast_accum=False)["ok"]
    assert not compare_fp8((ref * 1.02).float(), ref, "float32", 4096, fast_accum=True)["ok"]


def test_seeds_replay_across_processes():
    """The seed of a cell is the same in another process (hash() of a str is not)."""
    import subprocess
    import sys

    from cutedsl_backend.validation.seeds import stable_seed

    code = "from cutedsl_backend.validation.seeds import stable_seed; print(stable_seed('c', 1, 2, 3))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "123", "PYTHONPATH": __import__("os").getcwd()}).stdout.strip()
    assert int(other) == stable_seed("c", 1, 2, 3) and 0 <= stable_seed("x") < 2**31


def test_fp8_bounds_follow_the_output_dtype():
    """An fp32 (or fp16) FP8 output is held to its own rounding plus the accumulation mode's error,
    not to bf16's bounds: an error bf16 rounding would hide is caught in fp32."""
    from cutedsl_backend.validation.tolerances import compare_fp8

    assert tolerance("float32", 1024, tc_acc_len=128).rel_l2 < tolerance("bfloat16", 1024, tc_acc_len=128).rel_l2
    assert tolerance("float16", 1024, tc_acc_len=128).rtol < tolerance("bfloat16", 1024, tc_acc_len=128).rtol
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(256, 256, generator=g, dtype=torch.float64)
    off = ref * (1 + 4e-3)  # a 0.4% scale error: inside bf16's rounding, far outside fp32's + precise FP8's
    assert compare_fp8(off.to(torch.bfloat16), ref, "bfloat16", 1024)["ok"]
    assert not compare_fp8(off.float(), ref, "float32", 1024)["ok"]
    # precise FP8 accumulation noise (one k-tile's worth, measured ~1e-4..2.5e-4 rel_l2) passes in fp32
    noisy = ref + 2.5e-4 * torch.randn(ref.shape, generator=g, dtype=torch.float64)
    assert compare_fp8(noisy.float(), ref, "float32", 1024)["ok"]


def test_a_gated_output_carries_two_gemms_accumulation_errors_and_one_rounding():
    """terms=2 (a gated product act(g) * u): the accumulation terms double, the output dtype's
    rounding does not; an fp32 gated result computed in fp32 passes, one with the up GEMM 2% off
    or paired with the wrong columns fails."""
    from cutedsl_backend.validation.tolerances import GATED_TERMS

    one, two = tolerance("float32", 4096, "silu", 4096), tolerance("float32", 4096, "silu", 4096, GATED_TERMS)
    u32 = 2.0**-24
    assert two.rtol - 2 * u32 > one.rtol - 2 * u32 and two.atol > one.atol
    assert tolerance("bfloat16", 64, terms=2).rtol == tolerance("bfloat16", 64).rtol  # rounding-dominated
    g = torch.Generator().manual_seed(3)
    a, wg, wu = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((64, 512), (96, 512), (96, 512)))
    gate, up = a.double() @ wg.double().t(), a.double() @ wu.double().t()
    ref = torch.nn.functional.silu(gate) * up
    gate32, up32 = a.float() @ wg.float().t(), a.float() @ wu.float().t()
    assert compare(torch.nn.functional.silu(gate32) * up32, ref, "float32", 512, "silu", terms=GATED_TERMS)["ok"]
    for bad in (torch.nn.functional.silu(gate32) * up32 * 1.02,
                torch.nn.functional.silu(gate32) * up32.roll(1, dims=1)):
        assert not compare(bad, ref, "float32", 512, "silu", terms=GATED_TERMS)["ok"]


def test_fp8_zero_results_match_a_zero_reference():
    """K = 0: every element is exactly zero on both sides (the cosine of two zero vectors is the
    same vector, not 0); a non-zero result against a zero reference still fails."""
    from cutedsl_backend.validation.tolerances import compare_fp8

    zero = torch.zeros(8, 16, dtype=torch.float64)
    assert compare_fp8(zero.to(torch.bfloat16), zero, "bfloat16", 0)["ok"]
    assert not compare_fp8(torch.ones(8, 16, dtype=torch.bfloat16), zero, "bfloat16", 0)["ok"]


def test_the_second_term_widens_only_the_accumulation_allowance():
    """An FP8 fast-accumulation result (K = 4096, fp32 out) with one element off by 1.5x what a
    single GEMM's accumulation allows: wrong for a plain GEMM, within a gated product's two."""
    from cutedsl_backend.validation.tolerances import GATED_TERMS

    g = torch.Generator().manual_seed(9)
    ref = torch.randn(64, 96, generator=g, dtype=torch.float64)
    one = tolerance("float32", 4096, "silu", 4096)
    scale = float(ref.pow(2).mean().sqrt())
    out = ref.clone()
    out[5, 7] += 1.5 * (one.rtol * abs(float(ref[5, 7])) + one.atol * scale)
    assert not compare(out.float(), ref, "float32", 4096, "silu", tc_acc_len=4096)["ok"]
    assert compare(out.float(), ref, "float32", 4096, "silu", tc_acc_len=4096, terms=GATED_TERMS)["ok"]


def test_fp8_bounds_follow_the_products_where_they_cancel():
    """A 1x1 FP8 result whose products cancel to near zero carries the accumulation error of the
    products, not of the result: held to their magnitude it passes, held to its own value it
    would not; a result off by a dropped scale still fails."""
    import torch

    from cutedsl_backend.validation.tolerances import compare_fp8

    a = torch.tensor([[1.0, -1.0] * 32], dtype=torch.float64)  # K = 64, products +-1
    b = torch.tensor([[1.0] * 63 + [0.9375]], dtype=torch.float64).t()
    ref = a @ b  # 0.0625 from products of magnitude sqrt(64) = 8
    magnitude = ((a * a) @ (b * b)).sqrt()
    got = ref + 8 * 2e-4  # an accumulation error of the products' size, ~14-bit tensor-core sums
    assert not compare_fp8(got, ref, "float32", 64)["ok"]
    assert compare_fp8(got, ref, "float32", 64, magnitude=magnitude)["ok"]
    assert not compare_fp8(ref * 2.0, ref, "float32", 64, magnitude=magnitude)["ok"]  # off by a scale of 2
