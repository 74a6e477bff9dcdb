"""The eager API fuzzed against torch's semantics: never a wrong answer, never a foreign exception.

Each case (replayable from ``(seed, index)``) draws a GEMM a user could write: 2-D or 3-D operands,
row- or column-major views, views at offsets into larger buffers (some misaligned), expanded
(zero-stride) operands, empty and tiny extents, bias (per column, per row, of a wrong shape),
residual (2-D, 3-D, strided, broadcast), an activation, alpha/beta, an ``out`` (fresh, strided,
of a wrong shape, aliasing an input), and sometimes an explicit swap-AB config. Our call must
then either return what torch computes (checked against a float64 evaluation with the tolerance
policy, output poisoned with NaN first) or raise :class:`UnsupportedGemmError`; any other
exception, or a wrong value, is a finding.
``gemm_gated``'s and ``scaled_mm``'s cases are drawn by validation.fuzz_gated and
validation.fuzz_scaled and run after these.
``python -m cutedsl_backend fuzz`` runs it on a GPU; tests/gpu/test_fuzz_sm90.py runs a fixed seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Optional

from ..configs import GemmConfig

ACTIVATIONS = (None, None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
# explicit swap-AB configs (GemmConfig.swap_ab) some cases ask for: its plan's operand exchange
# meets every layout, epilogue and out= form the fuzzer draws (a refusal by name is fine)
SWAP_CONFIGS = (GemmConfig(128, 128, swap_ab=True), GemmConfig(64, 128, schedule="pingpong", swap_ab=True),
                GemmConfig(128, 192, splits=2, swap_ab=True),
                GemmConfig(64, 64, schedule="pingpong", splits=3, swap_ab=True))


@dataclass
class Case:
    """One drawn call: ``kwargs`` for ``gemm(a, b, **kwargs)`` (or, ``b`` None, for
    ``gemm_gated(a, **kwargs)``: its weights are among the kwargs), and how it was drawn."""

    index: int
    a: Any
    b: Any
    kwargs: dict
    notes: list = field(default_factory=list)
    label: str = "case"

    def describe(self) -> str:
        def geo(t):
            return None if t is None else (tuple(t.shape), tuple(t.stride()), t.storage_offset(), str(t.dtype))

        kw = {k: (geo(v) if hasattr(v, "stride") else v) for k, v in self.kwargs.items()}
        b = "" if self.b is None else f" b={geo(self.b)}"
        return f"{self.label} {self.index}: a={geo(self.a)}{b} {kw} ({', '.join(self.notes)})"


def _extent(rng: random.Random) -> int:
    return rng.choice([0, 1, 1, 2, 3, 7, 8, 16, 24, 40, 64, 96, 100, 128, 136, 200, 256, 264, 520])


def _view(rng: random.Random, shape: tuple, dtype, device, notes: list, what: str, gen,
          weights: tuple = (5, 3, 2, 1, 1)):
    """A tensor of ``shape`` (values randn) as a user might pass it: contiguous, transposed in its
    last two dims, at an offset into a larger buffer, expanded from a single row/column, or
    strided (drawn with ``weights`` in that order)."""
    import torch

    kind = rng.choices(["contiguous", "transposed", "offset", "expanded", "strided"], weights)[0]
    notes.append(f"{what} {kind}")
    if kind == "transposed" and len(shape) >= 2:
        base = torch.randn(*shape[:-2], shape[-1], shape[-2], device=device, generator=gen).to(dtype)
        return base.transpose(-1, -2)
    if kind == "offset":
        off = rng.choice([1, 4, 8, 16])
        flat = torch.randn(int(torch.tensor(shape).prod()) + off, device=device, generator=gen).to(dtype)
        return flat[off:].view(shape)
    if kind == "expanded" and len(shape) >= 2 and shape[-2] > 0:
        row = torch.randn(*shape[:-2], 1, shape[-1], device=device, generator=gen).to(dtype)
        return row.expand(shape)
    if kind == "strided" and len(shape) >= 2:
        pad = rng.choice([1, 8, 24])
        base = torch.randn(*shape[:-1], shape[-1] + pad, device=device, generator=gen).to(dtype)
        return base[..., : shape[-1]]
    return torch.randn(*shape, device=device, generator=gen).to(dtype)


def draw(seed: int, index: int, device="cuda") -> Case:
    """Case ``index`` of the run seeded ``seed`` (the same case on every run)."""
    import torch

    from .seeds import stable_seed

    rng = random.Random(stable_seed("fuzz", seed, index))
    gen = torch.Generator(device=device).manual_seed(stable_seed("fuzz-data", seed, index))
    dtype = rng.choice([torch.bfloat16, torch.float16])
    notes: list = [str(dtype).replace("torch.", "")]
    m, n, k = _extent(rng), _extent(rng), _extent(rng)
    if rng.random() < 0.1:
        k = k + 1 if rng.random() < 0.5 else k  # odd K: 16-byte strides broken where row-major
    batched = rng.choice(["2d", "2d", "3d@2d", "3d@3d", "2d@3d"])
    L = rng.choice([1, 2, 3])
    a_shape = (L, m, k) if batched in ("3d@2d", "3d@3d") else (m, k)
    b_shape = (L, k, n) if batched in ("3d@3d", "2d@3d") else (k, n)
    if rng.random() < 0.03:
        b_shape = (k + 1, n)  # a shape mismatch torch refuses
        notes.append("K mismatch")
    a = _view(rng, a_shape, dtype, device, notes, "a", gen)
    b = _view(rng, b_shape, dtype, device, notes, "b", gen)
    kwargs: dict = {}
    res_shape = (*(torch.broadcast_shapes(a_shape[:-2], b_shape[:-2])), m, n)
    r = rng.random()
    if r < 0.3:
        kwargs["bias"] = torch.randn(n, device=device, generator=gen).to(rng.choice([dtype, torch.float32]))
        notes.append("col bias")
    elif r < 0.4:
        kwargs["bias"] = torch.randn(m, 1, device=device, generator=gen).to(dtype)
        notes.append("row bias")
    elif r < 0.43:
        kwargs["bias"] = torch.randn(n + 1, device=device, generator=gen).to(dtype)[1:]
        notes.append("bias at a 2-byte offset")
    if rng.random() < 0.25:
        shape = res_shape if rng.random() < 0.6 else (m, n)
        kwargs["residual"] = _view(rng, shape, dtype, device, notes, "residual", gen)
        kwargs["beta"] = rng.choice([1.0, 0.5, -2.0])
    kwargs["activation"] = rng.choice(ACTIVATIONS)
    if rng.random() < 0.3:
        kwargs["alpha"] = rng.choice([0.5, 2.0, -1.0])
    if rng.random() < 0.2:
        kwargs["out_dtype"] = torch.float32
        if "bias" in kwargs:
            kwargs["bias"] = kwargs["bias"].float()
        if "residual" in kwargs:
            kwargs["residual"] = kwargs["residual"].float()
    q = rng.random()
    out_dtype = kwargs.get("out_dtype", dtype)
    full_out = res_shape  # torch.matmul's result shape
    if q < 0.15:
        kwargs["out"] = torch.empty(full_out, device=device, dtype=out_dtype)
        notes.append("out")
    elif q < 0.2:
        kwargs["out"] = torch.empty(*full_out[:-1], full_out[-1] + 8, device=device, dtype=out_dtype)[..., :n]
        notes.append("strided out")
    elif q < 0.23 and a.dtype == out_dtype and tuple(a.shape) == full_out:
        kwargs["out"] = a
        notes.append("out aliasing a")
    elif q < 0.25:
        kwargs["out"] = torch.empty(max(1, m * n), device=device, dtype=out_dtype)
        notes.append("out of another shape")
    if rng.random() < 0.15:  # drawn last: the draws above stay what they were for every seed
        kwargs["config"] = rng.choice(SWAP_CONFIGS)
        notes.append("swap-AB")
    return Case(index, a, b, kwargs, notes)


def torch_reference(case: Case):
    """What torch computes for the case, in float64 (None: torch refuses it as well)."""
    import torch

    from ..epilogue import torch_activation

    kw = case.kwargs
    try:
        y = torch.matmul(case.a.double(), case.b.double()) * kw.get("alpha", 1.0)
        if kw.get("bias") is not None:
            y = y + kw["bias"].double()
        if kw.get("residual") is not None:
            y = y + kw.get("beta", 1.0) * kw["residual"].double()
    except RuntimeError:
        return None
    if kw.get("activation"):
        y = torch_activation(kw["activation"])(y)
    return y


def judge(case, call, reference, compare) -> Optional[str]:
    """The verdict on one drawn call (``call()``: our result): None when it behaves (a right
    result, or UnsupportedGemmError), else the finding. ``reference(case)``: torch's float64
    result or None where torch refuses; ``compare(got, ref)``: the tolerance policy's verdict."""
    import torch

    import cutedsl_backend as cb

    out = case.kwargs.get("out")
    if out is not None and out.numel():
        out.fill_(float("nan"))
    try:
        got = call()
        if got.is_cuda:  # a kernel fault surfaces here, named by this case, not by a later one
            torch.cuda.synchronize()
    except cb.UnsupportedGemmError:
        return None
    except Exception as e:  # a foreign exception: a finding
        return f"{case.describe()}: {type(e).__name__}: {e}"
    ref = reference(case)
    if ref is None:
        return f"{case.describe()}: torch refuses this call, ours returned a result"
    if out is not None and got is not out:
        return f"{case.describe()}: out= given but another tensor returned"
    if tuple(got.shape) != tuple(ref.shape):
        return f"{case.describe()}: shape {tuple(got.shape)}, torch's {tuple(ref.shape)}"
    if not got.numel():
        return None
    m = compare(got.detach(), ref)
    if got.is_cuda:
        torch.cuda.synchronize()
    return None if m["ok"] else f"{case.describe()}: wrong result {m}"


