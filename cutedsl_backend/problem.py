"""GemmProblem and the input rules: the one place that says what the kernels support.

Pure Python: importing this module imports neither torch nor the CuTe DSL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


class UnsupportedGemmError(ValueError):
    """Raised when a GEMM request breaks a rule of the kernels; the message names the rule."""


ARCHS = ("sm90a", "sm100a")

# dtype names as torch spells them (torch.float16 -> "float16").
DTYPE_BITS = {
    "float16": 16,
    "bfloat16": 16,
    "float32": 32,
    "float8_e4m3fn": 8,
    "float8_e5m2": 8,
}
INPUT_DTYPES_16 = ("float16", "bfloat16")
INPUT_DTYPES_FP8 = ("float8_e4m3fn", "float8_e5m2")
MAJORS_A = ("k", "m")
MAJORS_B = ("n", "k")
# TMA needs every non-unit stride and the base address 16-byte aligned.
ALIGN_BYTES = 16


def dtype_bits(name: str) -> int:
    try:
        return DTYPE_BITS[name]
    except KeyError:
        raise UnsupportedGemmError(
            f"dtype {name!r}: supported dtypes are {sorted(DTYPE_BITS)}"
        ) from None


def dtype_name(dtype) -> str:
    """'bfloat16' for torch.bfloat16, 'bfloat16', or a cutlass type named BFloat16."""
    if isinstance(dtype, str):
        name = dtype.replace("torch.", "")
    else:
        name = str(dtype).replace("torch.", "")
    aliases = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32",
               "fp32": "float32", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2",
               "Float16": "float16", "BFloat16": "bfloat16", "Float32": "float32",
               "Float8E4M3FN": "float8_e4m3fn", "Float8E5M2": "float8_e5m2"}
    name = aliases.get(name, name)
    if name not in DTYPE_BITS:
        raise UnsupportedGemmError(f"dtype {dtype}: supported dtypes are {sorted(DTYPE_BITS)}")
    return name


def normalize_arch(arch: str) -> str:
    a = arch.lower().replace("_", "")
    if a in ("sm90", "sm90a"):
        return "sm90a"
    if a in ("sm100", "sm100a"):
        return "sm100a"
    raise UnsupportedGemmError(f"arch {arch!r}: supported targets are {ARCHS}")


def arch_for_capability(major: int, minor: int) -> str:
    """Compute capability -> kernel target: 9.0 -> sm90a, 10.x -> sm100a, anything else refused."""
    if (major, minor) == (9, 0):
        return "sm90a"
    if major == 10:
        return "sm100a"
    raise UnsupportedGemmError(
        f"device: compute capability {major}.{minor} has no kernels here (needs sm90 = 9.0 "
        f"or sm100 = 10.x)"
    )


@dataclass(frozen=True)
class GemmProblem:
    """out[l] = a[l] @ b[l] for l < batch; a is (M, K), b is (K, N), out is (M, N) row-major.

    ``a_major``: "k" (a row-major, K contiguous) or "m" (column-major).
    ``b_major``: "n" (b row-major, N contiguous) or "k" (column-major, i.e. a transposed view).
    ``c_major``: "n" (out row-major, the API's result) or "m" (column-major: the kernel's view of
    a swap-AB launch, which computes out^T = b^T @ a^T, see :meth:`swapped`).
    """

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    a_major: str = "k"
    b_major: str = "n"
    arch: str = "sm90a"
    # False when the caller checks real strides instead (strided views in the eager API).
    packed: bool = True
    # B's dtype where it differs from A's (the fp8 mixes e4m3 x e5m2); None: same as ``dtype``
    b_dtype: Optional[str] = None
    # fp8 only: accumulate in the tensor cores' reduced-precision fp8 accumulator across the
    # whole K (torch._scaled_mm's use_fast_accum=True); False adds every k-tile into fp32
    fast_accum: bool = False
    c_major: str = "n"

    def swapped(self) -> "GemmProblem":
        """The problem of out^T = b^T @ a^T, as a swap-AB launch hands it to the kernel: M and N
        exchanged, b^T as its A (K-major when b is), a^T as its B (K-major when a is), and the
        output column-major (out^T's columns are out's rows)."""
        return GemmProblem(self.n, self.m, self.k, self.batch, self.dtype_b, self.out_dtype,
                           "k" if self.b_major == "k" else "m", "k" if self.a_major == "k" else "n", self.arch,
                           self.packed, None if self.b_dtype is None else self.dtype, self.fast_accum,
                           "m" if self.c_major == "n" else "n")

    @property
    def fp8(self) -> bool:
        return self.dtype in INPUT_DTYPES_FP8

    @property
    def promote_fp8(self) -> bool:
        return self.fp8 and not self.fast_accum

    @property
    def dtype_b(self) -> str:
        return self.b_dtype or self.dtype

    def describe(self) -> str:
        b = f"x{self.b_dtype}" if self.b_dtype else ""
        return (
            f"{self.arch} {self.dtype}{b}->{self.out_dtype} M={self.m} N={self.n} K={self.k} "
            f"L={self.batch} a_major={self.a_major} b_major={self.b_major}"
            + (f" c_major={self.c_major}" if self.c_major != "n" else "")
        )

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch

    def check(self) -> "GemmProblem":
        """Raise UnsupportedGemmError naming the first rule broken; return self otherwise."""
        check_problem(self)
        return self


def make_problem(m, n, k, *, dtype, arch="sm90a", batch=1, a_major="k", b_major="n",
                 out_dtype: Optional[object] = None, b_dtype: Optional[object] = None,
                 fast_accum: bool = False) -> GemmProblem:
    d = dtype_name(dtype)
    bd = dtype_name(b_dtype) if b_dtype is not None else None
    od = dtype_name(out_dtype) if out_dtype is not None else (d if dtype_bits(d) == 16 else "bfloat16")
    return GemmProblem(int(m), int(n), int(k), int(batch), d, od, a_major, b_major,
                       normalize_arch(arch), b_dtype=None if bd == d else bd,
                       fast_accum=bool(fast_accum) and d in INPUT_DTYPES_FP8).check()


def check_problem(p: GemmProblem) -> None:
    if p.arch not in ARCHS:
        raise UnsupportedGemmError(f"arch {p.arch!r}: supported targets are {ARCHS}")
    for name, v in (("M", p.m), ("N", p.n), ("K", p.k), ("batch", p.batch)):
        if not isinstance(v, int) or v < 0:
            raise UnsupportedGemmError(f"shape: {name}={v} must be a non-negative integer")
    if max(p.m, p.n, p.k) >= 2**31 or p.batch >= 2**31:
        raise UnsupportedGemmError("shape: every extent must be below 2**31")
    if p.dtype not in INPUT_DTYPES_16 + INPUT_DTYPES_FP8:
        raise UnsupportedGemmError(
            f"dtype: inputs must be one of {INPUT_DTYPES_16 + INPUT_DTYPES_FP8}, got {p.dtype}"
        )
    if p.out_dtype not in ("float16", "bfloat16", "float32"):
        raise UnsupportedGemmError(
            f"out_dtype: must be float16, bfloat16 or float32, got {p.out_dtype}"
        )
    if p.dtype in INPUT_DTYPES_FP8:
        if p.dtype_b not in INPUT_DTYPES_FP8:
            raise UnsupportedGemmError(f"dtype: fp8 A needs an fp8 B, got {p.dtype_b}")
        if p.dtype == p.dtype_b == "float8_e5m2":
            raise UnsupportedGemmError("dtype: e5m2 x e5m2 is not a supported fp8 mix (as in torch._scaled_mm)")
        if p.a_major != "k" or p.b_major != "k":
            raise UnsupportedGemmError(
                "layout: fp8 operands must be K-major: a row-major (M, K), b column-major (K, N)")
    else:
        if p.dtype_b != p.dtype:
            raise UnsupportedGemmError(f"dtype: a is {p.dtype}, b is {p.dtype_b}; they must match")
        if dtype_bits(p.out_dtype) == 16 and p.out_dtype != p.dtype:
            raise UnsupportedGemmError(
                f"out_dtype: a 16-bit output must match the input dtype ({p.dtype}), got {p.out_dtype}"
            )
    if p.a_major not in MAJORS_A:
        raise UnsupportedGemmError(f"layout: a_major must be one of {MAJORS_A}, got {p.a_major!r}")
    if p.b_major not in MAJORS_B:
        raise UnsupportedGemmError(f"layout: b_major must be one of {MAJORS_B}, got {p.b_major!r}")
    if p.c_major not in ("n", "m"):
        raise UnsupportedGemmError(f"layout: c_major must be 'n' or 'm', got {p.c_major!r}")
    if not p.packed:
        return
    # The contiguous extent of each operand sets its leading stride for a packed tensor.
    in_align = ALIGN_BYTES * 8 // dtype_bits(p.dtype)
    out_align = ALIGN_BYTES * 8 // dtype_bits(p.out_dtype)
    lead_a = p.k if p.a_major == "k" else p.m
    lead_b = p.n if p.b_major == "n" else p.k
    lead_c = p.n if p.c_major == "n" else p.m
    for what, extent, align in (("A", lead_a, in_align), ("B", lead_b, in_align), ("out", lead_c, out_align)):
        if extent % align:
            raise UnsupportedGemmError(
                f"alignment: the contiguous extent of {what} ({extent}) must be a multiple of "
                f"{align} elements (16 bytes) for TMA"
            )


# ---------------------------------------------------------------------------- operand rules
# Stated once over an Operand (sizes and strides as ints, or as Inductor's symbolic expressions) and
# a Sizes (what can be known statically about them): the eager API applies them to tensors
# (operands.py), the Inductor integration to IR nodes and fake tensors (inductor/eligibility.py).


@dataclass(frozen=True)
class Operand:
    """What the rules need of a tensor: sizes and strides (ints or symbolic), dtype name, and the
    offset of its first element in elements (eager: its address; Inductor: its storage offset)."""

    shape: tuple
    stride: tuple
    dtype: str
    offset: Any = 0

    @property
    def dim(self) -> int:
        return len(self.shape)


class Sizes:
    """Static reasoning about (possibly symbolic) extents: plain ints (``Sizes()``), Inductor's
    sizevars in a lowering, the fake tensors' shape environment (``shape_env``) in an FX pass."""

    def __init__(self, sizevars=None, shape_env=None):
        self.sizevars = sizevars
        self.shape_env = shape_env

    def hint(self, x) -> int:
        if self.sizevars is not None:
            return int(self.sizevars.optimization_hint(x))
        if isinstance(x, int):
            return x
        if self.shape_env is not None:  # a symbolic extent (sympy) of the pass's fake tensors
            hint = self.shape_env.size_hint(x, allow_none=True)
            if hint is not None:
                return int(hint)
        raise UnsupportedGemmError(f"a symbolic extent {x} without a size hint")

    def multiple_of(self, x, k: int) -> bool:
        if isinstance(x, int):
            return x % k == 0
        if self.sizevars is not None:
            return bool(self.sizevars.statically_known_multiple_of(x, k))
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(x % k == 0))

    def is_static(self, x) -> bool:
        """True when ``x`` is a plain integer (no free symbols)."""
        return isinstance(x, int) or not getattr(x, "free_symbols", ())

    def equals(self, x, v: int) -> bool:
        if isinstance(x, int):
            return x == v
        if self.sizevars is not None:
            return bool(self.sizevars.statically_known_equals(x, v))
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(x == v))


