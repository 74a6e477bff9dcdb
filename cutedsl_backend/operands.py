"""The eager API's operand rules: what a call's tensors must be (problem.py states the rules; here
they are applied to torch tensors), and the views and descriptors the kernel reads. Every bad
input ends in a named UnsupportedGemmError or a correct computation on a (logged) copy.
"""

from __future__ import annotations

import functools
import logging

import torch

from .configs import GemmConfig
from .epilogue import residual_broadcast
from .problem import (
    VECTOR_ALIGN_BYTES,
    GemmProblem,
    Operand,
    UnsupportedGemmError,
    arch_for_capability,
    bias_kind,
    byte_span,
    check_aligned,
    check_epilogue_dtype,
    check_problem,
    dtype_name,
    has_zero_stride,
    operand_major,
    overlaps_itself,
    ranges_overlap,
    scale_kind,
)

log = logging.getLogger("cutedsl_backend.ops")


@functools.lru_cache(None)
def device_arch(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return arch_for_capability(major, minor)


@functools.lru_cache(None)
def max_clusters(index: int, cluster_size: int) -> int:
    """Clusters of ``cluster_size`` CTAs (one CTA per SM) that the device holds at once."""
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    if cluster_size == 1:
        return sms
    try:
        from cutlass.utils import HardwareInfo

        return max(1, int(HardwareInfo(index).get_max_active_clusters(cluster_size)))
    except Exception:  # pragma: no cover - driver query unavailable
        return max(1, sms // cluster_size)


def operand(t: torch.Tensor) -> Operand:
    """The rules' view of a tensor (problem.Operand): its offset is its address in elements (an
    address that is no multiple of the element size counts as misaligned)."""
    size = t.element_size()
    ptr = t.data_ptr()
    return Operand(tuple(t.shape), tuple(t.stride()), dtype_name(t.dtype), ptr // size if ptr % size == 0 else 1)


def as_rcl(t: torch.Tensor, cols_contiguous: bool, align: int) -> torch.Tensor:
    """The (R, C, L) view of an (L, R, C) tensor that ``rcl`` describes."""
    _, shape, strides = rcl(t, cols_contiguous, align)
    return t.as_strided(shape, strides)


FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def prepare(a: torch.Tensor, b: torch.Tensor, out_dtype, config, fp8: bool = False,
             fast_accum: bool = False) -> tuple:
    """Validate eager operands; return (problem, batch-3d a, b, out shape)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedGemmError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() not in (2, 3):
            raise UnsupportedGemmError(f"shape: {name} must be 2-D or 3-D, got {t.dim()}-D")
    if not a.is_cuda or not b.is_cuda:
        raise UnsupportedGemmError(
            f"device: a and b must be CUDA tensors, got {a.device} and {b.device}"
        )
    if a.device != b.device:
        raise UnsupportedGemmError(f"device: a is on {a.device}, b on {b.device}")
    if fp8:
        if a.dtype not in FP8_DTYPES or b.dtype not in FP8_DTYPES:
            raise UnsupportedGemmError(f"dtype: scaled_mm takes fp8 operands, got {a.dtype} and {b.dtype}")
        if a.dim() != 2 or b.dim() != 2:
            raise UnsupportedGemmError("shape: scaled_mm takes 2-D a (M, K) and b (K, N)")
    elif a.dtype in FP8_DTYPES or b.dtype in FP8_DTYPES:
        raise UnsupportedGemmError("dtype: fp8 operands need their scales: use cutedsl_backend.scaled_mm")
    elif a.dtype != b.dtype:
        raise UnsupportedGemmError(f"dtype: a is {a.dtype}, b is {b.dtype}; they must match")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise UnsupportedGemmError(f"shape: batch sizes differ ({a.shape[0]} vs {b.shape[0]})")
    if a.shape[-1] != b.shape[-2]:
        raise UnsupportedGemmError(
            f"shape: a is {tuple(a.shape)} and b is {tuple(b.shape)}; a's last dim (K) must equal "
            f"b's second-to-last dim"
        )
    if a.dim() == 3 and b.dim() == 2 and a.stride(2) == 1 and a.stride(0) == a.shape[1] * a.stride(1):
        # (L, M, K) row-major with packed batches @ (K, N): one (L*M, K) @ (K, N) GEMM
        a = a.reshape(a.shape[0] * a.shape[1], a.shape[2])
    batch = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3 else 1)
    a3 = a if a.dim() == 3 else a.unsqueeze(0)
    b3 = b if b.dim() == 3 else b.unsqueeze(0)
    # a 2-D operand broadcast over the batch is materialized: TMA takes no zero strides
    if a3.shape[0] != batch:
        a3 = a3.expand(batch, -1, -1).contiguous()
    if b3.shape[0] != batch:
        b3 = b3.expand(batch, -1, -1).contiguous()
    a3 = readable_by_tma("a", a3)
    b3 = readable_by_tma("b", b3)
    m, k = a3.shape[1], a3.shape[2]
    n = b3.shape[2]
    d = dtype_name(a.dtype)
    od = dtype_name(out_dtype) if out_dtype is not None else d
    arch = device_arch(a.device.index if a.device.index is not None else torch.cuda.current_device())
    a_op, b_op = operand(a3), operand(b3)
    a_major = operand_major(a_op, "a", "k", "m")
    b_major = operand_major(b_op, "b", "n", "k")
    bd = dtype_name(b.dtype)
    problem = GemmProblem(m, n, k, batch, d, od, a_major, b_major, arch, packed=False,
                          b_dtype=None if bd == d else bd, fast_accum=bool(fast_accum) and fp8)
    check_problem(problem)
    if not (m and n and k):
        return problem, a3, b3  # nothing is launched: strides of empty operands do not matter
    check_aligned(a_op, "a", -1 if a_major == "k" else -2)
    check_aligned(b_op, "b", -1 if b_major == "n" else -2)
    if config is not None and not isinstance(config, GemmConfig):
        raise UnsupportedGemmError(f"config: expected a GemmConfig, got {type(config).__name__}")
    return problem, a3, b3


def readable_by_tma(what: str, t: torch.Tensor) -> torch.Tensor:
    """``t``, or a packed copy of it (logged) where a zero stride or overlapping elements make it
    something TMA cannot describe (see problem.py's memory rules): the result stays exact."""
    shape, strides = tuple(t.shape), tuple(t.stride())
    if has_zero_stride(shape, strides) or overlaps_itself(shape, strides):
        log.info("%s: strides %s alias elements (a zero stride or overlapping rows): computing on a packed "
                 "copy", what, strides)
        return t.contiguous()
    return t


def rcl(t: torch.Tensor, cols_contiguous: bool, align: int) -> tuple:
    """(L, R, C) tensor -> (data_ptr, (R, C, L), strides) of its (R, C, L) view.

    The stride of an extent-1 dimension is never used; it is replaced by an aligned one that keeps
    the contiguous dimension the only unit-stride one (TMA checks every stride, and the DSL finds
    the leading dimension by its unit stride)."""
    L, R, C = t.shape
    sl, sr, sc = t.stride()
    if cols_contiguous:
        sc = 1 if C == 1 else sc
        sr = max(align, -(-C // align) * align) if R == 1 else sr
    else:
        sr = 1 if R == 1 else sr
        sc = max(align, -(-R // align) * align) if C == 1 else sc
    if L == 1:
        sl = sr * R if cols_contiguous else sc * C
        sl = max(align, -(-sl // align) * align)
    return t.data_ptr(), (R, C, L), (sr, sc, sl)


def descriptor(t: torch.Tensor, cols_contiguous: bool, align: int) -> tuple:
    """(shape, dynamic strides) of ``t``'s (R, C, L) view as the kernel's argument struct holds it
    (the unit stride is static in the compiled kernel)."""
    _, shape, strides = rcl(t, cols_contiguous, align)
    unit = 1 if cols_contiguous else 0
    return shape, tuple(s for i, s in enumerate(strides) if i != unit)


def kernel_views(problem: GemmProblem, a3, bt, out3):
    """The (M,K,L), (N,K,L), (M,N,L) torch views the compiled function takes."""
    in_align = 16 // a3.element_size()
    return (as_rcl(a3, problem.a_major == "k", in_align), as_rcl(bt, problem.b_major == "k", in_align),
            as_rcl(out3, problem.c_major == "n", 16 // out3.element_size()))


class EpilogueOperands:
    """The epilogue operands of a call, checked: the spec, and per operand the tensor the kernel
    reads (a 1-D unit-stride vector, or the (M, N, L) residual view)."""

    def __init__(self, problem: GemmProblem, device, bias, residual, activation, scale_a, scale_b):
        from .epilogue import EpilogueSpec, residual_aligned

        m, n, L = problem.m, problem.n, problem.batch
        b_kind = bias_dtype = None
        if bias is not None:
            check_tensor("bias", bias, device)
            b_kind = bias_kind(operand(bias), m, n)
            bias_dtype = dtype_name(bias.dtype)
            check_epilogue_dtype("bias", bias_dtype, problem.out_dtype)
        res_dtype = None
        if residual is not None:
            check_tensor("residual", residual, device)
            residual = flat_residual(residual, problem)
            if tuple(residual.shape) not in ((m, n), (L, m, n)):
                raise UnsupportedGemmError(
                    f"residual: shape must be ({m}, {n}) or ({L}, {m}, {n}), got {tuple(residual.shape)}")
            res_dtype = dtype_name(residual.dtype)
            check_epilogue_dtype("residual", res_dtype, problem.out_dtype)
        sa_kind = sb_kind = None
        if scale_a is not None:
            check_tensor("scale_a", scale_a, device)
            sa_kind = scale_kind(operand(scale_a), "scale_a", m, n, "row")
        if scale_b is not None:
            check_tensor("scale_b", scale_b, device)
            sb_kind = scale_kind(operand(scale_b), "scale_b", m, n, "col")
        self.bias, self.scale_a, self.scale_b, self.residual = epilogue_views(
            bias, residual, scale_a, scale_b, problem)
        aligned = self.residual is not None and residual_aligned(self.residual, L)
        self.spec = EpilogueSpec(activation=activation, bias=b_kind, bias_dtype=bias_dtype or "float32",
                                 residual=residual is not None, residual_dtype=res_dtype or "float32",
                                 residual_aligned=aligned, scale_a=sa_kind, scale_b=sb_kind)

    def tensors(self) -> tuple:
        return (self.bias, self.scale_a, self.scale_b, self.residual)

    def descs(self) -> list:
        """(shape, dynamic strides) of each epilogue tensor the kernel takes, in its argument order."""
        out: list[tuple[tuple, tuple]] = []
        for t in (self.bias, self.scale_a, self.scale_b):
            if t is not None:
                out.append(((t.shape[0],), ()))
        if self.residual is not None:
            sm, _, sl = self.residual.stride()
            out.append((tuple(self.residual.shape), (sm, sl)))
        return out

    def ptrs(self) -> tuple:
        return tuple(t.data_ptr() for t in self.tensors() if t is not None)


def check_tensor(what, t, device):
    if not isinstance(t, torch.Tensor):
        raise UnsupportedGemmError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise UnsupportedGemmError(f"device: {what} is on {t.device}, the operands on {device}")


def result_shape(a, b, problem: GemmProblem) -> tuple:
    """torch.matmul's result shape (the kernel always writes (L, M, N))."""
    if a.dim() == 2 and b.dim() == 2:
        return (problem.m, problem.n)
    if a.dim() == 3 and b.dim() == 2 and problem.batch == 1:
        return (a.shape[0], a.shape[1], problem.n)  # includes the folded (L*M, K) case
    return (problem.batch, problem.m, problem.n)


def residual_view(residual):
    """(L, M, N) -> the (M, N, L) view the kernel reads: unit stride along N, no zero stride on an
    extent above one (a broadcast over rows or batches; else a copy, logged: the kernel's gathered
    residual reads only distinct rows and batches correctly)."""
    (sl, sm, sn), (L, M, N) = residual.stride(), residual.shape
    if (sn != 1 and N > 1) or residual_broadcast(rows=M, row_stride=sm, batched=L > 1, batch_stride=sl):
        if residual.stride(2) == 1:
            log.info("residual: strides %s broadcast rows or batches: computing on a packed copy",
                     tuple(residual.stride()))
        residual = residual.contiguous()
    if N == 1 and M > 1 and residual.stride(1) == 1:
        # one column: adjacent rows make the row stride a second unit stride, and the DSL takes a
        # tensor's unit stride for its leading dimension: computed on a copy with 16-byte rows
        rows = 16 // residual.element_size()
        residual = torch.empty((L, M, rows), dtype=residual.dtype, device=residual.device)[..., :1].copy_(residual)
    if M == 1:
        # one row: its stride is never used, and a unit one (a (1, 1) residual has two) would make
        # a second unit stride: the aligned stride of a row of N elements instead
        rows = 16 // residual.element_size()
        row_stride = max(rows, -(-N // rows) * rows)
        if residual.stride(1) != row_stride:
            residual = residual.as_strided(residual.shape, (residual.stride(0), row_stride, residual.stride(2)))
        if L > 1 and residual.stride(0) == 1:
            # batches one element apart (one row of one column each): a copy with 16-byte rows
            residual = torch.empty((L, M, row_stride), dtype=residual.dtype,
                                   device=residual.device)[..., :N].copy_(residual)
    if residual.shape[0] == 1 and residual.stride(0) != residual.shape[1] * residual.stride(1):
        # one batch: its stride is never used; make it the aligned one TMA's descriptor checks
        residual = residual.as_strided(residual.shape, (residual.shape[1] * residual.stride(1),
                                                        residual.stride(1), residual.stride(2)))
    return residual.permute(1, 2, 0)


def flat_residual(residual, problem: GemmProblem):
    """A residual of the result's shape (L', M', N) for an (L', M', K) @ (K, N) call, which runs as
    one (L'*M', K) GEMM: its rows flattened alike, (M, N) (a view where its strides allow, else a
    copy). Any other residual as given."""
    if (residual.dim() == 3 and problem.batch == 1 and residual.shape[0] > 1 and residual.shape[2] == problem.n
            and residual.shape[0] * residual.shape[1] == problem.m):
        return residual.reshape(problem.m, problem.n)
    return residual


def epilogue_views(bias, residual, scale_a, scale_b, problem):
    """The tensors the kernel reads, per call: 1-D vectors and the (M, N, L) residual view."""
    res = None
    if residual is not None:
        residual = flat_residual(residual, problem)
        if residual.dim() == 2:
            residual = residual.unsqueeze(0).expand(problem.batch, problem.m, problem.n)
        res = residual_view(residual)
    return (None if bias is None else bias.reshape(-1), None if scale_a is None else scale_a.reshape(-1),
            None if scale_b is None else scale_b.reshape(-1), res)


def batch_row_bias(a, b, bias):
    """A per-row bias (M, 1) of each batch where (L, M, K) @ (K, N) runs as one (L*M, K) GEMM: the
    bias repeated per batch (a copy of L*M values; differentiable, as torch broadcasts it)."""
    if (bias is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 3
            and b.dim() == 2 and a.shape[0] > 1 and tuple(bias.shape) == (a.shape[1], 1)):
        return bias.repeat(a.shape[0], 1)
    return bias


def check_out(out: torch.Tensor, result_shape: tuple, shape3: tuple, dtype: torch.dtype, device) -> torch.Tensor:
    """``out`` checked against the result (torch's rules: its exact shape and dtype, no element
    written twice); returns its (L, M, N) view."""
    if not isinstance(out, torch.Tensor):
        raise UnsupportedGemmError(f"out: expected a torch.Tensor, got {type(out).__name__}")
    if out.dtype != dtype:
        raise UnsupportedGemmError(f"out: dtype must be {dtype}, got {out.dtype}")
    if out.device != device:
        raise UnsupportedGemmError(f"out: must be on {device}, got {out.device}")
    if tuple(out.shape) != tuple(result_shape):
        raise UnsupportedGemmError(f"out: shape must be the result's {tuple(result_shape)}, got {tuple(out.shape)}")
    if out.requires_grad and torch.is_grad_enabled():
        raise UnsupportedGemmError("out: a tensor that requires grad cannot be written in place (as in torch)")
    if has_zero_stride(out.shape, out.stride()) or overlaps_itself(out.shape, out.stride()):
        raise UnsupportedGemmError(
            f"out: its elements overlap (strides {tuple(out.stride())}): every output element must have "
            "its own memory")
    try:
        out3 = out.view(shape3)
    except RuntimeError:
        raise UnsupportedGemmError(
            f"out: strides {tuple(out.stride())} cannot be viewed as the kernel's (L, M, N) = {shape3} result"
        ) from None
    if out3.stride(2) != 1 and shape3[2] > 1:
        raise UnsupportedGemmError(f"layout: out needs unit stride along N, got strides {tuple(out.stride())}")
    if out3.data_ptr() % 16:
        raise UnsupportedGemmError("alignment: out's data pointer must be 16-byte aligned")
    return out3


def tma_writable(out3: torch.Tensor) -> bool:
    """Whether the kernel's TMA store can write ``out3`` (L, M, N) in place: unit stride along N,
    row (and, batched, batch) strides whole multiples of 16 bytes. Otherwise the result goes
    through a padded buffer (see Plan)."""
    align = 16 // out3.element_size()
    L, M, N = out3.shape
    sl, sm, sn = out3.stride()
    return (sn == 1 or N == 1) and sm % align == 0 and (L == 1 or sl % align == 0)


def memory_ranges(*tensors) -> tuple:
    """(data pointer, byte span) of each tensor (None stays None)."""
    return tuple(None if t is None else (t.data_ptr(), byte_span(t.shape, t.stride(), t.element_size()))
                 for t in tensors)


def check_no_alias(out_range: tuple, named_ranges) -> None:
    """Refuse an ``out`` sharing memory with an input (the kernel could read what it already wrote)."""
    for what, r in named_ranges:
        if r is not None and ranges_overlap(out_range[0], out_range[1], r[0], r[1]):
            raise UnsupportedGemmError(
                f"out: shares memory with {what}; the output must not overlap any input (as in torch)")


def check_vector_alignment(epi_ops) -> None:
    for what, t in zip(("bias", "scale_a", "scale_b"), epi_ops[:3]):
        if t is not None and t.data_ptr() % VECTOR_ALIGN_BYTES:
            raise UnsupportedGemmError(
                f"alignment: {what}'s data pointer must be {VECTOR_ALIGN_BYTES}-byte aligned (it is read as "
                "4-byte words)")
