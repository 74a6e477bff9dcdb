"""The gated GEMM's eager API (``gemm_gated``) fuzzed against torch's semantics, as
:mod:`~cutedsl_backend.validation.fuzz` does for ``gemm``: never a wrong answer, never a foreign
exception.

Each case (replayable from ``(seed, index)``; drawn from its own random streams, so a seed's
``gemm`` cases are the same with or without these) draws a call a user could write: 2-D or 3-D
activations in any of the fuzzer's views (transposed, at an offset, expanded, strided), the two
weights or one concatenated ``[gate | up]`` weight (contiguous, padded rows, at an offset,
transposed, expanded, of mismatched shapes), biases (per weight, concatenated, float32, of a wrong
length), every gated activation and an unknown one, 16-bit or FP8 operands with tensorwise or
per-row scales and an output dtype, ``out`` (fresh, strided, of a wrong shape, aliasing ``a``),
``requires_grad`` inputs, and sometimes an explicit config (split-K, short A loads, B multicast).
The oracle is ``act(a @ w_gate^T + b_gate) * (a @ w_up^T + b_up)`` in float64 (FP8: on the
dequantized inputs), or torch's refusal where ``F.linear`` or the product refuses the shapes; our
call must match it within the tolerance policy or raise :class:`UnsupportedGemmError`.
"""

from __future__ import annotations

import random
from typing import Optional

from ..configs import GemmConfig
from ..epilogue import GATED_ACTIVATIONS
from .fuzz import Case, _extent, _view, judge

# explicit configs some cases ask for: split-K, short A loads (refused by name past their rows),
# B multicast, both schedules
GATED_CONFIGS = (GemmConfig(128, 256, cluster_n=2), GemmConfig(128, 128, schedule="pingpong"),
                 GemmConfig(128, 256, cluster_m=2), GemmConfig(64, 128, schedule="pingpong", splits=3),
                 GemmConfig(64, 64, schedule="pingpong", a_rows=16))


def draw_gated(seed: int, index: int, device="cuda") -> Case:
    """Gated case ``index`` of the run seeded ``seed`` (the same case on every run)."""
    import torch

    from .seeds import stable_seed

    rng = random.Random(stable_seed("fuzz-gated", seed, index))
    gen = torch.Generator(device=device).manual_seed(stable_seed("fuzz-gated-data", seed, index))
    fp8 = rng.random() < 0.2
    dtype = rng.choice([torch.bfloat16, torch.float16])
    notes: list = ["float8_e4m3fn" if fp8 else str(dtype).replace("torch.", "")]
    # FP8 operands are drawn in e4m3 (randn fits its range) and then viewed, so every view holds
    in_dtype = torch.float8_e4m3fn if fp8 else dtype
    m, n, k = _extent(rng), _extent(rng), _extent(rng)
    a_shape = (rng.choice([2, 3]), m, k) if not fp8 and rng.random() < 0.3 else (m, k)
    a = _view(rng, a_shape, in_dtype, device, notes, "a", gen)
    w_shapes = [(n, k), (n, k)]
    if rng.random() < 0.04:
        w_shapes[1] = rng.choice([(n, k + 1), (n + 8, k)])  # shapes torch refuses
        notes.append("weight shape mismatch")
    w_gate = _view(rng, w_shapes[0], in_dtype, device, notes, "w_gate", gen)
    w_up = _view(rng, w_shapes[1], in_dtype, device, notes, "w_up", gen)
    kwargs: dict = {}
    concatenated = w_shapes[0] == w_shapes[1] and rng.random() < 0.3
    if concatenated:
        kwargs["w_gate_up"] = torch.cat([w_gate, w_up])
        if rng.random() < 0.3:  # padded rows: a row stride past K
            padded = torch.empty(2 * n, k + 8, device=device, dtype=in_dtype)[:, :k]
            kwargs["w_gate_up"] = padded.copy_(kwargs["w_gate_up"])
            notes.append("padded w_gate_up")
        notes.append("concatenated")
    else:
        kwargs["w_gate"], kwargs["w_up"] = w_gate, w_up
    out_dtype = dtype
    if fp8:
        # scales around K^-1/4 each: gate and up come out O(1) (tiny values would underflow an
        # fp16 result, which no kernel can then match in relative terms)
        unit = max(k, 1) ** -0.25

        def scales(shape):
            return (torch.rand(shape, device=device, generator=gen) + 0.5) * unit

        kwargs["scale_a"] = scales((m, 1) if rng.random() < 0.5 else ())
        rowwise = rng.random() < 0.5
        if concatenated:
            kwargs["scale_gate_up"] = scales(2 * n if rowwise else ())
        else:
            for w in ("scale_gate", "scale_up"):
                kwargs[w] = scales(n if rowwise else ())
        notes.append("rowwise scales" if rowwise else "tensorwise scales")
        kwargs["use_fast_accum"] = rng.random() < 0.5
        out_dtype = rng.choice([torch.bfloat16, torch.bfloat16, torch.float16, torch.float32])
        kwargs["out_dtype"] = out_dtype
    r = rng.random()
    bias_dtype = out_dtype if rng.random() < 0.7 else torch.float32
    if r < 0.25:
        kwargs["bias_gate"], kwargs["bias_up"] = (torch.randn(n, device=device, generator=gen).to(bias_dtype)
                                                  for _ in range(2))
        notes.append("biases")
    elif r < 0.35:
        kwargs["bias_gate"] = torch.randn(n, device=device, generator=gen).to(bias_dtype)
        notes.append("gate bias")
    elif r < 0.45 and concatenated:
        kwargs["bias_gate_up"] = torch.randn(2 * n, device=device, generator=gen).to(bias_dtype)
        notes.append("concatenated bias")
    elif r < 0.48:
        kwargs["bias_up"] = torch.randn(n + 1, device=device, generator=gen).to(bias_dtype)
        notes.append("bias of a wrong length")
    kwargs["activation"] = rng.choice(GATED_ACTIVATIONS) if rng.random() < 0.97 else "tanh"
    result_shape = (*a_shape[:-1], w_shapes[0][0])
    q = rng.random()
    if q < 0.15:
        kwargs["out"] = torch.empty(result_shape, device=device, dtype=out_dtype)
        notes.append("out")
    elif q < 0.2:
        kwargs["out"] = torch.empty(*result_shape[:-1], result_shape[-1] + 8, device=device,
                                    dtype=out_dtype)[..., : result_shape[-1]]
        notes.append("strided out")
    elif q < 0.23 and a.dtype == out_dtype and tuple(a.shape) == result_shape:
        kwargs["out"] = a
        notes.append("out aliasing a")
    elif q < 0.25:
        kwargs["out"] = torch.empty(max(1, m * n), device=device, dtype=out_dtype)
        notes.append("out of another shape")
    if not fp8 and "out" not in kwargs and rng.random() < 0.1:
        a = a.detach().requires_grad_()
        notes.append("requires grad on a")
    if rng.random() < 0.15:
        kwargs["config"] = rng.choice(GATED_CONFIGS)
        notes.append("config")
    return Case(index, a, None, kwargs, notes, "gated case")