CONCRETE = Sizes()


def operand_major(t: Operand, what: str, row_major: str, col_major: str, sizes: Sizes = CONCRETE) -> str:
    """Which of the last two dims is contiguous: ``row_major`` for unit stride along the last,
    ``col_major`` for unit stride along the second-to-last; where both strides are 1 (a dim of
    extent 1), the one along the dim of extent > 1. A dim of extent 1 counts as either (its
    stride is never used)."""
    (rows, cols), (sr, sc) = t.shape[-2:], t.stride[-2:]
    if sizes.equals(sc, 1) and not (sizes.equals(cols, 1) and sizes.equals(sr, 1)):
        return row_major
    if sizes.equals(sr, 1) or sizes.equals(rows, 1):
        return col_major
    if sizes.equals(cols, 1):
        return row_major
    raise UnsupportedGemmError(f"layout: {what} needs unit stride on one of its last two dims, got strides {t.stride}")


def check_aligned(t: Operand, what: str, unit_dim: int, sizes: Sizes = CONCRETE) -> None:
    """TMA's rule for a strided operand: every stride but the unit one (of a dim of extent > 1: a
    unit extent's stride is never used) and the start address 16-byte aligned."""
    elem_bits = dtype_bits(dtype_name(t.dtype))
    align = ALIGN_BYTES * 8 // elem_bits
    for i, (extent, s) in enumerate(zip(t.shape, t.stride)):
        if i == unit_dim % t.dim or sizes.equals(extent, 1):
            continue
        if not sizes.multiple_of(s, align):
            known = "" if sizes.is_static(s) else " statically"  # a symbolic stride: unknown until run time
            raise UnsupportedGemmError(f"alignment: {what} stride {s} (dim {i}) is not{known} a multiple of {align} "
                                       "elements (16 bytes), as TMA needs")
    if not sizes.multiple_of(t.offset, align):
        raise UnsupportedGemmError(f"alignment: {what} must start at a 16-byte aligned address (element offset "
                                   f"{t.offset})")


