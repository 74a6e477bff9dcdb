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
import statistics
import subprocess
import sys
import threading
import time

import torch

import cutedsl_backend as cb

# Dense tensor-core FLOP per clock per SM on sm90 (H100/H200 datasheet rates at their boost clock).
FLOP_PER_CLK_PER_SM = {"bf16": 4096, "fp8": 8192}
# NVML throttle-reason bits (nvmlClocksThrottleReason*) worth naming
REASONS = {0x1: "idle", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
           0x80: "hw_power_brake"}


class Sampler:
    """SM clock (MHz), power (W) and throttle reasons every ~20 ms, from NVML or nvidia-smi."""

    def __init__(self):
        self.samples, self._stop = [], threading.Event()
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())

            def read():
                return (pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                        pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
            read()
            self.source = "nvml"
        except Exception:  # no pynvml: one nvidia-smi query per sample (slower, ~50 ms)
            def read():
                q = subprocess.run(["nvidia-smi", "-i", str(torch.cuda.current_device()),
                                    "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
                                    "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
                clk, pw, reasons = (x.strip() for x in q.split(","))
                return int(clk), float(pw), int(reasons, 16)
            self.source = "nvidia-smi"
        self._read = read

    def __enter__(self):
        self.samples.clear()
        self._stop.clear()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append(self._read())
            time.sleep(0.02)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def sustained(fn, seconds: float, sampler: Sampler, calls: int = 20) -> dict:
    """Replay a graph of ``calls`` launches of ``fn`` for ``seconds``; device ms per call and the
    samples taken over the second half (the clock settles after the first)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    per_replay = None
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
    clk = statistics.median(x[0] for x in tail)
    reasons = 0
    for x in tail:
        reasons |= x[2]
    return {"ms": per_replay / calls, "sm_mhz": clk, "power_w": statistics.median(x[1] for x in tail),
            "samples": len(tail), "throttle": [n for b, n in REASONS.items() if reasons & b]}


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
    sampler = Sampler()
    print(f"{torch.cuda.get_device_name()}, {sms} SMs, samples from {sampler.source}, "
          f"{seconds:.0f} s per case, {rounds} rounds", flush=True)
    rows = []
    for rnd in range(1, rounds + 1):
        for shape, kind, name, fn in cases:
            m, n, k = (int(x) for x in shape.split("x"))
            r = sustained(fn, seconds, sampler)
            tf = 2.0 * m * n * k / (r["ms"] * 1e-3) / 1e12
            util = tf * 1e12 / (sms * FLOP_PER_CLK_PER_SM[kind] * r["sm_mhz"] * 1e6)
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
