"""How starting the compile worker pool slows the compiling process, forked against spawned.

Times a CPU-bound loop (a stand-in for Dynamo's trace) alone, then while a pool of eight
workers starts, and how long until all eight are ready. Run it with CUTEDSL_WORKER_FORK=1 and =0:
    CUTEDSL_WORKER_FORK=1 python3 scripts/worker_pool_contention.py
"""

import os
import time

from cutedsl_backend import compiler


def cpu_work() -> float:
    t = time.perf_counter()
    x = 0
    for i in range(6_000_000):
        x += i * i % 7
    return time.perf_counter() - t


def main() -> None:
    alone = cpu_work()
    t0 = time.perf_counter()
    pool = compiler._WorkerPool(8)
    ready = [pool.submit(None) for _ in range(8)]
    beside = cpu_work()
    for f in ready:
        f.result(timeout=300)
    print(f"CUTEDSL_WORKER_FORK={os.environ.get('CUTEDSL_WORKER_FORK', '1')}: CPU work alone {alone:.2f} s, "
          f"beside the pool's start {beside:.2f} s; 8 workers ready after {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
