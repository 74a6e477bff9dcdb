"""The kernel disk cache and the compile workers, hardened (CPU only): the cache is private and
refuses directories or files another user could have written (they would hold native code this
process links in); entries are written under unique temporary names and a failed write leaves
nothing behind; one compile per key across threads and processes (the per-key lock); a compile worker that stops
answering is ended after $CUTEDSL_COMPILE_TIMEOUT_S and the next job gets a new worker."""

import os
import signal
import stat
import threading
import time
from types import SimpleNamespace

import pytest

from cutedsl_backend import compiler, disk_cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "kc"
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(root))
    compiler.STORE.disk.untrusted_logged.clear()
    return root


def test_private_dirs_are_created_0700(cache):
    d = cache / "a" / "b"
    disk_cache.private_dir(d)
    for p in (cache, cache / "a", d):
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, oct(p.stat().st_mode)


def test_group_or_world_writable_cache_is_refused(cache, caplog):
    disk_cache.private_dir(cache)
    assert compiler.STORE.disk.untrusted() is None
    os.chmod(cache, 0o777)
    why = compiler.STORE.disk.untrusted()
    assert why and "writable by group or others" in why
    assert any("not using the kernel disk cache" in r.getMessage() for r in caplog.records)
    os.chmod(cache, 0o700)
    f = cache / "kernel.o"
    f.write_bytes(b"x")
    os.chmod(f, 0o666)
    assert "writable" in compiler.STORE.disk.untrusted(f)


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to chown a file to another user")
def test_cache_owned_by_another_user_is_refused(cache):
    disk_cache.private_dir(cache)
    f = cache / "kernel.o"
    f.write_bytes(b"x")
    os.chown(f, 12345, 12345)
    assert "owned by uid 12345" in compiler.untrusted_reason(f)


def test_load_refuses_an_untrusted_entry_without_loading_it(cache, monkeypatch):
    monkeypatch.setattr(disk_cache, "driver_available", lambda: True)
    obj, cub, meta = compiler.STORE.disk.paths("k" * 24)
    disk_cache.private_dir(obj.parent)
    for p in (obj, cub, meta):
        p.write_bytes(b"{}")
    os.chmod(obj, 0o666)
    loaded = []
    import cutlass.cute as cute

    monkeypatch.setattr(cute.runtime, "load_module", lambda path: loaded.append(path))
    assert compiler.STORE.disk.load(None, SimpleNamespace(digest="k" * 24, config=None, epilogue=None)) is None
    assert loaded == [] and obj.exists()  # not linked in, not deleted either (not ours to judge)


class _FakeCompiled:
    def __init__(self, key, fail=False):
        self.key, self.cubin, self.compile_seconds, self.fail = key, b"cubin", 1.0, fail
        self.config = type("C", (), {"name": "cfg"})()
        self.problem = type("P", (), {"describe": lambda self: "p"})()
        outer = self

        class Fn:
            def dump_to_object(self, name):
                if outer.fail:
                    raise RuntimeError("disk full")
                return b"object"

        self._fn = Fn()


def test_store_writes_complete_private_entries_and_cleans_up_after_a_failure(cache, monkeypatch):
    monkeypatch.setattr(disk_cache, "driver_available", lambda: True)
    compiler.STORE.disk.store(_FakeCompiled("a" * 24))
    obj, cub, meta = compiler.STORE.disk.paths("a" * 24)
    assert obj.read_bytes() == b"object" and cub.read_bytes() == b"cubin" and meta.exists()
    assert not [p for p in obj.parent.iterdir() if p.name.endswith(".tmp")]
    assert stat.S_IMODE(obj.parent.stat().st_mode) & 0o077 == 0
    compiler.STORE.disk.store(_FakeCompiled("b" * 24, fail=True))
    assert not compiler.STORE.disk.paths("b" * 24)[0].parent.exists()  # no empty directory left


