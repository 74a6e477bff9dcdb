"""The Inductor integration, end to end, in one process: torch.compile(mode="max-autotune") of
transformer blocks with our candidates enabled against ATen + Triton alone.

Per block and variant: the compile + autotune wall time of the first call (each variant on a fresh
Inductor cache), the median time per call afterwards (triton.testing.do_bench: each call alone;
and calls issued back to back, as a model issues its layers), the error against
a float64 evaluation of the same block, and which candidate won each GEMM autotune. Variants:
  - ``aten+triton``: max-autotune without us (the baseline);
  - ``cutedsl cold``: with us, our kernel disk cache empty (every candidate compiles);
  - ``cutedsl warm``: with us, our kernels on disk from the cold run (the GPU image ships them);
  - ``cutedsl cold unfused-forced-aten``: cold with every fused chain made to lose after its
    autotune ran, the inlined GEMMs autotuned with ATen only (``--loss-rows``);
  - ``cutedsl cold spawned-workers``: cold with each compile worker a subprocess of its own
    (``--rows``; the default forks them from one process that imported the DSL once);
  - ``cutedsl cold residual-lost``: the chains with a residual made to lose (``--rows``).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import tempfile
import time
from typing import Optional


def residual_mlp(d: int, hidden: int, activation: str):
    """x + W2 act(W1 x + b1) + b2 (``activation`` a name of epilogue.torch_activation): the
    feed-forward half of a transformer layer, as the benches and the Inductor tests build it."""
    import torch.nn as nn

    from ..epilogue import torch_activation

    act = torch_activation(activation)

    class ResidualMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(d, hidden)
            self.down = nn.Linear(hidden, d)

        def forward(self, x):
            return x + self.down(act(self.up(x)))

    return ResidualMLP()


def _blocks(tokens: int, d: int, hidden: int, dtype):
    import torch
    import torch.nn as nn

    class SwiGLU(nn.Module):
        """x + W_down (silu(W_gate x) * W_up x): the gated feed-forward of Llama, Mistral, Qwen
        (no biases); our candidates include the gated GEMM (enable(gated_mlp=True))."""

        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(d, hidden, bias=False)
            self.up = nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d, bias=False)

        def forward(self, x):
            return x + self.down(nn.functional.silu(self.gate(x)) * self.up(x))

    class OutProj(nn.Module):
        """x + W_o attn + b_o: the attention output projection with its residual."""

        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(d, d)

        def forward(self, x, attn):
            return x + self.proj(attn)

    g = torch.Generator(device="cuda").manual_seed(0)
    # Sequences of 512 tokens; fewer tokens (decode) are one sequence of that length.
    shape = (max(1, tokens // 512), min(tokens, 512), d)
    x = torch.randn(*shape, device="cuda", generator=g).to(dtype)
    attn = torch.randn(*shape, device="cuda", generator=g).to(dtype)
    out = []
    blocks = (("mlp", residual_mlp(d, hidden, "gelu_tanh"), (x,)), ("swiglu", SwiGLU(), (x,)),
              ("attn_out_proj", OutProj(), (x, attn)))
    for name, mod, args in blocks:
        mod = mod.to("cuda", dtype).eval()
        for p in mod.parameters():
            p.data.normal_(0, p.shape[-1] ** -0.5, generator=g)
        out.append((name, mod, args))
    return out


class _Winners:
    """Feedback saver: the fastest choice of each autotune, ours and theirs."""

    def __init__(self):
        self.rows = []

    def __call__(self, timings, name, input_nodes, choices, *rest):
        if not timings:
            return
        best = min(timings, key=timings.get)
        # ours: our kernels (choices.bind marks them); the unfused-ops subgraph is theirs
        ours = [c for c in timings if getattr(c, "cutedsl_decision", None) is not None]
        theirs = [c for c in timings if c not in ours]
        desc = (lambda c: f"{c.name} {getattr(c, 'description', '')}".strip())
        self.rows.append({
            "autotune": name, "winner": desc(best), "winner_ms": timings[best],
            "best_ours_ms": min((timings[c] for c in ours), default=None),
            "best_theirs_ms": min((timings[c] for c in theirs), default=None),
            "choices": len(timings),
            "timings_ms": sorted(([desc(c), timings[c]] for c in timings), key=lambda r: r[1])[:8]})


# Cold variants, each with the environment it sets for its compile only. The cold compile when
# every fused chain loses: our fused choices are compiled and timed as in any fused autotune, then
# their times are multiplied by FORCED_LOSS_FACTOR (so the autotune waits for our kernels and times
# them, as a real loss does); the inlined GEMMs are autotuned with ATen only
FORCED_LOSS_ATEN = "cutedsl cold unfused-forced-aten"
# the same for the chains with a residual only (the MLP's down-projection, a near tie when it was
# measured): their chain loses, the others autotune as usual
RESIDUAL_LOST = "cutedsl cold residual-lost"
# each compile worker a subprocess with its own DSL import (the default forks them from one zygote
# that imported it once)
SPAWNED_WORKERS = "cutedsl cold spawned-workers"
FORCED_LOSS_FACTOR = 1000.0
AB_VARIANTS = {FORCED_LOSS_ATEN: {"CUTEDSL_BENCH_FORCE_UNFUSED": "1"},
               SPAWNED_WORKERS: {"CUTEDSL_WORKER_FORK": "0"},
               RESIDUAL_LOST: {"CUTEDSL_BENCH_FORCE_UNFUSED": "_res_"}}


@contextlib.contextmanager
def _forced_unfused():
    """Under $CUTEDSL_BENCH_FORCE_UNFUSED ("1": all, else a regular expression searched in our
    choices' names): those of our fused autotunes' choices report their device time x
    FORCED_LOSS_FACTOR, so the unfused ops win after the whole autotune ran. Needs the device
    timing of fused autotunes (the default), where those times are taken. Yields a dict whose
    "losses" counts the choices made to lose (a forced row where none was forced nothing)."""
    from ..inductor import device_timing

    forced = {"losses": 0}
    which = os.environ.get("CUTEDSL_BENCH_FORCE_UNFUSED", "").strip()
    if which.lower() in ("", "0", "false"):
        yield forced
        return
    pattern = re.compile("" if which == "1" else which)
    install = device_timing.install_on_ours

    def install_losing(choice, call, kwargs):
        install(choice, call, kwargs)
        if not pattern.search(getattr(choice, "name", "")):
            return
        forced["losses"] += 1
        timed = choice.benchmark
        choice.benchmark = lambda *args, out: FORCED_LOSS_FACTOR * timed(*args, out=out)

    device_timing.install_on_ours = install_losing
    try:
        yield forced
    finally:
        device_timing.install_on_ours = install


@contextlib.contextmanager
def _variant_env(variant: str):
    """The environment an A/B variant sets (AB_VARIANTS), for its compile only."""
    settings = AB_VARIANTS.get(variant, {})
    saved = {k: os.environ.get(k) for k in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _clear_our_memory_caches():
    from .. import compiler
    from ..plan import PLANS

    compiler.forget_background_work()
    PLANS.clear()


def _timeline(start: float, end: float = float("inf"), digits: int = 3) -> list:
    """Our compile pipeline's events from ``start`` to ``end`` (perf_counter seconds): (seconds
    after ``start``, what, key shortened)."""
    from .. import compiler

    return [(round(t - start, digits), what, _short(key)) for t, what, key in compiler.STORE.events
            if start <= t <= end]


def _timeline_text(events) -> str:
    return "; ".join(f"{t:.2f} {what} {key}".strip() for t, what, key in events)


def _short(key: str) -> str:
    """A timeline key as printed: kernel cache keys (long hex) cut to 12 characters, names whole."""
    return key[:12] if re.fullmatch(r"[0-9a-f]{16,}", key) else key


def _run_variant(name, mod, args, variant: str, kernel_dir: str, log, kernels: bool = False) -> dict:
    """One block compiled and timed as ``variant``; ``kernels``: also each kernel's device time per
    call (the profiler, after every timing: CUPTI may stay attached and add host time to later ones)."""
    import torch
    import torch._dynamo
    from torch._inductor.select_algorithm import add_feedback_saver, clear_feedback_savers
    from torch._inductor.utils import fresh_cache

    import cutedsl_backend.inductor as cbi

    from .bench import _median_ms, back_to_back_ms, kernels_per_call, kernels_text

    os.environ["CUTEDSL_BACKEND_CACHE_DIR"] = kernel_dir
    from .. import compiler

    if variant == SPAWNED_WORKERS and compiler.STORE.pool is not None and compiler.STORE.pool._fork:
        raise RuntimeError(f"{variant!r} needs a process without a worker pool yet: run it with --isolated")
    _clear_our_memory_caches()
    torch._dynamo.reset()
    winners = _Winners()
    add_feedback_saver(winners)
    stats0 = dict(compiler.STORE.stats, **cbi.stats())
    skips0 = _cudagraph_skips()
    phases0 = _compile_phases()
    try:
        with _variant_env(variant), fresh_cache(), torch.no_grad(), _forced_unfused() as forced:
            torch.cuda.synchronize()
            t0 = time.perf_counter()  # enable() is timed too: it starts our workers and loader
            if variant != "aten+triton":
                cbi.enable(gated_mlp=name == "swiglu")
            compiled = torch.compile(mod, mode="max-autotune")
            out = compiled(*args).clone()  # CUDA-graph outputs are overwritten by the next replay
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            phases = _phase_delta(phases0)
            for _ in range(3):  # CUDA-graph warm-up and capture
                compiled(*args)
            ms = _median_ms(lambda: compiled(*args), warmup=25, rep=200)
            loop_ms = back_to_back_ms(lambda: compiled(*args))
            eager_ms = _median_ms(lambda: mod(*args), warmup=25, rep=200)
            ref = copy.deepcopy(mod).double()(*(a.double() for a in args))
            err = float((out.double() - ref).norm() / ref.norm())
            per_kernel = kernels_per_call(lambda: compiled(*args)) if kernels else None
    finally:
        cbi.disable()
        clear_feedback_savers()
    stats1 = dict(compiler.STORE.stats, **cbi.stats())
    fallbacks = stats1.pop("runtime_fallbacks") - stats0["runtime_fallbacks"]
    ours = {k: round(v - stats0[k], 3) for k, v in stats1.items()}
    # the compile pipeline's events during this compile, in seconds from its start (keys shortened)
    timeline = _timeline(t0, t0 + compile_s)
    row = {"block": name, "variant": variant, "compile_s": compile_s, "ms": ms, "loop_ms": loop_ms,
           "eager_ms": eager_ms, "rel_l2_vs_fp64": err, "winners": winners.rows, "runtime_fallbacks": fallbacks,
           "cudagraph_skips": _cudagraph_skips() - skips0, "our_kernel_fetches": ours, "our_timeline": timeline,
           "compile_phases_s": phases}
    if per_kernel is not None:
        row["kernels"] = per_kernel
    if row["cudagraph_skips"]:
        log(f"{name} {variant}: WARNING: Inductor skipped CUDA graphs {row['cudagraph_skips']} time(s): the time "
            "per call includes launch overhead")
    if "CUTEDSL_BENCH_FORCE_UNFUSED" in AB_VARIANTS.get(variant, {}):
        row["forced_losses"] = forced["losses"]
        if not row["forced_losses"]:
            log(f"{name} {variant}: WARNING: no choice of ours was made to lose (no fused autotune ran "
                "with the device timing): this row is not a forced loss")
    log(f"{name:14s} {variant:14s} compile {compile_s:7.2f} s  {ms:.4f} ms/call  back to back {loop_ms:.4f} ms  "
        f"eager {eager_ms:.4f} ms  "
        f"rel_l2 {err:.2e}  " + "; ".join(f"{w['autotune']}: {w['winner']}" for w in winners.rows))
    log(f"{'':14s} {'':14s} our kernels: {ours}")
    log(f"{'':14s} {'':14s} compile phases (s, inclusive): " + _phases_text(phases))
    if timeline:
        log(f"{'':14s} {'':14s} timeline: " + _timeline_text(timeline))
    if per_kernel is not None:
        log(f"{'':14s} {'':14s} " + kernels_text(per_kernel))
    return row


def bench_inductor(tokens: int = 4096, d: int = 4096, hidden: int = 14336, dtype: str = "bfloat16",
                   variants=("aten+triton", "cutedsl cold", "cutedsl warm"), log=print,
                   kernel_dir: Optional[str] = None, blocks=("mlp", "swiglu", "attn_out_proj"),
                   kernels: bool = False) -> list:
    """Rows per (block, variant); ratios against the aten+triton row of the same block. ``kernels``:
    each row also lists its kernels' device time per call (where the block's time goes)."""
    import torch

    kernel_dir = kernel_dir or tempfile.mkdtemp(prefix="cutedsl-bench-kernels-")
    rows = []
    for name, mod, args in _blocks(tokens, d, hidden, getattr(torch, dtype)):
        if name not in blocks:
            continue
        base = None
        for variant in variants:
            cold_dir = os.path.join(kernel_dir, name + ("-" + variant.split()[-1] if variant in AB_VARIANTS else ""))
            row = _run_variant(name, mod, args, variant, cold_dir if variant != "aten+triton" else
                               os.path.join(kernel_dir, "unused"), log, kernels)
            if variant == "aten+triton":
                base = row
            elif base is not None:
                row["speedup_vs_aten_triton"] = base["ms"] / row["ms"]
                row["loop_speedup_vs_aten_triton"] = base["loop_ms"] / row["loop_ms"]
                row["compile_ratio_vs_aten_triton"] = row["compile_s"] / base["compile_s"]
                log(f"{'':14s} {'':14s} speedup {row['speedup_vs_aten_triton']:.3f}x (back to back "
                    f"{row['loop_speedup_vs_aten_triton']:.3f}x), compile time "
                    f"{row['compile_ratio_vs_aten_triton']:.2f}x of aten+triton")
            rows.append(row)
    return rows


def bench_inductor_isolated(tokens: int = 4096, d: int = 4096, hidden: int = 14336, dtype: str = "bfloat16",
                            blocks=("mlp", "swiglu", "attn_out_proj"), log=print, loss_rows: bool = False,
                            rounds: int = 1, rows_between=None) -> list:
    """Each (block, variant) in a fresh process, in the order aten+triton, cutedsl cold, cutedsl
    warm, aten+triton again: compile wall times in one process depend on what compiled before
    (Inductor's compile workers, Triton caches), so here every variant starts alike. The second
    baseline shows the run-to-run spread. Ratios against the mean of the block's baselines.
    ``loss_rows`` adds the forced-loss row before the last baseline. ``rounds`` repeats that
    order (each round with an empty kernel cache) and ends with each variant's median.
    ``rows_between``: the variants between the two baselines instead of those. Every row lists its
    kernels' device time per call (the profiler runs last in each process)."""
    import json
    import subprocess
    import sys

    rows = []
    for block in blocks:
        block_rows = []
        order = ("aten+triton", "cutedsl cold", "cutedsl warm") + ((FORCED_LOSS_ATEN,) if loss_rows else ()) + (
            "aten+triton",)
        if rows_between:
            order = ("aten+triton", *rows_between, "aten+triton")
        for round_ in range(rounds):
            kernel_root = tempfile.mkdtemp(prefix="cutedsl-bench-kernels-")  # cold rows start empty
            for variant in order:
                out = os.path.join(kernel_root, f"{block}-{len(block_rows)}.json")
                cmd = [sys.executable, "-m", "cutedsl_backend", "bench-inductor", "--tokens", str(tokens), "--d",
                       str(d), "--hidden", str(hidden), "--dtype", dtype, "--blocks", block, "--variants", variant,
                       "--kernel-dir", kernel_root, "--kernels", "--json", out]
                p = subprocess.run(cmd, capture_output=True, text=True)
                if p.returncode != 0:
                    log(f"{block} {variant}: failed\n{p.stderr[-2000:]}")
                    continue
                for line in p.stdout.splitlines():
                    log(line)
                new_rows = json.load(open(out))
                for r in new_rows:
                    r["round"] = round_
                block_rows += new_rows
        for line in block_summary(block, block_rows, medians=rounds > 1):
            log(line)
        rows += block_rows
    return rows


def block_summary(block: str, block_rows: list, medians: bool = False) -> list:
    """Ratios of one block's isolated rows against the mean of its aten+triton rows, set on each
    row, and the lines that report them: the timed call (``speedup_vs_aten_triton``), calls issued
    back to back (``loop_speedup_vs_aten_triton``, where the rows have ``loop_ms``), its compile
    (``compile_ratio_vs_aten_triton``) and, where the rows list their kernels, the GPU time
    (``gpu_us``: the kernels' device time per call; ``gpu_speedup_vs_aten_triton``). A timed call
    also holds time no kernel accounts for (the CUDA-graph replay's launch and the gaps between its
    kernels, host work the GPU waits for, the L2 flushed before it): the same code in every
    variant, but its time varies from one process to the next; the kernels' time is what the block
    costs inside a model's graph.
    ``medians``: also each variant's median over its rows."""
    import statistics

    base = [r for r in block_rows if r["variant"] == "aten+triton"]
    if not base:
        return []
    for r in block_rows:
        if r.get("kernels"):
            r["gpu_us"] = sum(k["us"] for k in r["kernels"])
    ms = sum(r["ms"] for r in base) / len(base)
    cs = sum(r["compile_s"] for r in base) / len(base)
    gpu = [r["gpu_us"] for r in base if "gpu_us" in r]
    loop = [r["loop_ms"] for r in base if "loop_ms" in r]
    lines = []
    for r in block_rows:
        r["speedup_vs_aten_triton"] = ms / r["ms"]
        r["compile_ratio_vs_aten_triton"] = r["compile_s"] / cs
        gpu_text = ""
        if loop and "loop_ms" in r:
            r["loop_speedup_vs_aten_triton"] = sum(loop) / len(loop) / r["loop_ms"]
            gpu_text = f", back to back {r['loop_ms']:.4f} ms ({r['loop_speedup_vs_aten_triton']:.3f}x)"
        if gpu and "gpu_us" in r:
            r["gpu_speedup_vs_aten_triton"] = sum(gpu) / len(gpu) / r["gpu_us"]
            gpu_text += f", GPU {r['gpu_us']:.1f} us ({r['gpu_speedup_vs_aten_triton']:.3f}x)"
        lines.append(f"{block:14s} {r['variant']:14s} {r['ms']:.4f} ms/call ({r['speedup_vs_aten_triton']:.3f}x)"
                     f"{gpu_text}, compile {r['compile_s']:.2f} s ({r['compile_ratio_vs_aten_triton']:.2f}x)")
    if medians:
        for variant in dict.fromkeys(r["variant"] for r in block_rows):
            mine = [r for r in block_rows if r["variant"] == variant]
            gpu_mine = [r["gpu_speedup_vs_aten_triton"] for r in mine if "gpu_speedup_vs_aten_triton" in r]
            loop_mine = [r["loop_speedup_vs_aten_triton"] for r in mine if "loop_speedup_vs_aten_triton" in r]
            lines.append(f"{block:14s} {variant:14s} median of {len(mine)}: "
                         f"{statistics.median(r['speedup_vs_aten_triton'] for r in mine):.3f}x block"
                         + (f", {statistics.median(loop_mine):.3f}x back to back" if loop_mine else "")
                         + (f", {statistics.median(gpu_mine):.3f}x GPU time" if gpu_mine else "")
                         + f", compile {statistics.median(r['compile_ratio_vs_aten_triton'] for r in mine):.2f}x "
                         f"(max {max(r['compile_ratio_vs_aten_triton'] for r in mine):.2f}x)")
    return lines


def _compile_phases() -> dict:
    """Seconds spent so far in each phase Dynamo and Inductor time (their own metrics, by name),
    less Dynamo's numbered retry wrapper (``compile_attempt_<n>``: the span of
    ``_compile.compile_inner`` again, not a phase of its own)."""
    from torch._dynamo.utils import compilation_time_metrics

    return {name: sum(times) for name, times in compilation_time_metrics.items()
            if not re.fullmatch(r"compile_attempt_\d+", name)}


def _phase_delta(before: dict, top: int = 15) -> dict:
    """The phases of the compile since ``before`` (the ``top`` longest, at least 10 ms; phases
    nest, so their times overlap): where a compile's time went beside another variant's."""
    grown = {name: t - before.get(name, 0.0) for name, t in _compile_phases().items()}
    kept = sorted(((name, t) for name, t in grown.items() if t >= 0.01), key=lambda item: -item[1])[:top]
    return {name: round(t, 3) for name, t in kept}


def _phases_text(phases: dict) -> str:
    return "; ".join(f"{name} {t:.2f}" for name, t in phases.items()) or "none recorded"


def _cudagraph_skips() -> int:
    """How often Inductor has decided against CUDA graphs in this process (its own counter): a
    row measured without them pays launch overhead the other rows may not."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])
