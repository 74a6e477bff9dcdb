"""Tuning sweeps: every candidate config timed on the GPU beside the peer (the data the config
rules and the cost models are fitted on), and the worker precompile they start with."""

from __future__ import annotations

import os
import statistics
import time
from typing import Optional

from .bench import _graph_ms, epilogue_operands, geomean, tflops
from .sweep_spaces import (
    cluster_candidates,
    decode_candidates,
    mid_candidates,
    prior_candidates,
    swap_candidates,
    sweep_problem,
    wave_candidates,
)


def precompile(pairs: list, workers: Optional[int] = None) -> list:
    """Compile (problem, config[, epilogue spec]) tuples into the disk cache, in the compile
    worker processes (workers.WorkerPool); one (config name, compile seconds, error) per pair."""
    from ..compiler import WorkerPool, cache_dir, get_kernel

    workers = workers or max(1, min(len(pairs), (os.cpu_count() or 2)))
    futures = None
    if workers > 1 and len(pairs) > 1:
        pool = WorkerPool(workers)
        futures = [pool.submit(p[0], p[1], p[2] if len(p) > 2 else None, str(cache_dir())) for p in pairs]
    out = []
    for i, p in enumerate(pairs):
        try:
            seconds = futures[i].result()[1] if futures else get_kernel(*p).compile_seconds
            out.append((p[1].name, seconds, None))
        except Exception as e:  # reported by the caller
            out.append((p[1].name, 0.0, f"{type(e).__name__}: {e}"))
    return out


def sweep(shapes, dtype="bfloat16", configs=None, log=print, workers=None) -> dict:
    """Time every valid config on every shape (one compile per config, shape-generic kernels)."""
    import torch

    import cutedsl_backend as cb

    from ..configs import valid_configs
    from ..problem import GemmProblem

    tdt = getattr(torch, dtype)
    probe = GemmProblem(4096, 4096, 4096, 1, dtype, dtype, "k", "n", "sm90a")
    cfgs = configs or valid_configs(probe)
    t0 = time.time()
    res = precompile([(probe, c) for c in cfgs], workers)
    failed = [r for r in res if r[2]]
    log(f"precompiled {len(cfgs)} configs in {time.time() - t0:.1f}s; {len(failed)} failed")
    for r in failed:
        log("  compile failed:", r)
    out = {}
    for (m, n, k) in shapes:
        a = torch.randn(m, k, device="cuda").to(tdt)
        b = torch.randn(k, n, device="cuda").to(tdt)
        o = torch.empty(m, n, device="cuda", dtype=tdt)
        t_torch = _graph_ms(lambda: torch.matmul(a, b, out=o))
        times = []
        for c in cfgs:
            if any(f[0] == c.name for f in failed):
                continue
            try:
                cb.gemm(a, b, config=c, out=o)
                times.append((_graph_ms(lambda: cb.gemm(a, b, config=c, out=o)), c))
            except Exception as e:
                log(f"  {c.name} on {m}x{n}x{k}: {type(e).__name__}: {str(e)[:200]}")
        times.sort(key=lambda x: x[0])
        out[(m, n, k)] = {"torch_ms": t_torch, "ranked": [(t, c.name) for t, c in times]}
        best = times[0]
        log(f"{m}x{n}x{k}: cuBLAS {tflops(m, n, k, t_torch):.1f} TFLOP/s; best {best[1].name} "
            f"{tflops(m, n, k, best[0]):.1f} ({t_torch / best[0]:.3f}x); top5: "
            + ", ".join(f"{c.name}={t_torch / t:.3f}" for t, c in times[:5]))
    return out


def _sweep_configs(problem, cfgs: list, variants: dict, call, peers: dict, log=print, workers=None) -> dict:
    """Time ``call(cfg, **variant)`` for every (variant, config) next to ``peers`` (name -> fn),
    CUDA-graph medians in one process. ``variants``: name -> (EpilogueSpec, call kwargs).
    Returns {"peers_ms": {...}, variant: [(ms, config name), ...] best first}."""
    t0 = time.time()
    res = precompile([(problem, c, spec) for spec, _ in variants.values() for c in cfgs], workers)
    failed = {r[0] for r in res if r[2]}
    log(f"precompiled {len(res)} kernels in {time.time() - t0:.1f}s; {len(failed)} failed")
    out: dict = {"peers_ms": {name: _graph_ms(fn) for name, fn in peers.items()}}
    for vname, (_, kw) in variants.items():
        times = []
        for c in cfgs:
            try:
                call(c, **kw)
                times.append((_graph_ms(lambda: call(c, **kw)), c.name))
            except Exception as e:  # reported, not fatal: one config must not end the sweep
                log(f"  {vname} {c.name}: {type(e).__name__}: {str(e)[:160]}")
        times.sort()
        out[vname] = times
        log(f"{vname:16s} best {times[0][1] if times else '-'} {times[0][0] if times else 0:.4f} ms; top: "
            + ", ".join(f"{n}={t:.4f}" for t, n in times[:4]))
    log("peers (ms): " + ", ".join(f"{k}={v:.4f}" for k, v in out["peers_ms"].items()))
    return out