def test_one_compile_per_key_across_threads(cache, monkeypatch):
    monkeypatch.setattr(disk_cache, "driver_available", lambda: True)
    inside, overlap = [], []

    def compile_once():
        with compiler.STORE.disk.lock("c" * 24):
            if inside:
                overlap.append(1)
            inside.append(1)
            time.sleep(0.2)
            inside.pop()

    threads = [threading.Thread(target=compile_once) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap == []


# get_kernel's protocol under the per-key lock: load the entry if it is there, else compile and
# store it (the compile stands in as a sleep, the entry as a file: no GPU driver here)
_COMPILE_ONCE = """
import os, sys, time
from cutedsl_backend import compiler, disk_cache
disk_cache.driver_available = lambda: True
entry, log = sys.argv[1], sys.argv[2]
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))  # every process reaches the lock together
with compiler.STORE.disk.lock("e" * 24):
    if os.path.exists(entry):
        outcome = "loaded"
    else:
        time.sleep(0.5)
        with open(entry, "w") as f:
            f.write(str(os.getpid()))
        outcome = "compiled"
with open(log, "a") as f:
    f.write(outcome + "\\n")
"""


def test_one_compile_per_key_across_processes(cache, tmp_path):
    """Processes sharing a cache directory that need the same kernel at the same time: one
    compiles it, the others wait on the key's lock (an flock) and load what it stored."""
    import subprocess
    import sys

    entry, log = tmp_path / "entry", tmp_path / "log"
    start = time.time() + 3.0
    env = {**os.environ, "CUTEDSL_BACKEND_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", _COMPILE_ONCE, str(entry), str(log), str(start)], env=env)
             for _ in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    assert sorted(log.read_text().split()) == ["compiled", "loaded", "loaded"]


def test_a_stopped_worker_times_out_and_is_replaced(monkeypatch):
    monkeypatch.setenv("CUTEDSL_WORKER_FORK", "0")  # spawned: no zygote to start in a test
    pool = compiler.WorkerPool(1)
    pid, _ = pool.submit("ping").result(timeout=120)
    os.kill(pid, signal.SIGSTOP)
    try:
        # the limit is read per job: short for the stopped worker's, long again for its
        # replacement's first (a spawned interpreter can take seconds to start on a busy machine)
        monkeypatch.setenv("CUTEDSL_COMPILE_TIMEOUT_S", "3")
        t0 = time.perf_counter()
        with pytest.raises(RuntimeError, match="TimeoutError"):
            pool.submit("ping").result(timeout=60)
        assert time.perf_counter() - t0 < 30
        monkeypatch.setenv("CUTEDSL_COMPILE_TIMEOUT_S", "120")
        new_pid, _ = pool.submit("ping").result(timeout=180)
        assert new_pid != pid
    finally:
        with __import__("contextlib").suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _fake_entry(root, key, seed=0):
    """An entry of random bytes (the import never links native code: only the load does)."""
    import os

    d = root / disk_cache.dsl_version() / key
    d.mkdir(parents=True)
    for name in disk_cache.ENTRY_FILES:
        (d / name).write_bytes(os.urandom(64) if name != "meta.json" else b'{"key": "%s"}' % key.encode())
    return d


def test_shared_read_only_cache_imports_only_verified_entries(tmp_path, monkeypatch, caplog):
    """A shared cache (opt-in) is sealed with a manifest of file digests; an entry is copied into the
    private cache only when every file matches; a tampered file, a manifest writable by group or
    others (unless its digest is pinned) or a wrong pin is refused with a warning."""
    import logging
    import os
    import stat

    shared, private = tmp_path / "shared", tmp_path / "private"
    shared.mkdir()
    good, bad = _fake_entry(shared, "k_good"), _fake_entry(shared, "k_bad")
    digest = disk_cache.seal(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755 and stat.S_IMODE((good / "kernel.o").stat().st_mode) == 0o644
    (bad / "kernel.o").write_bytes(b"something else")  # changed after sealing
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(private))
    monkeypatch.setenv("CUTEDSL_BACKEND_SHARED_CACHE_DIR", str(shared))
    monkeypatch.delenv("CUTEDSL_BACKEND_SHARED_CACHE_SHA256", raising=False)
    disk = disk_cache.DiskCache()
    assert disk.shared.has("k_good") and not disk.has("k_good") and not disk.shared.has("k_other")
    with caplog.at_level(logging.WARNING, logger="cutedsl_backend.compiler"):
        assert disk.shared.import_entry(disk, "k_good")
        assert not disk.shared.import_entry(disk, "k_bad")
    copied = private / disk_cache.dsl_version() / "k_good"
    for name in disk_cache.ENTRY_FILES:
        assert (copied / name).read_bytes() == (good / name).read_bytes()
    assert not (private / disk_cache.dsl_version() / "k_bad").exists()
    assert any("kernel.o does not match the manifest" in r.getMessage() for r in caplog.records)
    # a manifest others can write is trusted only with its digest pinned
    os.chmod(shared / disk_cache.MANIFEST, 0o666)
    disk = disk_cache.DiskCache()
    assert disk.shared.entries() == {}
    monkeypatch.setenv("CUTEDSL_BACKEND_SHARED_CACHE_SHA256", digest)
    assert f"{disk_cache.dsl_version()}/k_good" in disk_cache.DiskCache().shared.entries()
    monkeypatch.setenv("CUTEDSL_BACKEND_SHARED_CACHE_SHA256", "0" * 64)
    assert disk_cache.DiskCache().shared.entries() == {}


