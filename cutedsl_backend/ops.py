"""Eager API and torch custom ops.

``gemm(a, b)`` follows torch.matmul's operand convention for 2-D and 3-D operands and launches
the CuTe DSL kernel on the current CUDA stream. ``torch.ops.cutedsl.gemm`` is the same operation
as a ``torch.library`` custom op with a fake (meta) implementation, so it traces under
``torch.compile``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Optional

import torch

from .autograd import GemmFunction, needs_autograd
from .configs import GemmConfig, split_k_workspace
from .problem import (
    VECTOR_ALIGN_BYTES,
    GemmProblem,
    UnsupportedGemmError,
    arch_for_capability,
    byte_span,
    check_problem,
    check_strides,
    dtype_name,
    has_zero_stride,
    overlaps_itself,
    ranges_overlap,
)
from .workspace import SplitKWorkspaces

log = logging.getLogger("cutedsl_backend.ops")


@functools.lru_cache(None)
def _device_arch(index: int) -> str:
    major, minor = torch.cuda.get_device_capability(index)
    return arch_for_capability(major, minor)


@functools.lru_cache(None)
def _max_clusters(index: int, cluster_size: int) -> int:
    """Clusters of ``cluster_size`` CTAs (one CTA per SM) that the device holds at once."""
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    if cluster_size == 1:
        return sms
    try:
        from cutlass.utils import HardwareInfo

        return max(1, int(HardwareInfo(index).get_max_active_clusters(cluster_size)))
    except Exception:  # pragma: no cover - driver query unavailable
        return max(1, sms // cluster_size)


def _operand_major(t: torch.Tensor, rows_dim: int, cols_dim: int, row_major: str, col_major: str,
                   what: str) -> str:
    """Which of the last two dims is contiguous (unit stride); size-1 dims count as either."""
    if t.stride(cols_dim) == 1 or t.size(cols_dim) == 1 and t.stride(rows_dim) != 1:
        return row_major
    if t.stride(rows_dim) == 1 or t.size(rows_dim) == 1:
        return col_major
    raise UnsupportedGemmError(
        f"layout: {what} needs unit stride on one of its last two dims, got strides {tuple(t.stride())}"
    )


def _as_rcl(t: torch.Tensor, cols_contiguous: bool, align: int) -> torch.Tensor:
    """The (R, C, L) view of an (L, R, C) tensor that ``_rcl`` describes."""
    _, shape, strides = _rcl(t, cols_contiguous, align)
    return t.as_strided(shape, strides)


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _prepare(a: torch.Tensor, b: torch.Tensor, out_dtype, config, fp8: bool = False,
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
        if a.dtype not in _FP8 or b.dtype not in _FP8:
            raise UnsupportedGemmError(f"dtype: scaled_mm takes fp8 operands, got {a.dtype} and {b.dtype}")
        if a.dim() != 2 or b.dim() != 2:
            raise UnsupportedGemmError("shape: scaled_mm takes 2-D a (M, K) and b (K, N)")
    elif a.dtype in _FP8 or b.dtype in _FP8:
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
    a3 = _readable_by_tma("a", a3)
    b3 = _readable_by_tma("b", b3)
    m, k = a3.shape[1], a3.shape[2]
    n = b3.shape[2]
    d = dtype_name(a.dtype)
    od = dtype_name(out_dtype) if out_dtype is not None else d
    arch = _device_arch(a.device.index if a.device.index is not None else torch.cuda.current_device())
    a_major = _operand_major(a3, 1, 2, "k", "m", "a")
    b_major = _operand_major(b3, 1, 2, "n", "k", "b")
    bd = dtype_name(b.dtype)
    problem = GemmProblem(m, n, k, batch, d, od, a_major, b_major, arch, packed=False,
                          b_dtype=None if bd == d else bd, fast_accum=bool(fast_accum) and fp8)
    check_problem(problem)
    if not (m and n and k):
        return problem, a3, b3  # nothing is launched: strides of empty operands do not matter
    for what, t, major_rows in (("a", a3, a_major == "k"), ("b", b3, b_major == "n")):
        strides = tuple(t.stride())
        if t.shape[0] == 1:
            strides = (0,) + strides[1:]
        check_strides(what, strides, d, 2 if major_rows else 1)
        if t.data_ptr() % 16:
            raise UnsupportedGemmError(f"alignment: {what}'s data pointer must be 16-byte aligned")
    if config is not None and not isinstance(config, GemmConfig):
        raise UnsupportedGemmError(f"config: expected a GemmConfig, got {type(config).__name__}")
    return problem, a3, b3


def _readable_by_tma(what: str, t: torch.Tensor) -> torch.Tensor:
    """``t``, or a packed copy of it (logged) where a zero stride or overlapping elements make it
    something TMA cannot describe (see problem.py's memory rules): the result stays exact."""
    shape, strides = tuple(t.shape), tuple(t.stride())
    if has_zero_stride(shape, strides) or overlaps_itself(shape, strides):
        log.info("%s: strides %s alias elements (a zero stride or overlapping rows): computing on a packed "
                 "copy", what, strides)
        return t.contiguous()
    return t


def _rcl(t: torch.Tensor, cols_contiguous: bool, align: int) -> tuple:
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


def _views(problem: GemmProblem, a3, bt, out3):
    """The (M,K,L), (N,K,L), (M,N,L) torch views the compiled function takes."""
    in_align = 16 // a3.element_size()
    return (_as_rcl(a3, problem.a_major == "k", in_align), _as_rcl(bt, problem.b_major == "k", in_align),
            _as_rcl(out3, True, 16 // out3.element_size()))


class _Epilogue:
    """The epilogue operands of a call, checked: the spec, and per operand the tensor the kernel
    reads (a 1-D unit-stride vector, or the (M, N, L) residual view)."""

    def __init__(self, problem: GemmProblem, device, bias, residual, activation, scale_a, scale_b):
        from .epilogue import EpilogueSpec, residual_aligned

        m, n, L = problem.m, problem.n, problem.batch
        out_ok = (problem.out_dtype, "float32")
        bias_kind = bias_dtype = None
        if bias is not None:
            _check_tensor("bias", bias, device)
            if tuple(bias.shape) == (n,):
                bias_kind = "col"
            elif tuple(bias.shape) == (m, 1):
                bias_kind = "row"
            else:
                raise UnsupportedGemmError(f"bias: shape must be ({n},) or ({m}, 1), got {tuple(bias.shape)}")
            bias_dtype = dtype_name(bias.dtype)
            if bias_dtype not in out_ok:
                raise UnsupportedGemmError(f"bias: dtype must be {' or '.join(out_ok)}, got {bias.dtype}")
        res_dtype = None
        if residual is not None:
            _check_tensor("residual", residual, device)
            if tuple(residual.shape) not in ((m, n), (L, m, n)):
                raise UnsupportedGemmError(
                    f"residual: shape must be ({m}, {n}) or ({L}, {m}, {n}), got {tuple(residual.shape)}")
            res_dtype = dtype_name(residual.dtype)
            if res_dtype not in out_ok:
                raise UnsupportedGemmError(f"residual: dtype must be {' or '.join(out_ok)}, got {residual.dtype}")
        sa_kind = _scale_kind("scale_a", scale_a, (m, 1), "row", device)
        sb_kind = _scale_kind("scale_b", scale_b, (1, n), "col", device)
        for what, t in (("bias", bias), ("scale_a", scale_a), ("scale_b", scale_b)):
            if t is not None:
                _check_unit_vector(what, t)
        self.bias, self.scale_a, self.scale_b, self.residual = _epilogue_views(
            bias, residual, scale_a, scale_b, problem)
        aligned = self.residual is not None and residual_aligned(self.residual, L)
        self.spec = EpilogueSpec(activation=activation, bias=bias_kind, bias_dtype=bias_dtype or "float32",
                                 residual=residual is not None, residual_dtype=res_dtype or "float32",
                                 residual_aligned=aligned, scale_a=sa_kind, scale_b=sb_kind)

    def tensors(self) -> tuple:
        return (self.bias, self.scale_a, self.scale_b, self.residual)

    def descs(self) -> list:
        out = []
        for t in (self.bias, self.scale_a, self.scale_b):
            if t is not None:
                out.append(((t.shape[0],), ()))
        if self.residual is not None:
            sm, _, sl = self.residual.stride()
            out.append((tuple(self.residual.shape), (sm, sl)))
        return out

    def ptrs(self) -> tuple:
        return tuple(t.data_ptr() for t in self.tensors() if t is not None)


def _scale_kind(what, t, vector_shape, vector_kind, device):
    """None, "scalar" (one element: tensorwise) or ``vector_kind`` (rowwise/columnwise)."""
    if t is None:
        return None
    _check_tensor(what, t, device)
    if t.dtype != torch.float32:
        raise UnsupportedGemmError(f"{what}: dtype must be float32, got {t.dtype}")
    if t.numel() == 1 and t.dim() <= 2:
        return "scalar"
    if tuple(t.shape) == vector_shape:
        return vector_kind
    raise UnsupportedGemmError(f"{what}: shape must be () or {vector_shape}, got {tuple(t.shape)}")


def _check_tensor(what, t, device):
    if not isinstance(t, torch.Tensor):
        raise UnsupportedGemmError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise UnsupportedGemmError(f"device: {what} is on {t.device}, the operands on {device}")


def _check_unit_vector(what, t):
    """Vectors are read in place as 1-D unit-stride arrays (``_epilogue_views`` makes the view)."""
    if t.numel() > 1 and t.reshape(-1).stride(0) != 1:
        raise UnsupportedGemmError(f"layout: {what} must be contiguous")


def _epilogue_key(bias, residual, activation, scale_a, scale_b):
    def geo(t):
        return None if t is None else (t.shape, t.stride(), t.dtype, t.device)

    # the residual's data alignment picks the kernel variant (TMA-loaded or gathered)
    res_key = None if residual is None else (geo(residual), residual.data_ptr() % 16 == 0)
    return (geo(bias), res_key, activation, geo(scale_a), geo(scale_b))


class _Plan:
    """What an eager call needs that depends only on the operands' geometry, validated once:
    the kernel, its argument structs, the result's shape. Calls of the same geometry reuse it."""

    def __init__(self, problem: GemmProblem, kernel, a3, b3, out3, result_shape, device, epi: _Epilogue):
        self.problem = problem
        self.kernel = kernel
        self.device = device
        self.shape3 = tuple(out3.shape)
        self.out_dtype = out3.dtype
        self.result_shape = result_shape
        self.a_geo = (tuple(a3.shape), tuple(a3.stride()))
        self.b_geo = (tuple(b3.shape), tuple(b3.stride()))
        # byte spans of the inputs (fixed by the geometry): an ``out`` given per call is checked
        # against them (problem.py's memory rules)
        self.in_spans = tuple(None if r is None else r[1] for r in _memory_ranges(a3, b3, *epi.tensors()))
        self.out_span = byte_span(out3.shape, out3.stride(), out3.element_size())
        # an output TMA cannot write (N * element size not a multiple of 16 bytes, e.g. N = 1):
        # the kernel writes a buffer with padded rows, copied into the result after the launch
        self.staged = not _tma_writable(out3)
        if self.staged:
            L, M, N = out3.shape
            pad = -(-N * out3.element_size() // 16) * 16 // out3.element_size()
            out3 = torch.empty_strided((L, M, N), (M * pad, pad, 1), dtype=out3.dtype, device="meta")
            self.stage_shape = (L, M, pad)
        bt = b3.transpose(1, 2)  # (L, N, K): the kernel wants B as (N, K, L)
        in_align = 16 // a3.element_size()
        units = (1 if problem.a_major == "k" else 0, 1 if problem.b_major == "k" else 0, 1)
        descs = []
        for unit, (_, shape, strides) in zip(units, (
                _rcl(a3, problem.a_major == "k", in_align), _rcl(bt, problem.b_major == "k", in_align),
                _rcl(out3, True, 16 // out3.element_size()))):
            descs.append((shape, tuple(s for i, s in enumerate(strides) if i != unit)))
        descs += epi.descs()
        cfg = kernel.config
        # split-K: the workspace's sizes (fixed by the geometry); its buffers are per stream
        self.split_sizes = split_k_workspace(problem, cfg)
        if cfg.splits > 1:
            descs += [((self.split_sizes[1],), ()), ((self.split_sizes[0],), ())]
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.device_index = index
        self.pack = kernel.arg_pack(descs, _max_clusters(index, cfg.cluster_m * cfg.cluster_n))
        self.has_vectors = epi.bias is not None or epi.scale_a is not None or epi.scale_b is not None

    def run(self, a, b, out, epi_ops, alpha, beta):
        fresh = out is None
        dest = out
        if self.staged:
            out = torch.empty(self.stage_shape, dtype=self.out_dtype, device=self.device)[..., :self.shape3[2]]
        elif fresh:
            out = torch.empty(self.result_shape, dtype=self.out_dtype, device=self.device)
        pa, pb, pc = a.data_ptr(), b.data_ptr(), out.data_ptr()
        if (pa | pb | pc) % 16:
            raise UnsupportedGemmError("alignment: data pointers of a, b and out must be 16-byte aligned")
        if epi_ops is _NO_EPILOGUE:
            ins = (pa, pb)
            ptrs = (pa, pb, pc)
        else:
            ins = (pa, pb) + tuple(None if t is None else t.data_ptr() for t in epi_ops)
            ptrs = (pa, pb, pc) + tuple(p for p in ins[2:] if p is not None)
            if self.has_vectors:
                _check_vector_alignment(epi_ops)
        if not fresh:
            ranges = (None if p is None else (p, n) for p, n in zip(ins, self.in_spans))
            _check_no_alias((dest.data_ptr(), self.out_span),
                            zip(("a", "b", "bias", "scale_a", "scale_b", "residual"), ranges))
        stream = _raw_stream(self.device_index)
        work = None
        if self.split_sizes[0]:
            work = _SPLIT_K_WORKSPACES.get(self.device, stream, *self.split_sizes)
            ptrs += (work[0].data_ptr(), work[1].data_ptr())
        self.kernel.launch(self.pack, ptrs, float(alpha), float(beta), stream,
                           lambda: self._views(a, b, out, epi_ops, work))
        if not self.staged:
            return out
        if fresh:
            return out.contiguous().view(self.result_shape)
        dest.view(self.shape3).copy_(out)
        return dest

    def _views(self, a, b, out, epi_ops, work):  # only for the one-time check of the direct launch path
        # detached: the DSL exports them through DLPack, which refuses tensors that require grad
        a3 = a.detach().as_strided(*self.a_geo)
        b3 = b.detach().as_strided(*self.b_geo)
        split = (None, None) if work is None else (work[0][:self.split_sizes[1]], work[1][:self.split_sizes[0]])
        vectors = tuple(None if t is None else t.detach().reshape(-1) for t in epi_ops[:3])
        res = None if epi_ops[3] is None else epi_ops[3].detach()
        return _views(self.problem, a3, b3.transpose(1, 2), out.detach().view(self.shape3)) + vectors + (res,) + split


# per thread: a plan's argument structs are filled in place at each call
_TLS = threading.local()
# the epilogue operands of a call without any (the plain GEMM's fast path tests identity)
_NO_EPILOGUE = (None, None, None, None)
# the current stream's handle as an int (what torch.cuda.current_stream(i).cuda_stream returns,
# without building a Stream object per call)
_raw_stream = torch._C._cuda_getCurrentRawStream if hasattr(torch._C, "_cuda_getCurrentRawStream") else (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_SPLIT_K_WORKSPACES = SplitKWorkspaces()
_MAX_PLANS = 4096


def _result_shape(a, b, problem: GemmProblem) -> tuple:
    """torch.matmul's result shape (the kernel always writes (L, M, N))."""
    if a.dim() == 2 and b.dim() == 2:
        return (problem.m, problem.n)
    if a.dim() == 3 and b.dim() == 2 and problem.batch == 1:
        return (a.shape[0], a.shape[1], problem.n)  # includes the folded (L*M, K) case
    return (problem.batch, problem.m, problem.n)


def _make_plan(a, b, out_dtype, config, out, epi_args, fp8=False) -> Optional[_Plan]:
    """Validate a call. A _Plan, or None when the call needs the general path (empty problems,
    K == 0, a batch-broadcast operand that has to be materialized)."""
    from .compiler import get_kernel

    problem, a3, b3 = _prepare(a, b, out_dtype, config, bool(fp8), fp8 == "fast")
    epi = _Epilogue(problem, a.device, *epi_args)
    out_t = getattr(torch, problem.out_dtype)
    shape3 = (problem.batch, problem.m, problem.n)
    out3 = _check_out(out, _result_shape(a, b, problem), shape3, out_t, a.device) if out is not None else None
    if not (problem.m and problem.n and problem.k):
        return None
    if a3.data_ptr() != a.data_ptr() or b3.data_ptr() != b.data_ptr():
        return None
    if out3 is None:
        out3 = torch.empty(shape3, dtype=out_t, device=a.device)
    return _Plan(problem, get_kernel(problem, config, epi.spec), a3, b3, out3, _result_shape(a, b, problem),
                 a.device, epi)


def _gemm_general(a, b, out_dtype, config, out, epi_args, alpha, beta, fp8=False):
    """Calls without a plan: empty results, K == 0, materialized batch broadcasts."""
    from .compiler import get_kernel
    from .epilogue import reference

    problem, a3, b3 = _prepare(a, b, out_dtype, config, bool(fp8), fp8 == "fast")
    epi = _Epilogue(problem, a.device, *epi_args)
    out_t = getattr(torch, problem.out_dtype)
    shape3 = (problem.batch, problem.m, problem.n)
    out3 = torch.empty(shape3, dtype=out_t, device=a.device) if out is None else _check_out(
        out, _result_shape(a, b, problem), shape3, out_t, a.device)
    if out is not None:
        _check_no_alias(_memory_ranges(out)[0], zip(("a", "b", "bias", "scale_a", "scale_b", "residual"),
                                                     _memory_ranges(a, b, *epi.tensors())))
    if problem.m and problem.n:
        if problem.k == 0:
            # A @ B is exactly zero: the epilogue of zeros, in fp32, rounded once
            bias, residual, activation, scale_a, scale_b = epi_args
            res = None if residual is None else epi.residual.permute(2, 0, 1)
            val = reference(torch.zeros(shape3, device=a.device), bias=bias, residual=res, alpha=alpha,
                            beta=beta, activation=activation, scale_a=scale_a, scale_b=scale_b)
            out3.copy_(val)
        else:
            kernel = get_kernel(problem, config, epi.spec)
            plan = _Plan(problem, kernel, a3, b3, out3, shape3, a.device, epi)
            plan.run(a3, b3, out3, epi.tensors(), alpha, beta)  # a staged plan copies into out3
    return out if out is not None else out3.view(_result_shape(a, b, problem))


def _run(a, b, *, bias, residual, activation, scale_a, scale_b, alpha, beta, out_dtype, config, out,
         fp8=False):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise UnsupportedGemmError("a and b must be torch.Tensors")
    epi_args = (bias, residual, activation, scale_a, scale_b)
    # each tested with `is`: `epi_args == (None,) * 5` compares tensors elementwise (~10 us a call)
    plain = bias is None and residual is None and activation is None and scale_a is None and scale_b is None
    key = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.device, out_dtype, config, fp8,
           None if out is None else (out.shape, out.stride(), out.dtype, out.device),
           None if plain else _epilogue_key(*epi_args))
    plans = getattr(_TLS, "plans", None)
    if plans is None:
        plans = _TLS.plans = {}
    hit = plans.get(key)
    first = hit is None
    if first:
        t0 = time.perf_counter()
        plan = _make_plan(a, b, out_dtype, config, out, epi_args, fp8)
        if plan is None:
            return _gemm_general(a, b, out_dtype, config, out, epi_args, alpha, beta, fp8)
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        hit = plans[key] = plan
    # the vectors are views of the caller's tensors: rebuild them per call (cheap reshape)
    # (vectors as given: the plan checked their geometry, the kernel needs only their data pointers)
    epi_ops = _NO_EPILOGUE
    if not plain:
        res = None if residual is None else _epilogue_views(None, residual, None, None, hit.problem)[3]
        epi_ops = (bias, scale_a, scale_b, res)
    result = hit.run(a, b, out, epi_ops, alpha, beta)
    if first:
        from .compiler import STORE

        STORE.stats["first_calls"] += 1
        STORE.stats["first_call_s"] += time.perf_counter() - t0  # kernel fetch, plan, launch check
    return result


def _residual_view(residual):
    """(L, M, N) -> the (M, N, L) view the kernel reads: unit stride along N, no zero stride on an
    extent above one (a broadcast over rows or batches; else a copy, logged: the kernel's gathered
    residual reads only distinct rows and batches correctly)."""
    if (residual.stride(2) != 1 and residual.shape[2] > 1) or has_zero_stride(residual.shape, residual.stride()):
        if residual.stride(2) == 1:
            log.info("residual: strides %s broadcast rows or batches: computing on a packed copy",
                     tuple(residual.stride()))
        residual = residual.contiguous()
    if residual.shape[0] == 1 and residual.stride(0) != residual.shape[1] * residual.stride(1):
        # one batch: its stride is never used; make it the aligned one TMA's descriptor checks
        residual = residual.as_strided(residual.shape, (residual.shape[1] * residual.stride(1),
                                                        residual.stride(1), residual.stride(2)))
    return residual.permute(1, 2, 0)


def _epilogue_views(bias, residual, scale_a, scale_b, problem):
    """The tensors the kernel reads, per call: 1-D vectors and the (M, N, L) residual view."""
    res = None
    if residual is not None:
        if residual.dim() == 2:
            residual = residual.unsqueeze(0).expand(problem.batch, problem.m, problem.n)
        res = _residual_view(residual)
    return (None if bias is None else bias.reshape(-1), None if scale_a is None else scale_a.reshape(-1),
            None if scale_b is None else scale_b.reshape(-1), res)


def _batch_row_bias(a, b, bias):
    """A per-row bias (M, 1) of each batch where (L, M, K) @ (K, N) runs as one (L*M, K) GEMM: the
    bias repeated per batch (a copy of L*M values; differentiable, as torch broadcasts it)."""
    if (bias is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 3
            and b.dim() == 2 and a.shape[0] > 1 and tuple(bias.shape) == (a.shape[1], 1)):
        return bias.repeat(a.shape[0], 1)
    return bias


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
        bias = _batch_row_bias(a, b, bias)
    if needs_autograd(a, b, bias, residual):
        if out is not None:
            raise UnsupportedGemmError("out: not supported where an input requires grad (as in torch)")
        return GemmFunction.apply(a, b, bias, residual, activation, alpha, beta, out_dtype, config)
    return _run(a, b, bias=bias, residual=residual, activation=activation, scale_a=None, scale_b=None,
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
    return _run(a, b, bias=bias, residual=residual, activation=activation, scale_a=scale_a,
                scale_b=scale_b, alpha=1.0, beta=beta, out_dtype=out_dtype, config=config, out=out,
                fp8="fast" if use_fast_accum else "precise")


def _check_out(out: torch.Tensor, result_shape: tuple, shape3: tuple, dtype: torch.dtype, device) -> torch.Tensor:
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


def _tma_writable(out3: torch.Tensor) -> bool:
    """Whether the kernel's TMA store can write ``out3`` (L, M, N) in place: unit stride along N,
    row (and, batched, batch) strides whole multiples of 16 bytes. Otherwise the result goes
    through a padded buffer (see _Plan)."""
    align = 16 // out3.element_size()
    L, M, N = out3.shape
    sl, sm, sn = out3.stride()
    return (sn == 1 or N == 1) and sm % align == 0 and (L == 1 or sl % align == 0)


def _memory_ranges(*tensors) -> tuple:
    """(data pointer, byte span) of each tensor (None stays None)."""
    return tuple(None if t is None else (t.data_ptr(), byte_span(t.shape, t.stride(), t.element_size()))
                 for t in tensors)


def _check_no_alias(out_range: tuple, named_ranges) -> None:
    """Refuse an ``out`` sharing memory with an input (the kernel could read what it already wrote)."""
    for what, r in named_ranges:
        if r is not None and ranges_overlap(out_range[0], out_range[1], r[0], r[1]):
            raise UnsupportedGemmError(
                f"out: shares memory with {what}; the output must not overlap any input (as in torch)")


def _check_vector_alignment(epi_ops) -> None:
    for what, t in zip(("bias", "scale_a", "scale_b"), epi_ops[:3]):
        if t is not None and t.data_ptr() % VECTOR_ALIGN_BYTES:
            raise UnsupportedGemmError(
                f"alignment: {what}'s data pointer must be {VECTOR_ALIGN_BYTES}-byte aligned (it is read as "
                "4-byte words)")


# ---------------------------------------------------------------------------- custom op
# ``torch.ops.cutedsl.gemm``: registered through torch.library.Library (define + impl +
# register_fake) rather than torch.library.custom_op, whose per-call checks cost ~90 us a call on
# the H200 machine (inductor/ops.py registers its ops the same way, for the same reason).

_OUT_DTYPES = {None: None, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _gemm_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
             residual: Optional[torch.Tensor] = None, activation: Optional[str] = None,
             alpha: float = 1.0, beta: float = 1.0, out_dtype: Optional[str] = None) -> torch.Tensor:
    # _run, not gemm: the op's autograd is registered below (gemm would wrap it a second time)
    return _run(a, b, bias=_batch_row_bias(a, b, bias), residual=residual, activation=activation, scale_a=None,
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
