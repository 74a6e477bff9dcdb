"""Which kernels the peers launch for the prefill shapes (cuBLAS for torch.matmul, cuBLASLt for
torch._scaled_mm), with their device time, from torch.profiler: their names carry the tile,
cluster and schedule cuBLAS chose, to set beside our configs. Run on the GPU machine from the
repository root:

    python3 scripts/peer_kernels.py
"""
import torch
from torch.profiler import ProfilerActivity, profile

from cutedsl_backend.validation.bench import PREFILL_SHAPES


def kernels(fn, calls: int = 5) -> list:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return [(e.key, e.device_time_total / e.count / 1e3) for e in prof.key_averages() if e.device_time_total > 0]


def main():
    for (m, n, k) in PREFILL_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        cases = {"bf16 torch.matmul": lambda: torch.matmul(a, b)}
        a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        for kind, sa, sb in (("tensorwise", torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")),
                             ("rowwise", torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5)):
            for fast in (True, False):
                cases[f"fp8 {kind} {'fast' if fast else 'precise'}"] = (
                    lambda sa=sa, sb=sb, fast=fast: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb,
                                                                    out_dtype=torch.bfloat16, use_fast_accum=fast))
        for name, fn in cases.items():
            for kernel, ms in kernels(fn):
                print(f"{m}x{n}x{k} {name:22s} {ms:.4f} ms  {kernel}", flush=True)


if __name__ == "__main__":
    main()
