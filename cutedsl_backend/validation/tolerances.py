"""The tolerance policy: the one place that says how close a result must be to the reference.

Reference: torch.matmul of the same (already rounded) inputs in float64, so the only errors
allowed are (1) fp32 accumulation in a different order and (2) one rounding to the output dtype.

  elementwise:  |out - ref| <= rtol * |ref| + atol * scale,   scale = rms(ref) (never 0)
  normwise:     ||out - ref||_2 / ||ref||_2 <= rel_l2

with rtol = 2 u_out (u: unit roundoff of the output dtype; rounding contributes at most u|ref|)
and atol = u_out + c sqrt(K) u_fp32 (+ 2^-10 for a transcendental activation, which the GPU
evaluates with its fast approximations): the accumulation-order term grows like sqrt(K) for random
inputs (a worst-case K bound would hide real indexing bugs at large K). NaN or Inf in the output
where the reference is finite never passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIT_ROUNDOFF = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float32": 2.0**-24,
}
ACC_ORDER_FACTOR = 64.0
# Transcendental activations run on the GPU's fast approximations (tanh.approx, ex2.approx):
# relative error ~2^-11; below bf16's rounding, not below fp16/fp32's.
ACTIVATION_APPROX = {"gelu": 2.0**-10, "gelu_tanh": 2.0**-10, "silu": 2.0**-10, "sigmoid": 2.0**-10,
                     "tanh": 2.0**-10}


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float  # in units of rms(ref)
    rel_l2: float

    def describe(self) -> str:
        return f"rtol={self.rtol:.2e} atol={self.atol:.2e}*rms(ref) rel_l2<={self.rel_l2:.2e}"


# Hopper's FP8 tensor cores keep about 14 mantissa bits in their own accumulator (the DeepSeek-V3
# report's measurement; ours on the H200 agree: with fast accumulation at K=784 one element reached
# 1.03x of the plain bf16 bound). Products summed there carry that unit's error, growing
# like sqrt(n) u rms(ref) (1 sigma) for random data, n = how many the tensor cores add up before an fp32 add.
FP8_TC_ACC_UNIT = 2.0**-14
FP8_TC_ACC_FACTOR = 5.0  # the largest of ~1e7 elements lies within ~5 sigma
# The precise mode adds each k-tile's partial sums into fp32; no sm90/sm100 FP8 tile is deeper.
FP8_PRECISE_CHUNK = 128


def tolerance(out_dtype: str, k: int, activation: str | None = None, tc_acc_len: int = 0,
              terms: int = 1) -> Tolerance:
    """The bounds for one result. ``tc_acc_len``: products the FP8 tensor cores accumulate in
    their reduced-precision accumulator before an fp32 add (0 for 16-bit inputs). Its error,
    sigma = sqrt(tc_acc_len) * 2^-14 relative, adds one sigma to rtol (large elements have large
    partial sums), FP8_TC_ACC_FACTOR sigmas to atol and two to the normwise bound; the output
    dtype's own rounding comes on top, so an fp32 output is held to fp32's rounding plus the
    accumulation mode's error, a bf16 one to bf16's. ``terms``: GEMM results the output combines
    before its one rounding (the gated product act(g) * u: two, each entering with a sensitivity
    of at most ~1.1 for the gated activations), each bringing its accumulation error."""
    u = UNIT_ROUNDOFF[out_dtype]
    acc = terms * ACC_ORDER_FACTOR * math.sqrt(max(k, 1)) * UNIT_ROUNDOFF["float32"]
    sigma = terms * math.sqrt(tc_acc_len) * FP8_TC_ACC_UNIT if tc_acc_len else 0.0
    act = ACTIVATION_APPROX.get(activation, 0.0) if activation else 0.0
    return Tolerance(rtol=2 * u + sigma + act, atol=u + acc + FP8_TC_ACC_FACTOR * sigma + act,
                     rel_l2=2 * u + acc + 2 * sigma + act)


def compare(out, ref, out_dtype: str, k: int, activation: str | None = None, tc_acc_len: int = 0,
            terms: int = 1, magnitude=None) -> dict:
    """Check ``out`` against ``ref`` (torch tensors). Returns metrics and ``ok``. ``magnitude``
    (optional, ``ref``'s shape): the size of the summed products, sqrt((a*a) @ (b*b)) times the
    scales, which an accumulation's error scales with; where the products cancel (a tiny output,
    a dot product near zero) the bounds are taken relative to it, not to the smaller result."""
    import torch

    tol = tolerance(out_dtype, k, activation, tc_acc_len, terms)
    o = out.double()
    r = ref.double()
    finite_ref = torch.isfinite(r)
    bad_nonfinite = int((~torch.isfinite(o) & finite_ref).sum())
    diff = (o - r).abs()
    diff = torch.where(finite_ref, diff, torch.zeros_like(diff))
    scale = float(r[finite_ref].pow(2).mean().sqrt()) if bool(finite_ref.any()) else 1.0
    norm = float(r[finite_ref].norm())
    if magnitude is not None:
        mag = magnitude.double()[finite_ref]
        scale = max(scale, float(mag.pow(2).mean().sqrt()) if mag.numel() else 0.0)
        norm = max(norm, float(mag.norm()))
    scale = scale or 1.0
    allowed = tol.rtol * r.abs() + tol.atol * scale
    n_bad = int((diff > allowed).sum())
    rel_l2 = float(diff.norm() / (norm + 1e-300))
    max_ratio = float((diff / allowed).max()) if diff.numel() else 0.0
    ok = bad_nonfinite == 0 and n_bad == 0 and rel_l2 <= tol.rel_l2 and not math.isnan(rel_l2)
    return {
        "ok": ok,
        "max_abs_err": float(diff.max()) if diff.numel() else 0.0,
        "rel_l2": rel_l2,
        "max_err_over_allowed": max_ratio,
        "n_bad": n_bad,
        "n_nonfinite": bad_nonfinite,
        "tolerance": tol.describe(),
    }


FP8_MIN_COSINE = 0.999
# a gated output act(g) * u combines two GEMM results (compare's ``terms``)
GATED_TERMS = 2


def compare_fp8(out, ref, out_dtype: str, k: int, activation: str | None = None,
                fast_accum: bool = False, terms: int = 1, magnitude=None) -> dict:
    """FP8: ``ref`` is built from the dequantized inputs (fp8 values times their scales, exact in
    float64). Hopper's FP8 WGMMA accumulates in the tensor cores with fewer mantissa bits than
    fp32, in both modes: measured on the H200 at K=784 (2026-12-02): relative L2 errors of
    ~5e-4 with fast accumulation and 1e-4..2.5e-4 with the per-k-tile fp32 promotion, against
    ~1e-6 for a true fp32 accumulation. So an FP8 result is held to its output dtype's bounds
    plus the tensor-core accumulator's term (:func:`tolerance`) over K products (``fast_accum``)
    or over one k-tile (precise), and to cosine similarity >= FP8_MIN_COSINE, the scale-free
    summary FP8 users quote. ``magnitude``: as in :func:`compare`; where the products cancel to
    under a quarter of it, the cosine (a direction of mostly accumulation error) is not held."""
    import torch

    tc_len = k if fast_accum else min(k, FP8_PRECISE_CHUNK)
    m = compare(out, ref, out_dtype, k, activation, tc_acc_len=tc_len, terms=terms, magnitude=magnitude)
    m["fast_accum"] = fast_accum
    o = out.double().flatten()
    r = ref.double().flatten()
    fin = torch.isfinite(r) & torch.isfinite(o)
    cancelled = magnitude is not None and float(r[fin].norm()) < 0.25 * float(magnitude.double().flatten()[fin].norm())
    if cancelled or (bool(fin.any()) and not (bool(o[fin].any()) or bool(r[fin].any()))):
        cos = 1.0  # both exactly zero (K = 0, or zero biases past it), or cancelled products: not a direction
    else:
        cos = float(torch.nn.functional.cosine_similarity(o[fin], r[fin], dim=0)) if bool(fin.any()) else 0.0
    m["cosine"] = cos
    m["ok"] = m["ok"] and cos >= FP8_MIN_COSINE
    return m
