"""Compile workers (started by workers.WorkerPool), in one of two ways:

- ``python -m cutedsl_backend.compile_worker``: one worker; jobs on stdin, replies on stdout.
- ``python -m cutedsl_backend.compile_worker --zygote FD``: imports the DSL once, then forks one
  worker per request received on the AF_UNIX socket ``FD``; each request carries the worker's
  own socket (SCM_RIGHTS), on which it takes jobs and replies. N workers then cost one DSL
  import instead of N at once: the import is seconds of CPU each, paid while the compiling
  process traces its graph (a fork of the imported, single-threaded zygote costs milliseconds).

A job is a pickled ``(problem, config, epilogue, cache dir)`` to compile into the disk cache,
``(None,)`` to just finish starting, or ``("ping",)`` (answered with the worker's pid and parent
pid). One pickled ``(ok, result or exception)`` is written per job; anything the compiler prints
goes to stderr.
"""

from __future__ import annotations

import os
import pickle
import sys

# the zygote's exit status when forking would not be safe (the pool then spawns its workers), and
# its word to the pool, once its DSL import is done, that it can fork
ZYGOTE_CANNOT_FORK = 3
ZYGOTE_READY = b"r"


def _serve(jobs, replies) -> None:
    """Answer jobs from the binary stream ``jobs`` on ``replies`` until ``jobs`` ends."""
    from .background import worker_compile

    while True:
        try:
            job = pickle.load(jobs)
        except EOFError:
            return
        reply: tuple
        try:
            if job[0] is None:
                reply = (True, None)
            elif job[0] == "ping":
                reply = (True, (os.getpid(), os.getppid()))
            else:
                reply = (True, worker_compile(*job))
        except Exception as e:
            reply = (False, e)
        pickle.dump(reply, replies)
        replies.flush()


def _thread_names() -> list:
    """This process's threads by name (one entry where /proc is missing)."""
    if not os.path.isdir("/proc/self/task"):
        return ["?"]
    names = []
    for task in sorted(os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


def _zygote(control_fd: int) -> None:
    """Fork a worker for each socket received on ``control_fd``; return when the pool's end closes."""
    import signal
    import socket

    threads = _thread_names()
    if len(threads) > 1:  # a fork would copy one thread of several (e.g. a lock held by another)
        print(f"cutedsl compile zygote: {len(threads)} threads after the DSL import ({', '.join(threads)}); "
              "not forking", file=sys.stderr)
        sys.exit(ZYGOTE_CANNOT_FORK)
    control = socket.socket(fileno=control_fd)
    control.sendall(ZYGOTE_READY)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the workers
    while True:
        try:
            _msg, fds, _flags, _addr = socket.recv_fds(control, 1, 1)
        except OSError:
            return
        if not fds:  # end of stream: the compiling process is gone
            return
        if os.fork() == 0:
            code = 0
            try:
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a compile may wait on its own children
                os.set_inheritable(fds[0], False)  # not into whatever a compile may exec
                conn = socket.socket(fileno=fds[0])
                _serve(conn.makefile("rb"), conn.makefile("wb"))
            except BaseException:  # noqa: BLE001 - a worker never returns into the zygote's loop
                code = 1
            finally:
                os._exit(code)
        os.close(fds[0])


def main(argv: list) -> None:
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # keep the result channel clean of prints
    import cutlass.cute  # noqa: F401  (the DSL import, paid once per worker, or once per zygote)

    from . import compiler  # noqa: F401  (imported before any fork)

    if argv[:1] == ["--zygote"]:
        _zygote(int(argv[1]))
    else:
        _serve(sys.stdin.buffer, results)


if __name__ == "__main__":
    main(sys.argv[1:])
