"""Device-time benchmarks for the fused autotune, safe from a compile's CPU load.

Inductor times a choice by queuing, per iteration, an L2 flush, a start event, the call and an
end event, and keeps the fastest iteration. When the host time of a call nears the kernel's, the
GPU drains between iterations and the events time the host. During a compile the CPU is shared
with Dynamo, Inductor's compile workers and ours, and our op's host time per call (argument
checks and launch in Python, ~70 us on the H200 machine against ~20 us for ``addmm``) then
exceeded a 4096^3 GEMM's 0.2 ms: our fused bias+residual measured 0.41 ms there against 0.19 ms
on the device, and lost.

Here every candidate of a fused autotune - ours and the unfused subgraph alike - is timed the way
Inductor times it (same flush, same per-iteration events, fastest iteration, same duration
budget), but all iterations are queued behind a GPU sleep that outlasts their queuing, so the GPU
runs them back to back however slowly this thread gets the CPU. (Timing replays of a CUDA graph
of back-to-back calls, without flushes, was tried first and changed the ranking: on the MLP
down-projection, 4096 x 4096 x 14336 bf16, our fused bias+residual measured 0.677 ms that way and
0.621 ms Inductor's way, the unfused ops 0.619 and 0.611; the cause was not isolated.)

Each choice's ``benchmark`` is replaced on that choice object only (no torch code is patched): the
same on torch 2.11 and 2.13.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from typing import Callable, Optional

from .state import STATE

log = logging.getLogger("cutedsl_backend.inductor")
# counted in STATE.counters: choices timed here (device_timed / subgraphs_timed), fallen back to
# Inductor's timing (timing_fallbacks), timed with the GPU sleep outrun (sleep_outrun; still timed,
# the warning says so)
MAX_SLEEP_MS = 1000.0


@functools.lru_cache(maxsize=None)
def _cycles_per_ms() -> float:
    """The GPU sleep's calibration, measured once per process."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000_000)  # ramp the clock first (tens of ms)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    # sized long rather than short: a clock that later runs faster than here shortens the sleeps
    return 2.0 * 20_000_000 / max(start.elapsed_time(end), 1e-3)


def _queued_times(fn, flush, iters: int, host_ms_per_iter: float) -> tuple:
    """``iters`` iterations of (L2 flush, start event, ``fn``, end event), queued behind a GPU
    sleep sized from the host's pace (at most MAX_SLEEP_MS; fewer iterations where the host is
    too slow for that); where the sleep ended before the last iteration was queued, retried once
    with a sleep four times as long (capped). Returns (event times in ms, host ms per iteration)."""
    import torch

    iters = max(1, min(iters, int(MAX_SLEEP_MS / (1.5 * max(host_ms_per_iter, 1e-3)))))
    sleep_ms = min(max(2.0, 1.5 * iters * host_ms_per_iter), MAX_SLEEP_MS)
    for attempt in range(2):
        gate = torch.cuda.Event()
        torch.cuda._sleep(int(sleep_ms * _cycles_per_ms()))
        gate.record()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        t0 = time.perf_counter()
        for start, end in pairs:
            flush.zero_()
            start.record()
            fn()
            end.record()
        host_ms = (time.perf_counter() - t0) * 1e3 / iters
        queued_in_time = not gate.query()
        torch.cuda.synchronize()
        if queued_in_time:
            break
        if attempt == 0:
            sleep_ms = min(4 * max(sleep_ms, iters * host_ms), MAX_SLEEP_MS)
    else:
        STATE.counters["sleep_outrun"] += 1
        log.warning("cutedsl: device timing: %d iterations took longer to queue (%.2f ms each) than a "
                    "%.0f ms GPU sleep; their times may include host time", iters, host_ms, sleep_ms)
    return [s.elapsed_time(e) for s, e in pairs], host_ms


