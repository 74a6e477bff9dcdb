"""The kernel disk cache: one entry per kernel (``<root>/<dsl version>/<key>/``: the host+device
object the process links in, the cubin, metadata written last), in a private directory.

Loading native code from a directory someone else can write would let them run code in this
process: a root or entry owned by another user, or writable by group or others, is refused (logged
once per reason). Entries are written under unique temp names and renamed, so a crash or a
concurrent writer never leaves an entry that looks complete; an unreadable entry is dropped and
its kernel recompiled. One compile per key across threads and processes: ``lock(key)``.

A shared read-only cache (``$CUTEDSL_BACKEND_SHARED_CACHE_DIR``, opt-in: e.g. the kernels a GPU
image was built with) may belong to another user. Nothing in it is loaded on trust: its
``manifest.json`` (written by :func:`seal`) lists each entry's file digests, and an entry is
copied into the private cache only after every file matched (the bytes checked are the bytes
written); only bounded regular files are read (no symlink, FIFO or device). The manifest is
trusted when ``$CUTEDSL_BACKEND_SHARED_CACHE_SHA256`` pins its digest, else only when it and its
directory belong to root or this user and neither is writable by group or others.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
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
    """$CUTEDSL_BACKEND_CACHE_DIR, else ~/.cache/cutedsl_backend; a user without a writable home
    (a container run as an arbitrary uid) gets a per-user directory under the temp dir (created
    private; one another user made first is refused like any cache directory it owns)."""
    d = os.environ.get("CUTEDSL_BACKEND_CACHE_DIR")
    if d:
        return Path(d)
    home = Path.home()
    if (home / ".cache").exists() or os.access(home, os.W_OK):
        return home / ".cache" / "cutedsl_backend"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"cutedsl_backend-{uid}"


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


ENTRY_FILES = ("kernel.o", "kernel.cubin", "meta.json")  # meta.json last: it marks an entry complete
MANIFEST = "manifest.json"


def shared_cache_dir() -> Optional[Path]:
    """$CUTEDSL_BACKEND_SHARED_CACHE_DIR (a read-only cache others built), or None."""
    d = os.environ.get("CUTEDSL_BACKEND_SHARED_CACHE_DIR")
    return Path(d) if d else None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


MAX_SHARED_FILE_BYTES = 256 << 20  # a kernel's object is a few MB; the manifest of thousands, less


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file (no symlink, FIFO or device: a writer of a
    shared directory must not be able to block or exhaust this process) of bounded size."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SHARED_FILE_BYTES:
            raise OSError(f"{path} is not a regular file of at most {MAX_SHARED_FILE_BYTES} bytes")
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def seal(root: Path) -> str:
    """Make ``root`` a shared cache: readable by everyone, writable by its owner only, and its
    manifest listing every complete entry (each DSL version's) with its files' sha256. Returns
    the manifest's own sha256 (pin it with $CUTEDSL_BACKEND_SHARED_CACHE_SHA256)."""
    entries = {}
    for meta in sorted(root.glob("*/*/meta.json")):
        d = meta.parent
        if all((d / f).is_file() and not (d / f).is_symlink() for f in ENTRY_FILES):
            entries[f"{d.parent.name}/{d.name}"] = {f: _sha256((d / f).read_bytes()) for f in ENTRY_FILES}
    for p in [root, *root.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o755 if p.is_dir() else 0o644)
    data = json.dumps({"entries": entries}, indent=0, sort_keys=True).encode()
    fd, tmp = tempfile.mkstemp(dir=root, prefix=MANIFEST + ".", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, root / MANIFEST)
    return _sha256(data)


class SharedCache:
    """The read-only shared cache (see the module's docstring): its manifest, checked once per
    version of the file, and the import of verified entries into the private cache."""

    def __init__(self):
        self._manifest: tuple = (None, None)  # (the manifest file's stat signature, its entries)
        self.logged: set = set()

    def _warn(self, why: str) -> None:
        if why not in self.logged:
            self.logged.add(why)
            log.warning("cutedsl: not using the shared kernel cache: %s", why)

    def entries(self) -> dict:
        """{"<dsl version>/<key>": {file: sha256}} of the trusted manifest; {} when there is none."""
        root = shared_cache_dir()
        if root is None:
            return {}
        path = root / MANIFEST
        try:
            st, root_mode = path.stat(), root.stat().st_mode
        except OSError:
            return {}
        pin = os.environ.get("CUTEDSL_BACKEND_SHARED_CACHE_SHA256", "").strip().lower()
        sig = (str(path), st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode, root_mode, pin)
        if self._manifest[0] == sig:
            return self._manifest[1]
        entries: dict = {}
        try:
            data = _read_regular(path)
            uid = os.getuid() if hasattr(os, "getuid") else 0
            if pin and _sha256(data) != pin:
                self._warn(f"{path} does not match $CUTEDSL_BACKEND_SHARED_CACHE_SHA256")
            elif not pin and any(p.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH) or p.stat().st_uid not in (0, uid)
                                 for p in (root, path)):
                self._warn(f"{root} or its manifest is writable by group or others, or owned by another user than "
                           "root or this one (pin the manifest's digest with $CUTEDSL_BACKEND_SHARED_CACHE_SHA256 "
                           "to use it)")
            else:
                raw = json.loads(data)["entries"]
                entries = {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, dict)
                           and all(isinstance(v.get(f), str) for f in ENTRY_FILES)}
        except (OSError, ValueError, KeyError, TypeError) as e:
            self._warn(f"unreadable manifest {path}: {e}")
        self._manifest = (sig, entries)
        return entries

    def has(self, key: str) -> bool:
        return f"{dsl_version()}/{key}" in self.entries()

    def import_entry(self, disk: "DiskCache", key: str) -> bool:
        """Copy entry ``key`` into the private cache if the manifest lists it and every file
        matches its digest; True when the private cache then holds it."""
        want = self.entries().get(f"{dsl_version()}/{key}")
        root = shared_cache_dir()
        if not want or root is None:
            return False
        d = root / dsl_version() / key
        payloads = {}
        for name in ENTRY_FILES:
            try:
                data = _read_regular(d / name)
            except OSError as e:
                self._warn(f"entry {d} unreadable: {e}")
                return False
            if _sha256(data) != want.get(name):
                self._warn(f"entry {d}: {name} does not match the manifest")
                return False
            payloads[name] = data
        disk.write_entry(key, payloads)
        return disk.has(key)


