"""bench-inductor --dynamic: a SiLU MLP compiled once with ``dynamic=True``, with and without our
backend, both kept compiled in one process and timed alternately at several token counts."""

from __future__ import annotations

import copy
import os
import tempfile
import time
from typing import Optional

from .bench_inductor import (
    _clear_our_memory_caches,
    _compile_phases,
    _cudagraph_skips,
    _phase_delta,
    _phases_text,
    _timeline,
    _timeline_text,
    residual_mlp,
)


def token_counts_of(spec: str, d: int, hidden: int) -> tuple:
    """``--dynamic``'s token counts ("16,48,512"), or ValueError naming the rule they break."""
    try:
        ms = tuple(int(m) for m in spec.split(","))
    except ValueError:
        raise ValueError(f"token counts are comma-separated integers, not {spec!r}") from None
    return check_token_counts(ms, d, hidden)


def check_token_counts(ms: tuple, d: int, hidden: int) -> tuple:
    """``ms``, or ValueError naming the rule they break."""
    if min(ms) < 2:
        # dynamic=True still specializes sizes 0 and 1: such an M would need a graph of its own
        raise ValueError(f"token counts must be at least 2 (got {min(ms)}): Dynamo compiles M = 0 and 1 apart")
    if ms[0] in (d, hidden):
        # Dynamo gives equal sizes one symbol at the first call: the width would follow the token count
        raise ValueError(f"the first token count ({ms[0]}) must differ from d and hidden")
    return ms


