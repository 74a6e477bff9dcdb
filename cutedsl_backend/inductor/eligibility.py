"""Which GEMMs in an Inductor graph our kernels may take, and with which configs.

One check, :func:`check_gemm`, serves the FX pass (fake tensors) and the lowerings (Inductor IR
nodes): it applies the operand rules the eager API applies (problem.py states them once) through
a ``Sizes`` adapter, so symbolic (dynamic) extents are fine as long as the rules hold for every
value they can take (alignment must be statically known: no guards are added). It returns an
:class:`Offer` (the problem, its epilogue and the configs to try) or the reason the GEMM is not
offered, which the callers log at DEBUG.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable, Optional, Union

from ..configs import GemmConfig, rank_configs
from ..configs.as_run import as_run, candidates_as_run
from ..epilogue import EpilogueSpec
from ..problem import (  # noqa: F401  (Operand and Sizes: this module's callers use them from here)
    ALIGN_BYTES,
    GemmProblem,
    Operand,
    Sizes,
    UnsupportedGemmError,
    arch_for_capability,
    bias_kind,
    check_aligned,
    check_epilogue_dtype,
    check_problem,
    dtype_bits,
    dtype_name,
    operand_major,
    scale_kind,
)

log = logging.getLogger("cutedsl_backend.inductor")


@dataclass(frozen=True)
class Offer:
    """What we offer for one GEMM: the problem at the size hints, its epilogue, the configs ranked
    for the hint (best first), and whether any extent is dynamic (symbolic): then the offer is the
    per-call dispatcher (:data:`DISPATCH`), which picks the config from the runtime shape."""

    problem: GemmProblem
    epilogue: EpilogueSpec
    configs: tuple  # GemmConfig, best first
    dynamic: bool = False
    gpu: Optional[str] = None  # the GPU model (configs.measured tables are per model)

    def dispatch_buckets(self) -> list:
        """(problem, config) of each config the per-call dispatcher picks over the token range (M
        from 1 to 16384 at the hint's N, K and batch, and each token count a measured config table
        holds for the projection): the kernels worth compiling ahead of the first calls (kernels
        are shape-generic: one per config serves its whole bucket). Each pick also as the token
        counts beside its bucket run it, its last tiles moved to the edge or not (configs.edge)."""
        import dataclasses

        from ..configs import default_config
        from ..configs.measured import MEASURED

        picks: dict = {}
        for m in sorted(set(DISPATCH_BUCKETS_M) | set(MEASURED.bounds(self.problem, self.gpu))):
            problem = dataclasses.replace(self.problem, m=m)
            try:
                cfg = default_config(problem, epilogue=self.epilogue, gpu=self.gpu)
            except UnsupportedGemmError:
                continue
            picks.setdefault(cfg, problem)
            # and as the token counts beside the bucket run it: its last tiles moved or not
            for near in (m - 1, m + 1):
                if near >= 1:
                    picks.setdefault(as_run(cfg.tiling(), dataclasses.replace(problem, m=near), self.epilogue),
                                     problem)
        return [(problem, cfg) for cfg, problem in picks.items()]

    def describe(self) -> str:
        return f"{self.problem.describe()} epilogue={self.epilogue.describe()}"


# the kernel_config of the per-call dispatcher (the eager API's config choice from the runtime shape)
DISPATCH = "dispatch"
# (96 and 160: where the swap-AB models' exact-width tiles take over from the next wider ones; 2, 4
# and 8: the few-token loads configs.as_run.ShortALoads fits to M, when on)
DISPATCH_BUCKETS_M = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 256, 512, 1024, 2048, 4096, 16384)


def default_device_arch(device) -> str:
    """The kernel target of a device: CUDA compute capability 9.0 -> sm90a, 10.x -> sm100a."""
    if device.type != "cuda":
        raise UnsupportedGemmError(f"device: {device.type} tensors (our kernels need a CUDA sm90/sm100 GPU)")
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return arch_for_capability(major, minor)


@functools.lru_cache(None)
def _num_sms(device_type: str, index: int) -> int:
    import torch

    if device_type != "cuda" or not torch.cuda.is_available():
        return 132  # CPU tensors, fake CUDA tensors without a GPU (tests): rank as for an H100/H200
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device) -> int:
    return _num_sms(device.type, device.index if device.index is not None else 0)


def check_gemm(a: Operand, b: Operand, *, arch: str, sizes: Sizes, out_dtype: Optional[str] = None,
               bias: Optional[Operand] = None, residual: Optional[Operand] = None,
               scale_a: Optional[Operand] = None, scale_b: Optional[Operand] = None,
               activation: Optional[str] = None, fast_accum: bool = False, top_k: int = 3,
               num_sms: int = 132, gpu: Optional[str] = None) -> Offer:
    """The offer for ``activation(scale_a*scale_b*(a @ b) + bias + residual)`` (``out_dtype``: None
    means a's dtype, bf16 for fp8) on GPU model ``gpu`` (its measured config table, if any);
    raises UnsupportedGemmError naming the rule it breaks."""
    if a.dim != b.dim or a.dim not in (2, 3):
        raise UnsupportedGemmError(f"shape: a is {a.dim}-D and b {b.dim}-D (2-D @ 2-D or 3-D @ 3-D)")
    d, bd = dtype_name(a.dtype), dtype_name(b.dtype)
    fp8 = dtype_bits(d) == 8
    if fp8 != (scale_a is not None):
        raise UnsupportedGemmError("dtype: fp8 operands come with scales, 16-bit ones without")
    od = dtype_name(out_dtype) if out_dtype else (d if not fp8 else "bfloat16")
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if not sizes.equals(b.shape[-2] - k, 0):
        raise UnsupportedGemmError(f"shape: a is {a.shape}, b is {b.shape}")
    a_major = operand_major(a, "a", "k", "m", sizes)
    b_major = operand_major(b, "b", "n", "k", sizes)
    check_aligned(a, "a", -1 if a_major == "k" else -2, sizes)
    check_aligned(b, "b", -1 if b_major == "n" else -2, sizes)
    if not sizes.multiple_of(n, ALIGN_BYTES * 8 // dtype_bits(od)):
        raise UnsupportedGemmError(f"alignment: N={n} must be a multiple of 16 bytes of {od} (output rows)")
    hm, hn, hk = sizes.hint(m), sizes.hint(n), sizes.hint(k)
    if not (hm and hn and hk):
        raise UnsupportedGemmError(f"shape: empty problem (M={m}, N={n}, K={k})")
    batch = sizes.hint(a.shape[0]) if a.dim == 3 else 1
    problem = GemmProblem(hm, hn, hk, batch, d, od, a_major, b_major, arch, packed=False,
                          b_dtype=None if bd == d else bd, fast_accum=bool(fast_accum) and fp8)
    check_problem(problem)
    b_kind = res_dtype = None
    res_aligned = False
    if bias is not None:
        b_kind = bias_kind(bias, m, n, sizes, row_broadcast=True)
        check_epilogue_dtype("bias", bias.dtype, od)
    if residual is not None:
        if residual.dim not in (2, a.dim) or not (sizes.equals(residual.shape[-1] - n, 0)
                                                  and sizes.equals(residual.shape[-2] - m, 0)):
            raise UnsupportedGemmError(f"residual: shape {residual.shape} is not (M, N) or (L, M, N)")
        if not sizes.equals(residual.stride[-1], 1):
            raise UnsupportedGemmError("layout: residual needs unit stride along N")
        check_epilogue_dtype("residual", residual.dtype, od)
        res_dtype = residual.dtype
        if _residual_broadcast(residual, a, m, sizes):
            raise UnsupportedGemmError("residual: broadcast over rows or batches (a zero stride) is not fused "
                                       "(problem.py's memory rules)")
        res_aligned = _residual_aligned(residual, a.dim, sizes)
    sa = scale_kind(scale_a, "scale_a", m, n, "row", sizes) if scale_a is not None else None
    sb = scale_kind(scale_b, "scale_b", m, n, "col", sizes) if scale_b is not None else None
    spec = EpilogueSpec(activation=activation, bias=b_kind, bias_dtype=bias.dtype if bias else "float32",
                        residual=residual is not None, residual_dtype=res_dtype or "float32",
                        residual_aligned=res_aligned, scale_a=sa,
                        scale_b=sb)
    configs = diverse(rank_configs(problem, num_sms=num_sms, epilogue=spec, gpu=gpu), top_k)
    if not configs:
        raise UnsupportedGemmError(f"no valid kernel config for {problem.describe()}")
    extents = (m, n, k) + ((a.shape[0],) if a.dim == 3 else ())
    dynamic = not all(sizes.is_static(x) for x in extents)
    if not dynamic:  # its candidates' partial last tiles move, as the eager pick's
        configs = candidates_as_run(configs, problem, spec)
    return Offer(problem, spec, tuple(configs), dynamic=dynamic, gpu=gpu)


def _residual_broadcast(residual: Operand, a: Operand, m, sizes: Sizes) -> bool:
    """A residual repeated over rows (row stride 0, M > 1) or over the batch (2-D under a batched
    GEMM, or batch stride 0): the eager op would compute it on a copy, so it is not fused."""
    from ..epilogue import residual_broadcast

    return residual_broadcast(rows=m, row_stride=residual.stride[-2],
                              batched=a.dim == 3 and not sizes.equals(a.shape[0], 1),
                              batch_stride=residual.stride[0] if residual.dim == 3 else None,
                              is_zero=lambda x: sizes.equals(x, 0), is_one=lambda x: sizes.equals(x, 1))


def _residual_aligned(residual: Operand, gemm_dim: int, sizes: Sizes) -> bool:
    """EpilogueSpec.residual_aligned, statically (:func:`~cutedsl_backend.epilogue.residual_rule` on
    the layout; a 2-D residual under a batched GEMM is a broadcast: batch stride 0). The op re-checks
    the tensors it gets at run time (a mismatch costs a compile, never a wrong result)."""
    from ..epilogue import residual_rule

    return residual_rule(elem_bytes=dtype_bits(residual.dtype) // 8, offset=residual.offset,
                         row_stride=residual.stride[-2], batch_stride=residual.stride[0] if residual.dim == 3 else 0,
                         batched=gemm_dim == 3, multiple_of=sizes.multiple_of,
                         is_zero=lambda x: sizes.equals(x, 0))


def diverse(ranked: list, k: int) -> list:
    """The best ``k`` of ``ranked`` that differ in more than raster order and group (those
    variants measure within a few percent of each other; a different tile or cluster is worth the
    compile more); raster variants fill up if too few differ. With three or more, the last is the
    best of another schedule where the others share one: the schedules differ in what the
    heuristic models least (sm90a ping-pong overlaps the epilogue with the next mainloop; the
    H200 sweeps found it fastest for fp8 at K = 4096 and for a gathered residual)."""
    if k < 1:
        return []
    seen, picked = set(), []
    for cfg in ranked:
        if cfg.shape not in seen:
            seen.add(cfg.shape)
            picked.append(cfg)
        if len(picked) == k:
            break
    else:
        picked += [c for c in ranked if c not in picked][:k - len(picked)]
    if k >= 3 and len(picked) == k and len({c.schedule for c in picked}) == 1:
        other = next((c for c in ranked if c.schedule != picked[0].schedule), None)
        if other is not None:
            picked[-1] = other
    return picked


def operand_from_ir(node) -> Operand:
    """An Operand from an Inductor IR node (TensorBox / Buffer / view)."""
    layout = node.get_layout()
    return Operand(tuple(node.get_size()), tuple(node.get_stride()), dtype_name(node.get_dtype()),
                   getattr(layout, "offset", 0))


def operand_from_fake(t) -> Operand:
    """An Operand from a (fake) tensor; symbolic sizes become sympy expressions."""
    import torch

    def expr(x):
        return x.node.expr if isinstance(x, torch.SymInt) else int(x)

    return Operand(tuple(expr(s) for s in t.shape), tuple(expr(s) for s in t.stride()), dtype_name(t.dtype),
                   expr(t.storage_offset()))


def offer_or_reason(what: str, fn: Callable[[], Offer]) -> Union[Offer, str]:
    """Run a check; a refusal is logged at DEBUG and returned as its text."""
    try:
        return fn()
    except UnsupportedGemmError as e:
        log.debug("cutedsl: not offering %s (%s)", what, e)
        return str(e)


def config_names(configs) -> list[str]:
    return [c.name if isinstance(c, GemmConfig) else str(c) for c in configs]