def test_shared_cache_is_off_unless_named(tmp_path, monkeypatch):
    monkeypatch.delenv("CUTEDSL_BACKEND_SHARED_CACHE_DIR", raising=False)
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "private"))
    disk = disk_cache.DiskCache()
    assert disk.shared.entries() == {} and not disk.shared.import_entry(disk, "any")


def test_shared_cache_reads_only_bounded_regular_files(tmp_path, monkeypatch):
    """A writer of the shared directory cannot block or exhaust the process: a FIFO (or symlink)
    in place of an entry file is refused, not read; a malformed manifest lists nothing; an entry
    that cannot be imported leaves has_or_imports False (so its kernel gets compiled)."""
    import json
    import os

    shared = tmp_path / "shared"
    shared.mkdir()
    d = _fake_entry(shared, "k_fifo")
    disk_cache.seal(shared)
    (d / "kernel.o").unlink()
    os.mkfifo(d / "kernel.o")
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "private"))
    monkeypatch.setenv("CUTEDSL_BACKEND_SHARED_CACHE_DIR", str(shared))
    monkeypatch.delenv("CUTEDSL_BACKEND_SHARED_CACHE_SHA256", raising=False)
    disk = disk_cache.DiskCache()
    assert disk.shared.has("k_fifo") and not disk.has_or_imports("k_fifo")  # returns: the FIFO is never opened
    (shared / disk_cache.MANIFEST).write_text(json.dumps({"entries": {f"{disk_cache.dsl_version()}/k": ["x"]}}))
    os.chmod(shared / disk_cache.MANIFEST, 0o644)
    assert disk_cache.DiskCache().shared.entries() == {}


def test_cache_dir_without_a_writable_home(tmp_path, monkeypatch):
    monkeypatch.delenv("CUTEDSL_BACKEND_CACHE_DIR", raising=False)
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    monkeypatch.setenv("HOME", str(home))
    import os

    if os.access(home, os.W_OK):  # root writes anywhere: the fallback is not needed there
        assert disk_cache.cache_dir() == home / ".cache" / "cutedsl_backend"
    else:
        assert disk_cache.cache_dir().name == f"cutedsl_backend-{os.getuid()}"


def test_store_drain_waits_for_compiles_and_the_loads_they_queue():
    """Benchmarks drain the store before timing: a compile that ends queues its load, and drain
    waits for that too; work that does not end within the timeout gives False. The futures stay
    recorded for the callers that will ask for them."""
    import threading
    import time
    from concurrent.futures import Future

    from cutedsl_backend.store import KernelStore

    store = KernelStore()
    compile_, load = Future(), Future()
    store.pending["k"] = compile_

    def background():
        time.sleep(0.1)
        store.loads["k"] = load
        compile_.set_result(None)
        time.sleep(0.1)
        load.set_result("kernel")

    threading.Thread(target=background).start()
    assert store.drain(timeout=10)
    assert load.done() and store.pending["k"] is compile_ and store.loads["k"] is load
    store.pending["stuck"] = Future()
    t0 = time.perf_counter()
    assert not store.drain(timeout=0.2)
    assert time.perf_counter() - t0 < 2
