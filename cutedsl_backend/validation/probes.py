"""Focused GPU probes behind configuration choices in ``configs`` and the design notes (the CLI's
``probe-*`` commands): where a GEMM's time goes at the power cap (clock and power, or work per
clock), tile and cluster candidates sustained against the defaults and the peers, an interleaved
A/B of the fused residual epilogue, the compile worker pool's start-up cost to the compiling
process, the rate at which the memory lets a kernel read a weight (the few-token ceiling), and how
much of the peer's speed comes from reducing in reduced precision.
The routine measuring (validate, bench, sweeps) lives in ``bench`` and ``runner``."""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import time

from ..configs import GemmConfig


def sustained(fn, seconds: float, sampler, calls: int = 20) -> dict:
    """Replay a graph of ``calls`` launches of ``fn`` for ``seconds``; device ms per call and the
    samples taken over the second half (the clock settles after the first)."""
    import torch

    from .bench import graph_of
    from .power import summarize

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


def power_cases():
    import torch

    import cutedsl_backend as cb
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
    import torch

    from .power import PowerSampler, tensor_utilisation

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


TILE_SETS = {
    "clusters": {
        "b_major": "n",
        "bf16": [GemmConfig(128, 256, cluster_m=2), GemmConfig(128, 256, cluster_m=2, cluster_n=2),
                 GemmConfig(256, 128, cluster_n=2), GemmConfig(256, 128, cluster_m=2, cluster_n=2)],
        "fp8 fast": [GemmConfig(128, 256, cluster_m=2), GemmConfig(128, 256, cluster_m=2, cluster_n=2)],
        "fp8 precise": [GemmConfig(128, 192, cluster_m=2), GemmConfig(128, 192, cluster_m=2, cluster_n=2)],
    },
    "wide": {
        "b_major": "k",
        "bf16": [GemmConfig(128, 256, cluster_m=2), GemmConfig(128, 320, cluster_m=2),
                 GemmConfig(128, 320, cluster_n=2)],
        "fp8 fast": [GemmConfig(128, 256, cluster_m=2), GemmConfig(128, 320, cluster_m=2),
                     GemmConfig(128, 320, cluster_n=2)],
        "fp8 precise": [],
        "fp8 scales": ("tensorwise", "rowwise"),
    },
}


def bf16_operands(m, n, k, b_major):
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if b_major == "k":
        return a, torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return a, torch.randn(k, n, device="cuda", dtype=torch.bfloat16)


def check_tile_numerics(cand) -> bool:
    import torch

    import cutedsl_backend as cb

    from ..epilogue import reference
    from .tolerances import compare, compare_fp8

    ok = True
    for (m, n, k) in ((1100, 2056, 784), (2, 4104, 528)):  # tile counts odd in M and N; one M tile
        a, b = bf16_operands(m, n, k, cand["b_major"])
        ref = a.double() @ b.double()
        for cfg in cand["bf16"]:
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            r = compare(cb.gemm(a, b, config=cfg, out=out), ref, "bfloat16", k)
            ok &= bool(r["ok"])
            print(f"numerics bf16 {m}x{n}x{k} {cfg.name}: {'ok' if r['ok'] else 'FAILED'} {r}", flush=True)
        a8 = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
        b8 = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn).t()
        sa, sb = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
        ref8 = reference(a8.double() @ b8.double(), scale_a=sa.double(), scale_b=sb.double())
        for fast, cfgs in ((True, cand["fp8 fast"]), (False, cand["fp8 precise"])):
            for cfg in cfgs:
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                cb.scaled_mm(a8, b8, sa, sb, config=cfg, out=out, use_fast_accum=fast)
                r = compare_fp8(out, ref8, "bfloat16", k, fast_accum=fast)
                ok &= bool(r["ok"])
                print(f"numerics fp8 {'fast' if fast else 'precise'} {m}x{n}x{k} {cfg.name}: "
                      f"{'ok' if r['ok'] else 'FAILED'} {r}", flush=True)
    return ok


