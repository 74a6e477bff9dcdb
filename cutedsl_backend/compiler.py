"""Compile kernels for a target arch without a GPU, cache them (memory + disk), read artifacts.

``compile_gemm`` builds fake tensors with dynamic M, N, K, L and dynamic 16-byte-aligned strides,
so one compiled kernel serves every shape and stride of its (arch, config, dtypes, layouts,
epilogue) key. The disk cache holds the host+device object (``dump_to_object``) with the cubin
and metadata beside it; a corrupt or unreadable entry is dropped and recompiled.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .artifacts import Resources, disassemble, find_tool, resource_usage  # noqa: F401  (public here too)
from .configs import GemmConfig, check_config, default_config, family, resolve_config
from .launch import ArgPack
from .problem import GemmProblem, make_problem
from .workers import (  # noqa: F401  (the pool's settings, public here too)
    _WorkerPool,
    compile_timeout_s,
    fork_workers_enabled,
    precompile_workers,
)

log = logging.getLogger("cutedsl_backend.compiler")

class KernelStore:
    """This process's kernel-lifecycle state, in one object (``STORE``):

    - ``memory``: cache key -> CompiledGemm; ``fast``: (problem, requested config, epilogue) ->
      CompiledGemm (skips config ranking and key hashing per call);
    - ``stats``: where the time of kernel fetches went (reported by bench-inductor): loads from
      disk, compiles here, seconds in get_kernel (a memory hit is not counted), of which waiting
      for a worker; eager first calls of a geometry (ops.py) add their count and seconds; loads
      by the background loader count in "preloaded" / "preload_s" (off the caller's path), and
      "preload_wait_s" is the time get_kernel waited for one;
    - ``events``: (time.perf_counter(), event, cache key or "") of the compile/load pipeline, for
      bench-inductor's timeline;
    - ``pool`` (the compile workers, made on first use) and ``pending``: cache key -> a worker's
      compile of it (get_kernel waits on it instead of compiling again);
    - ``loader`` (one thread, made on first use), ``loads``: cache key -> the loader's load of it,
      and ``generation`` (bumped by forget_background_work: older loads do not fill the caches);
    - ``runtime_start``: the DSL runtime's start on the loader thread;
    - ``untrusted_logged``: the disk-cache refusals already logged."""

    STAT_KEYS = ("loaded", "compiled", "get_kernel_s", "waited_s", "first_calls", "first_call_s", "preloaded",
                 "preload_s", "preload_wait_s")

    def __init__(self):
        self.memory: dict = {}
        self.fast: dict = {}
        self.stats: dict = dict.fromkeys(self.STAT_KEYS, 0)
        self.events: list = []
        self.pool: Optional[_WorkerPool] = None
        self.pool_lock = threading.Lock()
        self.pending: dict = {}
        self.loader = None
        self.loads: dict = {}
        self.generation = 0
        self.runtime_start: Optional[Future] = None
        self.untrusted_logged: set = set()

    def event(self, what: str, key: str = "") -> None:
        if len(self.events) < 10000:
            self.events.append((time.perf_counter(), what, key))


STORE = KernelStore()


def _event(what: str, key: str = "") -> None:
    STORE.event(what, key)


# cute.compile is not thread-safe: one compile or module load at a time per process (use processes
# to scale). Reentrant: a load may run inside get_kernel called under it.
_DSL_LOCK = threading.RLock()


def cache_dir() -> Path:
    """$CUTEDSL_BACKEND_CACHE_DIR, else ~/.cache/cutedsl_backend."""
    d = os.environ.get("CUTEDSL_BACKEND_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "cutedsl_backend"


def _private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) readable and writable by this user only."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass


def untrusted_reason(path: Path) -> Optional[str]:
    """Why ``path`` (a cache directory or file, which must exist) cannot be trusted to hold native
    code this process links in: owned by another user, or writable by group or others (anyone who
    can write it could run code in this process). None when it can be trusted."""
    import stat

    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _cache_untrusted(*paths: Path) -> Optional[str]:
    """The first reason (untrusted_reason) among the cache root and ``paths``; logged once per reason."""
    for p in (cache_dir(),) + paths:
        why = untrusted_reason(p) if p.exists() else None
        if why:
            if why not in STORE.untrusted_logged:
                STORE.untrusted_logged.add(why)
                log.warning("cutedsl: not using the kernel disk cache: %s", why)
            return why
    return None




@functools.lru_cache(None)
def kernel_source_hash() -> str:
    """Hash of everything that shapes generated code: kernels, configs, epilogue, this file."""
    root = Path(__file__).parent
    files = sorted((root / "kernels").glob("*.py")) + sorted((root / "configs").glob("*.py")) + [root / "compiler.py",
                                                       root / "epilogue.py"]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(None)
def dsl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:  # pragma: no cover - source installs
        import cutlass

        return getattr(cutlass, "__version__", "unknown")


@dataclass
class CompiledGemm:
    """A compiled GEMM kernel and its artifacts.

    ``compile_seconds`` is the time ``cute.compile`` took (0.0 cost is never reported for a
    cache hit: a hit keeps the original compile time and sets ``cache_hit``).
    """

    problem: GemmProblem
    config: GemmConfig
    epilogue: Any  # kernels.epilogue.EpilogueSpec
    key: str
    compile_seconds: float
    cubin: bytes
    cache_hit: str = ""  # "", "memory" or "disk"
    load_seconds: float = 0.0
    _fn: Any = field(default=None, repr=False)
    _sass: Optional[str] = field(default=None, repr=False)
    _resources: Optional[Resources] = field(default=None, repr=False)
    _fast: Any = field(default=None, repr=False)

    @property
    def arch(self) -> str:
        return self.problem.arch

    @property
    def direct_launch(self) -> Optional[bool]:
        """Whether launches fill the argument structs directly (True), go through the DSL's own
        marshalling (False), or have not been decided yet (None: no launch so far)."""
        return self._fast

    def sass(self) -> str:
        """SASS text of the cubin (cuobjdump or nvdisasm from PATH, CUDA_HOME or the pip wheels)."""
        if self._sass is None:
            self._sass = disassemble(self.cubin)
        return self._sass

    @property
    def resources(self) -> Resources:
        if self._resources is None:
            self._resources = resource_usage(self.cubin)
        return self._resources

    def sass_counts(self, opcodes=("HGMMA", "QGMMA", "UTMALDG", "UTMASTG", "UTCHMMA", "UTCQMMA",
                                   "LDL", "STL")) -> dict:
        text = self.sass()
        return {op: len(re.findall(r"\b" + op + r"\b", text)) for op in opcodes}

    def __call__(self, *args):
        if self._fn is None:
            raise RuntimeError("this CompiledGemm has no callable (artifacts only)")
        return self._fn(*args)

    def arg_pack(self, descs: list, max_clusters: int) -> "ArgPack":
        """Argument structs for one operand geometry (the eager API caches one per geometry).
        ``descs``: (shape, dynamic strides) of each tensor argument present, in call order."""
        return ArgPack(self, descs, max_clusters)

    def launch(self, pack: "ArgPack", ptrs: tuple, alpha: float, beta: float, stream_handle: int,
               views) -> None:
        """Launch with ``pack``'s geometry on the data at ``ptrs``; ``views()`` gives the tensor
        arguments (None where absent) as torch views for the DSL's own argument path.

        The DSL's generic argument marshalling costs ~50-90 us a call; filling the kernel's
        argument structs directly costs a few. The direct path is enabled per kernel only after
        its bytes matched the DSL's own marshalling of a real call; otherwise the DSL path runs.
        """
        if self._fast is None:  # the DSL's marshalling, once: not beside a load on the loader thread
            with _DSL_LOCK:
                self._fast = pack.matches_dsl(ptrs, alpha, beta, stream_handle, views)
        if self._fast:
            pack.launch(ptrs, alpha, beta, stream_handle)
        else:
            import cuda.bindings.driver as cuda
            from cutlass import Float32

            with _DSL_LOCK:  # the DSL's own argument path: Python state a load may touch
                self._fn(*views(), Float32(alpha), Float32(beta), pack.clusters.value,
                         cuda.CUstream(stream_handle))


def _cache_key(problem: GemmProblem, cfg: GemmConfig, epilogue_key: tuple) -> str:
    parts = {
        "src": kernel_source_hash(),
        "dsl": dsl_version(),
        "arch": problem.arch,
        "cfg": cfg.key(),
        "dtype": problem.dtype,
        "b_dtype": problem.dtype_b,
        "fast_accum": problem.fast_accum,
        "out": problem.out_dtype,
        "a_major": problem.a_major,
        "b_major": problem.b_major,
        "epi": epilogue_key,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def _cutlass_dtype(name: str):
    import cutlass

    return {
        "float16": cutlass.Float16,
        "bfloat16": cutlass.BFloat16,
        "float32": cutlass.Float32,
        "float8_e4m3fn": cutlass.Float8E4M3FN,
        "float8_e5m2": cutlass.Float8E5M2,
    }[name]


def _fake_args(problem: GemmProblem, epilogue, cfg: GemmConfig) -> tuple:
    """Fake arguments of the kernel's host function: A (M,K,L), B (N,K,L), C (M,N,L) with dynamic
    extents and dynamic 16B-aligned strides; the epilogue's vectors (dynamic length, unit stride)
    and residual (M,N,L: unit stride along N, other strides any, or 16-byte aligned when the spec
    says so) where the spec has them, else None; with split-K the fp32 workspace and int32
    counters (dynamic length, unit stride), else None."""
    import cutlass
    import cutlass.cute as cute
    from cutlass import Float32
    from cutlass.cute.runtime import make_fake_tensor

    in_t = _cutlass_dtype(problem.dtype)
    in_b = _cutlass_dtype(problem.dtype_b)
    out_t = _cutlass_dtype(problem.out_dtype)
    in_align = 128 // in_t.width
    out_align = 128 // out_t.width
    m, n, k, l = (cute.sym_int32() for _ in range(4))

    def strides(major_first: bool, align: int):
        ld = cute.sym_int64(divisibility=align)
        batch = cute.sym_int64(divisibility=align)
        return (1, ld, batch) if major_first else (ld, 1, batch)

    def vector(dtype):
        return make_fake_tensor(_cutlass_dtype(dtype), (cute.sym_int32(),), (1,), assumed_align=4)

    a = make_fake_tensor(in_t, (m, k, l), strides(problem.a_major == "m", in_align), assumed_align=16)
    b = make_fake_tensor(in_b, (n, k, l), strides(problem.b_major == "n", in_align), assumed_align=16)
    c = make_fake_tensor(out_t, (m, n, l), strides(False, out_align), assumed_align=16)
    e = epilogue
    bias = vector(e.bias_dtype) if e.bias else None
    sa = vector("float32") if e.scale_a else None
    sb = vector("float32") if e.scale_b else None
    res = None
    if e.residual:
        # unit stride along N (the eager API copies other layouts); rows and batches any stride
        res_t = _cutlass_dtype(e.residual_dtype)
        if e.residual_tma:  # 16-byte aligned rows, batches and data: loadable by TMA
            res = make_fake_tensor(res_t, (m, n, l), strides(False, 128 // res_t.width), assumed_align=16)
        else:
            res = make_fake_tensor(res_t, (m, n, l), (cute.sym_int64(), 1, cute.sym_int64()),
                                   assumed_align=res_t.width // 8)
    work = counters = None
    if cfg.splits > 1:
        work = make_fake_tensor(cutlass.Float32, (cute.sym_int32(),), (1,), assumed_align=16)
        counters = make_fake_tensor(cutlass.Int32, (cute.sym_int32(),), (1,), assumed_align=16)
    return a, b, c, bias, sa, sb, res, work, counters, Float32(1.0), Float32(0.0)


def _kernel_class(arch: str):
    return family(arch).kernel_class()


def _compile_fresh(problem: GemmProblem, cfg: GemmConfig, epilogue, key: str, kernel_class=None) -> CompiledGemm:
    """A fresh ``cute.compile`` (``kernel_class``: another kernel class than the arch's, for the
    validation's deliberately broken kernels; such compiles are never cached)."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.runtime import make_fake_stream

    kernel = (kernel_class or _kernel_class(problem.arch))(cfg, epilogue, problem.promote_fp8)
    fakes = _fake_args(problem, epilogue, cfg)
    with tempfile.TemporaryDirectory() as dump:
        opts = f"--gpu-arch {family(problem.arch).compile_flag} --keep-cubin --dump-dir {dump}"
        with _DSL_LOCK:
            t0 = time.perf_counter()
            fn = cute.compile(kernel, *fakes, cutlass.Int32(1), make_fake_stream(), options=opts)
            seconds = time.perf_counter() - t0
        cubin = fn.__cubin__
        if cubin is None:
            cubins = list(Path(dump).glob("*.cubin"))
            cubin = cubins[0].read_bytes() if cubins else b""
    if isinstance(cubin, str):
        cubin = cubin.encode("latin-1")
    return CompiledGemm(problem, cfg, epilogue, key, seconds, bytes(cubin), _fn=fn)


@contextlib.contextmanager
def _key_lock(key: str):
    """Exclusive per-key lock over the disk cache (an flock on ``<cache>/<dsl>/<key>.lock``: other
    threads and processes compiling the same key wait here). Without a usable cache directory
    (or without a driver: nothing is stored then) it does not lock."""
    if not driver_available():
        yield
        return
    lock_path = cache_dir() / dsl_version() / f"{key}.lock"
    try:
        _private_dir(lock_path.parent)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        log.info("cutedsl: no compile lock for %s (%s)", key, e)
        yield
        return
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _disk_paths(key: str) -> tuple[Path, Path, Path]:
    d = cache_dir() / dsl_version() / key
    return d / "kernel.o", d / "kernel.cubin", d / "meta.json"


def _load_from_disk(problem, cfg, epilogue, key) -> Optional[CompiledGemm]:
    if not driver_available():
        return None
    obj, cub, meta = _disk_paths(key)
    if not (obj.exists() and cub.exists() and meta.exists()):
        return None
    if _cache_untrusted(obj.parent.parent, obj.parent, obj):
        return None
    try:
        import cutlass.cute as cute

        t0 = time.perf_counter()
        info = json.loads(meta.read_text())
        if info.get("key") != key:
            raise ValueError("key mismatch")
        with _DSL_LOCK:
            module = cute.runtime.load_module(str(obj))
            fn = getattr(module, "gemm_" + key)
        cubin = cub.read_bytes()
        if not cubin:
            raise ValueError("empty cubin")
        return CompiledGemm(problem, cfg, epilogue, key, float(info["compile_seconds"]), cubin,
                            cache_hit="disk", load_seconds=time.perf_counter() - t0, _fn=fn)
    except Exception as e:  # corrupt entry: drop it, recompile
        log.warning("dropping unreadable cache entry %s (%s: %s)", obj.parent, type(e).__name__, e)
        shutil.rmtree(obj.parent, ignore_errors=True)
        return None


@functools.lru_cache(None)
def driver_available() -> bool:
    """The cached host object links against libcuda: without a driver it can be neither written
    nor loaded (the compile-only path still works, uncached on disk)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _store_to_disk(cg: CompiledGemm) -> None:
    if not driver_available():
        return
    obj, cub, meta = _disk_paths(cg.key)
    created = not obj.parent.exists()
    temps: list = []
    try:
        _private_dir(obj.parent)
        if _cache_untrusted(obj.parent.parent, obj.parent):
            return
        data = cg._fn.dump_to_object("gemm_" + cg.key)
        info = json.dumps({"key": cg.key, "compile_seconds": cg.compile_seconds, "config": cg.config.name,
                           "problem": cg.problem.describe()}).encode()
        # unique temp names (threads and processes may write the same entry), then renames, meta
        # last: a crash never leaves an entry that looks complete
        for path, payload in ((obj, data), (cub, cg.cubin), (meta, info)):
            fd, tmp = tempfile.mkstemp(dir=obj.parent, prefix=path.name + ".", suffix=".tmp")
            temps.append(tmp)
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(tmp, path)
    except Exception as e:
        log.warning("could not write cache entry %s: %s", obj.parent, e)
        for tmp in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        if created and not meta.exists():
            shutil.rmtree(obj.parent, ignore_errors=True)


def _resolve(problem: GemmProblem, config: Optional[GemmConfig], epilogue) -> tuple:
    """(the checked, resolved config, its cache key): the heuristic's pick when ``config`` is None."""
    cfg = config or default_config(problem, epilogue=epilogue)
    check_config(cfg, problem, epilogue)
    cfg = resolve_config(cfg, problem, epilogue)
    return cfg, _cache_key(problem, cfg, epilogue.key())


def get_kernel(problem: GemmProblem, config: Optional[GemmConfig] = None, epilogue=None,
               *, use_disk_cache: bool = True) -> CompiledGemm:
    """The compiled kernel for ``problem`` (shape-generic), from memory, disk or a fresh compile."""
    from .epilogue import EpilogueSpec

    epilogue = epilogue or EpilogueSpec()
    fast_key = (problem, config, epilogue)
    hit = STORE.fast.get(fast_key)
    if hit is not None:
        return hit
    cfg, key = _resolve(problem, config, epilogue)
    hit = STORE.memory.get(key)
    if hit is not None:
        STORE.loads.pop(key, None)  # a background load that finished first: nothing left to wait for
    else:
        hit = _wait_preload(key)
    if hit is not None:
        STORE.fast[fast_key] = hit
        return hit
    t0 = time.perf_counter()
    cg = _load_from_disk(problem, cfg, epilogue, key) if use_disk_cache else None
    if cg is None and use_disk_cache and _wait_pending(key):
        STORE.stats["waited_s"] += time.perf_counter() - t0
        cg = _load_from_disk(problem, cfg, epilogue, key)
    if cg is None:
        # one compile per key across threads and processes sharing the cache: the others wait,
        # then load what it stored
        with _key_lock(key) if use_disk_cache else contextlib.nullcontext():
            cg = _load_from_disk(problem, cfg, epilogue, key) if use_disk_cache else None
            if cg is None:
                cg = _compile_fresh(problem, cfg, epilogue, key)
                STORE.stats["compiled"] += 1
                if use_disk_cache:
                    _store_to_disk(cg)
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
                 use_cache: bool = True) -> CompiledGemm:
    """Compile (no GPU needed) the kernel that ``gemm`` would run for this problem.

    - ``dtype``: float16 or bfloat16 (torch dtype or name); ``out_dtype``: the input dtype
      (default) or float32. FP8: ``dtype`` float8_e4m3fn or float8_e5m2 for A, ``b_dtype`` for B
      (default: the same; e5m2 x e5m2 is refused), both K-major, any 16/32-bit ``out_dtype``
      (default bfloat16); scales come as an epilogue (``EpilogueSpec(scale_a=..., scale_b=...)``);
      ``fast_accum`` as in torch._scaled_mm (default False: every k-tile is added in fp32).
    - ``a_major``: "k" (A row-major) or "m"; ``b_major``: "n" (B row-major) or "k".
    - The packed extents must keep 16-byte aligned strides: K (a_major "k") or M (a_major "m"),
      N (b_major "n") or K (b_major "k"), and N for the output, in multiples of 8 (16-bit).
    - ``config``: a :class:`GemmConfig`, default: the heuristic's pick for this shape.
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
    if not use_cache:
        cfg, key = _resolve(problem, config, epilogue)
        return _compile_fresh(problem, cfg, epilogue, key)
    return get_kernel(problem, config, epilogue)


# ---------------------------------------------------------------------------- precompile in workers
# cute.compile is not thread-safe, so parallel compiles need processes. The workers are forked from
# one zygote subprocess that imported the DSL once (``python -m cutedsl_backend.compile_worker
# --zygote``; $CUTEDSL_WORKER_FORK=0: each worker a subprocess of its own), not multiprocessing
# children: spawn and forkserver would re-run the caller's __main__ module in each of them.



def _pool() -> Optional[_WorkerPool]:
    with STORE.pool_lock:
        workers = precompile_workers()
        if STORE.pool is None and workers:
            STORE.pool = _WorkerPool(workers)
        return STORE.pool


def _after_fork_in_child() -> None:
    """A fork of this process starts without our pool: its threads are not in the child, and the
    sockets it inherited would keep the zygote and workers alive after this process exits."""
    pool, STORE.pool, STORE.pool_lock = STORE.pool, None, threading.Lock()
    STORE.pending.clear()
    if pool is not None:
        for sock in list(pool._sockets):
            fd = sock.detach()  # the descriptor itself, whatever file objects still refer to it
            if fd >= 0:
                os.close(fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def worker_compile(problem: GemmProblem, cfg: GemmConfig, epilogue, cache: Optional[str] = None) -> tuple:
    """A worker's job: compile (or find on disk) and store in ``cache`` (the submitting process's
    cache dir at submit time); (key, compile seconds, cache hit)."""
    if cache is not None:
        os.environ["CUTEDSL_BACKEND_CACHE_DIR"] = cache
    cg = get_kernel(problem, cfg, epilogue)
    return cg.key, cg.compile_seconds, cg.cache_hit


def warm_precompile_pool() -> None:
    """Start the worker processes now (their DSL import overlaps the caller's work)."""
    pool = _pool()
    if pool is not None:
        _event("worker pool warm-up")
        for _ in pool.threads:
            pool.submit(None).add_done_callback(lambda f: _event("a worker is ready"))


def precompile_async(problem: GemmProblem, config: Optional[GemmConfig] = None,
                     epilogue=None) -> Optional[Future]:
    """Compile ``problem``'s kernel with ``config`` in a worker process. The worker writes the disk
    cache and ``get_kernel`` here waits for a pending compile of the same key instead of
    compiling it again. Either way (compiled now or already on disk) the kernel is then loaded
    into this process by the background loader (:func:`preload_async`).

    Returns the future of (key, compile seconds, cache hit), or None when there is no compile to
    do: the kernel is in memory or on disk, workers are off, or there is no disk cache to hand the
    result over (no CUDA driver: see :func:`driver_available`)."""
    from .epilogue import EpilogueSpec

    epilogue = epilogue or EpilogueSpec()
    cfg, key = _resolve(problem, config, epilogue)
    if key in STORE.memory or key in STORE.pending or not driver_available():
        return None
    warm_runtime_async()  # this process will load a kernel: its DSL start-up begins now
    if _disk_paths(key)[2].exists():
        preload_async(problem, cfg, epilogue, key)
        return None
    pool = _pool()
    if pool is None:
        return None
    fut = pool.submit(problem, cfg, epilogue, str(cache_dir()))
    _event("worker compile submitted", key)
    fut.add_done_callback(lambda f: _event("worker compile done" if f.exception() is None else "worker compile failed",
                                           key))
    STORE.pending[key] = fut
    preload_async(problem, cfg, epilogue, key)
    return fut


# ---------------------------------------------------------------------------- background loads
# The first kernel load in a process pays the DSL runtime's start-up (seconds, on the H200 machine),
# and a kernel a worker compiled must still be loaded here. One loader thread does both as soon as
# the kernel exists (on disk now, or when its worker finishes), so under Inductor they overlap its
# own precompilation and the wait for our workers instead of following them. Loads hold _DSL_LOCK;
# the caller's get_kernel takes a finished load from memory or waits for the one under way.



def forget_background_work() -> None:
    """Drop this process's memory caches and its pending compiles and loads (benchmarks start
    each variant afresh): work still under way finishes without filling the caches again."""
    STORE.generation += 1
    STORE.memory.clear()
    STORE.fast.clear()
    STORE.pending.clear()
    STORE.loads.clear()


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
    _event("DSL runtime started here")


def background_load_enabled() -> bool:
    """The loader runs where a driver can load kernels."""
    return driver_available()




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


def preload_async(problem: GemmProblem, cfg: GemmConfig, epilogue, key: str) -> Optional[Future]:
    """Load ``key``'s kernel into the memory cache on the loader thread: now if it is on disk,
    else when its pending worker compile finishes (loads queue in the order kernels become ready).
    ``cfg`` is the resolved config. Returns the load's future (its CompiledGemm, or None)."""
    if key in STORE.memory or key in STORE.loads or not background_load_enabled():
        return STORE.loads.get(key)
    load: Future = Future()
    STORE.loads[key] = load
    generation = STORE.generation

    def queue(_done=None):
        try:
            _loader().submit(_preload, load, problem, cfg, epilogue, key, generation)
        except RuntimeError:  # the interpreter is shutting down: nobody will ask for it
            load.cancel()

    compiling = STORE.pending.get(key)
    if compiling is None:
        queue()
    else:
        compiling.add_done_callback(queue)
    return load


def _preload(load: Future, problem, cfg, epilogue, key, generation: int) -> None:
    if not load.set_running_or_notify_cancel():  # get_kernel took the job back
        return
    try:
        compiling = STORE.pending.get(key)
        if generation != STORE.generation or (compiling is not None and compiling.exception() is not None):
            # forgotten (forget_background_work), or the worker failed: get_kernel reports that
            # failure and compiles in the caller
            load.set_result(None)
            return
        t0 = time.perf_counter()
        cg = _load_from_disk(problem, cfg, epilogue, key)
        if cg is not None:
            _event("loaded in the background", key)
            STORE.memory.setdefault(key, cg)
            STORE.pending.pop(key, None)
            STORE.stats["preloaded"] += 1
            STORE.stats["preload_s"] += time.perf_counter() - t0
        load.set_result(cg)
    except BaseException as e:
        load.set_exception(e)


def _wait_preload(key: str):
    """The loader's kernel for ``key``: taken from a finished load, waited for if the load is
    under way, or None (no load, a failed one, or one not started yet: the caller then fetches
    the kernel itself rather than queueing behind other loads)."""
    load = STORE.loads.pop(key, None)
    if load is None or load.cancel():
        return None
    t0 = time.perf_counter()
    try:
        cg = load.result()
    except Exception as e:
        log.warning("background load of %s failed (%s: %s)", key, type(e).__name__, e)
        cg = None
    STORE.stats["preload_wait_s"] += time.perf_counter() - t0
    return STORE.memory.get(key) if cg is not None else None


def _wait_pending(key: str) -> bool:
    """Wait for a worker compiling ``key``; True if it finished without error."""
    fut = STORE.pending.pop(key, None)
    if fut is None:
        return False
    _event("caller waits for worker", key)
    try:
        fut.result()
        _event("caller's wait ended", key)
        return True
    except Exception as e:  # the caller compiles in this process instead
        log.warning("worker compile of %s failed (%s: %s); compiling here", key, type(e).__name__, e)
        return False