def run_case(case: Case) -> Optional[str]:
    """None when the case behaves (a right result, or UnsupportedGemmError); else the finding."""
    import cutedsl_backend as cb

    from .tolerances import compare

    def verdict(got, ref):
        od = str(got.dtype).replace("torch.", "")
        return compare(got, ref, od, case.a.shape[-1], activation=case.kwargs.get("activation"))

    return judge(case, lambda: cb.gemm(case.a, case.b, **case.kwargs), torch_reference, verdict)


def gated_case_count(cases: int) -> int:
    """The gemm_gated cases a fuzz run of ``cases`` gemm cases adds by default: a third as many."""
    return cases // 3


def fuzz(seed: int = 0, cases: int = 300, log=print, gated_cases: Optional[int] = None,
         scaled_cases: Optional[int] = None) -> list:
    """Run ``cases`` cases of ``seed`` for ``gemm``, then ``gated_cases`` for ``gemm_gated``
    (validation.fuzz_gated) and ``scaled_cases`` for ``scaled_mm`` (validation.fuzz_scaled; both
    by default :func:`gated_case_count`, a third as many); returns the findings (empty: every case
    behaved)."""
    from .fuzz_gated import draw_gated, run_gated_case
    from .fuzz_scaled import draw_scaled, run_scaled_case

    gated_cases = gated_case_count(cases) if gated_cases is None else gated_cases
    scaled_cases = gated_case_count(cases) if scaled_cases is None else scaled_cases
    runs = [("gemm", lambda i: run_case(draw(seed, i)), cases),
            ("gemm_gated", lambda i: run_gated_case(draw_gated(seed, i)), gated_cases),
            ("scaled_mm", lambda i: run_scaled_case(draw_scaled(seed, i)), scaled_cases)]
    findings: list = []
    for what, run, count in runs:
        for i in range(count):
            finding = run(i)
            if finding:
                findings.append(finding)
                log(finding)
                if "AcceleratorError" in finding:  # the CUDA context is lost: no later case can run
                    findings.append(f"fuzz seed {seed}: stopped after {what} case {i} (CUDA context lost)")
                    log(findings[-1])
                    return findings
    log(f"fuzz seed {seed}: {cases} gemm, {gated_cases} gemm_gated and {scaled_cases} scaled_mm cases, "
        f"{len(findings)} findings")
    return findings
