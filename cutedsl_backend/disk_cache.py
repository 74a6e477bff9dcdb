"""The kernel disk cache: one entry per kernel (``<root>/<dsl version>/<key>/``: the host+device
object the process links in, the cubin, metadata written last), in a private directory.

Loading native code from a directory someone else can write would let them run code in this
process: a root or entry owned by another user, or writable by group or others, is refused (logged
once per reason). Entries are written under unique temp names and renamed, so a crash or a
concurrent writer never leaves an entry that looks complete; an unreadable entry is dropped and
its kernel recompiled. One compile per key across threads and processes: ``lock(key)``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Optional

from .kernel import DSL_LOCK, CompiledGemm, dsl_version

log = logging.getLogger("cutedsl_backend.compiler")


def cache_dir() -> Path:
    """$CUTEDSL_BACKEND_CACHE_DIR, else ~/.cache/cutedsl_backend."""
    d = os.environ.get("CUTEDSL_BACKEND_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "cutedsl_backend"


def private_dir(path: Path) -> None:
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
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} is owned by uid {st.st_uid}, not this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
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


class DiskCache:
    """The disk cache under :func:`cache_dir` (read at each use: a worker may point it elsewhere)."""

    def __init__(self):
        self.untrusted_logged: set = set()

    def paths(self, key: str) -> tuple[Path, Path, Path]:
        """(host+device object, cubin, metadata) of entry ``key``."""
        d = cache_dir() / dsl_version() / key
        return d / "kernel.o", d / "kernel.cubin", d / "meta.json"

    def has(self, key: str) -> bool:
        """Entry ``key`` is complete (its metadata, written last, exists)."""
        return self.paths(key)[2].exists()

    def untrusted(self, *paths: Path) -> Optional[str]:
        """The first reason (:func:`untrusted_reason`) among the cache root and ``paths``; logged
        once per reason."""
        for p in (cache_dir(),) + paths:
            why = untrusted_reason(p) if p.exists() else None
            if why:
                if why not in self.untrusted_logged:
                    self.untrusted_logged.add(why)
                    log.warning("cutedsl: not using the kernel disk cache: %s", why)
                return why
        return None

    @contextlib.contextmanager
    def lock(self, key: str):
        """Exclusive per-key lock (an flock on ``<cache>/<dsl>/<key>.lock``: other threads and
        processes compiling the same key wait here). Without a usable cache directory (or without
        a driver: nothing is stored then) it does not lock."""
        if not driver_available():
            yield
            return
        lock_path = cache_dir() / dsl_version() / f"{key}.lock"
        try:
            private_dir(lock_path.parent)
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

    def load(self, problem, which) -> Optional[CompiledGemm]:
        """Kernel ``which`` (a :class:`~cutedsl_backend.kernel.KernelKey`) from its entry, or None
        (no driver, no complete entry, an untrusted directory, or a corrupt entry: dropped)."""
        if not driver_available():
            return None
        key = which.digest
        obj, cub, meta = self.paths(key)
        if not (obj.exists() and cub.exists() and meta.exists()):
            return None
        if self.untrusted(obj.parent.parent, obj.parent, obj):
            return None
        try:
            import cutlass.cute as cute

            t0 = time.perf_counter()
            info = json.loads(meta.read_text())
            if info.get("key") != key:
                raise ValueError("key mismatch")
            with DSL_LOCK:
                module = cute.runtime.load_module(str(obj))
                fn = getattr(module, "gemm_" + key)
            cubin = cub.read_bytes()
            if not cubin:
                raise ValueError("empty cubin")
            return CompiledGemm(problem, which.config, which.epilogue, key, float(info["compile_seconds"]), cubin,
                                cache_hit="disk", load_seconds=time.perf_counter() - t0, _fn=fn)
        except Exception as e:  # corrupt entry: drop it, recompile
            log.warning("dropping unreadable cache entry %s (%s: %s)", obj.parent, type(e).__name__, e)
            shutil.rmtree(obj.parent, ignore_errors=True)
            return None

    def store(self, cg: CompiledGemm) -> None:
        """Write ``cg``'s entry (nothing without a driver or in an untrusted directory; a failed
        write leaves neither temp files nor an empty directory)."""
        if not driver_available():
            return
        obj, cub, meta = self.paths(cg.key)
        created = not obj.parent.exists()
        temps: list = []
        try:
            private_dir(obj.parent)
            if self.untrusted(obj.parent.parent, obj.parent):
                return
            data = cg._fn.dump_to_object("gemm_" + cg.key)
            info = json.dumps({"key": cg.key, "compile_seconds": cg.compile_seconds, "config": cg.config.name,
                               "problem": cg.problem.describe()}).encode()
            # unique temp names (threads and processes may write the same entry), then renames,
            # meta last: a crash never leaves an entry that looks complete
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