def sweep_epilogue(m=4096, n=14336, k=4096, dtype="bfloat16", configs=None, log=print, only=None) -> dict:
    """Every fused variant of bench_epilogues (``only``: these names) on each config (default: the
    heuristic's top 6 and every valid ping-pong config), beside cuBLAS, cuBLASLt's fused
    bias+activation and eager."""
    import torch
    import torch.nn.functional as F

    import cutedsl_backend as cb

    from ..configs import rank_configs
    from ..epilogue import EpilogueSpec
    from ..problem import GemmProblem

    problem = GemmProblem(m, n, k, 1, dtype, dtype, "k", "n", "sm90a")
    ranked = rank_configs(problem)
    cfgs = configs or (ranked[:6] + [c for c in ranked[6:] if c.schedule == "pingpong" and c.raster == "n"
                                     and c.tile_m * c.tile_n >= 64 * 128])
    a, b, bias, res, out = epilogue_operands(m, n, k, dtype)
    variants = {
        "bare": (EpilogueSpec(), {}),
        "bias+relu": (EpilogueSpec("relu", bias="col", bias_dtype=dtype), dict(bias=bias, activation="relu")),
        "bias+gelu_tanh": (EpilogueSpec("gelu_tanh", bias="col", bias_dtype=dtype),
                           dict(bias=bias, activation="gelu_tanh")),
        "bias+silu": (EpilogueSpec("silu", bias="col", bias_dtype=dtype), dict(bias=bias, activation="silu")),
        "residual": (EpilogueSpec(residual=True, residual_dtype=dtype, residual_aligned=True), dict(residual=res)),
    }
    if only:
        unknown = set(only) - set(variants)
        if unknown:
            raise ValueError(f"unknown variants {sorted(unknown)}: choose from {sorted(variants)}")
        variants = {k: v for k, v in variants.items() if k in only}
    peers = {"cublas": lambda: torch.matmul(a, b),
             "cublaslt_bias_relu": lambda: torch._addmm_activation(bias, a, b, use_gelu=False),
             "cublaslt_bias_gelu_tanh": lambda: torch._addmm_activation(bias, a, b, use_gelu=True),
             "eager_bias_silu": lambda: F.silu(torch.matmul(a, b) + bias),
             "eager_residual": lambda: torch.matmul(a, b) + res}
    return _sweep_configs(problem, cfgs, variants, lambda c, **kw: cb.gemm(a, b, config=c, out=out, **kw),
                          peers, log)


