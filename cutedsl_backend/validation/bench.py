"""Benchmarks: our kernels against torch.matmul (cuBLAS) measured in the same run.

Times are medians of triton.testing.do_bench (CUDA events, warm-up first) on fresh random
inputs; each result is reported as TFLOP/s and as the ratio to the peer timed beside it.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import threading
import time
from typing import Iterable

PREFILL_SHAPES = [(8192, 8192, 8192), (4096, 14336, 4096), (4096, 4096, 14336), (2048, 1024, 8192)]
DECODE_SHAPES = [(128, 8192, 8192), (16, 8192, 8192)]


def _median_ms(fn, warmup=50, rep=300) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def back_to_back_ms(fn, calls: int = 20, reps: int = 7) -> float:
    """Median time per call of ``calls`` calls of ``fn`` issued back to back (one pair of CUDA
    events around them, ``reps`` times), as a model's forward issues its layers: no L2 flush
    between calls (:func:`_median_ms`, triton's do_bench, flushes before each call and times each
    by its own events), and host time per call shows only where it exceeds the device's. One
    untimed call goes first in each rep, so that the events time calls the host issued while the
    GPU ran the one before."""
    import torch

    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        fn()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def graph_of(fn, calls: int = 10):
    """A CUDA graph of ``calls`` back-to-back calls of ``fn`` (one warm-up call first, outside the
    capture: compiles, caches). The warm-up runs on the stream the capture then runs on (torch's
    capture stream, one per process), so a split-K launch finds that stream's workspace already
    sized and the graph times the kernel as an eager loop runs it (workspace.py): warmed up on a
    stream of its own, each capture allocated and zeroed a workspace per launch inside the graph,
    and each such stream kept its warm-up's workspace for the process's life."""
    import torch

    g = torch.cuda.CUDAGraph()
    capture = torch.cuda.graph(g)
    s = capture.capture_stream
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with capture:
        for _ in range(calls):
            fn()
    return g


def _graph_ms(fn, calls: int = 10) -> float:
    """Median device time per call of ``fn`` replayed ``calls`` times from one CUDA graph."""
    return _median_ms(graph_of(fn, calls).replay) / calls


def alternated_graph_ms(fns: dict, rounds: int = 3, sampler=None) -> dict:
    """Time each ``fns`` entry (name -> fn) with :func:`_graph_ms`, ``rounds`` times in
    alternation (A B A B ...): on a power-capped GPU the clock drifts over seconds, and timings
    taken in one round share its clock state. Returns, per name, its per-round times ``runs`` and
    their median ``ms``, with the SM clock and power read over its timings (a
    :class:`~cutedsl_backend.validation.power.PowerSampler`; none without one)."""
    from .power import summarize

    runs: dict = {name: [] for name in fns}
    samples: dict = {name: [] for name in fns}
    with sampler or contextlib.nullcontext():
        for _ in range(rounds):
            for name, fn in fns.items():
                first = len(sampler.samples) if sampler else 0
                runs[name].append(_graph_ms(fn))
                if sampler:
                    samples[name] += sampler.samples[first:]
    return {name: {"ms": statistics.median(runs[name]), "runs": runs[name], **summarize(samples[name])}
            for name in fns}


def round_ratio(timed: dict, peer: str, ours: str) -> float:
    """The median over rounds of peer time / our time (each round's pair shares its clock)."""
    return statistics.median(p / o for p, o in zip(timed[peer]["runs"], timed[ours]["runs"]))


def _clock_note(timed: dict, name: str) -> str:
    t = timed[name]
    return f" @{t['sm_mhz']:.0f} MHz {t['power_w']:.0f} W" if "sm_mhz" in t else ""


def tflops(m, n, k, ms, batch=1):
    return 2.0 * m * n * k * batch / (ms * 1e-3) / 1e12


def bench_shapes(shapes: Iterable, dtypes=("bfloat16", "float16"), config=None, log=print,
                 rounds: int = 3) -> list:
    """One row per (dtype, shape): ours vs torch.matmul, timed alternately in the same process
    (the graph ratio: the median over ``rounds`` alternations, see :func:`alternated_graph_ms`)."""
    import torch

    import cutedsl_backend as cb

    from ..operands import prepare
    from .power import PowerSampler

    sampler = PowerSampler(torch.cuda.current_device())

    rows = []
    for dt in dtypes:
        tdt = getattr(torch, dt)
        for (m, n, k) in shapes:
            a = torch.randn(m, k, device="cuda").to(tdt)
            b = torch.randn(k, n, device="cuda").to(tdt)
            out = torch.empty(m, n, device="cuda", dtype=tdt)
            problem, _, _ = prepare(a, b, None, config)
            from ..compiler import get_kernel

            kern = get_kernel(problem, config)
            cb.gemm(a, b, config=config, out=out)
            ref = torch.matmul(a.float(), b.float())
            err = float((out.float() - ref).norm() / ref.norm())
            def ours():
                cb.gemm(a, b, config=kern.config, out=out)

            def peer():
                torch.matmul(a, b, out=out)

            # eager: what a caller sees, host launch cost included (it dominates small problems)
            t_torch = _median_ms(peer)
            t_ours = _median_ms(ours)
            t_torch = min(t_torch, _median_ms(peer))
            # graph: 10 calls replayed from a CUDA graph, i.e. device time per GEMM, alternated
            timed = alternated_graph_ms({"ours": ours, "peer": peer}, rounds, sampler)
            g_ours, g_torch = timed["ours"]["ms"], timed["peer"]["ms"]
            row = {
                "dtype": dt, "m": m, "n": n, "k": k, "config": kern.config.name,
                "ours_ms": t_ours, "torch_ms": t_torch,
                "ours_tflops": tflops(m, n, k, t_ours), "torch_tflops": tflops(m, n, k, t_torch),
                "ratio": t_torch / t_ours,
                "graph_ours_ms": g_ours, "graph_torch_ms": g_torch,
                "graph_ours_tflops": tflops(m, n, k, g_ours), "graph_torch_tflops": tflops(m, n, k, g_torch),
                "graph_ratio": round_ratio(timed, "peer", "ours"), "rel_l2_vs_fp32": err,
                "ours_timing": timed["ours"], "torch_timing": timed["peer"],
            }
            rows.append(row)
            log(f"{dt:9s} {m:6d}x{n:6d}x{k:6d}  eager: ours {row['ours_tflops']:6.1f} cuBLAS "
                f"{row['torch_tflops']:6.1f} ratio {row['ratio']:.3f} | graph: ours "
                f"{row['graph_ours_tflops']:6.1f}{_clock_note(timed, 'ours')} cuBLAS "
                f"{row['graph_torch_tflops']:6.1f}{_clock_note(timed, 'peer')} ratio "
                f"{row['graph_ratio']:.3f}  [{kern.config.name}] rel_l2={err:.1e}")
    return rows


def geomean(xs):
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def host_us_per_call(fn, calls: int = 200) -> float:
    """Host microseconds per call of ``fn`` (launches only: timed before the queue drains)."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return t


def kernels_per_call(fn, calls: int = 5) -> list:
    """The GPU kernels one call of ``fn`` runs (a CUDA-graph replay's kernels included), from the
    profiler over ``calls`` calls: per kernel name, launches and device microseconds per call,
    slowest first. Where the timed ratio of two variants differs from that of their GEMMs, this
    shows which kernels make the difference."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels: dict = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and event.device_time_total > 0:
            launches, us = kernels.get(event.name, (0, 0.0))
            kernels[event.name] = (launches + 1, us + event.device_time_total)
    return sorted(({"name": name, "launches": n / calls, "us": us / calls} for name, (n, us) in kernels.items()),
                  key=lambda k: -k["us"])


def kernels_text(kernels: list) -> str:
    """One log line's worth of :func:`kernels_per_call`'s result."""
    return f"kernels per call (sum {sum(k['us'] for k in kernels):.1f} us): " + "; ".join(
        f"{k['us']:.1f} us {k['name'][:70]}" + (f" (x{k['launches']:g})" if k["launches"] != 1 else "")
        for k in kernels)


@contextlib.contextmanager
def gil_hog(chunk: int = 2000):
    """A thread that keeps asking for the GIL (pure-Python work in ``chunk``-sized pieces) while the
    block runs: a compile's CPU load, exaggerated, for host-time probes."""
    stop = threading.Event()

    def hog():
        while not stop.is_set():
            sum(range(chunk))

    thread = threading.Thread(target=hog, name="gil-hog")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def host_overhead_us(n_calls: int = 2000, rounds: int = 5, log=print) -> dict:
    """Host microseconds per eager call on a tiny problem (64x64x64: the GPU is never the
    bottleneck), ours beside the torch call each replaces, alternated in ``rounds`` rounds; each
    figure is the median over the rounds (the spread, min-max, is kept beside it):

    - ``gemm``: ``gemm(a, b, out=)`` vs ``torch.matmul(a, b, out=)``
    - ``gemm_bias_gelu``: ``gemm(a, b, bias=, activation="gelu")`` vs ``F.gelu(torch.addmm(bias, a, b))``
      and cuBLASLt's fused ``torch._addmm_activation(bias, a, b, use_gelu=True)``
    - ``gemm_gated``: ours vs ``F.silu(a @ w_gate.T) * (a @ w_up.T)`` (three kernels)
    - ``scaled_mm`` tensorwise and rowwise: ours vs ``torch._scaled_mm`` (fp8 e4m3, bf16 out)
    """
    import statistics

    import torch
    import torch.nn.functional as F

    import cutedsl_backend as cb

    dev = "cuda"
    a = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    b = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(64, device=dev, dtype=torch.bfloat16)
    b2 = torch.randn(64, 64, device=dev, dtype=torch.bfloat16)
    out = torch.empty(64, 64, device=dev, dtype=torch.bfloat16)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=dev)
    rows, cols = torch.rand(64, 1, device=dev) + 0.5, torch.rand(1, 64, device=dev) + 0.5
    pairs = {
        "gemm": (lambda: cb.gemm(a, b, out=out), {"torch.matmul": lambda: torch.matmul(a, b, out=out)}),
        "gemm_bias_gelu": (lambda: cb.gemm(a, b, bias=bias, activation="gelu"), {
            "F.gelu(torch.addmm)": lambda: F.gelu(torch.addmm(bias, a, b)),
            "torch._addmm_activation": lambda: torch._addmm_activation(bias, a, b, use_gelu=True)}),
        "gemm_gated": (lambda: cb.gemm_gated(a, b, b2, activation="silu"), {
            "F.silu(a @ w_gate.T) * (a @ w_up.T)": lambda: F.silu(a @ b.t()) * (a @ b2.t())}),
        "scaled_mm_tensorwise": (lambda: cb.scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), {
            "torch._scaled_mm": lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)}),
        "scaled_mm_rowwise": (lambda: cb.scaled_mm(a8, b8, rows, cols, out_dtype=torch.bfloat16), {
            "torch._scaled_mm": lambda: torch._scaled_mm(a8, b8, rows, cols, out_dtype=torch.bfloat16)}),
    }
    from ..plan import PLANS

    res: dict = {}
    for name, (ours, peers) in pairs.items():
        PLANS.clear()
        ours()  # compile/load and plan outside the timing
        plan = PLANS.newest()
        fast = None if plan is None else plan.kernel.direct_launch  # else the DSL's argument marshalling
        for p in peers.values():
            p()
        times: dict = {"ours": [], **{k: [] for k in peers}}
        for _ in range(rounds):
            times["ours"].append(host_us_per_call(ours, n_calls))
            for k, p in peers.items():
                times[k].append(host_us_per_call(p, n_calls))
        res[name] = {k: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
                     for k, v in times.items()}
        res[name]["direct_launch"] = fast
        first_peer = next(iter(peers))
        res[name]["over_peer_us"] = res[name]["ours"]["median_us"] - res[name][first_peer]["median_us"]
        log(f"host us/call {name}: " + ", ".join(
            f"{k} {v['median_us']:.1f} ({v['min_us']:.1f}-{v['max_us']:.1f})" for k, v in res[name].items()
            if isinstance(v, dict)) + f"; ours - {first_peer}: {res[name]['over_peer_us']:+.1f}; direct launch: {fast}")
    return res


