"""Caches across processes: Inductor's FX graph cache hits with our pass and choices installed
(their uuid() is part of its key), choice names carry the build tag (Inductor's autotune cache
never reuses timings of other kernel sources), and worker processes compile kernels."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys, torch
    import torch._inductor.config as config
    from torch._dynamo.utils import counters
    sys.path.insert(0, sys.argv[1])
    from tests.inductor.conftest import _cpu_kernel, as_sm90a, forced_ours
    from cutedsl_backend.inductor import ops as iops
    import cutedsl_backend.inductor as cbi
    for kind in iops.SIGNATURES:
        torch.library.register_kernel(f"cutedsl::{iops.op_name(*kind)}", "cpu", _cpu_kernel(kind))
    cbi.enable(device_arch=as_sm90a)
    config.max_autotune_gemm_backends = "ATEN"
    torch.manual_seed(0)
    x, w, b = torch.randn(128, 64).bfloat16(), torch.randn(96, 64).bfloat16(), torch.randn(96).bfloat16()
    fn = torch.compile(lambda x, w, b: torch.relu(torch.nn.functional.linear(x, w, b)),
                       mode="max-autotune-no-cudagraphs")
    with forced_ours():
        out = fn(x, w, b)
    print(json.dumps({"hit": counters["inductor"]["fxgraph_cache_hit"],
                      "miss": counters["inductor"]["fxgraph_cache_miss"], "sum": float(out.float().sum())}))
""")


def test_second_process_hits_the_fx_graph_cache(tmp_path):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               CUTEDSL_BACKEND_CACHE_DIR=str(tmp_path / "kernels"), PYTHONPATH=str(ROOT))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    assert runs[0]["miss"] >= 1 and runs[0]["hit"] == 0, runs
    assert runs[1]["hit"] >= 1 and runs[1]["miss"] == 0, runs
    assert runs[0]["sum"] == runs[1]["sum"]


def test_choice_names_carry_the_build_tag(inductor, feedback):
    from cutedsl_backend.inductor.state import build_tag

    from .conftest import compile_and_code, rand

    a, b = rand(128, 64), rand(64, 96)
    compile_and_code(lambda a, b: a @ b, a, b)
    names = {n for n, _ in feedback.ours("mm")}
    assert names == {f"cutedsl_gemm_ab_{build_tag()}"}


@pytest.mark.parametrize("fork", ["1", "0"])
def test_worker_process_compiles(tmp_path, monkeypatch, fork):
    """A compile worker (forked from the zygote, or a subprocess of its own; never a
    multiprocessing child) builds a real sm_90a kernel."""
    from cutedsl_backend import compiler
    from cutedsl_backend.configs import quick_configs
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.problem import make_problem

    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUTEDSL_WORKER_FORK", fork)
    pool = compiler.WorkerPool(2)
    problem = make_problem(256, 256, 128, dtype="bfloat16")
    cfg = quick_configs("sm90a")[3]
    spec = EpilogueSpec(activation="relu")
    assert [f.result(timeout=120) for f in [pool.submit(None), pool.submit(None)]] == [None, None]  # warm-up
    parents = {pool.submit("ping").result(timeout=60)[1] for _ in range(4)}
    if fork == "1":  # both workers are children of one zygote, not of this process
        assert len(parents) == 1 and os.getpid() not in parents
    else:
        assert parents == {os.getpid()}
    key, seconds, hit = pool.submit(problem, cfg, spec).result(timeout=300)
    assert key == compiler.resolve(problem, cfg, spec).digest
    assert seconds > 0 and hit in ("", "disk")
    if not compiler.driver_available():  # no disk cache to hand results over: nothing is queued
        assert compiler.precompile_async(problem, cfg, spec) is None


def _wait_gone(pid):
    import time

    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still there")


def test_a_dead_forked_worker_is_replaced_before_its_next_job(monkeypatch):
    """A forked worker killed while idle: the next job runs on a new worker of the same zygote
    (the dead one is seen before the job is sent), and no job fails."""
    import signal

    from cutedsl_backend import compiler

    monkeypatch.setenv("CUTEDSL_WORKER_FORK", "1")
    pool = compiler.WorkerPool(1)
    pid, zygote = pool.submit("ping").result(timeout=120)
    assert zygote != os.getpid(), "the worker was spawned, not forked from a zygote"
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    new_pid, new_zygote = pool.submit("ping").result(timeout=60)
    assert new_pid != pid and new_zygote == zygote


