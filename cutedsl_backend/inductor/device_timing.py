"""Device-time benchmarks for the fused autotune: every candidate replayed from a CUDA graph.

Inductor times an extern choice by calling it back to back between CUDA events, so a candidate
whose host time per call nears its kernel time is timed by its host. During a compile the CPU is
shared with Dynamo, Inductor's compile workers and ours, and our op's host time per call (Python
argument checks and launch, ~70 us on the H200 machine against ~20 us for ``addmm``) then exceeds
a 4096^3 GEMM's 0.2 ms: the fused bias+residual measured 0.41 ms there against 0.19-0.21 ms on the
device, and lost to the unfused ops. The graph a compiled model runs under ``mode="max-autotune"``
(CUDA graphs on) pays no per-call host time at all, so the fused autotune times what the model
will pay: device time, for *every* candidate in it - ours and the unfused subgraph alike, so
neither side gets a warmer cache or fewer launch gaps than the other.

Torch 2.13 has a ``_benchmark_with_cudagraphs`` flag for some choices; 2.11 (the GPU machine) has
none, so the timing here is ours and the same on both: each choice's ``benchmark`` is replaced on
that choice object only (no torch code is patched). ``CUTEDSL_FUSED_TIMING=inductor`` keeps
Inductor's own timing (the A/B).
"""

from __future__ import annotations

import logging
import os
import statistics
from typing import Callable, Optional

log = logging.getLogger("cutedsl_backend.inductor")
# choices timed from a CUDA graph / fallen back to Inductor's timing (bench-inductor and tests read it)
COUNTS = {"graph_timed": 0, "fallbacks": 0}


def enabled() -> bool:
    """Graph timing of fused autotunes: on unless $CUTEDSL_FUSED_TIMING is "inductor"."""
    return os.environ.get("CUTEDSL_FUSED_TIMING", "graph").strip().lower() != "inductor"


_CYCLES_PER_MS: list = []  # the GPU sleep's calibration, measured once per process


def _cycles_per_ms() -> float:
    import torch

    if not _CYCLES_PER_MS:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # ramp the clock first
        start.record()
        torch.cuda._sleep(20_000_000)
        end.record()
        end.synchronize()
        _CYCLES_PER_MS.append(20_000_000 / max(start.elapsed_time(end), 1e-3))
    return _CYCLES_PER_MS[0]


def graph_ms_per_call(fn: Callable[[], object], calls: int = 10, replays: int = 10) -> float:
    """Median device milliseconds per call of ``fn``, captured ``calls`` times in one CUDA graph
    and replayed ``replays`` times, each replay between its own pair of events.

    The replays are queued behind a GPU sleep that outlasts their queuing (checked: the sleep must
    still run when the last one is queued, else it is retried four times as long), so they run
    back to back however slowly this thread gets the CPU: an idle GPU between two events would
    count host time. ``fn`` runs once outside the capture first (first-call work: loads, caches)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()  # warm: first replay uploads the graph
    sleep_ms = 5.0
    for _attempt in range(4):
        gate = torch.cuda.Event()
        torch.cuda._sleep(int(sleep_ms * _cycles_per_ms()))
        gate.record()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(replays)]
        for start, end in events:
            start.record()
            graph.replay()
            end.record()
        queued_in_time = not gate.query()
        torch.cuda.synchronize()
        if queued_in_time:
            break
        sleep_ms *= 4
    else:
        log.debug("cutedsl: graph timing: the replays outran a %.0f ms GPU sleep; timed anyway", sleep_ms / 4)
    return statistics.median(s.elapsed_time(e) for s, e in events) / calls


def _install(choice, run: Callable[[tuple], object], copy_to_out: bool) -> None:
    """Replace ``choice.benchmark`` (on this object) by a graph timing of ``run(args)``; where the
    capture fails, the choice keeps Inductor's timing and a warning says so."""
    inductor_benchmark = choice.benchmark

    def benchmark(*args, out):
        if out is not None and out.numel() == 0:
            return 0.0
        try:
            if copy_to_out and out is not None:
                out.copy_(run(args))  # as Inductor's own benchmark does (its result checks read it)
            ms = graph_ms_per_call(lambda: run(args))
            COUNTS["graph_timed"] += 1
            return ms
        except Exception as e:  # noqa: BLE001 - any capture failure: fall back, say so
            import torch

            torch.cuda.synchronize()
            COUNTS["fallbacks"] += 1
            log.warning("cutedsl: %s could not be timed from a CUDA graph (%s: %s); Inductor's timing used",
                        getattr(choice, "name", choice), type(e).__name__, e)
            return inductor_benchmark(*args, out=out)

    choice.benchmark = benchmark
    choice.cutedsl_graph_timed = True


def install_on_ours(choice, call: Callable, kwargs: dict) -> None:
    """Our extern choice: ``call(*args, **kwargs)`` (the op, in the lowering's argument order)."""
    _install(choice, lambda args: call(*args, **kwargs), copy_to_out=True)


def install_on_subgraph(choice) -> Optional[str]:
    """The unfused SubgraphChoiceCaller: its compiled module's ``call``, compiled on first use as
    Inductor's own benchmark does. Returns why it could not be installed (a torch whose subgraph
    choice lacks those pieces), else None."""
    missing = [a for a in ("_compile_for_benchmarking", "_compiled_module", "sym_input_values")
               if not hasattr(choice, a)]
    if missing:
        return f"the subgraph choice has no {', '.join(missing)} on this torch"

    def run(args):
        if choice._compiled_module is None:
            choice._compiled_module = choice._compile_for_benchmarking()
        return choice._compiled_module.call([*choice.sym_input_values, *args])  # call() clears its list

    _install(choice, run, copy_to_out=False)
    return None
