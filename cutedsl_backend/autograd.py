"""Gradients of ``gemm``: ``y = act(alpha * (a @ b) + bias + beta * residual)``.

One backward formula serves the eager API (a ``torch.autograd.Function``) and the custom op
``torch.ops.cutedsl.gemm`` (``torch.library.register_autograd``), and its GEMMs run on our kernels
through the custom op, so a training graph traced by ``torch.compile`` sees them too:

- the pre-activation ``z`` is recomputed (one GEMM with the same epilogue minus the activation,
  fp32 output) rather than saved, and ``grad_z = grad_y * act'(z)`` is torch's own derivative;
- ``grad_a = alpha * grad_z @ b^T`` and ``grad_b = alpha * a^T @ grad_z`` (transposes are views:
  the kernels take either major), with ``grad_z`` rounded to the input dtype as torch's own
  16-bit backward does;
- ``grad_bias`` and ``grad_residual`` are sums of ``grad_z`` over the broadcast dimensions.
"""

from __future__ import annotations

from typing import Optional

import torch

_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _sum_to(t: torch.Tensor, shape) -> torch.Tensor:
    """``t`` summed over the dimensions broadcasting expanded from ``shape``."""
    shape = tuple(shape)
    while t.dim() > len(shape):
        t = t.sum(0)
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and t.shape[i] != 1)
    return t.sum(dims, keepdim=True) if dims else t


def gemm_backward(grad: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor],
                  residual: Optional[torch.Tensor], activation: Optional[str], alpha: float, beta: float,
                  needs: tuple) -> tuple:
    """(grad_a, grad_b, grad_bias, grad_residual) of ``gemm``, None where ``needs`` says so."""
    from .epilogue import torch_activation

    op = torch.ops.cutedsl.gemm.default
    grad = grad.to(torch.promote_types(grad.dtype, torch.float32))
    if activation is not None:
        # fp32 output: the epilogue operands then have to be fp32 too (the kernel's dtype rule)
        z = op(a, b, None if bias is None else bias.float(), None if residual is None else residual.float(),
               None, alpha, beta, "float32").detach().requires_grad_(True)
        with torch.enable_grad():
            y = torch_activation(activation)(z)
        (grad,) = torch.autograd.grad(y, z, grad)
    gz = grad.to(a.dtype)
    grad_a = grad_b = grad_bias = grad_res = None
    if needs[0]:
        grad_a = op(gz, b.transpose(-1, -2), None, None, None, alpha, 1.0, None)
        grad_a = _sum_to(grad_a, a.shape).to(a.dtype)
    if needs[1]:
        if a.dim() == 3 and b.dim() == 2:  # b shared by the batch: one GEMM over all its rows
            grad_b = op(a.reshape(-1, a.shape[-1]).transpose(0, 1), gz.reshape(-1, gz.shape[-1]),
                        None, None, None, alpha, 1.0, None)
        else:
            grad_b = _sum_to(op(a.transpose(-1, -2), gz, None, None, None, alpha, 1.0, None), b.shape)
        grad_b = grad_b.to(b.dtype)
    if needs[2] and bias is not None:
        if bias.dim() == 2 and grad.dim() == 3 and bias.shape[0] == grad.shape[0] * grad.shape[1] != grad.shape[1]:
            grad = grad.reshape(-1, grad.shape[-1])  # a row bias over the folded (L*M) rows
        grad_bias = _sum_to(grad, bias.shape if bias.dim() == 2 else (1, bias.shape[0])).reshape(bias.shape)
        grad_bias = grad_bias.to(bias.dtype)
    if needs[3] and residual is not None:
        grad_res = _sum_to(grad * beta, residual.shape).to(residual.dtype)
    return grad_a, grad_b, grad_bias, grad_res


class GemmFunction(torch.autograd.Function):
    """The eager ``gemm`` where an input requires grad (forward: our fused kernel)."""

    @staticmethod
    def forward(ctx, a, b, bias, residual, activation, alpha, beta, out_dtype, config):
        from .ops import gemm

        ctx.save_for_backward(a, b, bias, residual)
        ctx.spec = (activation, alpha, beta)
        with torch.no_grad():
            return gemm(a, b, bias=bias, residual=residual, activation=activation, alpha=alpha, beta=beta,
                        out_dtype=out_dtype, config=config)

    @staticmethod
    def backward(ctx, grad):
        a, b, bias, residual = ctx.saved_tensors
        grads = gemm_backward(grad, a, b, bias, residual, *ctx.spec, needs=tuple(ctx.needs_input_grad[:4]))
        return (*grads, None, None, None, None, None)


def needs_autograd(*tensors) -> bool:
    """Grad mode is on and a tensor among ``tensors`` requires grad (None and non-tensors do not)."""
    if not torch.is_grad_enabled():
        return False
    for t in tensors:
        if getattr(t, "requires_grad", False):
            return True
    return False


def setup_context(ctx, inputs, output):
    """The custom op's autograd context (torch.library.register_autograd)."""
    a, b, bias, residual, activation, alpha, beta, _out_dtype = inputs
    ctx.save_for_backward(a, b, bias, residual)
    ctx.spec = (activation, alpha, beta)


def op_backward(ctx, grad):
    a, b, bias, residual = ctx.saved_tensors
    grads = gemm_backward(grad, a, b, bias, residual, *ctx.spec, needs=tuple(ctx.needs_input_grad[:4]))
    return (*grads, None, None, None, None)
