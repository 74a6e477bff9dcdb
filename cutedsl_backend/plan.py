"""A call's plan and launch: what an eager call needs that depends only on its operands'
geometry (the kernel, its argument structs, the byte spans the alias checks use, whether the
output is staged), made once per geometry and per thread, then filled per call and launched.
``run`` is the one launch path of ``gemm`` (plain and fused) and ``scaled_mm``.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Optional

import torch

from .configs import split_k_workspace
from .operands import (
    EpilogueOperands,
    check_no_alias,
    check_out,
    check_vector_alignment,
    descriptor,
    epilogue_views,
    kernel_views,
    max_clusters,
    memory_ranges,
    prepare,
    result_shape,
    tma_writable,
)
from .problem import VECTOR_ALIGN_BYTES, GemmProblem, UnsupportedGemmError, byte_span
from .workspace import SplitKWorkspaces


@functools.lru_cache(None)
def _gpu_model(index: int) -> str:
    return torch.cuda.get_device_name(index)


def gpu_model(device) -> Optional[str]:
    """The GPU model name (torch.cuda.get_device_name) the measured config tables are keyed by;
    None off CUDA or without a GPU (fake CUDA tensors in CPU tests)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    return _gpu_model(device.index if device.index is not None else torch.cuda.current_device())


def _geometry(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def epilogue_key(bias, residual, activation, scale_a, scale_b):
    # the residual's data alignment picks the kernel variant (TMA-loaded or gathered)
    res_key = None if residual is None else (_geometry(residual), residual.data_ptr() % 16 == 0)
    return (_geometry(bias), res_key, activation, _geometry(scale_a), _geometry(scale_b))


class Plan:
    """What an eager call needs that depends only on the operands' geometry, validated once:
    the kernel, its argument structs, the result's shape. Calls of the same geometry reuse it.
    A swap-AB plan (``swap``) holds the kernel's view (see :func:`swapped_view`) and exchanges
    the call's a and b, and its two scales, when it launches."""

    def __init__(self, problem: GemmProblem, kernel, a3, b3, out3, result_shape, device, epi: EpilogueOperands,
                 swap: bool = False):
        self.problem = problem
        self.swap = swap
        self.kernel = kernel
        self.device = device
        self.shape3 = tuple(out3.shape)
        self.out_dtype = out3.dtype
        self.result_shape = result_shape
        self.a_geo = (tuple(a3.shape), tuple(a3.stride()))
        self.b_geo = (tuple(b3.shape), tuple(b3.stride()))
        # byte spans of the inputs (fixed by the geometry): an ``out`` given per call is checked
        # against them (problem.py's memory rules)
        self.in_spans = tuple(None if r is None else r[1] for r in memory_ranges(a3, b3, *epi.tensors()))
        self.out_span = byte_span(out3.shape, out3.stride(), out3.element_size())
        # an output TMA cannot write (N * element size not a multiple of 16 bytes, e.g. N = 1):
        # the kernel writes a buffer with padded rows, copied into the result after the launch
        self.staged = not tma_writable(out3 if problem.c_major == "n" else out3.transpose(1, 2))
        if self.staged:
            L, M, N = out3.shape
            pad = -(-N * out3.element_size() // 16) * 16 // out3.element_size()
            out3 = torch.empty_strided((L, M, N), (M * pad, pad, 1), dtype=out3.dtype, device="meta")
            self.stage_shape = (L, M, pad)
        self.out_geo = (tuple(out3.shape), tuple(out3.stride()))  # what the kernel writes (padded when staged)
        bt = b3.transpose(1, 2)  # (L, N, K): the kernel wants B as (N, K, L)
        in_align = 16 // a3.element_size()
        descs = [descriptor(a3, problem.a_major == "k", in_align), descriptor(bt, problem.b_major == "k", in_align),
                 descriptor(out3, problem.c_major == "n", 16 // out3.element_size())]
        descs += epi.descs()
        cfg = kernel.config
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.device_index = index
        clusters = max_clusters(index, cfg.cluster_m * cfg.cluster_n)
        # split-K / stream-K: the workspace's sizes (fixed by the geometry and the GPU's cluster
        # count); its buffers are per stream
        self.split_sizes = split_k_workspace(problem, cfg, clusters)
        if self.split_sizes[0]:
            descs += [((self.split_sizes[1],), ()), ((self.split_sizes[0],), ())]
        self.pack = kernel.arg_pack(descs, clusters)
        self.has_vectors = epi.bias is not None or epi.scale_a is not None or epi.scale_b is not None

    def run(self, a, b, out, epi_ops, alpha, beta):
        if self.swap:  # the kernel's A is b^T and its B a^T; its row scales are b's, its column scales a's
            a, b = b, a
            if epi_ops is not NO_EPILOGUE:
                epi_ops = (epi_ops[0], epi_ops[2], epi_ops[1], epi_ops[3])
        fresh = out is None
        dest = out
        if self.staged:
            out = torch.empty(self.stage_shape, dtype=self.out_dtype, device=self.device)[..., :self.shape3[2]]
        elif fresh:
            out = torch.empty(self.result_shape, dtype=self.out_dtype, device=self.device)
        pa, pb, pc = a.data_ptr(), b.data_ptr(), out.data_ptr()
        if (pa | pb | pc) % 16:
            raise UnsupportedGemmError("alignment: data pointers of a, b and out must be 16-byte aligned")
        if epi_ops is NO_EPILOGUE:
            ins = (pa, pb)
            ptrs = (pa, pb, pc)
        else:
            # unrolled, not generator expressions: this is the fused calls' host cost (~2 us less)
            t_bias, t_sa, t_sb, t_res = epi_ops
            p_bias = None if t_bias is None else t_bias.data_ptr()
            p_sa = None if t_sa is None else t_sa.data_ptr()
            p_sb = None if t_sb is None else t_sb.data_ptr()
            p_res = None if t_res is None else t_res.data_ptr()
            ins = (pa, pb, p_bias, p_sa, p_sb, p_res)
            ptrs = (pa, pb, pc)
            if p_bias is not None:
                ptrs += (p_bias,)
            if p_sa is not None:
                ptrs += (p_sa,)
            if p_sb is not None:
                ptrs += (p_sb,)
            if p_res is not None:
                ptrs += (p_res,)
            if self.has_vectors and ((p_bias or 0) | (p_sa or 0) | (p_sb or 0)) % VECTOR_ALIGN_BYTES:
                check_vector_alignment(epi_ops)  # names the misaligned vector
        if not fresh:
            ranges = (None if p is None else (p, n) for p, n in zip(ins, self.in_spans))
            names = ("b", "a", "bias", "scale_b", "scale_a", "residual") if self.swap else (
                "a", "b", "bias", "scale_a", "scale_b", "residual")  # (a swap plan holds the kernel's order)
            check_no_alias((dest.data_ptr(), self.out_span), zip(names, ranges))
        stream = raw_stream(self.device_index)
        work = None
        if self.split_sizes[0]:
            work = PLANS.workspaces.get(self.device, stream, *self.split_sizes)
            ptrs += (work[0].data_ptr(), work[1].data_ptr())
        self.kernel.launch(self.pack, ptrs, float(alpha), float(beta), stream,
                           lambda: self._dsl_views(a, b, out, epi_ops, work))
        if not self.staged:
            return out
        if fresh:
            return out.contiguous().view(self.result_shape)
        dest.view(self.shape3).copy_(out)
        return dest

    def _dsl_views(self, a, b, out, epi_ops, work):  # only for the one-time check of the direct launch path
        # detached: the DSL exports them through DLPack, which refuses tensors that require grad
        a3 = a.detach().as_strided(*self.a_geo)
        b3 = b.detach().as_strided(*self.b_geo)
        split = (None, None) if work is None else (work[0][:self.split_sizes[1]], work[1][:self.split_sizes[0]])
        vectors = tuple(None if t is None else t.detach().reshape(-1) for t in epi_ops[:3])
        res = None if epi_ops[3] is None else epi_ops[3].detach()
        views = kernel_views(self.problem, a3, b3.transpose(1, 2), out.detach().as_strided(*self.out_geo))
        return views + vectors + (res,) + split


# the epilogue operands of a call without any (the plain GEMM's fast path tests identity)
NO_EPILOGUE = (None, None, None, None)


# the current stream's handle as an int (what torch.cuda.current_stream(i).cuda_stream returns,
# without building a Stream object per call)
raw_stream = torch._C._cuda_getCurrentRawStream if hasattr(torch._C, "_cuda_getCurrentRawStream") else (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def swapped_view(problem: GemmProblem, a3, b3, out3, epi: EpilogueOperands, epi_args, device) -> tuple:
    """The kernel's view of a swap-AB launch (GemmConfig.swap_ab), out^T = b^T @ a^T:
    (problem.swapped(), b3^T as its A, a3^T as its B, out3^T (column-major), its epilogue operands:
    a column bias becomes a row bias and back, scale_a the column scales, scale_b the row scales)."""
    bias, residual, activation, scale_a, scale_b = epi_args
    if residual is not None:
        raise UnsupportedGemmError("swap_ab: takes no residual (its output is transposed)")
    if not tma_writable(out3):
        raise UnsupportedGemmError("swap_ab: the output's rows must be 16-byte aligned (N x element size a multiple "
                                   "of 16 bytes), written in place")
    m, n, spec = problem.m, problem.n, epi.spec
    kbias = None if bias is None else bias.reshape(n, 1) if spec.bias == "col" else bias.reshape(m)
    kscale_a = None if scale_b is None else scale_b.reshape(n, 1) if spec.scale_b == "col" else scale_b
    kscale_b = None if scale_a is None else scale_a.reshape(1, m) if spec.scale_a == "row" else scale_a
    kproblem = problem.swapped()
    kepi = EpilogueOperands(kproblem, device, kbias, None, activation, kscale_a, kscale_b)
    return kproblem, b3.transpose(1, 2), a3.transpose(1, 2), out3.transpose(1, 2), kepi


def planned(problem: GemmProblem, config, a3, b3, out3, result_shape, device, epi: EpilogueOperands,
            epi_args) -> Plan:
    """The Plan of a validated call: the config (the heuristic's pick when None), and a swap-AB
    plan where the config says so."""
    from .compiler import get_kernel
    from .configs import default_config

    gpu = gpu_model(device) if config is None else None
    cfg = config or default_config(problem, epilogue=epi.spec, gpu=gpu)
    if cfg.swap_ab and config is None and not tma_writable(out3):
        # the dispatcher's swap-AB pick stores straight into out^T, which this `out` cannot take
        # (rows not 16-byte aligned): the best unswapped config stages it instead
        from .configs import rank_configs
        from .configs.as_run import as_run

        cfg = next(c for c in rank_configs(problem, epilogue=epi.spec, gpu=gpu) if not c.swap_ab)
        cfg = as_run(cfg, problem, epi.spec)  # as the dispatcher's picks
    if cfg.swap_ab:
        kproblem, ka3, kb3, kout3, kepi = swapped_view(problem, a3, b3, out3, epi, epi_args, device)
        return Plan(kproblem, get_kernel(kproblem, cfg, kepi.spec), ka3, kb3, kout3, result_shape, device, kepi,
                    swap=True)
    return Plan(problem, get_kernel(problem, cfg, epi.spec), a3, b3, out3, result_shape, device, epi)


def make_plan(a, b, out_dtype, config, out, epi_args, fp8=False) -> Optional[Plan]:
    """Validate a call. A Plan, or None when the call needs the general path (empty problems,
    K == 0, a batch-broadcast operand that has to be materialized)."""
    problem, a3, b3 = prepare(a, b, out_dtype, config, bool(fp8), fp8 == "fast")
    epi = EpilogueOperands(problem, a.device, *epi_args)
    out_t = getattr(torch, problem.out_dtype)
    shape3 = (problem.batch, problem.m, problem.n)
    out3 = check_out(out, result_shape(a, b, problem), shape3, out_t, a.device) if out is not None else None
    if not (problem.m and problem.n and problem.k):
        return None
    if a3.data_ptr() != a.data_ptr() or b3.data_ptr() != b.data_ptr():
        return None
    if out3 is None:
        out3 = torch.empty(shape3, dtype=out_t, device=a.device)
    return planned(problem, config, a3, b3, out3, result_shape(a, b, problem), a.device, epi, epi_args)


def gemm_general(a, b, out_dtype, config, out, epi_args, alpha, beta, fp8=False):
    """Calls without a plan: empty results, K == 0, materialized batch broadcasts."""
    from .epilogue import reference

    problem, a3, b3 = prepare(a, b, out_dtype, config, bool(fp8), fp8 == "fast")
    epi = EpilogueOperands(problem, a.device, *epi_args)
    out_t = getattr(torch, problem.out_dtype)
    shape3 = (problem.batch, problem.m, problem.n)
    out3 = torch.empty(shape3, dtype=out_t, device=a.device) if out is None else check_out(
        out, result_shape(a, b, problem), shape3, out_t, a.device)
    if out is not None:
        check_no_alias(memory_ranges(out)[0], zip(("a", "b", "bias", "scale_a", "scale_b", "residual"),
                                                  memory_ranges(a, b, *epi.tensors())))
    if problem.m and problem.n:
        if problem.k == 0:
            # A @ B is exactly zero: the epilogue of zeros, in fp32, rounded once
            bias, residual, activation, scale_a, scale_b = epi_args
            res = None if residual is None else epi.residual.permute(2, 0, 1)
            val = reference(torch.zeros(shape3, device=a.device), bias=bias, residual=res, alpha=alpha,
                            beta=beta, activation=activation, scale_a=scale_a, scale_b=scale_b)
            out3.copy_(val)
        else:
            plan = planned(problem, config, a3, b3, out3, shape3, a.device, epi, epi_args)
            plan.run(a3, b3, out3, epi.tensors(), alpha, beta)  # a staged plan copies into out3
    return out if out is not None else out3.view(result_shape(a, b, problem))


def run(a, b, *, bias, residual, activation, scale_a, scale_b, alpha, beta, out_dtype, config, out,
        fp8=False):
    """One eager call: its plan (made and kept on the first call of a geometry), then the launch."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise UnsupportedGemmError("a and b must be torch.Tensors")
    epi_args = (bias, residual, activation, scale_a, scale_b)
    # each tested with `is`: `epi_args == (None,) * 5` compares tensors elementwise (~10 us a call)
    plain = bias is None and residual is None and activation is None and scale_a is None and scale_b is None
    key = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.device, out_dtype, config, fp8,
           None if out is None else (out.shape, out.stride(), out.dtype, out.device),
           None if plain else epilogue_key(*epi_args))
    plans = PLANS.of_thread()
    hit = plans.get(key)
    first = hit is None
    if first:
        t0 = time.perf_counter()
        plan = make_plan(a, b, out_dtype, config, out, epi_args, fp8)
        if plan is None:
            return gemm_general(a, b, out_dtype, config, out, epi_args, alpha, beta, fp8)
        if len(plans) >= PLANS.max_plans:
            plans.clear()
        hit = plans[key] = plan
    # vectors as given (the plan checked their geometry; the kernel needs only their data pointers)
    epi_ops = NO_EPILOGUE
    if not plain:
        res = None if residual is None else epilogue_views(None, residual, None, None, hit.problem)[3]
        epi_ops = (bias, scale_a, scale_b, res)
    result = hit.run(a, b, out, epi_ops, alpha, beta)
    if first:
        from .compiler import STORE

        STORE.stats["first_calls"] += 1
        STORE.stats["first_call_s"] += time.perf_counter() - t0  # kernel fetch, plan, launch check
    return result


class PlanCache:
    """The plans of each thread (a plan's argument structs are filled in place at each call, so
    threads never share one; at most ``max_plans`` per thread) and the split-K workspaces (per
    device and stream)."""

    max_plans = 4096

    def __init__(self):
        self._tls = threading.local()
        self.workspaces = SplitKWorkspaces()

    def of_thread(self) -> dict:
        plans = getattr(self._tls, "plans", None)
        if plans is None:
            plans = self._tls.plans = {}
        return plans

    def clear(self) -> None:
        """Forget this thread's plans (the next call of each geometry plans again)."""
        self.of_thread().clear()

    def newest(self) -> Optional[Plan]:
        """This thread's most recently made plan (None: none yet)."""
        return next(reversed(self.of_thread().values()), None)


PLANS = PlanCache()