def device_ms_per_call(fn: Callable[[], object], max_duration_ms: float = 25.0, max_iters: int = 100,
                       warm_up: bool = True) -> float:
    """Fastest device milliseconds of ``fn`` over Inductor's benchmark iterations (an L2 flush
    before each; as many as fit ``max_duration_ms``, at most ``max_iters``), with the host's pace
    kept out of the events (see the module docstring). ``fn`` runs once first (unless the caller
    just ran it: ``warm_up=False``), synchronized."""
    import torch

    torch.cuda.synchronize()
    if warm_up:
        fn()
        torch.cuda.synchronize()
    l2_bytes = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 50 << 20
    flush = torch.empty(l2_bytes // 4, dtype=torch.int, device="cuda")
    flush.zero_()
    estimate, host_ms = _queued_times(fn, flush, 5, 0.5)
    best = min(estimate)
    iters = max(1, min(max_iters, int(max_duration_ms // best))) if best > 0 else max_iters
    times, _ = _queued_times(fn, flush, iters, host_ms)
    return min(best, min(times))


def _install(choice, run: Callable[[tuple], object], copy_to_out: bool, kind: str,
             prepare: Optional[Callable[[], bool]] = None) -> None:
    """Replace ``choice.benchmark`` (on this object) by :func:`device_ms_per_call` of ``run(args)``
    on the inputs' GPU; where the timing fails, the choice keeps Inductor's timing and a warning
    says so. ``prepare`` (a compile; True where it compiled) runs first, outside that fallback:
    its errors are the choice's own, as under Inductor's timing."""
    inductor_benchmark = choice.benchmark

    def benchmark(*args, out):
        import torch

        from .. import compiler

        if out is not None and out.numel() == 0:
            return 0.0
        # bench-inductor's timeline: where the autotune's time goes (ours named with their config)
        name = f"{getattr(choice, 'name', '')} {getattr(choice, 'description', '')}".strip()
        compiler.STORE.event("benchmark starts", name)
        if prepare is not None and prepare():
            compiler.STORE.event("subgraph compiled", name)
        device = next((a.device for a in (*args, out) if isinstance(a, torch.Tensor) and a.is_cuda), None)
        try:
            with torch.cuda.device(device) if device is not None else contextlib.nullcontext():
                ran = copy_to_out and out is not None
                if ran:
                    out.copy_(run(args))  # as Inductor's own benchmark does (its result checks read it)
                ms = device_ms_per_call(lambda: run(args), warm_up=not ran)  # that run was the warm-up
            STATE.counters[kind] += 1
            compiler.STORE.event(f"benchmark done ({ms:.4f} ms)", name)
            return ms
        except Exception as e:  # noqa: BLE001 - any failure: fall back, say so
            torch.cuda.synchronize()
            STATE.counters["timing_fallbacks"] += 1
            compiler.STORE.event("benchmark falls back to Inductor's timing", name)
            log.warning("cutedsl: %s could not be timed on the device (%s: %s); Inductor's timing used",
                        getattr(choice, "name", choice), type(e).__name__, e)
            return inductor_benchmark(*args, out=out)

    choice.benchmark = benchmark
    choice.cutedsl_device_timed = True


def install_on_ours(choice, call: Callable, kwargs: dict) -> None:
    """Our extern choice: ``call(*args, **kwargs)`` (the op, in the lowering's argument order)."""
    _install(choice, lambda args: call(*args, **kwargs), copy_to_out=True, kind="device_timed")


def install_on_subgraph(choice) -> Optional[str]:
    """The unfused SubgraphChoiceCaller: its compiled module's ``call``, compiled on first use as
    Inductor's own benchmark does. Returns why it could not be installed (a torch whose subgraph
    choice lacks those pieces), else None."""
    missing = [a for a in ("_compile_for_benchmarking", "_compiled_module", "sym_input_values")
               if not hasattr(choice, a)]
    if missing:
        return f"the subgraph choice has no {', '.join(missing)} on this torch"

    def compile_once() -> bool:
        if choice._compiled_module is not None:
            return False
        choice._compiled_module = choice._compile_for_benchmarking()
        return True

    def run(args):
        return choice._compiled_module.call([*choice.sym_input_values, *args])  # call() clears its list

    _install(choice, run, copy_to_out=False, kind="subgraphs_timed", prepare=compile_once)
    return None