def check_epilogue_dtype(what: str, dtype: str, out_dtype: str) -> None:
    """Bias and residual: the output's dtype or float32."""
    if dtype not in (out_dtype, "float32"):
        raise UnsupportedGemmError(f"{what}: dtype must be {out_dtype} or float32, got {dtype}")


def bias_kind(t: Operand, m, n, sizes: Sizes = CONCRETE, row_broadcast: bool = False) -> str:
    """"col" for a (N,) bias (one value per output column), "row" for (M, 1); with ``row_broadcast``
    (addmm's input in a graph) also (1, N) or a (R, N) whose rows repeat (stride 0). Contiguous
    along its length: the kernel reads it as a 1-D array."""
    if t.dim == 1 and sizes.equals(t.shape[0] - n, 0):
        kind, unit = "col", t.stride[0]
    elif t.dim == 2 and sizes.equals(t.shape[1], 1) and sizes.equals(t.shape[0] - m, 0):
        kind, unit = "row", t.stride[0]
    elif row_broadcast and t.dim == 2 and sizes.equals(t.shape[1] - n, 0) and (
            sizes.equals(t.shape[0], 1) or sizes.equals(t.stride[0], 0)):
        kind, unit = "col", t.stride[1]
    else:
        raise UnsupportedGemmError(f"bias: shape must be ({n},) or ({m}, 1), got {tuple(t.shape)}")
    length = n if kind == "col" else m
    if not sizes.equals(unit, 1) and not sizes.equals(length, 1):
        raise UnsupportedGemmError("layout: bias must be contiguous along its length")
    return kind


