"""A compile worker: ``python -m cutedsl_backend.compile_worker`` (started by compiler._WorkerPool).

Reads pickled jobs on stdin, one at a time: ``(problem, config, epilogue)`` to compile into the
disk cache, or ``(None,)`` to just finish starting (the DSL import). Writes one pickled
``(ok, result or exception)`` per job on stdout; anything else the compiler prints goes to stderr.
"""

from __future__ import annotations

import os
import pickle
import sys


def main() -> None:
    results = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # keep the result channel clean of prints
    import cutlass.cute  # noqa: F401  (the DSL import, paid once per worker)

    from .compiler import worker_compile

    while True:
        try:
            job = pickle.load(sys.stdin.buffer)
        except EOFError:
            return
        reply: tuple
        try:
            reply = (True, None if job[0] is None else worker_compile(*job))
        except Exception as e:
            reply = (False, e)
        pickle.dump(reply, results)
        results.flush()


if __name__ == "__main__":
    main()
