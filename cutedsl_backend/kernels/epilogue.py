"""CuTe DSL pieces that apply an EpilogueSpec (cutedsl_backend/epilogue.py) to a fragment of
fp32 accumulators. Shared by the sm90 and sm100 kernels."""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32


def _act_relu(x):
    # torch.relu keeps NaN: select on x < 0 (False for NaN) rather than max(x, 0)
    return cute.where(x < 0.0, cute.full_like(x, 0.0), x)


def _act_sigmoid(x):
    # 1 / (1 + e^-x) as 0.5 tanh(x/2) + 0.5: one fast tanh instead of exp and a division
    return 0.5 * cute.math.tanh(0.5 * x) + 0.5


def _act_silu(x):
    return x * _act_sigmoid(x)


def _act_tanh(x):
    return cute.math.tanh(x)


def _act_gelu(x):
    return 0.5 * x * (1.0 + cute.math.erf(x * (1.0 / math.sqrt(2.0))))


def _act_gelu_tanh(x):
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + cute.math.tanh(inner))


ACTIVATIONS = {
    "relu": _act_relu,
    "gelu": _act_gelu,
    "gelu_tanh": _act_gelu_tanh,
    "silu": _act_silu,
    "sigmoid": _act_sigmoid,
    "tanh": _act_tanh,
}


class EpilogueArgs:
    """Device-side view of the epilogue operands of one launch (None where absent)."""

    def __init__(self, bias, scale_a, scale_b, residual, alpha, beta, out):
        self.bias = bias
        self.scale_a = scale_a
        self.scale_b = scale_b
        self.residual = residual
        self.alpha = alpha
        self.beta = beta
        # the output's extents bound the gathers (out is (M, N, L))
        self.m_extent = out.shape[0]
        self.n_extent = out.shape[1]


@cute.jit
def apply_epilogue(spec: cutlass.Constexpr, frag: cute.Tensor, coord_of: cutlass.Constexpr, row0: cutlass.Int32,
                   col0: cutlass.Int32, batch: cutlass.Int32, args: cutlass.Constexpr):
    """Apply ``spec`` in place to ``frag`` (an fp32 register fragment).

    ``coord_of(v)`` gives the tile-local (m, n) of element v; (row0, col0) is the tile origin and
    ``batch`` the L index. Out-of-range elements (the M/N tails) read nothing and are clipped by
    the output store.
    """
    x = frag.load() * args.alpha
    if cutlass.const_expr(spec.needs_coords):
        # per-element factors and terms gathered from global memory. Indices are clamped into
        # the problem instead of branching: values of tail elements are never stored (the TMA
        # store clips them), and branch-free code keeps the epilogue cheap.
        mul = cute.make_rmem_tensor(frag.shape, Float32)
        add = cute.make_rmem_tensor(frag.shape, Float32)
        m_last = args.m_extent - 1
        n_last = args.n_extent - 1
        for v in cutlass.range_constexpr(cute.size(frag)):
            m_l, n_l = coord_of(v)
            gm = cutlass.min(row0 + m_l, m_last)
            gn = cutlass.min(col0 + n_l, n_last)
            f = Float32(1.0)
            t = Float32(0.0)
            if cutlass.const_expr(spec.scale_a == "scalar"):
                f = f * Float32(args.scale_a[0])
            if cutlass.const_expr(spec.scale_a == "row"):
                f = f * Float32(args.scale_a[gm])
            if cutlass.const_expr(spec.scale_b == "scalar"):
                f = f * Float32(args.scale_b[0])
            if cutlass.const_expr(spec.scale_b == "col"):
                f = f * Float32(args.scale_b[gn])
            if cutlass.const_expr(spec.bias == "col"):
                t = t + Float32(args.bias[gn])
            if cutlass.const_expr(spec.bias == "row"):
                t = t + Float32(args.bias[gm])
            if cutlass.const_expr(spec.residual):
                t = t + args.beta * Float32(args.residual[gm, gn, batch])
            mul[v] = f
            add[v] = t
        x = x * mul.load() + add.load()
    if cutlass.const_expr(spec.activation is not None):
        x = ACTIVATIONS[spec.activation](x)
    return x
