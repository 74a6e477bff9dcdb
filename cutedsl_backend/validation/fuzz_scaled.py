"""The FP8 eager API (``scaled_mm``) fuzzed as :mod:`~cutedsl_backend.validation.fuzz` does for
``gemm``: never a wrong answer, never a foreign exception.

Each case (replayable from ``(seed, index)``; drawn from its own random streams, so a seed's
``gemm`` and ``gemm_gated`` cases are the same with or without these) draws a call a user could
write: e4m3 or e5m2 operands (e5m2 x e5m2 included, which torch refuses too), ``a`` in any of the
fuzzer's views and ``b`` as nn.Linear's ``w.t()`` or in another layout, tensorwise (0-d or
one-element) or rowwise ((M, 1) and (1, N)) float32 scales, scales of a wrong shape or dtype, a
column or row bias (float32 or the output dtype, or of a wrong length), a residual with ``beta``,
an activation, the output dtype, fast accumulation, ``out`` (fresh, strided, of a wrong shape),
operands that require grad, token counts where the dispatcher swaps A and B, and sometimes an
explicit config (split-K, swap-AB). The oracle is ``act(scale_a * scale_b * (a @ b) + bias +
beta * residual)`` in float64 on the fp8 values, or a refusal where those shapes do not combine;
our call must match it within the FP8 tolerance policy or raise :class:`UnsupportedGemmError`.
"""

from __future__ import annotations

import random
from typing import Optional

from ..configs import GemmConfig
from .fuzz import ACTIVATIONS, Case, _extent, _view, judge

# the views of a and w (fuzz._view's kinds): contiguous favoured, the rest (mostly refused by
# name for FP8) still drawn
VIEW_WEIGHTS = (10, 2, 2, 1, 1)
# explicit configs some cases ask for: split-K (precise fp8 sums its K slices in fp32 too),
# swap-AB (its scales exchanged), short A loads (refused by name past their rows)
SCALED_CONFIGS = (GemmConfig(128, 128, splits=2), GemmConfig(64, 128, schedule="pingpong", swap_ab=True),
                  GemmConfig(128, 192, swap_ab=True), GemmConfig(64, 64, schedule="pingpong", a_rows=16))


