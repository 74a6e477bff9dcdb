"""Where a GEMM's time goes on the H200: clock and power, or work per clock.

For each case (ours and the peer, alternated, two rounds) a CUDA graph of back-to-back launches is
replayed for about ``seconds`` while NVML (or ``nvidia-smi``) samples the SM clock, the board power
and the clock-throttle reasons. It prints, per case: achieved TFLOP/s, median SM clock and power,
and the tensor-core utilisation at that clock (achieved / (SMs x dense FLOP per clock per SM x
clock)). Two kernels at one clock and different utilisation differ in their schedule; two at one
utilisation and different clocks differ in power. Run on the GPU machine from the repository root:

    python3 scripts/power_probe.py [seconds] [--json FILE]
"""
import json
import sys
import time

import torch

import cutedsl_backend as cb
from cutedsl_backend.validation.bench import graph_of
from cutedsl_backend.validation.power import PowerSampler, summarize, tensor_utilisation


def sustained(fn, seconds: float, sampler: PowerSampler, calls: int = 20) -> dict:
    """Replay a graph of ``calls`` launches of ``fn`` for ``seconds``; device ms per call and the
    samples taken over the second half (the clock settles after the first)."""
    g = graph_of(fn, calls)
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with sampler:
        while time.perf_counter() - t0 < seconds / 2:  # settle
            g.replay()
            torch.cuda.synchronize()
        first = len(sampler.samples)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        replays = 0
        start.record()
        while time.perf_counter() - t0 < seconds:
            g.replay()
            replays += 1
            if replays % 8 == 0:
                torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
        per_replay = start.elapsed_time(end) / replays
        tail = sampler.samples[first:]
    return {"ms": per_replay / calls, "samples": len(tail), **summarize(tail)}


def cases():
    out = []
    for (m, n, k) in ((8192, 8192, 8192), (4096, 14336, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        shape = f"{m}x{n}x{k}"
        out.append((shape, "bf16", "cuBLAS torch.matmul", lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)))
        out.append((shape, "bf16", "ours gemm", lambda a=a, b=b, c=c: cb.gemm(a, b, out=c)))
    for (m, n, k) in ((8192, 8192, 8192), (4096, 14336, 4096)):
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        shape = f"{m}x{n}x{k}"
        for fast in (True, False):
            mode = "fast" if fast else "precise"
            out.append((shape, "fp8", f"torch._scaled_mm {mode}",
                        lambda a=a, b=b, c=c, sa=sa, sb=sb, fast=fast: torch._scaled_mm(
                            a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)))
            out.append((shape, "fp8", f"ours scaled_mm {mode}",
                        lambda a=a, b=b, c=c, sa=sa, sb=sb, fast=fast: cb.scaled_mm(
                            a, b, sa, sb, out=c, use_fast_accum=fast)))
    return out


def run_cases(cases, seconds: float, rounds: int = 2) -> list:
    """Each case (shape "MxNxK", kind "bf16"/"fp8", name, fn) sustained for ``seconds``, every
    case once per round; prints and returns a row per measurement."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sampler = PowerSampler(torch.cuda.current_device())
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, samples from {sampler.source}, "
          f"{seconds:.0f} s per case, {rounds} rounds", flush=True)
    rows = []
    for rnd in range(1, rounds + 1):
        for shape, kind, name, fn in cases:
            m, n, k = (int(x) for x in shape.split("x"))
            r = sustained(fn, seconds, sampler)
            tf = 2.0 * m * n * k / (r["ms"] * 1e-3) / 1e12
            util = tensor_utilisation(tf, r["sm_mhz"], sms, "fp8" if kind == "fp8" else "16bit")
            rows.append({"round": rnd, "shape": shape, "kind": kind, "case": name, "tflops": tf, **r,
                         "util_at_clock": util})
            print(f"round {rnd} {kind} {shape:16s} {name:34s} {tf:7.1f} TFLOP/s  SM {r['sm_mhz']:5.0f} MHz  "
                  f"{r['power_w']:5.0f} W  tensor util at clock {util:.3f}  throttle {','.join(r['throttle']) or '-'}",
                  flush=True)
    return rows


def main(argv):
    seconds = float(argv[0]) if argv and not argv[0].startswith("--") else 3.0
    rows = run_cases(cases(), seconds)
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