def tile_cases(cand):
    import torch

    import cutedsl_backend as cb
    out = []
    for (m, n, k) in ((4096, 14336, 4096), (8192, 8192, 8192), (4096, 4096, 14336)):
        shape = f"{m}x{n}x{k}"
        a, b = bf16_operands(m, n, k, cand["b_major"])
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        out.append((shape, "bf16", "cuBLAS", lambda a=a, b=b, c=c: torch.matmul(a, b, out=c)))
        for cfg in cand["bf16"]:
            out.append((shape, "bf16", cfg.name, lambda a=a, b=b, c=c, cfg=cfg: cb.gemm(a, b, config=cfg, out=c)))
        a8 = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b8 = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        scales = {"tensorwise": (torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")),
                  "rowwise": (torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5)}
        for fast, cfgs in ((True, cand["fp8 fast"]), (False, cand["fp8 precise"])):
            for kind in cand.get("fp8 scales", ("tensorwise",)) if cfgs else ():
                sa, sb = scales[kind]
                mode = ("fast" if fast else "precise") + ("" if kind == "tensorwise" else " rowwise")
                out.append((shape, "fp8", f"torch._scaled_mm {mode}", lambda a=a8, b=b8, sa=sa, sb=sb, fast=fast:
                            torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                             use_fast_accum=fast)))
                for cfg in cfgs:
                    out.append((shape, "fp8", f"{mode} {cfg.name}",
                                lambda a=a8, b=b8, c=c, sa=sa, sb=sb, fast=fast, cfg=cfg:
                                cb.scaled_mm(a, b, sa, sb, config=cfg, out=c, use_fast_accum=fast)))
    return out


def tile_ab(set_name: str, seconds: float = 2.0) -> list:
    """Numerics of each candidate of ``TILE_SETS[set_name]`` on tail shapes, then each candidate and
    the peers sustained for ``seconds`` (``run_cases``); [] (and a message) when a numerics check
    fails."""
    cand = TILE_SETS[set_name]
    if not check_tile_numerics(cand):
        print("probe-tiles: a numerics check failed; not timing")
        return []
    return run_cases(tile_cases(cand), seconds)


def epilogue_ab(rounds: int = 5, names=None) -> dict:
    """Interleaved A/B of the fused residual epilogue across configs (4096x14336x4096 bf16): each
    round times every case once (CUDA-graph medians), so clock drift hits all alike; against
    cuBLAS bare, ``torch.addmm`` and eager ``mm + residual``. Returns {case: median ms}."""
    import torch

    import cutedsl_backend as cb

    from .bench import _graph_ms

    m, n, k = 4096, 14336, 4096
    names = names or ["sm90a_cooperative_128x256xauto_c2x1_sauto_rn8", "sm90a_pingpong_128x128xauto_c2x1_sauto_rn8"]
    cfgs = [GemmConfig.from_name(x) for x in names]
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    res = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cases = {"cublas bare": lambda: torch.matmul(a, b), "cublas addmm(res)": lambda: torch.addmm(res, a, b),
             "eager mm + res": lambda: torch.matmul(a, b) + res}
    for c in cfgs:
        cases[f"ours bare {c.name}"] = lambda c=c: cb.gemm(a, b, config=c, out=out)
        cases[f"ours residual {c.name}"] = lambda c=c: cb.gemm(a, b, residual=res, config=c, out=out)
    cases["ours residual default"] = lambda: cb.gemm(a, b, residual=res, out=out)
    times: dict = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            times[name].append(_graph_ms(fn))
    base = statistics.median(times[f"ours bare {cfgs[0].name}"])
    medians = {}
    for name, ts in times.items():
        t = medians[name] = statistics.median(ts)
        print(f"{name:70s} {t:.4f} ms  {2 * m * n * k / t / 1e9:7.1f} TFLOP/s  vs our bare {t / base - 1:+.1%}")
    return medians


