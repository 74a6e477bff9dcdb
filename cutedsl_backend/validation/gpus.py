"""Spreading GPU test workers over the GPUs of one host (pure Python: no CUDA initialised).

pytest-xdist workers (``gw0``, ``gw1``, ...) are pinned one per GPU, round robin, by setting
``CUDA_VISIBLE_DEVICES`` in the worker before anything initialises CUDA (tests/conftest.py does
it at import); work stealing between the workers balances them. A host with one GPU (or none)
runs unchanged. Each worker then sees its GPU as device 0; kernel disk caches are safe to share
(private directory, one compile per key across processes: DiskCache.lock).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Optional


def visible_gpus(env=None) -> list:
    """The GPU ids this process may use: $CUTEDSL_GPU_COUNT (a simulated count: "0".."N-1"),
    else the entries of $CUDA_VISIBLE_DEVICES when set, else one id per GPU ``nvidia-smi -L``
    lists (none without it)."""
    env = os.environ if env is None else env
    if env.get("CUTEDSL_GPU_COUNT"):
        return [str(i) for i in range(int(env["CUTEDSL_GPU_COUNT"]))]
    if env.get("CUDA_VISIBLE_DEVICES") is not None:
        return [x.strip() for x in env["CUDA_VISIBLE_DEVICES"].split(",") if x.strip() and x.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def worker_gpu(worker_id: Optional[str], gpus: list) -> Optional[str]:
    """The GPU of xdist worker ``worker_id`` ("gw<i>"): gpus[i mod len(gpus)]; None when there is
    nothing to choose (no worker id, one GPU or none)."""
    if not worker_id or len(gpus) < 2:
        return None
    m = re.fullmatch(r"gw(\d+)", worker_id)
    return gpus[int(m.group(1)) % len(gpus)] if m else None


def pin_xdist_worker(env=None) -> Optional[str]:
    """Pin this xdist worker to its GPU (sets CUDA_VISIBLE_DEVICES; call before CUDA initialises).
    Returns the GPU id, or None where nothing was pinned."""
    env = os.environ if env is None else env
    gpu = worker_gpu(env.get("PYTEST_XDIST_WORKER"), visible_gpus(env))
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


def xdist_workers(default: int, env=None) -> int:
    """Workers for a GPU pytest run: one per GPU on a multi-GPU host, else ``default``."""
    gpus = visible_gpus(env)
    return len(gpus) if len(gpus) > 1 else default


def pinned_gpu(hold_s: float = 0.0) -> Optional[str]:
    """The GPU this process is pinned to ($CUDA_VISIBLE_DEVICES), or None, after ``hold_s``
    seconds (a stand-in for a GPU cell when the sharding is tested without GPUs)."""
    if hold_s:
        import time

        time.sleep(hold_s)
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def _pin_pool_worker(gpu_ids) -> None:
    # each worker takes one id before anything in it initialises CUDA
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu_ids.get()


def run_sharded(fn: Callable, items: list, gpus: list, progress: Optional[Callable] = None) -> list:
    """``[fn(x) for x in items]`` spread over ``gpus``: one spawned process per GPU, pinned to it
    before CUDA initialises, each taking the next item when it finishes one (work stealing);
    results in item order. With one GPU or none, in this process. ``fn`` must be picklable (a
    module-level function); ``progress(done, total)`` is called as results arrive."""
    if len(gpus) < 2 or len(items) < 2:
        out = []
        for i, x in enumerate(items, 1):
            out.append(fn(x))
            if progress:
                progress(i, len(items))
        return out
    ctx = mp.get_context("spawn")
    gpu_ids = ctx.Queue()
    for g in gpus:
        gpu_ids.put(g)
    out = []
    with ProcessPoolExecutor(len(gpus), mp_context=ctx, initializer=_pin_pool_worker, initargs=(gpu_ids,)) as ex:
        for i, r in enumerate(ex.map(fn, items, chunksize=1), 1):
            out.append(r)
            if progress:
                progress(i, len(items))
    return out
