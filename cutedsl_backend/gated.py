"""Gated MLPs in one GEMM: ``act(a @ w_gate^T) * (a @ w_up^T)`` by one kernel whose epilogue pairs
each gate column with its up column, so the 2N-wide intermediate never reaches memory (design:
docs/design/gated-mlp.md). The eager API and ``torch.ops.cutedsl.gemm_gated``.

It takes 16-bit operands, or FP8 ones with their scales (A's tensorwise or per row, each weight's
tensorwise or per output row), and optional column biases. A call's geometry is checked once and
kept (a plan, as for ``gemm``), and the kernel is launched with its argument structs filled
directly (ArgPack; the up weights follow the stream in its signature).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from .compiler import get_kernel
from .configs import GemmConfig, split_k_workspace
from .epilogue import GATED_ACTIVATIONS, EpilogueSpec
from .operands import (
    FP8_DTYPES,
    as_rcl,
    check_no_alias,
    check_out,
    descriptor,
    max_clusters,
    memory_ranges,
    operand,
    prepare,
    readable_by_tma,
    tma_writable,
)
from .plan import PLANS, raw_stream
from .problem import UnsupportedGemmError, byte_span, dtype_name, gated_scale


def _weights(w_gate, w_up, w_gate_up):
    """(gate, up) as (N, K) tensors from either form (two weights, or one (2N, K) gate-first)."""
    pair = w_gate is not None or w_up is not None
    if (w_gate_up is not None) == pair or (pair and (w_gate is None or w_up is None)):
        raise UnsupportedGemmError("weights: pass w_gate and w_up, or w_gate_up (gate rows first), not both")
    if w_gate_up is not None:
        if not isinstance(w_gate_up, torch.Tensor) or w_gate_up.dim() != 2 or w_gate_up.shape[0] % 2:
            raise UnsupportedGemmError("w_gate_up: must be a 2-D (2N, K) tensor, the gate's N rows first")
        n = w_gate_up.shape[0] // 2
        return w_gate_up[:n], w_gate_up[n:]
    for what, w in (("w_gate", w_gate), ("w_up", w_up)):
        if not isinstance(w, torch.Tensor) or w.dim() != 2:
            raise UnsupportedGemmError(f"{what}: must be a 2-D (N, K) tensor (nn.Linear's weight)")
    if w_gate.shape != w_up.shape or w_gate.dtype != w_up.dtype or w_gate.device != w_up.device:
        raise UnsupportedGemmError(
            f"weights: w_gate {tuple(w_gate.shape)} {w_gate.dtype} and w_up {tuple(w_up.shape)} {w_up.dtype} "
            "must have the same shape, dtype and device")
    return w_gate, w_up


def _bias(bias_gate, bias_up, bias_gate_up, n: int, dtype, device):
    """The kernel's bias: one contiguous 2N vector (the gate's N values, then the up's), or None."""
    if bias_gate_up is not None:
        if bias_gate is not None or bias_up is not None:
            raise UnsupportedGemmError("bias: pass bias_gate / bias_up, or bias_gate_up, not both")
        vectors = [("bias_gate_up", bias_gate_up, 2 * n)]
    elif bias_gate is None and bias_up is None:
        return None
    else:
        vectors = [(what, b, n) for what, b in (("bias_gate", bias_gate), ("bias_up", bias_up)) if b is not None]
    for what, b, length in vectors:
        if not isinstance(b, torch.Tensor) or tuple(b.shape) != (length,):
            raise UnsupportedGemmError(f"{what}: must be a ({length},) tensor")
        if b.device != device or b.dtype not in (dtype, torch.float32):
            raise UnsupportedGemmError(f"{what}: must be on {device} with dtype {dtype} or float32, got {b.dtype}")
    if bias_gate_up is not None:
        return bias_gate_up.contiguous()
    given = {b.dtype for b in (bias_gate, bias_up) if b is not None}
    bias_dtype = given.pop() if len(given) == 1 else torch.float32  # mixed: fp32 keeps both exact
    halves = [b.to(bias_dtype) if b is not None else torch.zeros(n, dtype=bias_dtype, device=device)
              for b in (bias_gate, bias_up)]
    return torch.cat(halves)