def worker_pool_contention(workers: int = 8) -> dict:
    """How starting the compile worker pool slows the compiling process (CPU only): a CPU-bound
    loop (a stand-in for Dynamo's trace) alone, then while ``workers`` workers start, and how long
    until all are ready. Compare $CUTEDSL_WORKER_FORK=1 (forked from a zygote) against 0 (spawned)."""
    from .. import compiler

    def cpu_work() -> float:
        t = time.perf_counter()
        x = 0
        for i in range(6_000_000):
            x += i * i % 7
        return time.perf_counter() - t

    alone = cpu_work()
    t0 = time.perf_counter()
    pool = compiler.WorkerPool(workers)
    ready = [pool.submit(None) for _ in range(workers)]
    beside = cpu_work()
    for f in ready:
        f.result(timeout=300)
    row = {"fork": os.environ.get("CUTEDSL_WORKER_FORK", "1"), "alone_s": alone, "beside_s": beside,
           "ready_s": time.perf_counter() - t0}
    print(f"CUTEDSL_WORKER_FORK={row['fork']}: CPU work alone {alone:.2f} s, beside the pool's start "
          f"{beside:.2f} s; {workers} workers ready after {row['ready_s']:.2f} s")
    return row


def bandwidth_ceiling(sizes_mb=(256, 512, 1024), ms=(1, 16), k: int = 4096, rounds: int = 5, log=print) -> list:
    """How fast this GPU's memory lets a kernel read a weight, the ceiling of a few-token GEMM: per
    bf16 weight of ``sizes_mb`` MiB (N x ``k``, N-major rows as nn.Linear stores them), the device time
    (CUDA-graph replay, the calls alternated in ``rounds``) of torch's reductions over it (a sum and
    a max: each reads the weight once), a copy (reads and writes it), cuBLAS's ``torch.matmul`` and
    our ``gemm`` at ``ms`` tokens. Rows: the call, the bytes it moves, median ms and the rounds'
    range, TB/s. A GEMM at the reductions' rate is at what the memory gives a read-only kernel."""
    import torch

    rows = []
    for size in sizes_mb:
        rows += _bandwidth_rows(size, ms, k, rounds, log)
        torch.cuda.empty_cache()
    return rows


def _bandwidth_rows(size: int, ms, k: int, rounds: int, log) -> list:
    import torch

    import cutedsl_backend as cb

    from .bench import alternated_graph_ms

    g = torch.Generator(device="cuda").manual_seed(2026 + size)
    n = size * 2 ** 20 // (2 * k)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    copy = torch.empty_like(w)
    weight_bytes = w.numel() * 2
    calls = {"sum (reads)": (lambda: torch.sum(w, dtype=torch.float32), weight_bytes),
             "amax (reads)": (lambda: torch.amax(w), weight_bytes),
             "copy (reads + writes)": (lambda: copy.copy_(w), 2 * weight_bytes)}
    for m in ms:
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        peer_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        moved = weight_bytes + 2 * (m * k + m * n)
        calls[f"torch.matmul M={m}"] = (lambda a=a, o=peer_out: torch.matmul(a, w.t(), out=o), moved)
        calls[f"ours gemm M={m}"] = (lambda a=a, o=out: cb.gemm(a, w.t(), out=o), moved)
    timed = alternated_graph_ms({name: fn for name, (fn, _) in calls.items()}, rounds)
    rows = []
    for name, (_, moved) in calls.items():
        t, runs = timed[name]["ms"], timed[name]["runs"]
        row = {"weight_mb": size, "n": n, "k": k, "call": name, "bytes": moved, "ms": t,
               "ms_range": [min(runs), max(runs)], "tbps": moved / (t * 1e9)}
        rows.append(row)
        log(f"{size:5d} MiB  {name:24s} {t:.4f} ms ({row['ms_range'][0]:.4f}-{row['ms_range'][1]:.4f})  "
            f"{row['tbps']:.2f} TB/s")
    return rows


# torch's switches that let cuBLAS reduce a 16-bit GEMM's partial sums in reduced precision (on by
# default): a split-K kernel may then add its slices in the output's precision, faster and less exact
REDUCED_PRECISION_FLAGS = {"float16": "allow_fp16_reduced_precision_reduction",
                           "bfloat16": "allow_bf16_reduced_precision_reduction"}


