"""Eager API and torch custom ops.

``gemm(a, b)`` follows torch.matmul's operand convention for 2-D and 3-D operands and launches
the CuTe DSL kernel on the current CUDA stream. ``torch.ops.cutedsl.gemm`` is the same operation
as a ``torch.library`` custom op with a fake (meta) implementation, so it traces under
``torch.compile``.
"""

from __future__ import annotations

from typing import Optional

import torch

from .autograd import GemmFunction, needs_autograd
from .configs import GemmConfig
from .operands import batch_row_bias
from .plan import run
from .problem import UnsupportedGemmError


def gemm(a: torch.Tensor, b: torch.Tensor, *, bias: Optional[torch.Tensor] = None,
         activation: Optional[str] = None, residual: Optional[torch.Tensor] = None,
         alpha: float = 1.0, beta: float = 1.0, out_dtype: Optional[torch.dtype] = None,
         config: Optional[GemmConfig] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``activation(alpha * (a @ b) + bias + beta * residual)`` on a CuTe DSL kernel, computed in
    fp32 and rounded once to the output dtype.

    - a: (M, K) or (L, M, K); b: (K, N) or (L, K, N) (a 2-D operand is broadcast over L).
    - dtypes: float16 or bfloat16, the same for a and b; ``out_dtype``: the input dtype
      (default) or torch.float32.
    - layouts: each operand row- or column-major in its last two dims (any strides otherwise);
      every non-unit stride and the data pointers 16-byte aligned. The output is row-major.
    - ``bias``: (N,) per output column or (M, 1) per row (with a 3-D ``a`` and 2-D ``b`` also
      (L*M, 1)), contiguous, dtype the output dtype or float32. ``residual``: (M, N) or
      (L, M, N), any strides, dtype the output dtype or float32; with 16-byte aligned data,
      rows and batches it is loaded by TMA, otherwise gathered (slower).
    - ``activation``: None, "relu", "gelu" (erf), "gelu_tanh", "silu", "sigmoid" or "tanh", as in
      torch.nn.functional. ``alpha``, ``beta``: Python floats.
    - device: CUDA tensors on an sm90 (Hopper) GPU.
    - ``out``: optional result tensor of exactly the result's shape and dtype, unit stride along N,
      16-byte aligned data (it may be a strided view); it must not overlap itself or share memory
      with any input (refused, as in torch). An output whose rows TMA cannot store (N times the
      element size not a multiple of 16 bytes, e.g. N = 1) is written through a padded buffer and
      copied (one extra copy kernel).
    - an input with a zero stride (``expand``) or overlapping elements, and a residual broadcast
      over rows or batches, are computed on a packed copy (logged at INFO on
      ``cutedsl_backend.ops``); bias and scale data pointers 4-byte aligned.
    - autograd: where an input requires grad (and grad mode is on) the result is differentiable;
      the backward's GEMMs run on these kernels too (``cutedsl_backend.autograd``); no ``out`` then.

    Raises :class:`UnsupportedGemmError` (a ValueError) naming the rule an input breaks.
    """
    if bias is not None:
        bias = batch_row_bias(a, b, bias)
    if needs_autograd(a, b, bias, residual):
        if out is not None:
            raise UnsupportedGemmError("out: not supported where an input requires grad (as in torch)")
        return GemmFunction.apply(a, b, bias, residual, activation, alpha, beta, out_dtype, config)
    return run(a, b, bias=bias, residual=residual, activation=activation, scale_a=None, scale_b=None,
                alpha=alpha, beta=beta, out_dtype=out_dtype, config=config, out=out)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, *,
              bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
              residual: Optional[torch.Tensor] = None, beta: float = 1.0,
              out_dtype: torch.dtype = torch.bfloat16, use_fast_accum: bool = False,
              config: Optional[GemmConfig] = None, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """FP8 GEMM with torch._scaled_mm's contract and our fused epilogue:
    ``activation(scale_a * scale_b * (a @ b) + bias + beta * residual)``, fp32 math, one rounding.

    - a: (M, K) row-major, b: (K, N) column-major (``b = w.t()`` of a row-major (N, K) ``w``),
      float8_e4m3fn or float8_e5m2 (e5m2 x e5m2 is refused, as in torch); K and the leading
      strides multiples of 16 elements; 16-byte aligned data.
    - scale_a: float32, one element (tensorwise) or (M, 1) (rowwise); scale_b: one element or (1, N).
    - out_dtype: bfloat16 (default), float16 or float32. bias/residual/activation as in ``gemm``.
    - ``use_fast_accum`` as in torch._scaled_mm: False (default) adds every 128-deep k-tile's
      WGMMA result into fp32 registers; True accumulates the whole K in the tensor cores' fp8
      accumulator (fewer mantissa bits, faster, larger tiles allowed).
    - the FP8 WGMMA (QGMMA) runs on sm90.

    Raises :class:`UnsupportedGemmError` naming the broken rule.
    """
    if not isinstance(scale_a, torch.Tensor) or not isinstance(scale_b, torch.Tensor):
        raise UnsupportedGemmError("scale_a and scale_b must be float32 tensors")
    if needs_autograd(a, b, scale_a, scale_b, bias, residual):
        raise UnsupportedGemmError(
            "autograd: scaled_mm has no gradient (as torch._scaled_mm); call it under torch.no_grad() or on "
            "tensors that do not require grad")
    return run(a, b, bias=bias, residual=residual, activation=activation, scale_a=scale_a,
                scale_b=scale_b, alpha=1.0, beta=beta, out_dtype=out_dtype, config=config, out=out,
                fp8="fast" if use_fast_accum else "precise")


# ---------------------------------------------------------------------------- custom op
# ``torch.ops.cutedsl.gemm``: registered through torch.library.Library (define + impl +
# register_fake) rather than torch.library.custom_op, whose per-call checks cost ~90 us a call on
# the H200 machine (inductor/ops.py registers its ops the same way, for the same reason).

_OUT_DTYPES = {None: None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _gemm_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
             residual: Optional[torch.Tensor] = None, activation: Optional[str] = None,
             alpha: float = 1.0, beta: float = 1.0, out_dtype: Optional[str] = None) -> torch.Tensor:
    # run, not gemm: the op's autograd is registered below (gemm would wrap it a second time)
    return run(a, b, bias=batch_row_bias(a, b, bias), residual=residual, activation=activation, scale_a=None,
                scale_b=None, alpha=alpha, beta=beta, out_dtype=_OUT_DTYPES[out_dtype], config=None, out=None)


def _gemm_fake(a, b, bias=None, residual=None, activation=None, alpha=1.0, beta=1.0, out_dtype=None):
    if a.shape[-1] != b.shape[-2]:
        raise UnsupportedGemmError(f"shape: a is {tuple(a.shape)} and b is {tuple(b.shape)}")
    batch = a.shape[:-2] if a.dim() == 3 else b.shape[:-2]
    dt = _OUT_DTYPES[out_dtype] or a.dtype
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]), dtype=dt)


from . import autograd as _autograd  # noqa: E402  (imports torch only)

_LIB = torch.library.Library("cutedsl", "FRAGMENT")
_LIB.define("gemm" + torch.library.infer_schema(_gemm_op, mutates_args=()), tags=(torch.Tag.pt2_compliant_tag,))
# CUDA runs the kernel; other devices reach gemm()'s own checks (an UnsupportedGemmError naming
# the device rule), not the dispatcher's "no kernel" error
_LIB.impl("gemm", _gemm_op, "CUDA")
_LIB.impl("gemm", _gemm_op, "CPU")
torch.library.register_fake("cutedsl::gemm", _gemm_fake, lib=_LIB)
# its backward runs on the op itself (autograd.py), so traced training graphs keep our kernels
torch.library.register_autograd("cutedsl::gemm", _autograd.op_backward, setup_context=_autograd.setup_context,
                                lib=_LIB)
gemm_op = torch.ops.cutedsl.gemm.default