def gemm_gated(a: torch.Tensor, w_gate: Optional[torch.Tensor] = None, w_up: Optional[torch.Tensor] = None, *,
               w_gate_up: Optional[torch.Tensor] = None, activation: str = "silu",
               bias_gate: Optional[torch.Tensor] = None, bias_up: Optional[torch.Tensor] = None,
               bias_gate_up: Optional[torch.Tensor] = None, scale_a: Optional[torch.Tensor] = None,
               scale_gate: Optional[torch.Tensor] = None, scale_up: Optional[torch.Tensor] = None,
               scale_gate_up: Optional[torch.Tensor] = None, out_dtype: Optional[torch.dtype] = None,
               use_fast_accum: bool = False, out: Optional[torch.Tensor] = None,
               config: Optional[GemmConfig] = None) -> torch.Tensor:
    """``act(a @ w_gate^T + bias_gate) * (a @ w_up^T + bias_up)`` in one GEMM (fp32 math, one
    rounding); with FP8 operands ``act(s_a s_gate (a @ w_gate^T) + bias_gate) * (s_a s_up (a @
    w_up^T) + bias_up)``.

    - a: (M, K) or (..., M, K) (leading dims folded into M); weights (N, K) each as ``nn.Linear``
      stores them (``w_gate`` and ``w_up``), or one (2N, K) ``w_gate_up`` with the gate's rows
      first (fused checkpoints); result (..., M, N) in a's dtype.
    - dtypes: float16 or bfloat16, the same for every operand, result in that dtype; or FP8
      (e4m3 / e5m2, as ``scaled_mm`` takes them) with float32 scales: ``scale_a`` one element or
      one per row of a (M, 1); ``scale_gate`` and ``scale_up`` each one element or one per weight
      row (N), or ``scale_gate_up`` (one, or 2N) with the concatenated weight; result
      ``out_dtype`` (bfloat16 by default, float16 or float32); ``use_fast_accum`` as in
      ``torch._scaled_mm``. No autograd for FP8 (as ``torch._scaled_mm``).
    - K-contiguous weights, K and N multiples of 16 bytes of their dtype, 16-byte aligned data.
    - ``activation``: "silu" (SwiGLU), "gelu" (erf), "gelu_tanh" or "relu", as in
      torch.nn.functional.
    - biases (optional): ``bias_gate`` and/or ``bias_up`` (N,), or ``bias_gate_up`` (2N,) with the
      concatenated weight's layout; the result's dtype or float32.
    - ``out``: optional result tensor of exactly the result's shape and dtype, contiguous rows.
    - autograd: where a or a weight requires grad (in grad mode, two-weight form) the result is
      differentiable; the backward recomputes gate and up on our kernels (fp32) and runs its four
      GEMMs on them (:class:`GatedFunction`); no ``out`` then.
    - device: an sm90 (Hopper) or sm100 (Blackwell) GPU, as ``gemm`` (the sm100a kernel is
      compile-verified; no Blackwell GPU has run it).

    Raises :class:`UnsupportedGemmError` naming the rule an input breaks.
    """
    if activation not in GATED_ACTIVATIONS:
        raise UnsupportedGemmError(f"activation {activation!r}: must be one of {GATED_ACTIVATIONS}")
    gate, up = _weights(w_gate, w_up, w_gate_up)
    if not isinstance(a, torch.Tensor) or a.dim() < 2:
        raise UnsupportedGemmError("a: must be a tensor of at least 2 dims (..., M, K)")
    scales = (scale_a, scale_gate, scale_up, scale_gate_up)
    fp8 = a.dtype in FP8_DTYPES
    if fp8:
        pair = (scale_gate, scale_up)
        if scale_a is None or (scale_gate_up is None) == (None in pair) or (
                scale_gate_up is not None and pair != (None, None)):
            raise UnsupportedGemmError("scales: FP8 operands take scale_a and scale_gate + scale_up (or "
                                       "scale_gate_up with w_gate_up)")
        if any(getattr(t, "requires_grad", False) for t in (a, gate, up) + scales) and torch.is_grad_enabled():
            raise UnsupportedGemmError("autograd: FP8 gemm_gated has no gradient (as torch._scaled_mm)")
        res_dtype = out_dtype or torch.bfloat16
    else:
        if any(t is not None for t in scales) or use_fast_accum:
            raise UnsupportedGemmError("scales: only FP8 operands take scales (and use_fast_accum)")
        if out_dtype is not None and out_dtype != a.dtype:
            raise UnsupportedGemmError(f"out_dtype: a 16-bit gated GEMM returns a's dtype ({a.dtype})")
        res_dtype = a.dtype
    if not fp8 and torch.is_grad_enabled() and any(getattr(t, "requires_grad", False)
                                                   for t in (a, gate, up, bias_gate, bias_up, bias_gate_up)):
        if out is not None or w_gate_up is not None or bias_gate_up is not None:
            raise UnsupportedGemmError("autograd: takes the two-weight form without out= (as in torch)")
        return GatedFunction.apply(a, gate, up, bias_gate, bias_up, activation, config)
    if not a.shape[-1] or not gate.shape[0]:
        return _degenerate(a, gate, up, bias_gate, bias_up, bias_gate_up, activation, out, res_dtype)
    a2 = a.reshape(-1, a.shape[-1])
    # zero strides or overlapping elements: TMA cannot describe them, and the plan reads the
    # caller's pointers: computed on packed copies (as the eager gemm does)
    a2, gate, up = (readable_by_tma(what, t) for what, t in (("a", a2), ("w_gate", gate), ("w_up", up)))
    geo = (a.shape, a2.stride(), gate.shape, gate.stride(), up.stride(), a.dtype, gate.dtype, up.dtype, a.device,
           gate.device, up.device,
           activation, config, _geo(bias_gate), _geo(bias_up), _geo(bias_gate_up), res_dtype, use_fast_accum,
           tuple(_geo(t) for t in scales), None if out is None else (out.shape, out.stride(), out.dtype, out.device))
    plans = PLANS.of_thread()
    key = ("gated", geo)
    plan = plans.get(key)
    if plan is None:
        plan = _GatedPlan(a, a2, gate, up, bias_gate, bias_up, bias_gate_up, activation, out, config, res_dtype,
                          use_fast_accum, scales)
        if len(plans) >= PLANS.max_plans:
            plans.clear()
        plans[key] = plan
    bias = None if plan.spec.bias is None else _bias(bias_gate, bias_up, bias_gate_up, plan.n, res_dtype, a.device)
    vectors = _scale_vectors(plan.m, plan.n, *scales) if fp8 else (None, None)
    if out is not None:  # the epilogue reads these while out is written: they must not share memory
        named = [(w, t) for w, t in (("bias_gate", bias_gate), ("bias_up", bias_up), ("bias_gate_up", bias_gate_up),
                                     ("scale_a", scale_a), ("scale_gate", scale_gate), ("scale_up", scale_up),
                                     ("scale_gate_up", scale_gate_up)) if t is not None]
        check_no_alias(memory_ranges(out)[0], zip([w for w, _ in named], memory_ranges(*[t for _, t in named])))
    return plan.run(a2, gate, up, bias, out, *vectors)


