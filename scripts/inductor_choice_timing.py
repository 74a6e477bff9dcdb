"""Why can our fused kernel measure slower inside Inductor's autotune than in our own benchmarks?
Times the attention out-projection GEMM (4096^3 bf16, bias + residual) four ways for each of: our
op as Inductor calls it (torch.ops.cutedsl.gemm_ab_bias_res with a kernel_config), our eager API,
and the unfused torch ops - CUDA-graph device time, Inductor's benchmarker.benchmark_gpu, host time
per call, and benchmark_gpu while another Python thread holds the GIL - then the GPU clock ramp
after idling (which candidate is timed first). From the repository root on a GPU machine:
    python3 scripts/inductor_choice_timing.py
"""

import inspect
import json
import time

import torch
from torch._inductor import select_algorithm as sa
from torch._inductor.runtime.benchmarking import benchmarker

import cutedsl_backend as cb
from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.inductor import ops as iops
from cutedsl_backend.validation.bench import _graph_ms, gil_hog, host_us_per_call

CFG = "sm90a_cooperative_128x256xauto_c2x1_sauto_rm8"


def with_gil_hog(fn):
    with gil_hog(2000):
        return fn()


def main():
    out = {"torch": torch.__version__,
           "extern_benchmark_honors_cudagraph_flag": "_benchmark_with_cudagraphs" in inspect.getsource(
               sa.ExternKernelCaller.benchmark)}
    m = n = k = 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    b, bias = w.t(), torch.randn(n, device="cuda", generator=g).bfloat16()
    res = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    op = iops.overload(False, True, True)
    cfg = GemmConfig.from_name(CFG)
    fns = {"op (as Inductor calls it)": lambda: op(x, b, bias, res, kernel_config=CFG),
           "eager cb.gemm": lambda: cb.gemm(x, b, bias=bias, residual=res, config=cfg),
           "unfused addmm + add": lambda: torch.addmm(bias, x, b) + res}
    for name, fn in fns.items():
        fn()
        row = {"graph_ms": _graph_ms(fn), "benchmark_gpu_ms": benchmarker.benchmark_gpu(fn),
               "host_us_per_call": host_us_per_call(fn),
               "benchmark_gpu_ms_gil_hog": with_gil_hog(lambda: benchmarker.benchmark_gpu(fn)),
               "host_us_per_call_gil_hog": with_gil_hog(lambda: host_us_per_call(fn))}
        out[name] = row
        print(name, json.dumps({k: round(v, 4) for k, v in row.items()}), flush=True)
    ours, ref = fns["op (as Inductor calls it)"], fns["unfused addmm + add"]
    for order in (("ours", "ours", "ours", "ref"), ("ref", "ours", "ours", "ours")):
        time.sleep(8)  # the GPU idles, as during a compile
        times = [benchmarker.benchmark_gpu(ours if w == "ours" else ref) for w in order]
        out["after idle " + ",".join(order)] = times
        print("after 8 s idle:", ", ".join(f"{w} {t:.4f}" for w, t in zip(order, times)), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
