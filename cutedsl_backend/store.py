"""This process's kernels and the state of getting them, in one object (``STORE``)."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Optional

from .disk_cache import DiskCache
from .workers import WorkerPool

log = logging.getLogger("cutedsl_backend.compiler")


class KernelStore:
    """This process's kernel-lifecycle state:

    - ``memory``: cache key -> CompiledGemm; ``fast``: (problem, requested config, epilogue) ->
      CompiledGemm (skips config ranking and key hashing per call); ``disk``: the disk cache;
    - ``stats``: where the time of kernel fetches went (reported by bench-inductor): loads from
      disk, compiles here, seconds in get_kernel (a memory hit is not counted), of which waiting
      for a worker; eager first calls of a geometry (plan.py) add their count and seconds; loads
      by the background loader count in "preloaded" / "preload_s" (off the caller's path), and
      "preload_wait_s" is the time get_kernel waited for one;
    - ``events``: (time.perf_counter(), event, cache key or "") of the compile/load pipeline, for
      bench-inductor's timeline;
    - ``pool`` (the compile workers, made on first use) and ``pending``: cache key -> a worker's
      compile of it (get_kernel waits on it instead of compiling again);
    - ``loader`` (one thread, made on first use), ``loads``: cache key -> the loader's load of it,
      and ``generation`` (bumped by forget_background_work: older loads do not fill the caches);
    - ``runtime_start``: the DSL runtime's start on the loader thread."""

    STAT_KEYS = ("loaded", "compiled", "get_kernel_s", "waited_s", "first_calls", "first_call_s", "preloaded",
                 "preload_s", "preload_wait_s")

    def __init__(self):
        self.memory: dict = {}
        self.fast: dict = {}
        self.disk = DiskCache()
        self.stats: dict = dict.fromkeys(self.STAT_KEYS, 0)
        self.events: list = []
        self.pool: Optional[WorkerPool] = None
        self.pool_lock = threading.Lock()
        self.pending: dict = {}
        self.loader = None
        self.loads: dict = {}
        self.generation = 0
        self.runtime_start: Optional[Future] = None

    def event(self, what: str, key: str = "") -> None:
        if len(self.events) < 10000:
            self.events.append((time.perf_counter(), what, key))

    def forget_background_work(self) -> None:
        """Drop the memory caches and the pending compiles and loads (benchmarks start each
        variant afresh): work still under way finishes without filling the caches again."""
        self.generation += 1
        self.memory.clear()
        self.fast.clear()
        self.pending.clear()
        self.loads.clear()

    def drain(self, timeout: float = 300.0) -> bool:
        """Wait until no compile or background load is under way (they stay recorded for the
        callers that will ask for them); True if all ended within ``timeout`` seconds. Benchmarks
        call it before timing: that work competes for the CPU and the GIL with the timed calls."""
        import concurrent.futures

        deadline = time.perf_counter() + timeout
        while True:
            busy = [f for f in (*self.pending.values(), *self.loads.values()) if not f.done()]
            if not busy:
                return True
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            # a compile that ends queues its load: look again after every wait
            concurrent.futures.wait(busy, timeout=min(left, 1.0), return_when=concurrent.futures.FIRST_COMPLETED)

    def wait_preload(self, key: str):
        """The loader's kernel for ``key``: taken from a finished load, waited for if the load is
        under way, or None (no load, a failed one, or one not started yet: the caller then fetches
        the kernel itself rather than queueing behind other loads)."""
        load = self.loads.pop(key, None)
        if load is None or load.cancel():
            return None
        t0 = time.perf_counter()
        try:
            cg = load.result()
        except Exception as e:
            log.warning("background load of %s failed (%s: %s)", key, type(e).__name__, e)
            cg = None
        self.stats["preload_wait_s"] += time.perf_counter() - t0
        return self.memory.get(key) if cg is not None else None

    def wait_pending(self, key: str) -> bool:
        """Wait for a worker compiling ``key``; True if it finished without error."""
        fut = self.pending.pop(key, None)
        if fut is None:
            return False
        self.event("caller waits for worker", key)
        try:
            fut.result()
            self.event("caller's wait ended", key)
            return True
        except Exception as e:  # the caller compiles in this process instead
            log.warning("worker compile of %s failed (%s: %s); compiling here", key, type(e).__name__, e)
            return False


STORE = KernelStore()
