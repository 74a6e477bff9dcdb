"""Kernels got ahead of their first use: compiles in worker processes and loads on a loader thread.

cute.compile is not thread-safe, so parallel compiles need processes. The workers are forked from
one zygote subprocess that imported the DSL once (``python -m cutedsl_backend.compile_worker
--zygote``; $CUTEDSL_WORKER_FORK=0: each worker a subprocess of its own), not multiprocessing
children: spawn and forkserver would re-run the caller's __main__ module in each of them.

The first kernel load in a process pays the DSL runtime's start-up (seconds, on the H200 machine),
and a kernel a worker compiled must still be loaded here. One loader thread does both as soon as
the kernel exists (on disk now, or when its worker finishes), so under Inductor they overlap its
own precompilation and the wait for our workers instead of following them. Loads hold DSL_LOCK;
the caller's get_kernel takes a finished load from memory or waits for the one under way.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from concurrent.futures import Future
from typing import Optional

from . import disk_cache
from .configs import GemmConfig
from .disk_cache import cache_dir
from .kernel import KernelKey
from .problem import GemmProblem
from .store import STORE
from .workers import WorkerPool, precompile_workers


def pool() -> Optional[WorkerPool]:
    """The compile workers (made on first use; None where workers are off)."""
    with STORE.pool_lock:
        workers = precompile_workers()
        if STORE.pool is None and workers:
            STORE.pool = WorkerPool(workers)
        return STORE.pool


def _after_fork_in_child() -> None:
    """A fork of this process starts without our pool: its threads are not in the child, and the
    sockets it inherited would keep the zygote and workers alive after this process exits."""
    old, STORE.pool, STORE.pool_lock = STORE.pool, None, threading.Lock()
    STORE.pending.clear()
    if old is not None:
        for sock in list(old._sockets):
            fd = sock.detach()  # the descriptor itself, whatever file objects still refer to it
            if fd >= 0:
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def worker_compile(problem: GemmProblem, cfg: GemmConfig, epilogue, cache: Optional[str] = None) -> tuple:
    """A worker's job: compile (or find on disk) and store in ``cache`` (the submitting process's
    cache dir at submit time); (key, compile seconds, cache hit)."""
    from .compiler import get_kernel

    if cache is not None:
        os.environ["CUTEDSL_BACKEND_CACHE_DIR"] = cache
    cg = get_kernel(problem, cfg, epilogue)
    return cg.key, cg.compile_seconds, cg.cache_hit


def warm_precompile_pool() -> None:
    """Start the worker processes now (their DSL import overlaps the caller's work)."""
    workers = pool()
    if workers is not None:
        STORE.event("worker pool warm-up")
        for _ in workers.threads:
            workers.submit(None).add_done_callback(lambda f: STORE.event("a worker is ready"))


def precompile_async(problem: GemmProblem, config: Optional[GemmConfig] = None,
                     epilogue=None) -> Optional[Future]:
    """Compile ``problem``'s kernel with ``config`` in a worker process. The worker writes the disk
    cache and ``get_kernel`` here waits for a pending compile of the same key instead of
    compiling it again. Either way (compiled now or already on disk) the kernel is then loaded
    into this process by the background loader (:func:`preload_async`).

    Returns the future of (key, compile seconds, cache hit), or None when there is no compile to
    do: the kernel is in memory or on disk, workers are off, or there is no disk cache to hand the
    result over (no CUDA driver: see :func:`~cutedsl_backend.disk_cache.driver_available`)."""
    from .compiler import kernel_target, resolve
    from .epilogue import EpilogueSpec

    problem, config, epilogue = kernel_target(problem, config, epilogue or EpilogueSpec())
    which = resolve(problem, config, epilogue)
    key = which.digest
    if key in STORE.memory or key in STORE.pending or not disk_cache.driver_available():
        return None
    warm_runtime_async()  # this process will load a kernel: its DSL start-up begins now
    if STORE.disk.has_or_imports(key):
        preload_async(problem, which)
        return None
    workers = pool()
    if workers is None:
        return None
    fut = workers.submit(problem, which.config, epilogue, str(cache_dir()))
    STORE.event("worker compile submitted", key)
    fut.add_done_callback(lambda f: STORE.event(
        "worker compile done" if f.exception() is None else "worker compile failed", key))
    STORE.pending[key] = fut
    preload_async(problem, which)
    return fut


def _loader():
    with STORE.pool_lock:
        if STORE.loader is None:
            from concurrent.futures import ThreadPoolExecutor

            STORE.loader = ThreadPoolExecutor(1, thread_name_prefix="cutedsl-load")
        return STORE.loader


def _start_runtime() -> None:
    """The DSL's one-time start-up in this process: its import and runtime library."""
    import cutlass.cute  # noqa: F401
    import cutlass.runtime as runtime

    for path in runtime.find_runtime_libraries(enable_tvm_ffi=False):
        ctypes.CDLL(path)
    STORE.event("DSL runtime started here")


def background_load_enabled() -> bool:
    """The loader runs where a driver can load kernels."""
    return disk_cache.driver_available()  # read at each call: one place to patch (tests)


def warm_runtime_async() -> Optional[Future]:
    """Start the DSL runtime in this process on the loader thread, once (later calls return the
    same future; None where the loader is off: see :func:`background_load_enabled`).

    When: at the first kernel this process will load (precompile_async: a worker compile
    submitted, or a kernel found on disk), so the import overlaps the wait for the worker rather
    than competing for the GIL with Dynamo and Inductor (starting it at inductor.enable() measured
    slower), and a compile that needs none of our kernels pays nothing."""
    if not background_load_enabled():
        return None
    with STORE.pool_lock:
        start = STORE.runtime_start
    if start is None:
        start = _loader().submit(_start_runtime)
        with STORE.pool_lock:
            start = STORE.runtime_start = STORE.runtime_start or start
    return start


def preload_async(problem: GemmProblem, which: KernelKey) -> Optional[Future]:
    """Load kernel ``which`` into the memory cache on the loader thread: now if it is on disk,
    else when its pending worker compile finishes (loads queue in the order kernels become ready).
    Returns the load's future (its CompiledGemm, or None)."""
    key = which.digest
    if key in STORE.memory or key in STORE.loads or not background_load_enabled():
        return STORE.loads.get(key)
    load: Future = Future()
    STORE.loads[key] = load
    generation = STORE.generation

    def queue(_done=None):
        try:
            _loader().submit(_preload, load, problem, which, generation)
        except RuntimeError:  # the interpreter is shutting down: nobody will ask for it
            load.cancel()

    compiling = STORE.pending.get(key)
    if compiling is None:
        queue()
    else:
        compiling.add_done_callback(queue)
    return load


def _preload(load: Future, problem, which: KernelKey, generation: int) -> None:
    if not load.set_running_or_notify_cancel():  # get_kernel took the job back
        return
    key = which.digest
    try:
        compiling = STORE.pending.get(key)
        if generation != STORE.generation or (compiling is not None and compiling.exception() is not None):
            # forgotten (forget_background_work), or the worker failed: get_kernel reports that
            # failure and compiles in the caller
            load.set_result(None)
            return
        t0 = time.perf_counter()
        cg = STORE.disk.load(problem, which)
        if cg is not None:
            STORE.event("loaded in the background", key)
            STORE.memory.setdefault(key, cg)
            STORE.pending.pop(key, None)
            STORE.stats["preloaded"] += 1
            STORE.stats["preload_s"] += time.perf_counter() - t0
        load.set_result(cg)
    except BaseException as e:
        load.set_exception(e)
