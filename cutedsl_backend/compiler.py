"""Kernels by problem: ``get_kernel`` (memory, the background loader, disk, a worker's compile or
a compile here, in that order) and ``compile_gemm`` (no GPU needed).

``compile_gemm`` builds fake tensors with dynamic M, N, K, L and dynamic 16-byte-aligned strides
(build.py), so one compiled kernel serves every shape and stride of its
:class:`~cutedsl_backend.kernel.KernelKey`. The pieces: kernel.py (which kernel, a compiled one),
build.py (the compile), disk_cache.py, store.py (this process's state: ``STORE``), background.py
(worker compiles, background loads), launch.py (argument structs), artifacts.py (SASS, resources).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Optional

from .artifacts import Resources, disassemble, find_tool, resource_usage  # noqa: F401  (public here too)
from .background import (  # noqa: F401  (public here too)
    precompile_async,
    preload_async,
    warm_precompile_pool,
    warm_runtime_async,
    worker_compile,
)
from .build import compile_kernel
from .configs import GemmConfig, check_config, default_config, kernel_view, resolve_config
from .disk_cache import cache_dir, driver_available, untrusted_reason  # noqa: F401  (public here too)
from .kernel import CompiledGemm, KernelKey, dsl_version, kernel_source_hash  # noqa: F401  (public here too)
from .problem import GemmProblem, make_problem
from .store import STORE
from .workers import (  # noqa: F401  (the pool and its settings, public here too)
    WorkerPool,
    compile_timeout_s,
    fork_workers_enabled,
    precompile_workers,
)

log = logging.getLogger("cutedsl_backend.compiler")


def kernel_target(problem: GemmProblem, config: Optional[GemmConfig], epilogue) -> tuple:
    """(problem, config, epilogue) as the kernel compiles them: the config chosen first (the
    heuristic's pick when None), then its view of the call (a swap-AB config's is the swapped
    problem: :func:`kernel_view`). Compiles and cache keys both start from this."""
    config = config or default_config(problem, epilogue=epilogue)
    problem, epilogue = kernel_view(problem, config, epilogue)
    return problem, config, epilogue


def resolve(problem: GemmProblem, config: Optional[GemmConfig], epilogue) -> KernelKey:
    """The kernel ``problem`` gets with ``config`` (checked and resolved; the heuristic's pick when
    None) and ``epilogue``; a swap-AB config's is the swapped problem's (:func:`kernel_target`:
    compile it for that problem, as get_kernel does; compile_kernel checks)."""
    problem, cfg, epilogue = kernel_target(problem, config, epilogue)
    check_config(cfg, problem, epilogue)
    return KernelKey.of(problem, resolve_config(cfg, problem, epilogue), epilogue)


def forget_background_work() -> None:
    """Drop this process's memory caches and its pending compiles and loads (see KernelStore)."""
    STORE.forget_background_work()


def get_kernel(problem: GemmProblem, config: Optional[GemmConfig] = None, epilogue=None,
               *, use_disk_cache: bool = True) -> CompiledGemm:
    """The compiled kernel for ``problem`` (shape-generic), from memory, disk or a fresh compile
    (a swap-AB config's: :func:`kernel_view`)."""
    from .epilogue import EpilogueSpec

    problem, config, epilogue = kernel_target(problem, config, epilogue or EpilogueSpec())
    fast_key = (problem, config, epilogue)
    hit = STORE.fast.get(fast_key)
    if hit is not None:
        return hit
    which = resolve(problem, config, epilogue)
    key = which.digest
    hit = STORE.memory.get(key)
    if hit is not None:
        STORE.loads.pop(key, None)  # a background load that finished first: nothing left to wait for
    else:
        hit = STORE.wait_preload(key)
    if hit is not None:
        STORE.fast[fast_key] = hit
        return hit
    disk = STORE.disk
    t0 = time.perf_counter()
    cg = disk.load(problem, which) if use_disk_cache else None
    if cg is None and use_disk_cache and STORE.wait_pending(key):
        STORE.stats["waited_s"] += time.perf_counter() - t0
        cg = disk.load(problem, which)
    if cg is None:
        # one compile per key across threads and processes sharing the cache: the others wait,
        # then load what it stored
        with disk.lock(key) if use_disk_cache else contextlib.nullcontext():
            cg = disk.load(problem, which) if use_disk_cache else None
            if cg is None:
                cg = compile_kernel(problem, which)
                STORE.stats["compiled"] += 1
                if use_disk_cache:
                    disk.store(cg)
            else:
                STORE.stats["loaded"] += 1
    else:
        STORE.stats["loaded"] += 1
    STORE.stats["get_kernel_s"] += time.perf_counter() - t0
    STORE.memory[key] = cg
    STORE.fast[fast_key] = cg
    return cg


def compile_gemm(m: int, n: int, k: int, *, dtype, arch: str = "sm90a", batch: int = 1,
                 a_major: str = "k", b_major: str = "n", out_dtype=None, b_dtype=None,
                 fast_accum: bool = False, config: Optional[GemmConfig] = None, epilogue=None,
                 use_cache: bool = True, gpu: Optional[str] = None) -> CompiledGemm:
    """Compile (no GPU needed) the kernel that ``gemm`` would run for this problem on a GPU
    without a measured config table (``config=None``: the cost models' pick; configs.measured), or
    on GPU model ``gpu`` (as torch.cuda.get_device_name reports it), with its tables.

    - ``dtype``: float16 or bfloat16 (torch dtype or name); ``out_dtype``: the input dtype
      (default) or float32. FP8: ``dtype`` float8_e4m3fn or float8_e5m2 for A, ``b_dtype`` for B
      (default: the same; e5m2 x e5m2 is refused), both K-major, any 16/32-bit ``out_dtype``
      (default bfloat16); scales come as an epilogue (``EpilogueSpec(scale_a=..., scale_b=...)``);
      ``fast_accum`` as in torch._scaled_mm (default False: every k-tile is added in fp32).
    - ``a_major``: "k" (A row-major) or "m"; ``b_major``: "n" (B row-major) or "k".
    - The packed extents must keep 16-byte aligned strides: K (a_major "k") or M (a_major "m"),
      N (b_major "n") or K (b_major "k"), and N for the output, in multiples of 8 (16-bit).
    - ``config``: a :class:`GemmConfig`, default: the dispatcher's pick for this shape (with
      ``gpu``'s measured tables, its own and those it borrows, where one serves the problem).
    - ``epilogue``: a :class:`~cutedsl_backend.kernels.epilogue.EpilogueSpec` (bias kind,
      activation, residual, scales), default: none.
    - ``use_cache``: False compiles afresh (a true compile time), bypassing both caches.

    Returns a :class:`CompiledGemm` with ``compile_seconds``, ``cubin``, ``sass()`` and
    ``resources``. Raises :class:`UnsupportedGemmError` naming the broken rule.
    """
    from .epilogue import EpilogueSpec

    problem = make_problem(m, n, k, dtype=dtype, arch=arch, batch=batch, a_major=a_major,
                           b_major=b_major, out_dtype=out_dtype, b_dtype=b_dtype, fast_accum=fast_accum)
    epilogue = epilogue or EpilogueSpec()
    if config is None and gpu is not None:
        config = default_config(problem, epilogue=epilogue, gpu=gpu)
    if not use_cache:
        problem, config, epilogue = kernel_target(problem, config, epilogue)
        return compile_kernel(problem, resolve(problem, config, epilogue))
    return get_kernel(problem, config, epilogue)
