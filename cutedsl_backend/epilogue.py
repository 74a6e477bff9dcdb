"""The epilogue formula, one definition for every kernel family and the host:

    out = activation(alpha * scale_a * scale_b * (A @ B) + bias + beta * residual)

computed in fp32 and rounded once to the output dtype. ``EpilogueSpec`` is plain data
(hashable, part of the compile-cache key) saying which operands exist and their kinds; the CuTe
DSL pieces that apply it live in ``kernels/epilogue.py`` (adding an activation: one function
there, one name here). ``reference`` is the same formula in torch, for the tests.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

ACTIVATION_NAMES = ("relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
BIAS_KINDS = (None, "col", "row")  # col: shape (N,), one value per output column; row: (M, 1)
SCALE_A_KINDS = (None, "scalar", "row")  # tensorwise or per output row (rowwise fp8 scaling)
SCALE_B_KINDS = (None, "scalar", "col")  # tensorwise or per output column
# the gated epilogue's activations (act(gate) * up), as in torch.nn.functional
GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class EpilogueSpec:
    activation: Optional[str] = None
    bias: Optional[str] = None
    bias_dtype: str = "float32"
    residual: bool = False
    residual_dtype: str = "float32"
    # the residual's data pointer, row stride and batch stride are 16-byte aligned (a batch stride
    # of 0, a broadcast, is not): kernels may then load it tile by tile with TMA (sm90a does)
    # instead of gathering it element by element
    residual_aligned: bool = False
    scale_a: Optional[str] = None
    scale_b: Optional[str] = None
    # gated MLP: the GEMM's columns are gate and up halves per tile (two weights of N rows each);
    # the output, N wide, is ``gated(alpha * gate + b_gate) * (alpha * up + b_up)`` with the bias
    # ("col") one 2N vector, the gate's N values first (see docs/design/gated-mlp.md)
    gated: Optional[str] = None

    def __post_init__(self):
        from .problem import UnsupportedGemmError

        if self.activation is not None and self.activation not in ACTIVATION_NAMES:
            raise UnsupportedGemmError(
                f"activation {self.activation!r}: must be None or one of {ACTIVATION_NAMES}")
        if self.bias not in BIAS_KINDS:
            raise UnsupportedGemmError(f"bias kind {self.bias!r}: must be one of {BIAS_KINDS}")
        if self.scale_a not in SCALE_A_KINDS or self.scale_b not in SCALE_B_KINDS:
            raise UnsupportedGemmError("scale kinds: scale_a scalar/row, scale_b scalar/col")
        if self.gated is not None:
            if self.gated not in GATED_ACTIVATIONS:
                raise UnsupportedGemmError(f"gated {self.gated!r}: must be one of {GATED_ACTIVATIONS}")
            if self.activation or self.bias == "row" or self.residual:
                raise UnsupportedGemmError(
                    "gated: the gated epilogue takes a column bias and FP8 scales only (no row bias, residual "
                    "or second activation)")

    def swapped(self) -> "EpilogueSpec":
        """The spec of the swapped problem (GemmProblem.swapped: out^T): a column bias becomes a row
        bias and back, A's row scales become the column scales and B's column scales the row ones."""
        flip = {"col": "row", "row": "col", "scalar": "scalar", None: None}
        return dataclasses.replace(self, bias=flip[self.bias], scale_a=flip[self.scale_b], scale_b=flip[self.scale_a])

    def key(self) -> tuple:
        key = ("epi", self.activation, self.bias, self.bias_dtype if self.bias else None,
               self.residual, self.residual_dtype if self.residual else None,
               bool(self.residual and self.residual_aligned), self.scale_a, self.scale_b)
        return key + (("gated", self.gated),) if self.gated else key

    @property
    def is_identity(self) -> bool:
        return self == EpilogueSpec()

    @property
    def needs_coords(self) -> bool:
        return bool(self.bias or self.residual or self.scale_a or self.scale_b)

    @property
    def residual_tma(self) -> bool:
        """The residual is loaded by TMA into shared memory (sm90a kernels; see residual_aligned)."""
        return self.residual and self.residual_aligned

    def staged_vectors(self, tile_m: int, tile_n: int) -> tuple:
        """The per-tile vectors a kernel stages in shared memory ahead of its epilogue:
        ((operand, "col" | "row", fp32 offset, length), ...) in one buffer. Per-column vectors
        hold a tile's ``tile_n`` values, per-row ones its ``tile_m``."""
        if self.gated:
            return ()  # its bias is read per element (two halves of one 2N vector), not staged
        parts = []
        off = 0
        for name, axis in (("bias", self.bias), ("scale_b", self.scale_b), ("scale_a", self.scale_a)):
            if axis in ("col", "row"):
                n = tile_n if axis == "col" else tile_m
                parts.append((name, axis, off, n))
                off += n
        return tuple(parts)

    def staged_vector_bytes(self, tile_m: int, tile_n: int) -> int:
        return 4 * sum(p[3] for p in self.staged_vectors(tile_m, tile_n))

    def describe(self) -> str:
        if self.is_identity:
            return "none"
        parts = []
        if self.scale_a or self.scale_b:
            parts.append(f"scales({self.scale_a or '-'},{self.scale_b or '-'})")
        if self.bias:
            parts.append(f"bias_{self.bias}")
        if self.residual:
            parts.append("residual")
        if self.activation:
            parts.append(self.activation)
        if self.gated:
            parts.append(f"gated_{self.gated}")
        return "+".join(parts)