def _scale_kinds(m: int, n: int, scale_a, scale_gate, scale_up, scale_gate_up, device) -> tuple:
    """(scale_a kind, scale_b kind) of the FP8 scales, checked: A's "scalar" or "row" (M values);
    the weights' "scalar" (one scale_gate_up) or "col" (one 2N [gate | up] vector, made per call
    from the two weights' scales: :func:`_scale_vectors`)."""
    kinds = {}
    for what, t in (("scale_a", scale_a), ("scale_gate", scale_gate), ("scale_up", scale_up),
                    ("scale_gate_up", scale_gate_up)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor) or t.device != device:
            raise UnsupportedGemmError(f"{what}: must be a float32 tensor on {device}")
        length = {"scale_a": m, "scale_gate_up": 2 * n}.get(what, n)
        kinds[what] = gated_scale(operand(t), what, length, "row of a" if what == "scale_a" else "weight row")
    return ("scalar" if kinds["scale_a"] == "scalar" else "row"), (
        "scalar" if kinds.get("scale_gate_up") == "scalar" else "col")


def _scale_vectors(m: int, n: int, scale_a, scale_gate, scale_up, scale_gate_up) -> tuple:
    """The kernel's scale_a and scale_b arguments (1-D float32) of one call."""
    sb = scale_gate_up.reshape(-1) if scale_gate_up is not None else torch.cat(
        [scale_gate.reshape(-1).expand(n), scale_up.reshape(-1).expand(n)])
    return scale_a.reshape(-1), sb