def epilogue_operands(m: int, n: int, k: int, dtype: str) -> tuple:
    """(a, b, bias, residual, out) for the fused-epilogue benchmarks and sweeps (randn, never zeros)."""
    import torch

    dt = getattr(torch, dtype)
    return (torch.randn(m, k, device="cuda").to(dt), torch.randn(k, n, device="cuda").to(dt),
            torch.randn(n, device="cuda").to(dt), torch.randn(m, n, device="cuda").to(dt),
            torch.empty(m, n, device="cuda", dtype=dt))


def bench_epilogues(m=4096, n=14336, k=4096, dtype="bfloat16", log=print, with_compile=True,
                    rounds: int = 3) -> list:
    """Fused epilogues: ours vs our bare GEMM, cuBLASLt's fused bias+activation
    (torch._addmm_activation), eager torch, and torch.compile max-autotune; CUDA-graph timing.
    Each variant, our bare GEMM and the peers are timed in ``rounds`` alternations, back to back
    (:func:`alternated_graph_ms`), and every ratio is the median of the rounds' ratios: timed
    minutes apart, clock and power drift would be counted as epilogue cost or speed-up."""
    import torch
    import torch.nn.functional as F

    import cutedsl_backend as cb

    from .power import PowerSampler

    sampler = PowerSampler(torch.cuda.current_device())

    a, b, bias, res, out = epilogue_operands(m, n, k, dtype)
    variants = {
        "bare": (dict(), lambda: torch.matmul(a, b), None),
        "bias+relu": (dict(bias=bias, activation="relu"), lambda: torch.relu(torch.matmul(a, b) + bias),
                      lambda: torch._addmm_activation(bias, a, b, use_gelu=False)),
        "bias+gelu_tanh": (dict(bias=bias, activation="gelu_tanh"),
                           lambda: F.gelu(torch.matmul(a, b) + bias, approximate="tanh"),
                           lambda: torch._addmm_activation(bias, a, b, use_gelu=True)),
        "bias+silu": (dict(bias=bias, activation="silu"), lambda: F.silu(torch.matmul(a, b) + bias), None),
        "residual": (dict(residual=res), lambda: torch.matmul(a, b) + res, None),
    }
    rows = []

    def bare():
        cb.gemm(a, b, out=out)

    for name, (kw, eager, lt) in variants.items():
        cb.gemm(a, b, out=out, **kw)
        fns = {"bare": bare, "ours": lambda kw=kw: cb.gemm(a, b, out=out, **kw), "eager": eager}
        if lt is not None:
            fns["cublaslt"] = lt
        row = {"variant": name, "shape": f"{m}x{n}x{k}", "dtype": dtype}
        if with_compile and name != "bare":
            fns["compiled"] = torch.compile(eager, mode="max-autotune-no-cudagraphs")
            t0 = time.time()
            fns["compiled"]()
            row["compile_autotune_s"] = time.time() - t0
        timed = alternated_graph_ms(fns, rounds, sampler)
        # each ratio: the median of its rounds' ratios (a round's timings share its clock state)
        row.update(ours_ms=timed["ours"]["ms"], ours_tflops=tflops(m, n, k, timed["ours"]["ms"]),
                   our_bare_ms=timed["bare"]["ms"], overhead_vs_our_bare=round_ratio(timed, "ours", "bare") - 1,
                   eager_ms=timed["eager"]["ms"], vs_eager=round_ratio(timed, "eager", "ours"),
                   ours_timing=timed["ours"])
        if lt is not None:
            row.update(cublaslt_ms=timed["cublaslt"]["ms"], vs_cublaslt=round_ratio(timed, "cublaslt", "ours"))
        if "compiled" in fns:
            row.update(compiled_ms=timed["compiled"]["ms"], vs_compiled=round_ratio(timed, "compiled", "ours"))
        rows.append(row)
        log(f"{name:15s} ours {row['ours_tflops']:6.1f} TFLOP/s{_clock_note(timed, 'ours')} "
            f"({100 * row['overhead_vs_our_bare']:+.1f}% vs "
            f"our bare) | vs eager {row['vs_eager']:.3f}"
            + (f" | vs cuBLASLt fused {row['vs_cublaslt']:.3f}" if "vs_cublaslt" in row else "")
            + (f" | vs torch.compile max-autotune {row['vs_compiled']:.3f}" if "vs_compiled" in row else ""))
    return rows