@contextlib.contextmanager
def _reduced_precision(dtype: str, allowed: bool):
    """``dtype``'s reduced-precision reductions allowed or not (a bool: split-K allowed too) while
    inside; then torch's whole setting as before (since torch 2.10 a pair, reduced precision and
    split-K, of which the property reads only the first)."""
    import torch

    flags = torch.backends.cuda.matmul
    name = REDUCED_PRECISION_FLAGS[dtype]
    full = getattr(torch._C, f"_get_cublas_{name}", None)
    before = full() if full is not None else getattr(flags, name)
    setattr(flags, name, allowed)
    try:
        yield
    finally:
        setattr(flags, name, before)


def peer_precision(shapes, dtypes=("float16", "bfloat16"), rounds: int = 5, log=print) -> list:
    """Where the peer's speed comes from its reduction's precision: per ``shapes`` (M, N, K; B =
    W^T as nn.Linear stores W) and 16-bit dtype, ``torch.matmul`` as torch's defaults run it
    (reduced-precision reductions allowed), the same with them disallowed (every partial sum added
    in fp32, as our kernels do), and our ``gemm``; device time (CUDA-graph replay, alternated in
    ``rounds``; cuBLAS picks its kernel when the graph is captured, under the switch as set then)
    and each result's error against float64. Rows: the call, median ms and the rounds' range, the
    ratio against the default peer, rel. L2 error."""
    import torch

    import cutedsl_backend as cb

    from .bench import alternated_graph_ms

    rows = []
    for (m, n, k), dtype in itertools.product(shapes, dtypes):
        g = torch.Generator(device="cuda").manual_seed(2026 + m + n + k)
        dt = getattr(torch, dtype)
        a = torch.randn(m, k, device="cuda", generator=g).to(dt)
        b = torch.randn(n, k, device="cuda", generator=g).to(dt).t()
        names = ("torch.matmul (torch's defaults)", "torch.matmul (fp32 reductions only)", "ours gemm")
        outs = {name: torch.empty(m, n, device="cuda", dtype=dt) for name in names}

        def peer(allowed, o):
            def call():
                with _reduced_precision(dtype, allowed):
                    torch.matmul(a, b, out=o)
            return call

        calls = {names[0]: peer(True, outs[names[0]]), names[1]: peer(False, outs[names[1]]),
                 names[2]: lambda o=outs[names[2]]: cb.gemm(a, b, out=o)}
        ref = a.double() @ b.double()
        errors = {}
        for name, fn in calls.items():
            outs[name].fill_(float("nan"))
            fn()
            errors[name] = float((outs[name].double() - ref).norm() / ref.norm())
        timed = alternated_graph_ms(calls, rounds)
        base = timed[names[0]]["ms"]
        for name in calls:
            t, runs = timed[name]["ms"], timed[name]["runs"]
            row = {"m": m, "n": n, "k": k, "dtype": dtype, "call": name, "ms": t, "ms_range": [min(runs), max(runs)],
                   "peer_default_ms_over_this": base / t, "rel_l2_vs_fp64": errors[name]}
            rows.append(row)
            log(f"{m}x{n}x{k} {dtype:8s} {name:36s} {t * 1e3:8.2f} us ({min(runs) * 1e3:.2f}-{max(runs) * 1e3:.2f})"
                f"  {row['peer_default_ms_over_this']:.3f}x  rel_l2 {errors[name]:.2e}")
    return rows