def gated_reference(case: Case):
    """What torch computes for the case, in float64 (None: torch refuses it, or it names an
    activation there is no gated form of)."""
    if case.kwargs["activation"] not in GATED_ACTIVATIONS:
        return None
    try:
        y = _gated_float64(case.a.detach().double(), case.kwargs)
    except RuntimeError:  # shapes torch refuses (F.linear, the scales' or the product's broadcast)
        return None
    return y


def _gated_float64(a, kw: dict):
    from ..epilogue import gated_reference as formula

    if "w_gate_up" in kw:
        w = kw["w_gate_up"].double()
        if w.shape[0] % 2:
            raise RuntimeError("an odd number of rows has no gate and up halves")
        w_gate, w_up = w[: w.shape[0] // 2], w[w.shape[0] // 2:]
    else:
        w_gate, w_up = kw["w_gate"].double(), kw["w_up"].double()
    n = w_gate.shape[0]
    if "scale_a" in kw:
        a = a * kw["scale_a"].double().reshape(-1, 1) if kw["scale_a"].numel() > 1 else a * kw["scale_a"].double()
        if "scale_gate_up" in kw:
            s = kw["scale_gate_up"].double().reshape(-1).expand(2 * n)
            sg, su = s[:n], s[n:]
        else:
            sg, su = (kw[w].double().reshape(-1).expand(n) for w in ("scale_gate", "scale_up"))
        w_gate, w_up = w_gate * sg.reshape(-1, 1), w_up * su.reshape(-1, 1)
    if "bias_gate_up" in kw:
        b = kw["bias_gate_up"].double()
        b_gate, b_up = b[:n], b[n:]
    else:
        b_gate, b_up = (None if kw.get(w) is None else kw[w].double() for w in ("bias_gate", "bias_up"))
    return formula(a, w_gate, w_up, kw["activation"], b_gate, b_up)


def run_gated_case(case: Case) -> Optional[str]:
    """None when the case behaves (a right result, or UnsupportedGemmError); else the finding."""
    import cutedsl_backend as cb

    from .tolerances import GATED_TERMS, compare, compare_fp8

    def verdict(got, ref):
        od, k, act = str(got.dtype).replace("torch.", ""), case.a.shape[-1], case.kwargs["activation"]
        if "scale_a" in case.kwargs:
            return compare_fp8(got, ref, od, k, activation=act, fast_accum=case.kwargs["use_fast_accum"],
                               terms=GATED_TERMS)
        return compare(got, ref, od, k, activation=act, terms=GATED_TERMS)

    return judge(case, lambda: cb.gemm_gated(case.a, **case.kwargs), gated_reference, verdict)