def bench_fp8(shapes, log=print, rounds: int = 3) -> list:
    """scaled_mm (e4m3 x e4m3 -> bf16) vs torch._scaled_mm, tensorwise and rowwise, with the same
    accumulation mode on both sides (use_fast_accum True and False), same run. The graph ratio is
    the median over ``rounds`` alternations of the two (see :func:`alternated_graph_ms`), with the
    SM clock and power each side ran at where NVML or nvidia-smi can read them."""
    import torch

    import cutedsl_backend as cb

    from .power import PowerSampler

    sampler = PowerSampler(torch.cuda.current_device())
    rows = []
    for (m, n, k) in shapes:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        for kind, fast in (("tensorwise", True), ("rowwise", True), ("tensorwise", False), ("rowwise", False)):
            if kind == "tensorwise":
                sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
            else:
                sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5

            def ours():
                cb.scaled_mm(a, b, sa, sb, out=out, use_fast_accum=fast)

            def peer():
                torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

            ours()
            timed = alternated_graph_ms({"ours": ours, "peer": peer}, rounds, sampler)
            e_ours, e_peer = _median_ms(ours), _median_ms(peer)
            mode = "fast_accum" if fast else "precise"
            row = {"shape": f"{m}x{n}x{k}", "scaling": kind, "accumulation": mode,
                   "graph_ours_tflops": tflops(m, n, k, timed["ours"]["ms"]),
                   "graph_peer_tflops": tflops(m, n, k, timed["peer"]["ms"]),
                   "graph_ratio": round_ratio(timed, "peer", "ours"), "eager_ratio": e_peer / e_ours,
                   "rounds": rounds, "ours_timing": timed["ours"], "peer_timing": timed["peer"]}
            rows.append(row)
            log(f"fp8 {kind:10s} {mode:10s} {m}x{n}x{k}: ours {row['graph_ours_tflops']:7.1f} TFLOP/s"
                f"{_clock_note(timed, 'ours')}, torch._scaled_mm {row['graph_peer_tflops']:7.1f}"
                f"{_clock_note(timed, 'peer')}, graph ratio {row['graph_ratio']:.3f}, "
                f"eager ratio {row['eager_ratio']:.3f}")
    return rows