def _degenerate(a, gate, up, bias_gate, bias_up, bias_gate_up, activation, out, res_dtype):
    """K == 0 (both GEMMs are exactly zero: the result is act(b_gate) * b_up) or N == 0 (empty)."""
    from .epilogue import torch_activation

    n = gate.shape[0]
    if gate.shape[-1] != a.shape[-1] or up.shape != gate.shape:
        raise UnsupportedGemmError(f"shape: a {tuple(a.shape)}, w_gate {tuple(gate.shape)}, w_up {tuple(up.shape)}")
    result_shape = (*a.shape[:-1], n)
    bias = _bias(bias_gate, bias_up, bias_gate_up, n, res_dtype, a.device)
    zeros = torch.zeros(n, dtype=torch.float32, device=a.device)
    g, u = (zeros, zeros) if bias is None else (bias[:n].float(), bias[n:].float())
    val = (torch_activation(activation)(g) * u).to(res_dtype).expand(result_shape)
    if out is None:
        return val.contiguous()
    if tuple(out.shape) != result_shape or out.dtype != res_dtype:
        raise UnsupportedGemmError(f"out: must be {result_shape} {res_dtype}, got {tuple(out.shape)} {out.dtype}")
    return out.copy_(val)


def _geo(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


class _GatedPlan:
    """What a gated call needs that depends only on its operands' geometry, checked once: the
    kernel and its argument structs (the up weights after the stream: ArgPack's tail), the
    result's shape, the byte spans the per-call alias check uses."""

    def __init__(self, a, a2, gate, up, bias_gate, bias_up, bias_gate_up, activation, out, config, out_dtype,
                 fast_accum, scales):
        n = gate.shape[0]
        fp8 = a.dtype in FP8_DTYPES
        if fp8 and (gate.dtype not in FP8_DTYPES or up.dtype != gate.dtype):
            raise UnsupportedGemmError(f"dtype: FP8 a takes FP8 weights of one dtype, got {gate.dtype}, {up.dtype}")
        problem, a3, _ = prepare(a2, gate.t(), out_dtype, config, fp8, fp8 and fast_accum)
        if problem.b_major != "k" or up.stride(1) != 1:
            raise UnsupportedGemmError("layout: the weights must be K-contiguous ((N, K) row-major)")
        if n % 8:
            raise UnsupportedGemmError(f"alignment: N={n} must be a multiple of 8 (16-byte output rows)")
        if up.stride(0) % (16 // up.element_size()):
            raise UnsupportedGemmError("alignment: w_up's row stride must be 16-byte aligned")
        self.n, self.m = n, problem.m
        self.result_shape = (*a.shape[:-1], n)
        self.out_dtype = out_dtype
        self.device = a.device
        if out is not None:
            out3 = check_out(out, self.result_shape, (1, problem.m, n), out_dtype, a.device)
            if not tma_writable(out3):
                raise UnsupportedGemmError("alignment: out's row stride must be a multiple of 16 bytes")
        else:
            out3 = torch.empty((1, max(problem.m, 1), n), dtype=out_dtype, device="meta")
        bias = _bias(bias_gate, bias_up, bias_gate_up, n, out_dtype, a.device)
        kind_a = kind_b = None
        if fp8:
            kind_a, kind_b = _scale_kinds(problem.m, n, *scales, a.device)
        self.spec = EpilogueSpec(gated=activation, bias="col" if bias is not None else None,
                                 bias_dtype=dtype_name(bias.dtype) if bias is not None else "float32",
                                 scale_a=kind_a, scale_b=kind_b)
        self.gemm_problem = dataclasses.replace(problem, n=2 * n)  # the GEMM's width: gate and up columns
        self.a_major = problem.a_major
        self.a_geo = (tuple(a3.shape), tuple(a3.stride()))
        self.empty = not problem.m
        if self.empty:
            return
        self.kernel = kernel = get_kernel(self.gemm_problem, config, self.spec)
        cfg = kernel.config
        self.index = a.device.index if a.device.index is not None else torch.cuda.current_device()
        align = 16 // a.element_size()
        descs = [descriptor(a3, self.a_major == "k", align), descriptor(gate.unsqueeze(0), True, align),
                 descriptor(out3, True, 16 // out3.element_size())]
        if bias is not None:
            descs.append(((2 * n,), ()))
        if fp8:
            descs += [((1 if kind_a == "scalar" else problem.m,), ()), ((1 if kind_b == "scalar" else 2 * n,), ())]
        clusters = max_clusters(self.index, cfg.cluster_m * cfg.cluster_n)
        self.split_sizes = split_k_workspace(self.gemm_problem, cfg, clusters)
        if self.split_sizes[0]:
            descs += [((self.split_sizes[1],), ()), ((self.split_sizes[0],), ())]
        self.pack = kernel.arg_pack(descs, clusters, tail=(descriptor(up.unsqueeze(0), True, align),))
        self.in_spans = tuple(byte_span(t.shape, t.stride(), t.element_size()) for t in (a2, gate, up))
        self.out_span = None if out is None else byte_span(out3.shape, out3.stride(), out3.element_size())

    def run(self, a2, gate, up, bias, out, scale_a=None, scale_b=None):
        fresh = out is None
        out3 = torch.empty((1, self.m, self.n), dtype=self.out_dtype, device=self.device) if fresh else out.view(
            1, self.m, self.n)
        if self.empty:
            return out3.view(self.result_shape) if fresh else out
        pa, pg, pu, pc = a2.data_ptr(), gate.data_ptr(), up.data_ptr(), out3.data_ptr()
        if (pa | pg | pu | pc) % 16:
            raise UnsupportedGemmError("alignment: data pointers of a, the weights and out must be 16-byte aligned")
        if not fresh:
            check_no_alias((pc, self.out_span), zip(("a", "w_gate", "w_up"), zip((pa, pg, pu), self.in_spans)))
        ptrs = (pa, pg, pc)
        if bias is not None:
            if bias.data_ptr() % 4:
                raise UnsupportedGemmError("alignment: the bias's data pointer must be 4-byte aligned")
            ptrs += (bias.data_ptr(),)
        if scale_a is not None:
            if (scale_a.data_ptr() | scale_b.data_ptr()) % 4:
                raise UnsupportedGemmError("alignment: the scales' data pointers must be 4-byte aligned")
            ptrs += (scale_a.data_ptr(), scale_b.data_ptr())
        stream = raw_stream(self.index)
        work = None
        if self.split_sizes[0]:
            work = PLANS.workspaces.get(self.device, stream, *self.split_sizes)
            ptrs += (work[0].data_ptr(), work[1].data_ptr())
        self.kernel.launch(self.pack, ptrs + (pu,), 1.0, 0.0, stream,
                           lambda: self._views(a2, gate, up, out3, bias, scale_a, scale_b, work))
        return out3.view(self.result_shape) if fresh else out

    def _views(self, a2, gate, up, out3, bias, scale_a, scale_b, work):  # the direct launch path's one-time check
        align = 16 // a2.element_size()
        a3 = a2.detach().as_strided(*self.a_geo)
        split = (None, None) if work is None else (work[0][:self.split_sizes[1]], work[1][:self.split_sizes[0]])
        return (as_rcl(a3, self.a_major == "k", align), as_rcl(gate.detach().unsqueeze(0), True, align),
                as_rcl(out3, True, 16 // out3.element_size()), bias, scale_a, scale_b, None, *split,
                as_rcl(up.detach().unsqueeze(0), True, align))


class GatedFunction(torch.autograd.Function):
    """``gemm_gated`` where an input requires grad. Backward, with g = a @ w_gate^T + b_gate and
    u = a @ w_up^T + b_up recomputed in fp32 on our kernels (not saved: 2N x M fp32 values):
    grad_g = grad * u * act'(g) (torch's own derivative), grad_u = grad * act(g), both rounded to
    the input dtype as torch's 16-bit backward does; grad_a = grad_g @ w_gate + grad_u @ w_up (the
    second GEMM adds the first as its residual), grad_w = grad^T @ a, grad_b = column sums."""

    @staticmethod
    def forward(ctx, a, w_gate, w_up, bias_gate, bias_up, activation, config):
        ctx.save_for_backward(a, w_gate, w_up, bias_gate, bias_up)
        ctx.activation = activation
        with torch.no_grad():
            return gemm_gated(a.detach(), w_gate.detach(), w_up.detach(), activation=activation, config=config,
                              bias_gate=None if bias_gate is None else bias_gate.detach(),
                              bias_up=None if bias_up is None else bias_up.detach())

    @staticmethod
    def backward(ctx, grad):
        a, w_gate, w_up, bias_gate, bias_up = ctx.saved_tensors
        return (*gated_backward(grad, a, w_gate, w_up, bias_gate, bias_up, ctx.activation,
                                tuple(ctx.needs_input_grad[:5])), None, None)


def gated_backward(grad, a, w_gate, w_up, bias_gate, bias_up, activation: str, needs: tuple) -> tuple:
    """(grad_a, grad_w_gate, grad_w_up, grad_bias_gate, grad_bias_up), None where ``needs`` says so.
    Its GEMMs go through ``torch.ops.cutedsl.gemm``, so a traced training graph keeps them."""
    from . import ops  # registers torch.ops.cutedsl.gemm when only this module was imported
    from .epilogue import torch_activation

    op = ops.gemm_op
    a2 = a.reshape(-1, a.shape[-1])
    grad2 = grad.reshape(-1, grad.shape[-1]).float()
    g = op(a2, w_gate.t(), None if bias_gate is None else bias_gate.float(), None, None, 1.0, 1.0, "float32")
    u = op(a2, w_up.t(), None if bias_up is None else bias_up.float(), None, None, 1.0, 1.0, "float32")
    g = g.detach().requires_grad_(True)
    with torch.enable_grad():
        act_g = torch_activation(activation)(g)
    (grad_g,) = torch.autograd.grad(act_g, g, grad2 * u)
    grad_u = grad2 * act_g.detach()
    gg, gu = grad_g.to(a.dtype), grad_u.to(a.dtype)
    grad_a = grad_wg = grad_wu = grad_bg = grad_bu = None
    if needs[0]:
        partial = op(gg, w_gate, None, None, None, 1.0, 1.0, None)
        grad_a = op(gu, w_up, None, partial, None, 1.0, 1.0, None).reshape(a.shape)
    if needs[1]:
        grad_wg = op(gg.t(), a2, None, None, None, 1.0, 1.0, None).to(w_gate.dtype)
    if needs[2]:
        grad_wu = op(gu.t(), a2, None, None, None, 1.0, 1.0, None).to(w_up.dtype)
    if len(needs) > 3 and needs[3] and bias_gate is not None:
        grad_bg = grad_g.sum(0).to(bias_gate.dtype)
    if len(needs) > 4 and needs[4] and bias_up is not None:
        grad_bu = grad_u.sum(0).to(bias_up.dtype)
    return grad_a, grad_wg, grad_wu, grad_bg, grad_bu


# ---------------------------------------------------------------------------- custom op

def _gated_op(a: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    return gemm_gated(a, w_gate, w_up, activation=activation)


def _gated_fake(a, w_gate, w_up, activation="silu"):
    if a.shape[-1] != w_gate.shape[-1] or w_gate.shape != w_up.shape:
        raise UnsupportedGemmError(f"shape: a {tuple(a.shape)}, w_gate {tuple(w_gate.shape)}, w_up {tuple(w_up.shape)}")
    return a.new_empty((*a.shape[:-1], w_gate.shape[0]))


_LIB = torch.library.Library("cutedsl", "FRAGMENT")
_LIB.define("gemm_gated" + torch.library.infer_schema(_gated_op, mutates_args=()),
            tags=(torch.Tag.pt2_compliant_tag,))
_LIB.impl("gemm_gated", _gated_op, "CUDA")
_LIB.impl("gemm_gated", _gated_op, "CPU")  # reaches the device rule: a named error, not "no kernel"
torch.library.register_fake("cutedsl::gemm_gated", _gated_fake, lib=_LIB)


def _op_setup_context(ctx, inputs, output):
    a, w_gate, w_up, activation = inputs
    ctx.save_for_backward(a, w_gate, w_up)
    ctx.activation = activation


def _op_backward(ctx, grad):
    a, w_gate, w_up = ctx.saved_tensors
    grads = gated_backward(grad, a, w_gate, w_up, None, None, ctx.activation, tuple(ctx.needs_input_grad[:3]))
    return (*grads[:3], None)


# its backward runs on torch.ops.cutedsl.gemm, so traced training graphs keep our kernels
torch.library.register_autograd("cutedsl::gemm_gated", _op_backward, setup_context=_op_setup_context, lib=_LIB)
gemm_gated_op = torch.ops.cutedsl.gemm_gated.default