def test_a_dead_zygote_is_restarted(monkeypatch):
    """The zygote and its worker killed: the next job gets a worker of a new zygote."""
    import signal

    from cutedsl_backend import compiler

    monkeypatch.setenv("CUTEDSL_WORKER_FORK", "1")
    pool = compiler.WorkerPool(1)
    pid, zygote = pool.submit("ping").result(timeout=120)
    assert zygote != os.getpid(), "the worker was spawned, not forked from a zygote"
    os.kill(zygote, signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)
    pool._zygote[0].wait(timeout=30)
    _wait_gone(pid)
    new_pid, parent = pool.submit("ping").result(timeout=120)
    assert parent not in (zygote, os.getpid()) and new_pid != pid
    assert pool.submit("ping").result(timeout=60) == (new_pid, parent)


def _in_the_zygote(tmp_path, monkeypatch, code: str) -> None:
    """Run ``code`` (indented statements) at start-up of the zygote only (a sitecustomize on the
    workers' import path), with forked workers on."""
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nif '--zygote' in sys.argv:\n{code}")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])  # the workers' PYTHONPATH
    monkeypatch.setenv("CUTEDSL_WORKER_FORK", "1")


def test_a_zygote_that_cannot_fork_leaves_spawned_workers_and_no_failed_job(tmp_path, monkeypatch):
    """A zygote whose DSL import left a second thread refuses to fork: every job still runs, on
    spawned workers (children of this process), and no second zygote is started."""
    from cutedsl_backend import compiler

    _in_the_zygote(tmp_path, monkeypatch,
                   "    import threading, time\n"
                   "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n")
    pool = compiler.WorkerPool(4)
    assert [f.result(timeout=120) for f in [pool.submit(None) for _ in range(4)]] == [None] * 4
    parents = {f.result(timeout=60)[1] for f in [pool.submit("ping") for _ in range(8)]}
    assert parents == {os.getpid()} and not pool._fork and pool._zygote is None


def test_the_zygote_forks_where_numpy_starts_blas_threads(tmp_path, monkeypatch):
    """numpy's OpenBLAS starts a thread pool when loaded (the DSL imports numpy where installed):
    the workers' environment gives it one thread, so a zygote that imports numpy stays
    single-threaded and forks (on the H200 host, 16 threads made it refuse)."""
    pytest.importorskip("numpy", reason="numpy not installed: no BLAS thread pool to keep out of the zygote")
    count = "import os, numpy; print(len(os.listdir('/proc/self/task')))"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    threads = int(subprocess.run([sys.executable, "-c", count], capture_output=True, text=True, env=env,
                                 check=True).stdout)
    if threads < 2:
        pytest.skip("numpy's BLAS starts no thread pool on this machine (one core?)")

    from cutedsl_backend import compiler

    _in_the_zygote(tmp_path, monkeypatch, "    import numpy\n")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    pool = compiler.WorkerPool(2)
    parents = {f.result(timeout=120)[1] for f in [pool.submit("ping") for _ in range(4)]}
    assert len(parents) == 1 and os.getpid() not in parents and pool._fork


def test_a_fork_of_this_process_starts_without_our_pool(monkeypatch):
    """A child forked from a process with a worker pool has no pool (its feeding threads are not
    in the child) and none of its sockets."""
    import warnings

    from cutedsl_backend import compiler

    monkeypatch.setenv("CUTEDSL_WORKER_FORK", "1")
    monkeypatch.setattr(compiler.STORE, "pool", compiler.WorkerPool(1))
    assert compiler.STORE.pool.submit("ping").result(timeout=120)
    sockets = list(compiler.STORE.pool._sockets)
    assert sockets
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a multi-threaded process
        pid = os.fork()
    if pid == 0:
        ok = compiler.STORE.pool is None and all(s.fileno() == -1 for s in sockets) and not compiler.STORE.pending
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert compiler.STORE.pool is not None and all(s.fileno() != -1 for s in sockets)  # the parent's untouched


# ---------------------------------------------------------------- the background loader
# Loads need a CUDA driver, so these tests stand in for the disk load and the worker compile: they
# check the hand-over between the loader thread and get_kernel, which is what a GPU run relies on.

@pytest.fixture
def loader(monkeypatch):
    """compiler with fresh caches, a driver 'present' and a counting stand-in for the disk load."""
    import threading
    from concurrent.futures import Future

    from cutedsl_backend import background, compiler, disk_cache
    from cutedsl_backend.configs import quick_configs
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.problem import make_problem

    for name in ("memory", "fast", "pending", "loads"):
        monkeypatch.setattr(compiler.STORE, name, {})
    monkeypatch.setattr(compiler.STORE, "stats", dict.fromkeys(compiler.STORE.stats, 0))
    monkeypatch.setattr(disk_cache, "driver_available", lambda: True)
    loads = []

    def fake_load(problem, which):
        loads.append(threading.current_thread().name)
        return ("kernel", which.digest)

    monkeypatch.setattr(compiler.STORE.disk, "load", fake_load)
    problem = make_problem(256, 256, 128, dtype="bfloat16")
    cfg, spec = quick_configs("sm90a")[3], EpilogueSpec()
    which = compiler.resolve(problem, cfg, spec)

    class Env:
        pass

    env = Env()
    env.compiler, env.bg, env.problem, env.which, env.spec, env.loads, env.Future = (
        compiler, background, problem, which, spec, loads, Future)
    env.cfg, env.key, env.disk_cache = which.config, which.digest, disk_cache
    yield env
    # the loader thread outlives the test: let what the test queued finish under its stand-ins
    background._loader().submit(lambda: None).result(timeout=60)