def _numel(t: Operand):
    out = 1
    for s in t.shape:
        out = out * s
    return out


def scale_kind(t: Operand, what: str, m, n, vector: str, sizes: Sizes = CONCRETE) -> str:
    """FP8 scales: "scalar" (one element: tensorwise) or ``vector`` ("row": (M, 1) for scale_a,
    "col": (1, N) for scale_b), float32, contiguous along its length."""
    if t.dtype != "float32":
        raise UnsupportedGemmError(f"{what}: dtype must be float32, got {t.dtype}")
    if t.dim <= 2 and sizes.equals(_numel(t), 1):
        return "scalar"
    length, ones, unit = (m, 1, 0) if vector == "row" else (n, 0, 1)
    if (t.dim == 2 and sizes.equals(t.shape[ones], 1) and sizes.equals(t.shape[1 - ones] - length, 0)
            and sizes.equals(t.stride[unit], 1)):
        return vector
    want = (m, 1) if vector == "row" else (1, n)
    raise UnsupportedGemmError(f"{what}: shape must be () or {want} and contiguous, got {tuple(t.shape)}")


def gated_scale(t: Operand, what: str, length, per: str, sizes: Sizes = CONCRETE) -> str:
    """A gated GEMM's FP8 scale (a's, or a weight's): float32, "scalar" (one element) or "vector"
    (``length`` values, one per ``per``, contiguous, in any shape: (M, 1), (1, N), (N,), ...)."""
    if t.dtype != "float32":
        raise UnsupportedGemmError(f"{what}: must be a float32 tensor, got {t.dtype}")
    numel = _numel(t)
    if sizes.equals(numel, 1):
        return "scalar"
    long = [s for extent, s in zip(t.shape, t.stride) if not sizes.equals(extent, 1)]
    if sizes.equals(numel - length, 0) and len(long) == 1 and sizes.equals(long[0], 1):
        return "vector"
    raise UnsupportedGemmError(f"{what}: one element, or {length} contiguous ones (one per {per})")


