"""Host cost per call of our eager API and of our Inductor op, by epilogue, with a profile.

    python3 scripts/host_path_profile.py
Prints, per variant (4096^3 bf16): whether the direct launch path is on (CompiledGemm._fast), the
host microseconds per call, then cProfile's top entries for 300 calls of bias+residual through the
Inductor op (torch.ops.cutedsl.gemm_ab_bias_res).
"""

import cProfile
import pstats

import torch

import cutedsl_backend as cb
from cutedsl_backend import ops
from cutedsl_backend.inductor import ops as iops
from cutedsl_backend.validation.bench import host_us_per_call

CFG = "sm90a_cooperative_128x256xauto_c2x1_sauto_rm8"


def host_us(fn, calls=300):
    fn()  # warm: the first call of a geometry plans it
    return host_us_per_call(fn, calls)


def main():
    n = 4096
    x = torch.randn(n, n, device="cuda").bfloat16()
    b = torch.randn(n, n, device="cuda").bfloat16().t()
    bias = torch.randn(n, device="cuda").bfloat16()
    res = torch.randn(n, n, device="cuda").bfloat16()
    variants = {"plain": {}, "bias": dict(bias=bias), "residual": dict(residual=res),
                "bias+residual": dict(bias=bias, residual=res), "bias+relu": dict(bias=bias, activation="relu")}
    for name, kw in variants.items():
        us = host_us(lambda: cb.gemm(x, b, **kw))
        fast = [p.kernel._fast for p in ops._TLS.plans.values()][-1]
        print(f"eager {name:14s} host {us:7.1f} us/call  direct launch: {fast}", flush=True)
    op = iops.overload(False, True, True)
    print(f"op bias+residual      host {host_us(lambda: op(x, b, bias, res, kernel_config=CFG)):7.1f} us/call")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        op(x, b, bias, res, kernel_config=CFG)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)


if __name__ == "__main__":
    main()