def sweep_fp8(m, n, k, log=print, only=None, modes=(True, False)) -> dict:
    """scaled_mm e4m3 -> bf16 on every valid config (``only``: those whose name contains one of
    these strings), tensorwise/rowwise x fast/precise (``modes``: the fast_accum values), beside
    torch._scaled_mm in the same mode."""
    import torch

    import cutedsl_backend as cb

    from ..configs import valid_configs
    from ..epilogue import EpilogueSpec
    from ..problem import GemmProblem

    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    scales = {"tensorwise": (torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")),
              "rowwise": (torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5)}
    result = {}
    for fast in modes:
        problem = GemmProblem(m, n, k, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a", fast_accum=fast)
        cfgs = [c for c in valid_configs(problem) if c.raster == "n"
                and (not only or any(s in c.name for s in only))]
        variants = {kind: (EpilogueSpec(scale_a="scalar" if kind == "tensorwise" else "row",
                                        scale_b="scalar" if kind == "tensorwise" else "col"),
                           dict(sa=sa, sb=sb)) for kind, (sa, sb) in scales.items()}
        peers = {f"torch_{kind}": (lambda sa=sa, sb=sb: torch._scaled_mm(
            a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast))
            for kind, (sa, sb) in scales.items()}
        log(f"--- fp8 {m}x{n}x{k} {'fast' if fast else 'precise'}: {len(cfgs)} configs")
        result["fast" if fast else "precise"] = _sweep_configs(
            problem, cfgs, variants,
            lambda c, sa, sb: cb.scaled_mm(a, b, sa, sb, out=out, config=c, use_fast_accum=fast), peers, log)
    return result


def sweep_decode(ms=(1, 8, 16, 32, 48, 64), log=print, workers=None, space: str = "decode", models=None,
                 dtype: str = "bfloat16", checkpoint=None, device: str = "cuda", timer=None,
                 stream_k: bool = False, prior=None, gpu: Optional[str] = None) -> list:
    """Every candidate of ``space`` ("decode": :func:`decode_candidates`, "mid":
    :func:`mid_candidates`, "swap": :func:`swap_candidates`, "prior": per cell the
    :func:`prior_candidates` of the table ``prior``, "clusters": per cell
    :func:`cluster_candidates` against ``prior``, this GPU's own table, "waves": per cell
    :func:`wave_candidates` against ``prior`` above the few-token range, only the cells with
    more than one candidate (a width that fills the waves better, or the models' pick beside an
    entry measured at another M); these two each timed as the dispatcher runs it,
    configs.as_run, and recorded under its tiling's name) on every unique projection of the
    public models (or of ``models``; nn.Linear layout) at each M, next to the peer, CUDA-graph
    device time: the data configs.DecodeModel, MidModel and SwapModel are fitted on. ``dtype``:
    "bfloat16" (peer: cuBLAS through torch.matmul), "fp8_tensorwise" (e4m3 -> bf16, scalar scales,
    every k-tile added in fp32: torch._scaled_mm's default, as the validation's perf sweep runs it)
    or "fp8_tensorwise_fast" (the same with fast accumulation, on both sides; peer:
    torch._scaled_mm). Logs per shape the default pick's speed
    against the best candidate's; returns rows {m, n, k, dtype, peer_ms, pick, times: {config name: ms}}
    (also given to ``checkpoint``, if set, after each row). ``pick`` is the cost models' choice (no
    measured table: the tables, configs.measured, are made from these rows). Each candidate's
    result (into a NaN-poisoned output) is first held to the tolerance policy against float64; a
    wrong one (or one that raises) is logged, left out of the times and listed in the row's
    ``wrong`` {config name: relative L2}, so a table never names it. ``device`` and ``timer`` (ms
    per call of a function; default CUDA-graph replay) let a CPU test run its logic. ``stream_k``:
    also each unswapped candidate without K slices in its stream-K form (GemmConfig.stream_k; no model
    ranks those, and on the H100 and H200 they measured slower than the candidates they vary).
    Above the few-token range every cell also times the entry each measured table serving GPU
    model ``gpu`` holds for it (default: this device's; configs.measured, its own tables and those it
    borrows, a borrowed entry hidden by its own included), recorded in the row's ``served``
    {config name: [table GPU model, measured M]}: a table made from the rows has timed the entries
    it replaces beside the candidates."""
    import torch

    import cutedsl_backend as cb

    from ..configs import default_config, is_valid, rank_configs
    from ..configs.as_run import as_run
    from ..configs.config import DECODE_MAX_M, decode_a_rows
    from ..configs.measured import MEASURED
    from .model_shapes import MODEL_PROJECTIONS, unique_shapes
    from .shape_sweep import _graph_ms
    from .tolerances import compare, compare_fp8

    def timed(fn):  # a function giving fn's ms per call (a CUDA graph made once, replayed per call)
        return _graph_ms(fn) if timer is None else (lambda: timer(fn))

    _, spec = sweep_problem(dtype, 1, 1, 1)  # (checks the dtype)
    fp8 = dtype.startswith("fp8")
    fast = dtype == "fp8_tensorwise_fast"
    projections = unique_shapes(p for p in MODEL_PROJECTIONS if models is None or p.model in models)
    measured_here = ("clusters", "waves")  # spaces against this GPU's own table, timed as run
    if gpu is None and str(device).startswith("cuda"):
        gpu = torch.cuda.get_device_name(torch.device(device))

    def served_entries(problem) -> dict:
        """{config: (table GPU model, measured M)} of every table's entry serving ``problem`` on
        ``gpu``, above the few-token range (a few-token swap-AB entry needs the low-end check that
        config-table --update makes, configs.measured._serves_its_low_end)."""
        if problem.m <= DECODE_MAX_M:
            return {}
        out: dict = {}
        for e, table in MEASURED.serving(problem, gpu, spec):
            out.setdefault(e.config.tiling(), (table.gpu, e.m))
        return out

    if space in ("prior", *measured_here):
        if prior is None or stream_k:
            raise ValueError(f"sweep_decode: space {space!r} needs a prior table, and times its configs as named "
                             "(no stream-K forms)")
        if space == "waves" and min(ms) <= DECODE_MAX_M:
            # its tiles are 128 tokens tall: a few tokens fill no wave with them
            raise ValueError(f"sweep_decode: space {space!r} measures token counts above {DECODE_MAX_M}")
        sms = torch.cuda.get_device_properties(0).multi_processor_count if device == "cuda" else 132

        def cell(n, k, m):
            if space == "prior":
                return prior_candidates(prior, n, k, m)
            if space == "clusters":
                return cluster_candidates(prior, n, k, m, dtype)
            return wave_candidates(prior, n, k, m, dtype, sms)

        cell_cands = {(n, k, m): cell(n, k, m) for n, k in ((p.n, p.k) for p in projections) for m in ms}
        if space == "waves":  # a cell with one candidate (its own entry alone) has nothing to compare
            cell_cands = {cell: cs for cell, cs in cell_cands.items() if len(cs) > 1}
        cands = list(dict.fromkeys(c for cs in cell_cands.values() for c in cs))
        if space in measured_here:  # and the moved forms the cells run (configs.as_run), compiled ahead too
            cands = list(dict.fromkeys(cands + [as_run(c, sweep_problem(dtype, m, n, k)[0], spec)
                                                for (n, k, m), cs in cell_cands.items() for c in cs]))
    else:
        cands = {"decode": decode_candidates, "mid": mid_candidates, "swap": swap_candidates}[space]()
        cell_cands = {}
    if stream_k:
        cands += list(dict.fromkeys(c.replace(stream_k=True) for c in cands if c.splits == 1 and not c.swap_ab))

    def linear(m, n, k):
        return sweep_problem(dtype, m, n, k)[0]

    def kernel_problem(problem, c):  # a swap-AB config compiles (and is checked) for the swapped problem
        return problem.swapped() if c.swap_ab else problem

    served = {(p.n, p.k, m): served_entries(linear(m, p.n, p.k)) for p in projections for m in ms}
    probe = linear(8, 4096, 4096)
    t0 = time.time()
    compiled = list(dict.fromkeys(cands + [c for s in served.values() for c in s]))
    errors = {r[0]: r[2] for r in precompile([(kernel_problem(probe, c), c, spec) for c in compiled], workers)
              if r[2]}
    # a config the rules refuse for the probe (e.g. one loading a single row of A, which the probe's 8
    # tokens outgrow) may suit its own cell: each cell checks its candidates' rules itself
    failed = {name for name, e in errors.items() if not e.startswith("UnsupportedGemmError")}
    log(f"precompiled {len(compiled)} configs in {time.time() - t0:.1f}s; {len(errors) - len(failed)} refused by the "
        f"rules for the probe's {probe.describe()}, {len(failed)} failed to compile")
    sa, sb = torch.tensor(0.5, device=device), torch.tensor(2.0, device=device)
    rows, picked, best = [], [], []
    for proj in projections:
        n, k = proj.n, proj.k
        w = torch.randn(n, k, device=device)
        w = w.to(torch.float8_e4m3fn) if fp8 else w.to(torch.bfloat16)
        for m in ms:
            if space == "waves" and (n, k, m) not in cell_cands:
                continue
            a = torch.randn(m, k, device=device)
            a = a.to(torch.float8_e4m3fn) if fp8 else a.to(torch.bfloat16)
            o = torch.empty(m, n, device=device, dtype=torch.bfloat16)
            ref = (a.double() @ w.double().t()) * (float(sa) * float(sb) if fp8 else 1.0)
            if fp8:
                peer = timed(lambda: torch._scaled_mm(a, w.t(), sa, sb, out_dtype=torch.bfloat16,
                                                      use_fast_accum=fast))

                def ours(c):
                    return lambda: cb.scaled_mm(a, w.t(), sa, sb, out=o, config=c, use_fast_accum=fast)
            else:
                peer = timed(lambda: torch.matmul(a, w.t(), out=o))

                def ours(c):
                    return lambda: cb.gemm(a, w.t(), config=c, out=o)
            peer_runs = [peer()]
            problem = linear(m, n, k)
            # the models' pick as the candidates are timed: as tiled (configs.as_run's policies,
            # moved tiles and dependent launch, go on top of whichever config a table names)
            pick = default_config(problem, epilogue=spec).tiling()
            # and the pick without the models' waves width (configs.heuristic.waves_choice), which it replaced
            extra = [pick, rank_configs(problem, epilogue=spec, waves=False)[0].tiling()]
            # and the ranking's unswapped pick, which a swap pick replaces
            if space in ("swap", "prior", *measured_here):
                extra.append(next(c for c in rank_configs(problem, epilogue=spec) if not c.swap_ab).tiling())
            here_served = served[(n, k, m)]  # and what the tables serve the cell with now
            extra += list(here_served)
            times, wrong = {}, {}
            here = cell_cands.get((n, k, m), cands)
            for name_c in here + [c for c in dict.fromkeys(extra) if c not in here]:
                c = as_run(name_c, problem, spec) if space in measured_here else name_c
                if {name_c.name, c.name} & failed or not is_valid(c, kernel_problem(problem, c)):
                    continue
                if space == "decode" and c not in extra and c.a_rows != decode_a_rows(m):
                    continue  # loading more rows of A than M needs only adds traffic
                o.fill_(float("nan"))  # an element the candidate does not write fails the check
                try:
                    ours(c)()
                except Exception as e:  # reported, not fatal: one config must not end the sweep
                    log(f"  {m}x{n}x{k}: {c.name}: {type(e).__name__}: {str(e)[:160]}")
                    wrong[name_c.name] = float("nan")
                    continue
                check = (compare_fp8(o, ref, "bfloat16", k, fast_accum=fast) if fp8
                         else compare(o, ref, "bfloat16", k))
                if not check["ok"]:
                    log(f"  {m}x{n}x{k}: {c.name}: WRONG result against float64: {check}")
                    wrong[name_c.name] = check["rel_l2"]
                    continue
                times[name_c.name] = timed(ours(c))()
            del ref
            peer_runs.append(peer())
            p = statistics.median(peer_runs)
            row = {"m": m, "n": n, "k": k, "dtype": dtype, "peer_ms": p, "pick": pick.name, "times": times}
            if here_served:
                row["served"] = {c.name: list(source) for c, source in here_served.items()}
            rows.append({**row, "wrong": wrong} if wrong else row)
            if checkpoint is not None:
                checkpoint(rows)
            if pick.name not in times:
                log(f"{m}x{n}x{k}: peer {p * 1e3:.1f} us; the pick {pick.name} did not run right")
                continue
            picked.append(p / times[pick.name])
            best.append(p / min(times.values()))
            log(f"{m}x{n}x{k}: peer {p * 1e3:.1f} us; pick {pick.name} {picked[-1]:.3f}x, "
                f"best {min(times, key=times.get)} {best[-1]:.3f}x")
    if picked:
        log(f"geomean vs the peer: the default picks {geomean(picked):.3f}, the best candidates {geomean(best):.3f}")
    return rows


def gated_candidates(problem, epilogue) -> list:
    """The gated kernel's configs for ``problem`` (the gated GEMM, N counting gate and up columns):
    the ranking's top four, then every other config of the family's space the gated epilogue takes
    (B multicast included, which the ranking may not offer yet)."""
    from ..configs import family, fits, rank_configs

    ranked = rank_configs(problem, epilogue=epilogue, top_k=4)
    return ranked + [c for c in family(problem.arch).space() if c not in ranked and fits(c, problem, epilogue)]


def sweep_gated(ms=(16, 128, 512, 2048, 4096), n=14336, k=4096, dtype="bfloat16", log=print, workers=None,
                device: str = "cuda", timer=None, arch: Optional[str] = None) -> list:
    """``gemm_gated`` (SiLU; a Llama-style up projection, K -> 2 x N) on every gated candidate
    (:func:`gated_candidates`) at each M, beside what it replaces: cuBLAS on the concatenated
    weight then torch's ``silu(g) * u`` (and the cuBLAS GEMM alone), CUDA-graph device time in one
    process. Each candidate's result (into a NaN-poisoned ``out``) is held to the tolerance policy
    against float64; a wrong one is logged and left out of the times. Returns rows {m, n, k,
    peer_ms: {name: ms}, pick, times: {config name: ms}, errors: {config name: relative L2}}: the
    data the gated ranking (and its clusters, configs.ArchFamily.gated_ranked_clusters) is set
    from. ``arch``: default the family of the CUDA device; ``device`` and ``timer`` (ms per call
    of a function; default CUDA-graph replay) let a CPU test run its logic."""
    import torch
    import torch.nn.functional as F

    import cutedsl_backend as cb

    from ..configs import default_config
    from ..epilogue import EpilogueSpec, gated_reference
    from ..operands import device_arch
    from ..problem import GemmProblem
    from .tolerances import GATED_TERMS, compare

    tdt = getattr(torch, dtype)
    timer = timer or _graph_ms
    dev = torch.device(device)
    if arch is None:
        if dev.type != "cuda":
            raise ValueError("sweep_gated: pass arch for a non-CUDA device")
        arch = device_arch(dev.index if dev.index is not None else torch.cuda.current_device())
    spec = EpilogueSpec(gated="silu")
    g = torch.Generator(device=dev).manual_seed(2207)
    w_gate, w_up = ((torch.randn(n, k, device=dev, generator=g) / k**0.5).to(tdt) for _ in range(2))
    w_gate_up = torch.cat([w_gate, w_up])
    compiled: set = set()
    rows, picked, best = [], [], []
    for m in ms:
        a = torch.randn(m, k, device=dev, generator=g).to(tdt)
        y = torch.empty(m, 2 * n, device=dev, dtype=tdt)
        out = torch.empty(m, n, device=dev, dtype=tdt)
        problem = GemmProblem(m, 2 * n, k, 1, dtype, dtype, "k", "k", arch)
        cands = gated_candidates(problem, spec)
        pick = default_config(problem, epilogue=spec).tiling()  # as the candidates: as tiled
        fresh = [c for c in cands if c.name not in compiled]
        failed = {r[0] for r in precompile([(problem, c, spec) for c in fresh], workers) if r[2]}
        compiled.update(c.name for c in fresh if c.name not in failed)
        ref = gated_reference(a, w_gate, w_up, "silu")

        def unfused():
            torch.matmul(a, w_gate_up.t(), out=y)
            return F.silu(y[:, :n]) * y[:, n:]

        peers = {"cublas+silu_mul": [timer(unfused)], "cublas_gemm": [timer(
            lambda: torch.matmul(a, w_gate_up.t(), out=y))]}
        times, errors = {}, {}
        for c in cands:
            if c.name in failed:
                continue
            out.fill_(float("nan"))  # an element the candidate does not write fails the check
            try:
                cb.gemm_gated(a, w_gate, w_up, config=c, out=out)
            except Exception as e:  # reported, not fatal: one config must not end the sweep
                log(f"  {m}: {c.name}: {type(e).__name__}: {str(e)[:160]}")
                continue
            check = compare(out, ref, dtype, k, activation="silu", terms=GATED_TERMS)
            errors[c.name] = check["rel_l2"]
            if not check["ok"]:
                log(f"  {m}: {c.name}: WRONG result against float64: {check}")
                continue
            times[c.name] = timer(lambda: cb.gemm_gated(a, w_gate, w_up, config=c, out=out))
        peers["cublas+silu_mul"].append(timer(unfused))
        peer_ms = {name: statistics.median(v) for name, v in peers.items()}
        rows.append({"m": m, "n": n, "k": k, "peer_ms": peer_ms, "pick": pick.name, "times": times, "errors": errors})
        if not times or pick.name not in times:
            log(f"{m}x{2 * n}x{k}: the pick {pick.name} did not run")
            continue
        p = peer_ms["cublas+silu_mul"]
        fastest = min(times, key=times.get)
        picked.append(p / times[pick.name])
        best.append(p / times[fastest])
        log(f"{m}x{2 * n}x{k}: cuBLAS + silu*mul {p * 1e3:.1f} us (GEMM alone {peer_ms['cublas_gemm'] * 1e3:.1f}); "
            f"pick {pick.name} {picked[-1]:.3f}x, best {fastest} {best[-1]:.3f}x; top: "
            + ", ".join(f"{name}={p / t:.3f}" for name, t in sorted(times.items(), key=lambda x: x[1])[:4]))
    if picked:
        log(f"geomean vs cuBLAS + silu*mul: the picks {geomean(picked):.3f}, the best candidates {geomean(best):.3f}")
    return rows