# ---------------------------------------------------------------------------- memory rules
# The kernels read operands through TMA and write the output through TMA stores, tile by tile, in
# an order no caller controls. So (one statement of the rules, for the eager API and Inductor):
# - an input with a zero stride on a dimension of extent > 1 (an ``expand``), or whose elements
#   overlap each other, is not something TMA can describe: the eager API copies it (logged) and
#   computes the right result; Inductor does not offer such a GEMM; the same for a residual
#   broadcast over rows or batches (the eager API copies it, Inductor leaves the add unfused);
# - an output whose rows TMA cannot store (N times the element size not a multiple of 16 bytes):
#   the eager API writes a padded buffer and copies it; Inductor does not offer such a GEMM;
# - the output must not overlap itself (every element written once) nor share memory with any
#   input (a tile could read what another tile already wrote): refused, as torch refuses it;
# - epilogue vectors (bias, scales) are read as 4-byte words: their data pointers must be 4-byte
#   aligned (refused otherwise).
VECTOR_ALIGN_BYTES = 4


def has_zero_stride(shape, strides) -> bool:
    """True if a dimension of extent > 1 has stride 0 (its elements alias)."""
    return any(n > 1 and s == 0 for n, s in zip(shape, strides))


def overlaps_itself(shape, strides) -> bool:
    """True if two distinct indices of a strided tensor address the same element.

    Sufficient test (torch's own is similar): sorted by stride, each dimension of extent > 1 must
    step over everything the dimensions before it span. A layout that interleaves two dimensions
    without overlap is reported as overlapping (refused or copied, never wrong)."""
    dims = sorted((abs(s), n) for n, s in zip(shape, strides) if n > 1)
    span = 1  # elements covered by the dims so far (the first needs stride >= 1)
    for s, n in dims:
        if s < span:
            return True
        span = s * (n - 1) + span
    return False


def byte_span(shape, strides, itemsize: int) -> int:
    """Bytes from the first element to one past the last (0 for an empty tensor)."""
    if any(n == 0 for n in shape):
        return 0
    return (sum((n - 1) * abs(s) for n, s in zip(shape, strides)) + 1) * itemsize


def ranges_overlap(a_start: int, a_bytes: int, b_start: int, b_bytes: int) -> bool:
    """True if the byte ranges [start, start + bytes) intersect (empty ranges never do)."""
    return a_bytes > 0 and b_bytes > 0 and a_start < b_start + b_bytes and b_start < a_start + a_bytes


def operand_class(problem: GemmProblem) -> Optional[str]:
    """The operand class a fitted model is keyed by: "16bit" (bf16/fp16 operands), "fp8_precise"
    (e4m3 x e4m3, every k-tile added in fp32 as torch._scaled_mm does by default, 16-bit out),
    "fp8_fast" (the same with fast accumulation); None for the rest."""
    if dtype_bits(problem.dtype) == 16:
        return "16bit"
    if (problem.dtype == "float8_e4m3fn" and problem.b_dtype in (None, "float8_e4m3fn")
            and dtype_bits(problem.out_dtype) == 16):
        return "fp8_fast" if problem.fast_accum else "fp8_precise"
    return None
