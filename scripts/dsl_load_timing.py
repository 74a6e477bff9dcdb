"""Where the first kernel load in a process goes (the cold-start cost the Inductor loader hides).

    python3 scripts/dsl_load_timing.py            # compiles two kernels into a temp cache in a
                                                   # subprocess, then times a fresh process's loads
Prints seconds for: torch + CUDA init, the DSL import, its runtime library, the first kernel load
from disk, a second kernel's load, and the first launch of the first kernel.
"""

import json
import os
import subprocess
import sys
import tempfile
import time


def _problem_and_configs():
    from cutedsl_backend.configs import quick_configs
    from cutedsl_backend.problem import make_problem

    return make_problem(512, 512, 256, dtype="bfloat16"), quick_configs("sm90a")[:2]


def prepare() -> None:
    from cutedsl_backend import compiler

    problem, cfgs = _problem_and_configs()
    for cfg in cfgs:
        compiler.get_kernel(problem, cfg)


def measure() -> dict:
    t = {}
    t0 = time.perf_counter()
    import torch

    torch.ones(1, device="cuda")
    t["torch_and_cuda_init_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    import cutlass.cute  # noqa: F401

    t["dsl_import_s"] = time.perf_counter() - t0
    from cutedsl_backend import compiler

    t0 = time.perf_counter()
    compiler._start_runtime()
    t["runtime_library_s"] = time.perf_counter() - t0
    problem, cfgs = _problem_and_configs()
    kernels = []
    for i, cfg in enumerate(cfgs):
        t0 = time.perf_counter()
        kernels.append(compiler.get_kernel(problem, cfg))
        t[f"load_{i + 1}_s"] = time.perf_counter() - t0
        t[f"load_{i + 1}_hit"] = kernels[-1].cache_hit
    import cutedsl_backend as cb

    a = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    out = cb.gemm(a, b, config=cfgs[0])
    torch.cuda.synchronize()
    t["first_launch_s"] = time.perf_counter() - t0
    t["max_abs_err"] = float((out.float() - a.float() @ b.float()).abs().max())
    return t


if __name__ == "__main__":
    if sys.argv[1:] == ["prepare"]:
        prepare()
    elif sys.argv[1:] == ["measure"]:
        print(json.dumps(measure()))
    else:
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, CUTEDSL_BACKEND_CACHE_DIR=d)
            subprocess.run([sys.executable, __file__, "prepare"], env=env, check=True)
            for _ in range(2):
                p = subprocess.run([sys.executable, __file__, "measure"], env=env, check=True,
                                   capture_output=True, text=True)
                print(p.stdout.strip().splitlines()[-1])
