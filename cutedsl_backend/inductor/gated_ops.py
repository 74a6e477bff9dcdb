"""The gated-MLP ops the Inductor integration forms (:mod:`.gated_mlp`) and their choices: one
gated GEMM (``cutedsl_backend.gemm_gated``) without or with the [gate | up] bias, or on FP8
operands with their scales, and the unfused computation each is measured against."""

from __future__ import annotations

import functools

import torch

from ..epilogue import torch_activation
from .ops import config_for_call, cuda_or_op

aten = torch.ops.aten

_LIB = torch.library.Library("cutedsl", "FRAGMENT")
_LIB.define("gemm_gated_ab(Tensor a, Tensor w_gate, Tensor w_up, *, str activation, str kernel_config='') -> Tensor",
            tags=(torch.Tag.pt2_compliant_tag,))
# bias_gate_up: (2N,), the gate's N values then the up's
_LIB.define("gemm_gated_ab_bias(Tensor a, Tensor w_gate, Tensor w_up, Tensor bias_gate_up, *, str activation, "
            "str kernel_config='') -> Tensor", tags=(torch.Tag.pt2_compliant_tag,))
# FP8 a (M, K) and weights (N, K) with torch._scaled_mm's scales: scale_a one or (M, 1), each
# weight's one or one per row ((1, N) as _scaled_mm takes b = w^T)
_LIB.define("gemm_gated_ab_scaled(Tensor a, Tensor w_gate, Tensor w_up, Tensor scale_a, Tensor scale_gate, "
            "Tensor scale_up, *, str activation, ScalarType out_dtype, bool fast_accum, str kernel_config='') "
            "-> Tensor", tags=(torch.Tag.pt2_compliant_tag,))


def _impl(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    from ..gated import gemm_gated

    config = config_for_call(kernel_config, a.numel() // max(1, a.shape[-1]))
    return gemm_gated(a, w_gate, w_up, activation=activation, bias_gate_up=bias_gate_up, config=config)


def _fake(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    return a.new_empty((*a.shape[:-1], w_gate.shape[0]))


def _impl_scaled(a, w_gate, w_up, scale_a, scale_gate, scale_up, *, activation, out_dtype, fast_accum,
                 kernel_config=""):
    from ..gated import gemm_gated

    config = config_for_call(kernel_config, a.shape[0])
    return gemm_gated(a, w_gate, w_up, activation=activation, scale_a=scale_a, scale_gate=scale_gate,
                      scale_up=scale_up, out_dtype=out_dtype, use_fast_accum=fast_accum, config=config)


def _fake_scaled(a, w_gate, w_up, scale_a, scale_gate, scale_up, *, activation, out_dtype, fast_accum,
                 kernel_config=""):
    return a.new_empty((a.shape[0], w_gate.shape[0]), dtype=out_dtype)


for _name, _fn, _fake_fn in (("gemm_gated_ab", _impl, _fake), ("gemm_gated_ab_bias", _impl, _fake),
                             ("gemm_gated_ab_scaled", _impl_scaled, _fake_scaled)):
    _LIB.impl(_name, _fn, "CUDA")
    torch.library.register_fake(f"cutedsl::{_name}", _fake_fn, lib=_LIB)
GATED_OP = torch.ops.cutedsl.gemm_gated_ab.default
GATED_BIAS_OP = torch.ops.cutedsl.gemm_gated_ab_bias.default
GATED_SCALED_OP = torch.ops.cutedsl.gemm_gated_ab_scaled.default
GATED_OPS = (GATED_OP, GATED_BIAS_OP, GATED_SCALED_OP)
_CHOICE_NAMES = {GATED_OP: "cutedsl_gemm_gated_", GATED_BIAS_OP: "cutedsl_gemm_gated_bias_",
                 GATED_SCALED_OP: "cutedsl_gemm_gated_scaled_"}


def reference(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    """The unfused computation, rounding where the graph rounds (each GEMM's result, bias added
    before its rounding as addmm does, then the activation and the product in the input dtype):
    the candidate our kernel is measured against."""
    if bias_gate_up is None:
        return torch_activation(activation)(a @ w_gate.t()) * (a @ w_up.t())
    n = w_gate.shape[0]
    bias = bias_gate_up.to(a.dtype)
    return (torch_activation(activation)(torch.addmm(bias[:n], a, w_gate.t()))
            * torch.addmm(bias[n:], a, w_up.t()))


def reference_scaled(a, w_gate, w_up, scale_a, scale_gate, scale_up, *, activation, out_dtype, fast_accum,
                     kernel_config=""):
    """The unfused FP8 computation: two torch._scaled_mm, then the activation and the product."""
    def mm(w, s):
        return torch._scaled_mm(a, w.t(), scale_a, s, out_dtype=out_dtype, use_fast_accum=fast_accum)

    return torch_activation(activation)(mm(w_gate, scale_gate)) * mm(w_up, scale_up)


_CUDA_IMPLS = {GATED_OP: _impl, GATED_BIAS_OP: _impl, GATED_SCALED_OP: _impl_scaled}


@functools.lru_cache(None)
def extern_choice(op):
    """Gated op ``op`` as an Inductor choice (made once per process: extern_kernels names are unique)."""
    from torch._inductor.select_algorithm import ExternKernelChoice

    from .state import build_tag

    return ExternKernelChoice(cuda_or_op(_CUDA_IMPLS[op], op), name=f"{_CHOICE_NAMES[op]}{build_tag()}",
                              has_out_variant=False, op_overload=op)