def bench_inductor_dynamic(ms=(16, 48, 512, 2048), d: int = 4096, hidden: int = 14336, dtype: str = "bfloat16",
                           variants=("aten+triton", "cutedsl cold"), log=print,
                           kernel_dir: Optional[str] = None, rounds: int = 5) -> list:
    """A SiLU MLP (``x + down(silu(up(x)))``, d -> hidden -> d) compiled once per variant with
    ``torch.compile(mode="max-autotune", dynamic=True)`` (fresh Inductor cache each), then run at
    every M of ``ms`` (each at least 2). Every variant stays compiled in this process (each its own
    entry function, so Dynamo keeps both). Every M's first calls (CUDA-graph recordings, our
    dispatcher's kernels for it) run first, then the timings wait until no compile or load of ours
    is under way, and per M the variants are timed alternately (the order flipped every round) for
    ``rounds`` rounds on the same input: the median time per call (do_bench over the compiled module; where the
    module's host work outlasts its GPU work, that time is the host's) and the GPU's own time per
    call (``device_ms``: the calls queued behind a GPU sleep, inductor.device_timing), each the
    median of the rounds with the rounds' range; the error against float64. A recompile while
    timing raises (every M must run the graph compiled at the first call). Rows per variant with
    ``speedup_vs_aten_triton`` and ``device_speedup_vs_aten_triton`` per M for ours, and per M the
    kernels one call runs (profiler) with their sum beside ``device_ms``."""
    import statistics

    import torch
    import torch._dynamo
    from torch._inductor.utils import fresh_cache

    check_token_counts(ms, d, hidden)
    if rounds < 1:
        raise ValueError("rounds must be at least 1")

    import cutedsl_backend.inductor as cbi

    from ..inductor.device_timing import device_ms_per_call
    from .bench import _median_ms, kernels_per_call, kernels_text

    dt = getattr(torch, dtype)

    g = torch.Generator(device="cuda").manual_seed(0)
    mod = residual_mlp(d, hidden, "silu").to("cuda", dt).eval()
    for p in mod.parameters():
        p.data.normal_(0, p.shape[-1] ** -0.5, generator=g)
    # the float64 reference is a copy: converting the compiled module's own parameters would hand
    # the compiled graph new weight tensors between the Ms (re-recording its CUDA graphs)
    ref_mod = copy.deepcopy(mod).double()
    xs = {m: torch.randn(m, d, device="cuda", generator=g).to(dt) for m in ms}
    kernel_dir = kernel_dir or tempfile.mkdtemp(prefix="cutedsl-bench-kernels-")
    os.environ["CUTEDSL_BACKEND_CACHE_DIR"] = os.path.join(kernel_dir, "dynamic")
    _clear_our_memory_caches()
    torch._dynamo.reset()
    # Inductor's and Triton's imports, compile workers and a GEMM autotune's first-time costs,
    # paid here rather than by the first variant's compile time
    with fresh_cache():
        w = torch.randn(d, 256, device="cuda", generator=g).to(dt)
        torch.compile(lambda t, w: (t @ w).relu(), mode="max-autotune-no-cudagraphs")(xs[ms[0]], w)
    torch._dynamo.reset()
    rows, compiled = [], {}
    for variant in variants:
        entry = _distinct_entry(mod)
        skips0, phases0 = _cudagraph_skips(), _compile_phases()
        try:
            with fresh_cache(), torch.no_grad():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                if variant != "aten+triton":
                    cbi.enable()
                compiled[variant] = torch.compile(entry, mode="max-autotune", dynamic=True)
                compiled[variant](xs[ms[0]])
                torch.cuda.synchronize()
                rows.append({"block": "silu_mlp_dynamic", "variant": variant,
                             "compile_s": time.perf_counter() - t0, "per_m": {}, "rounds": rounds,
                             # Inductor decides on CUDA graphs while it compiles: this variant's count
                             "cudagraph_skips": _cudagraph_skips() - skips0,
                             "compile_phases_s": _phase_delta(phases0)})
        finally:
            cbi.disable()
    times = {(v, m): {"ms": [], "device_ms": []} for v in variants for m in ms}
    compiled_at = time.perf_counter()
    fallbacks0, run_skips0 = cbi.stats()["runtime_fallbacks"], _cudagraph_skips()
    with torch._dynamo.config.patch(error_on_recompile=True), torch.no_grad():
        # every M's first calls (CUDA-graph recordings; our dispatcher's kernels for that M) and
        # results first, then no compile or load of ours left under way, then the timings
        for m, x in xs.items():
            ref = ref_mod(x.double())
            for row in rows:
                fn = compiled[row["variant"]]
                out = fn(x).clone()
                for _ in range(3):
                    fn(x)
                row["per_m"][m] = {"rel_l2_vs_fp64": float((out.double() - ref).norm() / ref.norm())}
        torch.cuda.synchronize()
        from ..compiler import STORE

        drained = STORE.drain()
        if not drained:
            log("silu_mlp dynamic: WARNING: our background compiles or loads were still under way after "
                "300 s; the timings share the CPU with them")
        background = _timeline(compiled_at, digits=2)
        for m, x in xs.items():
            for round_ in range(rounds):
                # each round in the other order: neither variant always runs right after the other
                for variant in (variants if round_ % 2 == 0 else variants[::-1]):
                    fn = compiled[variant]
                    times[variant, m]["ms"].append(_median_ms(lambda: fn(x), warmup=25, rep=100))
                    times[variant, m]["device_ms"].append(device_ms_per_call(lambda: fn(x)))
        # the profiler last: CUPTI may stay attached after it, adding host time to later timings
        for m, x in xs.items():
            for row in rows:
                fn = compiled[row["variant"]]
                row["per_m"][m]["kernels"] = kernels_per_call(lambda: fn(x))
    run_skips = _cudagraph_skips() - run_skips0
    if run_skips:
        log(f"silu_mlp dynamic: WARNING: Inductor skipped CUDA graphs {run_skips} time(s) while the modules ran "
            "(either variant): some times per call include launch overhead")
    base = rows[0] if rows and rows[0]["variant"] == "aten+triton" else None
    for row in rows:
        row["cudagraph_skips_while_running_both"] = run_skips
        # our op's fallbacks to ATen while the modules ran (the baseline's module never calls it)
        row["runtime_fallbacks"] = 0 if row is base else cbi.stats()["runtime_fallbacks"] - fallbacks0
        if row is not base:
            row["background_after_compile"] = background
        for m in ms:
            cell = row["per_m"][m]
            for key in ("ms", "device_ms"):
                series = times[row["variant"], m][key]
                cell[key], cell[key + "_range"] = statistics.median(series), [min(series), max(series)]
            cell["kernels_us"] = sum(k["us"] for k in cell["kernels"])
            if base is not None and row is not base:
                b = base["per_m"][m]
                cell["speedup_vs_aten_triton"] = b["ms"] / cell["ms"]
                cell["device_speedup_vs_aten_triton"] = b["device_ms"] / cell["device_ms"]
                # per round, the ratio of the pair timed back to back: the spread the medians hide
                pairs = [(times[base["variant"], m][k], times[row["variant"], m][k]) for k in ("ms", "device_ms")]
                cell["speedup_range"] = _ratio_range(*pairs[0])
                cell["device_speedup_range"] = _ratio_range(*pairs[1])
        if base is not None and row is not base:
            row["compile_ratio_vs_aten_triton"] = row["compile_s"] / base["compile_s"]
        if row["cudagraph_skips"]:
            log(f"silu_mlp dynamic {row['variant']}: WARNING: Inductor skipped CUDA graphs "
                f"{row['cudagraph_skips']} time(s): its times per call include launch overhead")
        if row["runtime_fallbacks"]:
            log(f"silu_mlp dynamic {row['variant']}: WARNING: {row['runtime_fallbacks']} runtime fallback(s) "
                "of our op (the ATen GEMM ran instead)")
    if background:
        log("silu_mlp dynamic: our background work after the compile (s after it; "
            + ("finished before the timings" if drained else "not all finished before the timings") + "): "
            + _timeline_text(background[:40]))
    for row in rows:
        log(f"silu_mlp dynamic {row['variant']:14s} compile {row['compile_s']:7.2f} s"
            + (f" ({row['compile_ratio_vs_aten_triton']:.2f}x)" if "compile_ratio_vs_aten_triton" in row else "")
            + "; phases (s, inclusive): " + _phases_text(row["compile_phases_s"]))
        for m, v in row["per_m"].items():
            text = f"  M={m:<6d} {v['ms']:.4f} ms [device {v['device_ms']:.4f} ms]"
            if "speedup_vs_aten_triton" in v:
                text += (f"  {v['speedup_vs_aten_triton']:.3f}x (rounds {v['speedup_range'][0]:.3f}-"
                         f"{v['speedup_range'][1]:.3f}), device {v['device_speedup_vs_aten_triton']:.3f}x "
                         f"({v['device_speedup_range'][0]:.3f}-{v['device_speedup_range'][1]:.3f})")
            log(text + f"  rel err {v['rel_l2_vs_fp64']:.2e}")
            log("           " + kernels_text(v["kernels"]))
    return rows


def _distinct_entry(mod):
    """A new function calling ``mod``, with a code object of its own: Dynamo caches compiled
    graphs per code object, so each variant compiled through its own entry keeps its graph while
    the others compile (compiling ``mod`` itself twice would need a Dynamo reset in between)."""
    namespace = {"mod": mod}
    exec(compile("def entry(x):\n    return mod(x)\n", f"<bench-inductor entry {id(namespace)}>", "exec"),
         namespace)
    return namespace["entry"]


def _ratio_range(base: list, ours: list) -> list:
    ratios = [b / o for b, o in zip(base, ours)]
    return [min(ratios), max(ratios)]
