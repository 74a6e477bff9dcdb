"""The compile worker pool: worker processes fed pickled (problem, config, epilogue) jobs (one
feeding thread each), forked from one zygote that imported the DSL once (compile_worker) or
spawned; a worker that stops answering is ended after $CUTEDSL_COMPILE_TIMEOUT_S. cute.compile
is not thread-safe, so parallel compiles need processes."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import subprocess
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Optional

log = logging.getLogger("cutedsl_backend.compiler")


def precompile_workers() -> int:
    """$CUTEDSL_PRECOMPILE_WORKERS, else half the cores (at most 8); 0 turns worker compiles off."""
    env = os.environ.get("CUTEDSL_PRECOMPILE_WORKERS")
    if env is not None:
        return max(0, int(env))
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def fork_workers_enabled() -> bool:
    """Workers forked from one zygote process that imported the DSL once (see compile_worker),
    unless $CUTEDSL_WORKER_FORK is 0 or the platform lacks fork / fd passing: then each worker is
    a fresh subprocess with its own DSL import."""
    import socket

    return (os.environ.get("CUTEDSL_WORKER_FORK", "1") != "0" and hasattr(os, "fork")
            and hasattr(socket, "send_fds"))


# Workers only compile: math libraries that start a thread pool at load get one thread, so the
# zygote stays single-threaded and can fork (the DSL imports numpy where installed, whose OpenBLAS
# starts one worker per core but one: 16 threads in all on the 16-core H200 host).
_ONE_THREAD_LIBS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _close_quietly(*files) -> None:
    for f in files:
        try:
            f.close()
        except OSError:
            pass


@dataclass
class _Worker:
    """One worker process as a feeding thread sees it."""

    jobs: Any  # binary stream the pickled jobs go to
    replies: Any  # binary stream the pickled replies come from
    forked: bool
    alive: Any  # () -> bool
    close: Any  # () -> None
    kill: Any = None  # () -> None: ends the process (a worker that stopped answering)


class WorkerPool:
    """Worker processes fed pickled (problem, config, epilogue) jobs, one feeding thread each."""

    def __init__(self, workers: int):
        import queue

        self.jobs: "queue.Queue" = queue.Queue()
        self._zygote = None  # (Popen, control socket) once started; see _fork_worker
        self._zygote_lock = threading.Lock()
        self._fork = fork_workers_enabled()  # off for good once the zygote cannot serve (see _fork_worker)
        self._sockets: set = set()  # ours, closed in a forked child of this process (_after_fork_in_child)
        self.threads = [threading.Thread(target=self._serve, name=f"cutedsl-compile-{i}", daemon=True)
                        for i in range(workers)]
        for t in self.threads:
            t.start()

    def submit(self, *job) -> Future:
        fut: Future = Future()
        self.jobs.put((fut, job))
        return fut

    @staticmethod
    def _start(*args: str, **popen) -> subprocess.Popen:
        """``python -m cutedsl_backend.compile_worker *args``, with this process's import path."""
        import sys

        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **_ONE_THREAD_LIBS)
        return subprocess.Popen([sys.executable, "-m", "cutedsl_backend.compile_worker", *args], env=env, **popen)

    def _spawn_worker(self) -> _Worker:
        """A fresh worker subprocess."""
        proc = self._start(stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return _Worker(proc.stdin, proc.stdout, False, lambda: proc.poll() is None,
                       lambda: _close_quietly(proc.stdin, proc.stdout), proc.kill)

    def _start_zygote(self):
        """Start the zygote and wait for its word that it can fork (sent once its DSL import is
        done and it is single-threaded); None, and forked workers off for good, where it cannot."""
        import socket

        from .compile_worker import ZYGOTE_READY

        ours, theirs = socket.socketpair()
        proc = self._start("--zygote", str(theirs.fileno()), pass_fds=(theirs.fileno(),),
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        theirs.close()
        try:
            word = ours.recv(len(ZYGOTE_READY))
        except OSError:
            word = b""
        if word != ZYGOTE_READY:
            ours.close()
            self._fork = False
            log.warning("cutedsl: the compile workers' zygote cannot fork (exit status %s); spawning workers",
                        proc.wait())
            return None
        self._sockets.add(ours)
        return proc, ours

    def _fork_worker(self) -> _Worker:
        """A worker forked from the zygote (started on first use, restarted if it died)."""
        import select
        import socket

        with self._zygote_lock:
            if self._fork and (self._zygote is None or self._zygote[0].poll() is not None):
                if self._zygote is not None:
                    self._sockets.discard(self._zygote[1])
                    self._zygote[1].close()
                self._zygote = self._start_zygote()
            if not self._fork:
                raise OSError("forked compile workers are off")
            control = self._zygote[1]
            conn, theirs = socket.socketpair()
            try:
                socket.send_fds(control, [b"w"], [theirs.fileno()])
            finally:
                theirs.close()
            self._sockets.add(conn)

        def alive() -> bool:  # an idle worker never writes: a readable socket is its end of stream
            return not select.select([conn], [], [], 0)[0]

        jobs, replies = conn.makefile("wb"), conn.makefile("rb")

        def close():
            self._sockets.discard(conn)
            _close_quietly(jobs, replies, conn)  # the socket closes with its last file

        worker = _Worker(jobs, replies, True, alive, close)
        # its pid (a "ping" job), so a worker that stops answering can be ended
        import pickle

        pickle.dump(("ping",), jobs)
        jobs.flush()
        if not _readable(replies, 60.0):
            close()
            raise OSError("a forked compile worker did not answer its first ping")
        ok, (pid, _ppid) = pickle.load(replies)
        worker.kill = functools.partial(_kill_quietly, pid)
        return worker

    def _zygote_gone(self) -> bool:
        """Whether the zygote has exited (waiting a moment: a worker's death may precede its own)."""
        with self._zygote_lock:
            zygote = self._zygote
        if zygote is None:
            return not self._fork
        try:
            zygote[0].wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _new_worker(self) -> _Worker:
        if self._fork:
            try:
                return self._fork_worker()
            except OSError as e:  # no zygote: a worker of its own, as without fork
                log.info("cutedsl: forked compile worker unavailable (%s); spawning one", e)
        return self._spawn_worker()

    def _serve(self) -> None:
        import pickle

        worker: Optional[_Worker] = None
        while True:
            fut, job = self.jobs.get()
            if not fut.set_running_or_notify_cancel():
                continue
            for attempt in range(2):
                try:
                    if worker is None or not worker.alive():
                        if worker is not None:
                            worker.close()
                        worker = self._new_worker()
                    pickle.dump(job, worker.jobs)
                    worker.jobs.flush()
                    timeout = compile_timeout_s()
                    if not _readable(worker.replies, timeout):
                        # stopped or hung: end it, fail this job (the caller compiles in its own
                        # process), and start a new worker for the next one
                        worker.kill()
                        raise TimeoutError(f"no reply within {timeout:g} s ($CUTEDSL_COMPILE_TIMEOUT_S)")
                    ok, value = pickle.load(worker.replies)
                    break
                except Exception as e:  # the worker died: the job fails, the next one starts a new worker
                    forked = worker is not None and worker.forked
                    if worker is not None:
                        worker.close()
                    worker = None
                    if attempt == 0 and forked and self._zygote_gone():
                        # the zygote died with it: this job again, on a worker of a new zygote
                        log.warning("cutedsl: the compile workers' zygote exited; starting another")
                        continue
                    ok, value = False, RuntimeError(f"compile worker failed: {type(e).__name__}: {e}")
                    break
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value if isinstance(value, BaseException) else RuntimeError(str(value)))


def compile_timeout_s() -> float:
    """How long a compile worker may take to answer one job ($CUTEDSL_COMPILE_TIMEOUT_S, default
    300; a compile takes seconds) before it is ended and the job fails."""
    return float(os.environ.get("CUTEDSL_COMPILE_TIMEOUT_S", "300"))


def _readable(stream, timeout: float) -> bool:
    """Whether ``stream`` (a worker's replies) has data (or its end) within ``timeout`` seconds.
    Its read buffer is empty here: one reply is in flight per job, and it was read whole."""
    import select

    return bool(select.select([stream], [], [], timeout)[0])


def _kill_quietly(pid: int) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