def residual_rule(*, elem_bytes: int, offset, row_stride, batch_stride, batched: bool,
                  multiple_of=lambda x, k: x % k == 0, is_zero=lambda x: x == 0) -> bool:
    """The one rule for a residual the kernel may load by TMA (``EpilogueSpec.residual_aligned``):
    its offset (in elements from a 16-byte aligned address), its row stride and, under a batched
    GEMM, its batch stride are whole non-zero multiples of 16 bytes (TMA takes no zero stride: a
    residual broadcast over rows or over the batch is gathered instead). The eager API applies it to tensors;
    the Inductor check to symbolic layouts, with its own ``multiple_of`` and ``is_zero``."""
    elems = 16 // elem_bytes
    if not (multiple_of(offset, elems) and multiple_of(row_stride, elems)) or is_zero(row_stride):
        return False
    return not batched or (not is_zero(batch_stride) and multiple_of(batch_stride, elems))


def residual_broadcast(*, rows, row_stride, batched: bool, batch_stride,
                       is_zero=lambda x: x == 0, is_one=lambda x: x == 1) -> bool:
    """The one rule for a residual repeated over rows (row stride 0 with more than one row) or
    over the batch (batch stride 0 under a batched GEMM; ``batch_stride`` None: a 2-D residual):
    the kernel's residual reads take distinct rows and batches only, so the eager API computes
    such a residual on a copy and Inductor does not fuse it (problem.py's memory rules)."""
    if is_zero(row_stride) and not is_one(rows):
        return True
    return batched and (batch_stride is None or is_zero(batch_stride))


def residual_aligned(res_mnl, batch: int) -> bool:
    """:func:`residual_rule` for a residual view (M, N, L) (torch, unit stride along N)."""
    size = res_mnl.element_size()
    sm, _, sl = res_mnl.stride()
    if res_mnl.data_ptr() % size:
        return False
    return residual_rule(elem_bytes=size, offset=res_mnl.data_ptr() // size, row_stride=sm, batch_stride=sl,
                         batched=batch > 1)


def torch_activation(name: Optional[str]):
    """Activation ``name`` as torch computes it (torch.nn.functional semantics); None: identity."""
    import torch
    import torch.nn.functional as F

    fns = {None: lambda t: t, "relu": torch.relu, "gelu": F.gelu,
           "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
           "sigmoid": torch.sigmoid, "tanh": torch.tanh}
    return fns[name]


def reference(acc, *, bias=None, residual=None, alpha=1.0, beta=1.0, activation=None, scale_a=None,
              scale_b=None):
    """The formula in torch on an fp32/fp64 ``acc`` = A @ B (the tests' reference)."""
    x = acc * alpha
    if scale_a is not None:
        x = x * scale_a.to(x.dtype)
    if scale_b is not None:
        x = x * scale_b.to(x.dtype)
    if bias is not None:
        x = x + bias.to(x.dtype)
    if residual is not None:
        x = x + beta * residual.to(x.dtype)
    return torch_activation(activation)(x)


def gated_reference(a, w_gate, w_up, activation: str, bias_gate=None, bias_up=None):
    """The gated epilogue's formula in torch, float64: ``act(a @ w_gate^T + bias_gate) * (a @ w_up^T
    + bias_up)`` with nn.Linear-shaped (N, K) weights (FP8 callers pass the dequantized operands).
    Raises what torch raises for shapes it refuses."""
    import torch.nn.functional as F

    def f64(t):
        return None if t is None else t.detach().double()

    a = f64(a)
    gate = F.linear(a, f64(w_gate), f64(bias_gate))
    return torch_activation(activation)(gate) * F.linear(a, f64(w_up), f64(bias_up))