# (dtype, config, a shape whose launch reaches past the output's edge, a shape of the same launch that
# does not): clusters of two along M over 7 and 8 tile rows (896 / 1024 tokens) or 5 and 6 (640 /
# 768, 320 / 384 with 64-row tiles), along N over 5 and 6 tile columns (the weights' rows 576 / 768):
# CTAs wholly past the edge; and swap-AB tiles 96 and 160 tokens wide at 80 and 144 tokens: a last
# tile partly past it (its operand boxes zero-filled in part)
PADDING_CASES = (
    ("fp8_tensorwise", "sm90a_cooperative_128x128xauto_c2x1_sauto_rn8", (896, 8192, 29568), (1024, 8192, 29568)),
    ("fp8_tensorwise", "sm90a_cooperative_128x128xauto_c2x1_sauto_rn8", (896, 14336, 4096), (1024, 14336, 4096)),
    ("fp8_tensorwise", "sm90a_pingpong_64x192xauto_c2x1_sauto_rn8", (320, 4608, 4096), (384, 4608, 4096)),
    ("bfloat16", "sm90a_cooperative_128x192xauto_c2x1_sauto_rm8", (896, 4608, 3584), (1024, 4608, 3584)),
    ("bfloat16", "sm90a_cooperative_128x128xauto_c2x1_sauto_rn8", (640, 4096, 4096), (768, 4096, 4096)),
    ("bfloat16", "sm90a_cooperative_128x128xauto_c1x2_sauto_rm8", (4096, 576, 7168), (4096, 768, 7168)),
    ("bfloat16", "sm90a_pingpong_64x96xauto_c1x1_sauto_rn8_swap", (80, 4608, 3584), (96, 4608, 3584)),
    ("fp8_tensorwise", "sm90a_pingpong_64x96xauto_c1x1_sauto_rn8_swap", (80, 6144, 4096), (96, 6144, 4096)),
    ("fp8_tensorwise", "sm90a_pingpong_64x160xauto_c1x1_sauto_rn8_swap", (144, 4608, 3584), (160, 4608, 3584)),
)


def cluster_padding(rounds: int = 5, cases=PADDING_CASES, log=print) -> list:
    """What loads past the output's edge cost: a cluster's CTAs wholly past it (which load the last
    tile's operands instead: kernels.scheduler.loaded_tile) and a last tile partly past it. Per
    ``cases`` entry (:data:`PADDING_CASES`), one config at a shape whose launch reaches past the
    edge and at one of the same launch (tiles, clusters, waves) that does not, each result first
    checked against float64, then ours and the peer (cuBLAS / torch._scaled_mm, tensorwise scales)
    timed in alternation (CUDA-graph replay, ``rounds``). Were those loads as cheap as in-bounds
    ones, the smaller shape would run as fast as the larger, never slower. Rows: the case, shape,
    median ms and range, ratio vs the peer, the numerics check."""
    from .bench import alternated_graph_ms
    from .probe_configs import probe_calls, probe_operands

    rows = []
    for dtype, name, *shapes in cases:
        cfg = GemmConfig.from_name(name)
        calls, checks = {}, {}
        for m, n, k in shapes:
            probe = probe_calls(probe_operands(dtype, m, n, k), cfg)
            checks[(m, n, k)] = probe.check()
            calls[("ours", m, n, k)], calls[("peer", m, n, k)] = probe.ours, probe.peer
        timed = alternated_graph_ms(calls, rounds)
        for m, n, k in shapes:
            us, them = timed[("ours", m, n, k)], timed[("peer", m, n, k)]
            row = {"dtype": dtype, "config": name, "m": m, "n": n, "k": k, "ours_ms": us["ms"],
                   "ours_range": [min(us["runs"]), max(us["runs"])], "peer_ms": them["ms"],
                   "ratio": them["ms"] / us["ms"], "correct": bool(checks[(m, n, k)]["ok"])}
            rows.append(row)
            lo, hi = row["ours_range"]
            log(f"{dtype:15s} {name:48s} {m}x{n}x{k}: ours {us['ms'] * 1e3:8.1f} us ({lo * 1e3:.1f}-{hi * 1e3:.1f}), "
                f"peer {them['ms'] * 1e3:8.1f} us, {row['ratio']:.3f}x, {'correct' if row['correct'] else 'WRONG'}")
        smaller, larger = rows[-2], rows[-1]
        log(f"  smaller / larger shape: ours {smaller['ours_ms'] / larger['ours_ms']:.3f}, "
            f"peer {smaller['peer_ms'] / larger['peer_ms']:.3f}")
    return rows
