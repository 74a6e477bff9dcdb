"""Interleaved A/B timing of epilogue configs on an H100/H200: each round times every
(variant, config) once, CUDA-graph medians, so clock drift over the run hits all of them alike.
Usage: python3 scripts/epilogue_ab.py [rounds] [config names ...]"""

import statistics
import sys

import torch

import cutedsl_backend as cb
from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.validation.bench import _graph_ms

m, n, k = 4096, 14336, 4096
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
names = sys.argv[2:] or ["sm90a_cooperative_128x256xauto_c2x1_sauto_rn8", "sm90a_pingpong_128x128xauto_c2x1_sauto_rn8"]
cfgs = [GemmConfig.from_name(x) for x in names]
a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
res = torch.randn(m, n, device="cuda").to(torch.bfloat16)
out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
cases = {"cublas bare": lambda: torch.matmul(a, b), "cublas addmm(res)": lambda: torch.addmm(res, a, b),
         "eager mm + res": lambda: torch.matmul(a, b) + res}
for c in cfgs:
    cases[f"ours bare {c.name}"] = lambda c=c: cb.gemm(a, b, config=c, out=out)
    cases[f"ours residual {c.name}"] = lambda c=c: cb.gemm(a, b, residual=res, config=c, out=out)
cases["ours residual default"] = lambda: cb.gemm(a, b, residual=res, out=out)
times = {name: [] for name in cases}
for _ in range(rounds):
    for name, fn in cases.items():
        times[name].append(_graph_ms(fn))
base = statistics.median(times[f"ours bare {cfgs[0].name}"])
for name, ts in times.items():
    t = statistics.median(ts)
    print(f"{name:70s} {t:.4f} ms  {2 * m * n * k / t / 1e9:7.1f} TFLOP/s  vs our bare {t / base - 1:+.1%}")