def test_loader_loads_a_kernel_when_its_worker_finishes(loader):
    c = loader.compiler
    compiling = loader.Future()
    c.STORE.pending[loader.key] = compiling
    load = c.preload_async(loader.problem, loader.which)
    assert load is not None and not load.done() and loader.loads == []  # waits for the worker
    compiling.set_result((loader.key, 1.0, ""))
    assert load.result(timeout=30) == ("kernel", loader.key)
    assert loader.loads == ["cutedsl-load_0"] and c.STORE.stats["preloaded"] == 1
    # get_kernel takes the loaded kernel: no second load, no wait for the (finished) worker
    assert c.get_kernel(loader.problem, loader.cfg, loader.spec) == ("kernel", loader.key)
    assert loader.loads == ["cutedsl-load_0"] and c.STORE.stats["loaded"] == 0
    assert loader.key not in c.STORE.pending


def test_loader_leaves_a_failed_worker_compile_to_get_kernel(loader, monkeypatch, caplog):
    c = loader.compiler
    compiling = loader.Future()
    c.STORE.pending[loader.key] = compiling
    load = c.preload_async(loader.problem, loader.which)
    compiling.set_exception(RuntimeError("worker died"))
    assert load.result(timeout=30) is None and loader.loads == []
    monkeypatch.setattr(c.STORE.disk, "load", lambda *a: None)  # the worker wrote nothing
    monkeypatch.setattr(c, "compile_kernel", lambda problem, which: ("compiled here", which.digest))
    monkeypatch.setattr(c.STORE.disk, "store", lambda cg: None)
    with caplog.at_level("WARNING", logger="cutedsl_backend.compiler"):
        assert c.get_kernel(loader.problem, loader.cfg, loader.spec) == ("compiled here", loader.key)
    assert "worker died" in caplog.text and c.STORE.stats["compiled"] == 1


def test_get_kernel_does_not_queue_behind_other_loads(loader):
    """A load still queued (the loader busy with others) is taken back and done by the caller."""
    import threading

    c = loader.compiler
    release = threading.Event()
    loader.bg._loader().submit(release.wait, 30)  # the loader is busy
    try:
        load = c.preload_async(loader.problem, loader.which)
        assert not load.running()
        assert c.get_kernel(loader.problem, loader.cfg, loader.spec) == ("kernel", loader.key)
        assert load.cancelled() and loader.loads == [threading.current_thread().name]
    finally:
        release.set()


def test_no_loader_without_a_driver(loader, monkeypatch):
    """Without a CUDA driver nothing can be loaded: no loader thread, no runtime start."""
    c = loader.compiler
    monkeypatch.setattr(loader.disk_cache, "driver_available", lambda: False)
    assert c.preload_async(loader.problem, loader.which) is None
    assert c.warm_runtime_async() is None and c.STORE.loads == {}


def test_runtime_starts_at_the_first_kernel_once(loader, monkeypatch, tmp_path):
    """The DSL's start-up in the compiling process begins when a kernel is first offered (here: one
    found on disk), once; not at enable()."""
    c = loader.compiler
    starts = []
    monkeypatch.setattr(loader.bg, "_start_runtime", lambda: starts.append(1))
    monkeypatch.setattr(c.STORE, "runtime_start", None)
    monkeypatch.setattr(c.STORE.disk, "has", lambda key: True)
    assert c.precompile_async(loader.problem, loader.cfg, loader.spec) is None  # on disk: no compile
    c.STORE.loads[loader.key].result(timeout=30)
    c.warm_runtime_async().result(timeout=30)
    c.precompile_async(loader.problem, None, loader.spec)  # another kernel: no second start-up
    for load in list(c.STORE.loads.values()):  # its load finishes here, not in the next test
        load.result(timeout=30)
    assert starts == [1] and loader.loads[0] == "cutedsl-load_0"


def test_forgotten_loads_do_not_fill_the_cache(loader):
    """A load queued before forget_background_work (a benchmark starting its next variant) finishes
    without putting its kernel in the fresh memory cache."""
    c = loader.compiler
    compiling = loader.Future()
    c.STORE.pending[loader.key] = compiling
    load = c.preload_async(loader.problem, loader.which)
    c.forget_background_work()
    compiling.set_result((loader.key, 1.0, ""))
    assert load.result(timeout=30) is None and loader.key not in c.STORE.memory and loader.loads == []