def draw_scaled(seed: int, index: int, device="cuda") -> Case:
    """scaled_mm case ``index`` of the run seeded ``seed`` (the same case on every run)."""
    import torch

    from .seeds import stable_seed

    rng = random.Random(stable_seed("fuzz-scaled", seed, index))
    gen = torch.Generator(device=device).manual_seed(stable_seed("fuzz-scaled-data", seed, index))
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    a_dtype, b_dtype = rng.choices([(e4m3, e4m3), (e4m3, e5m2), (e5m2, e4m3), (e5m2, e5m2)], [8, 1, 1, 1])[0]
    notes: list = [f"{str(a_dtype)[6:]}x{str(b_dtype)[6:]}"]
    # a few hundred tokens now and then: where the dispatcher swaps A and B (tensorwise scales)
    m = rng.choice([150, 192]) if rng.random() < 0.15 else _extent(rng)
    n, k = _extent(rng), _extent(rng)
    if rng.random() < 0.8:  # the FP8 kernels take K in whole 16-byte rows: most cases reach one
        k = -(-k // 16) * 16
    a = _view(rng, (m, k), a_dtype, device, notes, "a", gen, weights=VIEW_WEIGHTS)
    layout = rng.choices(["linear", "row-major", "K mismatch"], [8, 2, 0.3])[0]
    if layout == "linear":  # nn.Linear's weight, transposed: b column-major (what torch._scaled_mm takes)
        b = _view(rng, (n, k), b_dtype, device, notes, "w", gen, weights=VIEW_WEIGHTS).t()
    elif layout == "row-major":
        b = _view(rng, (k, n), b_dtype, device, notes, "b", gen)
        notes.append("row-major b")
    else:
        b = _view(rng, (n, k + 1), b_dtype, device, notes, "w", gen).t()
        notes.append("K mismatch")
    # scales around K^-1/4 each: the result comes out O(1)
    unit = max(k, 1) ** -0.25

    def scale(shape):
        return (torch.rand(shape, device=device, generator=gen) + 0.5) * unit

    kind = rng.choices(["tensorwise", "one-element", "rowwise", "wrong shape", "wrong dtype"], [5, 1, 4, 0.5, 0.5])[0]
    if kind == "tensorwise":
        kwargs: dict = {"scale_a": scale(()), "scale_b": scale(())}
    elif kind == "one-element":
        kwargs = {"scale_a": scale((1,)), "scale_b": scale((1, 1))}
    elif kind == "rowwise":
        kwargs = {"scale_a": scale((m, 1)), "scale_b": scale((1, n))}
    elif kind == "wrong shape":
        kwargs = {"scale_a": scale((1, max(m, 1))), "scale_b": scale((max(n, 1), 1))}
    else:
        kwargs = {"scale_a": scale(()).to(torch.float16), "scale_b": scale(())}
    notes.append(f"{kind} scales")
    out_dtype = rng.choice([torch.bfloat16, torch.bfloat16, torch.float16, torch.float32])
    kwargs["out_dtype"] = out_dtype
    kwargs["use_fast_accum"] = rng.random() < 0.4
    r = rng.random()
    bias_dtype = out_dtype if rng.random() < 0.6 else torch.float32
    if r < 0.25:
        kwargs["bias"] = torch.randn(n, device=device, generator=gen).to(bias_dtype)
        notes.append("col bias")
    elif r < 0.32:
        kwargs["bias"] = torch.randn(m, 1, device=device, generator=gen).to(bias_dtype)
        notes.append("row bias")
    elif r < 0.35:
        kwargs["bias"] = torch.randn(n + 1, device=device, generator=gen).to(bias_dtype)
        notes.append("bias of a wrong length")
    if rng.random() < 0.2:
        kwargs["residual"] = _view(rng, (m, n), out_dtype, device, notes, "residual", gen)
        kwargs["beta"] = rng.choice([1.0, 0.5, -2.0])
    kwargs["activation"] = rng.choice(ACTIVATIONS)
    q = rng.random()
    if q < 0.15:
        kwargs["out"] = torch.empty(m, n, device=device, dtype=out_dtype)
        notes.append("out")
    elif q < 0.2:
        kwargs["out"] = torch.empty(m, n + 8, device=device, dtype=out_dtype)[:, :n]
        notes.append("strided out")
    elif q < 0.23:
        kwargs["out"] = torch.empty(max(1, m * n), device=device, dtype=out_dtype)
        notes.append("out of another shape")
    if rng.random() < 0.15 and "residual" in kwargs:
        kwargs["residual"] = kwargs["residual"].detach().clone().requires_grad_()
        notes.append("requires grad on residual")
    if rng.random() < 0.12:  # drawn last: the draws above stay what they were for every seed
        kwargs["config"] = rng.choice(SCALED_CONFIGS)
        notes.append("config")
    return Case(index, a, b, kwargs, notes, "scaled_mm case")


def scaled_reference(case: Case):
    """The float64 result on the fp8 values (None: the shapes do not combine)."""
    from ..epilogue import torch_activation

    kw = case.kwargs
    try:
        y = (case.a.double() @ case.b.double()) * kw["scale_a"].double() * kw["scale_b"].double()
        if y.dim() != 2 or tuple(y.shape) != (case.a.shape[0], case.b.shape[1]):
            return None  # scales that broadcast the product to another shape
        if kw.get("bias") is not None:
            y = y + kw["bias"].double()
        if kw.get("residual") is not None:
            y = y + kw.get("beta", 1.0) * kw["residual"].detach().double()
    except RuntimeError:
        return None
    if tuple(y.shape) != (case.a.shape[0], case.b.shape[1]):
        return None  # a bias that broadcasts the result to another shape
    if kw.get("activation"):
        y = torch_activation(kw["activation"])(y)
    return y


def _magnitude(case: Case):
    """sqrt((a*a) @ (b*b)) times the scales' sizes: what the accumulation's error scales with (a
    1x1 output whose products cancel is held to this, not to its near-zero value)."""
    kw = case.kwargs
    a2, b2 = case.a.double().pow(2), case.b.double().pow(2)
    return (a2 @ b2).sqrt() * kw["scale_a"].double().abs() * kw["scale_b"].double().abs()


def run_scaled_case(case: Case) -> Optional[str]:
    """None when the case behaves (a right result, or UnsupportedGemmError); else the finding."""
    import cutedsl_backend as cb

    from .tolerances import compare_fp8

    def verdict(got, ref):
        od = str(got.dtype).replace("torch.", "")
        return compare_fp8(got, ref, od, case.a.shape[-1], activation=case.kwargs.get("activation"),
                           fast_accum=case.kwargs["use_fast_accum"], magnitude=_magnitude(case).to(ref.device))

    return judge(case, lambda: cb.scaled_mm(case.a, case.b, **case.kwargs), scaled_reference, verdict)
