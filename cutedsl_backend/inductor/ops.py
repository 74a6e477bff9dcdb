"""The custom ops the Inductor integration puts into graphs: one op per tensor signature.

Each op computes ``activation(alpha * scale_a * scale_b * (a @ b) + bias + beta * residual)``
(cast to ``out_dtype``) with every tensor it takes required: Inductor's fallback kernels and
autotuned choices pass tensors positionally, so an optional tensor before a present one cannot be
expressed (a missing one is a different op). ``kernel_config`` names the GemmConfig to run
(``GemmConfig.name``); empty means "let Inductor choose": the lowering in :mod:`.lowering`
autotunes our configs against the unfused decomposition.

The ops are registered for CUDA (they call :func:`cutedsl_backend.gemm` / ``scaled_mm``);
:func:`reference` is the same function in torch ops, used as the unfused candidate.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch

from ..configs import GemmConfig
from ..problem import UnsupportedGemmError
from .eligibility import DISPATCH
from .state import STATE

log = logging.getLogger("cutedsl_backend.inductor")

# (scaled, bias, residual) -> op name; tensor order: a, b, [scale_a, scale_b], [bias], [residual]
_SCALAR_ARGS = ("str? activation=None, float alpha=1.0, float beta=1.0, ScalarType? out_dtype=None, "
                "bool fast_accum=False, str kernel_config=''")


def op_name(scaled: bool, bias: bool, residual: bool) -> str:
    return "gemm_ab" + ("_scaled" if scaled else "") + ("_bias" if bias else "") + ("_res" if residual else "")


def tensor_names(scaled: bool, bias: bool, residual: bool) -> tuple:
    return (("a", "b") + (("scale_a", "scale_b") if scaled else ()) + (("bias",) if bias else ())
            + (("residual",) if residual else ()))


SIGNATURES = [(s, b, r) for s in (False, True) for b in (False, True) for r in (False, True)]
# fallbacks to the unfused torch computation taken at run time (see _fallback): tests assert none happen


def normalize_bias(bias: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """Inductor hands a column bias as (N,), (1, N) or an (M, N) expansion with row stride 0;
    the kernel reads an (N,) vector. A row bias stays (M, 1)."""
    if bias.dim() == 2 and bias.shape[1] == n and (bias.shape[0] == 1 or bias.stride(0) == 0):
        return bias.as_strided((n,), (bias.stride(1),))
    return bias


@functools.lru_cache(maxsize=256)
def named_config(kernel_config: str) -> Optional[GemmConfig]:
    """The config a choice names, None for "" (not chosen yet) and DISPATCH (the eager API's
    per-call choice from the runtime shape); parsed once (Inductor's benchmark and every compiled
    call run the op)."""
    return GemmConfig.from_name(kernel_config) if kernel_config and kernel_config != DISPATCH else None


def for_rows(config: Optional[GemmConfig], rows: int) -> Optional[GemmConfig]:
    """``config`` without short A loads where this call has more rows than they load (chosen at
    the hint: a dynamic M may exceed it)."""
    if config is not None and config.a_rows and rows > config.a_rows:
        return config.replace(a_rows=0)
    return config


def config_for_call(kernel_config: str, rows: int) -> Optional[GemmConfig]:
    """The config a call of our op runs (:func:`named_config`, :func:`for_rows`)."""
    return for_rows(named_config(kernel_config), rows)


@functools.cache
def _eager_api():
    """The eager API module, imported at the first call (it loads after these ops are defined)
    rather than by an import statement on every call of the op."""
    from .. import ops

    return ops


def _eager_call(kind: tuple):
    """The op's CUDA function for signature ``kind`` (the op's arguments): the eager call with
    the tensors in their roles (positions worked out once, not per call) and the config the
    choice names; a refusal takes the logged fallback."""
    scaled, has_bias, has_res = kind
    i_bias = 2 + 2 * scaled if has_bias else None
    i_res = 2 + 2 * scaled + has_bias if has_res else None

    def call(*args, activation=None, alpha=1.0, beta=1.0, out_dtype=None, fast_accum=False, kernel_config=""):
        eager = _eager_api()
        a, b = args[0], args[1]
        config = named_config(kernel_config)
        if config is not None and config.a_rows:  # the rows only where they matter (host time per call)
            config = for_rows(config, a.shape[-2] if b.dim() == 3 else a.numel() // max(1, a.shape[-1]))
        bias = args[i_bias] if has_bias else None
        if bias is not None and bias.dim() == 2:
            bias = normalize_bias(bias, a.shape[-2], b.shape[-1])
        residual = args[i_res] if has_res else None
        try:
            if scaled:
                return eager.scaled_mm(a, b, args[2], args[3], bias=bias, activation=activation, residual=residual,
                                       beta=beta, out_dtype=out_dtype or torch.bfloat16, use_fast_accum=fast_accum,
                                       config=config)
            return eager.gemm(a, b, bias=bias, activation=activation, residual=residual, alpha=alpha, beta=beta,
                              out_dtype=out_dtype, config=config)
        except UnsupportedGemmError as e:
            return _fallback(kind, e, a, b, args[2:], activation, alpha, beta, out_dtype, fast_accum)

    return call


def _fallback(kind: tuple, error, a, b, tensors: tuple, activation, alpha, beta, out_dtype, fast_accum):
    """The lowering checked these inputs; reaching here means a layout changed after it did. The
    result stays right: the unfused torch computation, logged and counted."""
    STATE.counters["runtime_fallbacks"] += 1
    log.warning("cutedsl %s: %s; running the unfused torch ops instead", op_name(*kind), error)
    return reference(kind, a, b, tensors, activation, alpha, beta, out_dtype, fast_accum)


def reference(kind: tuple, a, b, tensors: tuple, activation=None, alpha=1.0, beta=1.0, out_dtype=None,
              fast_accum=False, kernel_config=""):
    """The op's function in torch ops, rounding where the unfused graph rounds (after the GEMM,
    after each pointwise op in the input dtype): the candidate our kernels are measured against."""
    from ..epilogue import torch_activation

    scaled, has_bias, has_res = kind
    named = dict(zip(tensor_names(*kind)[2:], tensors))
    bias, res = named.get("bias"), named.get("residual")
    if scaled:
        y = torch._scaled_mm(a, b, named["scale_a"], named["scale_b"], bias=bias,
                             out_dtype=out_dtype or torch.bfloat16, use_fast_accum=fast_accum)
    elif bias is not None and a.dim() == 2 and b.dim() == 2:
        y = torch.addmm(bias, a, b, alpha=alpha)
    else:
        y = torch.matmul(a, b)
        if alpha != 1.0:
            y = y * alpha
        if bias is not None:
            y = y + bias
    if res is not None:
        y = y + res if beta == 1.0 else y + beta * res
    y = torch_activation(activation)(y)
    if out_dtype is not None and y.dtype != out_dtype and not scaled:
        y = y.to(out_dtype)
    return y


def _fake(kind, a, b, tensors, activation, alpha, beta, out_dtype, fast_accum, kernel_config):
    if a.shape[-1] != b.shape[-2]:
        raise UnsupportedGemmError(f"shape: a is {tuple(a.shape)} and b is {tuple(b.shape)}")
    batch = a.shape[:-2] if a.dim() == 3 else b.shape[:-2]
    dtype = out_dtype or (torch.bfloat16 if kind[0] else a.dtype)
    return a.new_empty((*batch, a.shape[-2], b.shape[-1]), dtype=dtype)


# Registered through torch.library.Library (define + impl + register_fake), not custom_op: the op
# runs once per GEMM in every compiled graph and many times in each autotune benchmark, and
# custom_op's per-call safety checks cost ~90 us on the H200 machine (a 4096^3 GEMM takes ~190 us:
# measured through Inductor's benchmark, the host time, not the kernel, set our candidates' times).
_LIB = torch.library.Library("cutedsl", "FRAGMENT")


def cuda_or_op(run, op):
    """A plain callable for an extern kernel: CUDA tensors straight to ``run`` (the function the op
    ``op`` runs for CUDA), without the dispatcher's boxing of every argument on each call (host
    time that a small GEMM does not hide: 74 us through it against the eager call's 46 us on the
    H200); other tensors through ``op`` (its other registrations)."""

    def call(*args, **kwargs):
        return run(*args, **kwargs) if args[0].is_cuda else op(*args, **kwargs)

    return call


def direct(kind: tuple):
    """The op of signature ``kind`` as the extern kernels Inductor's generated code and autotune
    benchmarks call (:func:`cuda_or_op`)."""
    return cuda_or_op(_CUDA_CALLS[kind], _OVERLOADS[kind])


def _define(kind: tuple) -> None:
    name = op_name(*kind)
    tensors = tensor_names(*kind)
    # no autograd kernel: these ops exist only in graphs after autograd (the fusion pass is post-grad)
    _LIB.define(f"{name}({', '.join('Tensor ' + t for t in tensors)}, *, {_SCALAR_ARGS}) -> Tensor",
                tags=(torch.Tag.pt2_compliant_tag,))

    def fake(*args, activation=None, alpha=1.0, beta=1.0, out_dtype=None, fast_accum=False, kernel_config=""):
        return _fake(kind, args[0], args[1], args[2:], activation, alpha, beta, out_dtype, fast_accum,
                     kernel_config)

    _LIB.impl(name, _CUDA_CALLS[kind], "CUDA")
    torch.library.register_fake(f"cutedsl::{name}", fake, lib=_LIB)


# each signature's CUDA function, built once: the op's CUDA kernel and the extern kernels' direct call
_CUDA_CALLS = {kind: _eager_call(kind) for kind in SIGNATURES}
for _kind in SIGNATURES:
    _define(_kind)
_OVERLOADS = {kind: getattr(torch.ops.cutedsl, op_name(*kind)).default for kind in SIGNATURES}


def overload(scaled: bool, bias: bool, residual: bool):
    """The OpOverload for a tensor signature."""
    return _OVERLOADS[(scaled, bias, residual)]


def kind_of(op) -> Optional[tuple]:
    """The (scaled, bias, residual) signature of one of our op overloads, else None."""
    for kind, ov in _OVERLOADS.items():
        if op is ov:
            return kind
    return None