class DiskCache:
    """The disk cache under :func:`cache_dir` (read at each use: a worker may point it elsewhere),
    and the shared read-only one it imports verified entries from."""

    def __init__(self):
        self.untrusted_logged: set = set()
        self.shared = SharedCache()

    def paths(self, key: str) -> tuple[Path, Path, Path]:
        """(host+device object, cubin, metadata) of entry ``key``."""
        d = cache_dir() / dsl_version() / key
        return d / "kernel.o", d / "kernel.cubin", d / "meta.json"

    def has(self, key: str) -> bool:
        """Entry ``key`` is complete (its metadata, written last, exists)."""
        return self.paths(key)[2].exists()

    def has_or_imports(self, key: str) -> bool:
        """:meth:`has`, or the shared cache's verified entry was just imported (for deciding that
        no compile is needed: a listed entry that cannot be imported needs one)."""
        return self.has(key) or self.shared.import_entry(self, key)

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
        if not (obj.exists() and cub.exists() and meta.exists()) and not self.shared.import_entry(self, key):
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
        try:
            data = cg._fn.dump_to_object("gemm_" + cg.key)
        except Exception as e:
            log.warning("could not write cache entry %s: %s", cg.key, e)
            return
        info = json.dumps({"key": cg.key, "compile_seconds": cg.compile_seconds, "config": cg.config.name,
                           "problem": cg.problem.describe()}).encode()
        self.write_entry(cg.key, {"kernel.o": data, "kernel.cubin": cg.cubin, "meta.json": info})

    def write_entry(self, key: str, payloads: dict) -> None:
        """Write entry ``key``'s files (ENTRY_FILES -> bytes) under unique temp names (threads
        and processes may write the same entry), then rename them, the metadata last: a crash
        never leaves an entry that looks complete, a failed write neither temp files nor an empty
        directory. Nothing in an untrusted directory."""
        obj = self.paths(key)[0]
        meta = obj.parent / "meta.json"
        created = not obj.parent.exists()
        temps: list = []
        try:
            private_dir(obj.parent)
            if self.untrusted(obj.parent.parent, obj.parent):
                return
            for name in ENTRY_FILES:
                path = obj.parent / name
                fd, tmp = tempfile.mkstemp(dir=obj.parent, prefix=path.name + ".", suffix=".tmp")
                temps.append(tmp)
                with os.fdopen(fd, "wb") as f:
                    f.write(payloads[name])
                os.replace(tmp, path)
        except Exception as e:
            log.warning("could not write cache entry %s: %s", obj.parent, e)
            for tmp in temps:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if created and not meta.exists():
                shutil.rmtree(obj.parent, ignore_errors=True)
