"""python -m cutedsl_backend {validate,bench,sweep-shapes,sweep-decode,render-report,sweep,probe-*,compile,info,...}"""

from __future__ import annotations

import argparse
import json
import sys


def _shapes(spec: str):
    from .validation.bench import DECODE_SHAPES, PREFILL_SHAPES

    if spec == "prefill":
        return PREFILL_SHAPES
    if spec == "decode":
        return DECODE_SHAPES
    if spec == "all":
        return PREFILL_SHAPES + DECODE_SHAPES
    return [tuple(int(x) for x in s.split("x")) for s in spec.split(",")]


# the commands that run kernels on a GPU (time them, probe them, fuzz them); the others compile,
# replay, report or validate (compile-only without a GPU) on any machine
GPU_COMMANDS = frozenset({
    "bench", "bench-host", "sweep", "bench-epilogue", "bench-fp8", "sweep-epilogue", "sweep-fp8", "bench-inductor",
    "sweep-shapes", "sweep-decode", "tune", "sweep-gated", "probe-power", "probe-tiles", "probe-epilogue", "fuzz"})
CPU_COMMANDS = frozenset({
    "config-table", "replay", "probe-workers", "sass-digest", "render-report", "compile", "info", "precompile",
    "seal-cache", "merge-reports", "validate"})


def _no_gpu_message(cmd: str) -> str | None:
    """Why ``cmd`` cannot run here (no CUDA device), or None."""
    import torch

    if torch.cuda.is_available():
        return None
    return (f"python -m cutedsl_backend {cmd}: needs a CUDA GPU (the sm90a kernels run on an H100 or H200) and "
            f"this machine has none (torch {torch.__version__}, CUDA {torch.version.cuda or 'not built in'}). "
            "Without a GPU, `validate` runs the compile-only matrix and `compile`, `replay` and `config-table` work.")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cutedsl_backend")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="TFLOP/s vs torch.matmul on this GPU, same run")
    b.add_argument("--shapes", default="all", help="prefill | decode | all | MxNxK,...")
    b.add_argument("--dtypes", default="bfloat16,float16")
    b.add_argument("--json", help="write rows here")
    bh = sub.add_parser("bench-host", help="host microseconds per eager call (gemm, fused gemm, scaled_mm) beside "
                        "the torch call each replaces, on a tiny shape (GPU)")
    bh.add_argument("--json", help="write the figures here")
    s = sub.add_parser("sweep", help="time every valid config per shape (tuning)")
    s.add_argument("--shapes", default="all")
    s.add_argument("--dtype", default="bfloat16")
    s.add_argument("--json")
    e = sub.add_parser("bench-epilogue", help="fused epilogues vs bare GEMM, cuBLASLt, eager, torch.compile")
    e.add_argument("--shape", default="4096x14336x4096")
    e.add_argument("--dtype", default="bfloat16")
    e.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    e.add_argument("--json")
    f8 = sub.add_parser("bench-fp8", help="scaled_mm vs torch._scaled_mm (tensorwise, rowwise)")
    f8.add_argument("--shapes", default="prefill")
    f8.add_argument("--json")
    se = sub.add_parser("sweep-epilogue", help="every fused variant on each candidate config (tuning)")
    se.add_argument("--shape", default="4096x14336x4096")
    se.add_argument("--dtype", default="bfloat16")
    se.add_argument("--variants", help="comma-separated subset of bare,bias+relu,bias+gelu_tanh,bias+silu,residual")
    se.add_argument("--json")
    sf = sub.add_parser("sweep-fp8", help="scaled_mm on every valid config, both scalings and modes (tuning)")
    sf.add_argument("--shapes", default="8192x8192x8192,4096x14336x4096")
    sf.add_argument("--configs", help="only configs whose name contains one of these (comma-separated)")
    sf.add_argument("--modes", default="fast,precise", help="fast, precise, or fast,precise")
    sf.add_argument("--json")
    bi = sub.add_parser("bench-inductor", help="torch.compile max-autotune blocks with/without our candidates")
    bi.add_argument("--tokens", type=int, default=4096)
    bi.add_argument("--d", type=int, default=4096)
    bi.add_argument("--hidden", type=int, default=14336)
    bi.add_argument("--dtype", default="bfloat16")
    bi.add_argument("--variants", default="aten+triton,cutedsl cold,cutedsl warm")
    bi.add_argument("--blocks", default="mlp,swiglu,attn_out_proj")
    bi.add_argument("--kernel-dir", help="our kernel cache root (default: a new temporary folder)")
    bi.add_argument("--isolated", action="store_true", help="each block and variant in a fresh process")
    bi.add_argument("--loss-rows", action="store_true",
                    help="with --isolated: add a cold row where every fused chain loses (its GEMM then "
                         "autotuned with ATen only)")
    bi.add_argument("--rounds", type=int, default=None,
                    help="with --isolated: repeat the rows this many times (fresh kernel cache each), report "
                         "medians (default 1); with --dynamic: timing rounds per M, the variants alternated "
                         "(default 5)")
    bi.add_argument("--rows", help="with --isolated: the variants between the two baselines (comma-separated)")
    bi.add_argument("--dynamic", metavar="MS", help="instead: a SiLU MLP compiled once with dynamic=True and run "
                    "at these token counts (comma-separated, e.g. 16,48,512,2048), with and without us: per M "
                    "the timed call and its GPU time (calls queued behind a GPU sleep; a timed call slower than "
                    "that is host-bound)")
    bi.add_argument("--json")
    ss = sub.add_parser("sweep-shapes", help="model projections x the whole M range vs the peer (the perf gate)")
    ss.add_argument("--tag", default="standard", choices=["quick", "standard", "full"])
    ss.add_argument("--dtypes", default="bfloat16,float16,fp8_tensorwise,fp8_rowwise,gated_silu")
    ss.add_argument("--json", help="write the sweep (rows and summary) here")
    ss.add_argument("--no-config-tables", action="store_true",
                    help="rank with the cost models alone (no measured config table): the other half of an A/B")
    ss.add_argument("--ms", help="these token counts instead of the tag's (comma-separated; e.g. 96,160,320,768,1536 "
                    "between the measured tables' points, for an out-of-sample A/B)")
    sd = sub.add_parser("sweep-decode", help="every small/mid-M candidate (tile, K slices, A rows) on each model "
                        "projection vs cuBLAS: the data the decode cost model is fitted on (tuning)")
    sd.add_argument("--ms", default="1,8,16,32,48,64", help="token counts (comma-separated)")
    sd.add_argument("--space", default="decode", choices=["decode", "mid", "swap"],
                    help="the candidates: few-token (split-K, short A loads), a few hundred tokens, or swap-AB")
    sd.add_argument("--models", help="only these models' projections (comma-separated, e.g. llama3-8b,qwen2.5-7b)")
    sd.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "fp8_tensorwise", "fp8_tensorwise_fast"],
                    help="bf16 against cuBLAS, or e4m3 with scalar scales against torch._scaled_mm (its default "
                    "fp32 accumulation, or fast accumulation on both sides)")
    sd.add_argument("--json", help="write the rows here")
    ct = sub.add_parser("config-table", help="a measured config table (configs/tables/) for one GPU model from "
                        "sweep-decode --json files run on it (one operand class: bf16, or fp8 tensorwise)")
    ct.add_argument("sweeps", nargs="+", help="sweep-decode --json files (.json or .json.gz)")
    ct.add_argument("--gpu", required=True,
                    help='the GPU model, as torch.cuda.get_device_name reports it (e.g. "NVIDIA H200")')
    ct.add_argument("--source", required=True, help="the commands and code version that produced the sweeps")
    ct.add_argument("--min-gain", type=float, default=0.03,
                    help="name the fastest config where it beat the models' pick by more than this, else the pick")
    ct.add_argument("-o", "--out", required=True, help="the table's JSON file")
    rp = sub.add_parser("replay", help="score the dispatcher's current choices on stored sweep-decode rows (each "
                        "row's own peer timing; no GPU needed): the sweep's picks, today's picks and the best")
    rp.add_argument("sweeps", nargs="+", help="sweep-decode --json files (.json or .json.gz)")
    rp.add_argument("--gpu", help="rank with this GPU model's measured config table too (default: the models alone)")
    rp.add_argument("--json", help="write the scored rows and summaries here")
    tu = sub.add_parser("tune", help="measure this GPU's config tables: the mid-size and swap-AB candidate sweeps "
                        "on the model projections, then one table per operand class (use them with "
                        "CUTEDSL_BACKEND_CONFIG_TABLES=OUT, or copy them into cutedsl_backend/configs/tables/)")
    tu.add_argument("--out", required=True, help="directory for the sweeps' rows and the tables (sweeps it already "
                    "holds are kept: an interrupted tune resumes)")
    from .validation import tune as grids  # the default token counts (pure Python)
    tu.add_argument("--ms", default=",".join(map(str, grids.MID_MS)), help="token counts of the bf16 mid-size sweep")
    tu.add_argument("--swap-ms", default=",".join(map(str, grids.SWAP_MS)), help="the bf16 swap-AB sweep's")
    tu.add_argument("--fp8-ms", default=",".join(map(str, grids.FP8_MID_MS)), help="the fp8 mid-size sweep's")
    tu.add_argument("--fp8-swap-ms", default=",".join(map(str, grids.FP8_SWAP_MS)), help="fp8 swap-AB sweep's")
    tu.add_argument("--decode-ms", default="", help="token counts of a bf16 few-token sweep (split-K, short A "
                    "loads; e.g. 1,8,16,32,64); default none: the decode model's picks measured within 2%% of the best")
    tu.add_argument("--models", help="only these models' projections (comma-separated)")
    sg = sub.add_parser("sweep-gated", help="every gated-MLP candidate (B multicast included) on a SwiGLU up "
                        "projection at each M vs cuBLAS + silu*mul, results checked (tuning)")
    sg.add_argument("--ms", default="16,128,512,2048,4096", help="token counts (comma-separated)")
    sg.add_argument("--shape", default="14336x4096", help="NxK: the intermediate size and the hidden size")
    sg.add_argument("--json", help="write the rows here")
    pp = sub.add_parser("probe-power", help="ours and the peers sustained: TFLOP/s, SM clock, board power, "
                        "throttle reasons, tensor utilisation at that clock (where the time goes at the power cap)")
    pp.add_argument("--seconds", type=float, default=3.0, help="per case and round")
    pp.add_argument("--json", help="write the rows here")
    pt = sub.add_parser("probe-tiles", help="tile/cluster candidates: numerics on tail shapes, then sustained "
                        "against the defaults and the peers (clusters: 2x2; wide: 128x320)")
    pt.add_argument("set", choices=["clusters", "wide"])
    pt.add_argument("--seconds", type=float, default=2.0, help="per case and round")
    pt.add_argument("--json", help="write the rows here")
    pe = sub.add_parser("probe-epilogue", help="interleaved A/B of the fused residual epilogue across configs "
                        "(4096x14336x4096 bf16) against cuBLAS, torch.addmm and eager")
    pe.add_argument("--rounds", type=int, default=5)
    pe.add_argument("configs", nargs="*", help="config names (default: the cooperative and ping-pong candidates)")
    sub.add_parser("probe-workers", help="how starting the compile worker pool slows the compiling process "
                   "(CPU only; compare CUTEDSL_WORKER_FORK=1 and 0)")
    sd2 = sub.add_parser("sass-digest", help="SHA-256 of the SASS of every quick-matrix kernel (both archs; no GPU "
                         "needed): run before and after a refactor, the two outputs must be identical")
    sd2.add_argument("--json", help="write {kernel: digest} here")
    fz = sub.add_parser("fuzz", help="the eager API on random calls vs torch's semantics: right or refused by "
                        "name, never wrong, never a foreign exception (GPU)")
    fz.add_argument("--seed", type=int, default=0)
    fz.add_argument("--cases", type=int, default=300)
    fz.add_argument("--gated-cases", type=int, help="gemm_gated cases after the gemm ones (default: "
                    "validation.fuzz.gated_case_count, a third as many)")
    fz.add_argument("--scaled-cases", type=int, help="scaled_mm cases after those (default: a third as many as "
                    "--cases)")
    rr = sub.add_parser("render-report", help="write summary.md and report.html again from a report.json "
                        "(or report.json.gz)")
    rr.add_argument("report")
    c = sub.add_parser("compile", help="compile one problem for an arch (no GPU needed)")
    c.add_argument("mnk")
    c.add_argument("--dtype", default="bfloat16")
    c.add_argument("--arch", default="sm90a")
    sub.add_parser("info", help="versions, tools, GPU")
    pc = sub.add_parser("precompile", help="fill the disk kernel cache with the matrix's kernels")
    pc.add_argument("--tag", default="standard", choices=["quick", "standard", "full"])
    pc.add_argument("--arch", default="sm90a")
    pc.add_argument("--workers", type=int, default=0)
    sc = sub.add_parser("seal-cache", help="make a kernel cache a shared read-only one: readable by all, its "
                        "manifest of file digests written; prints the manifest's sha256")
    sc.add_argument("dir", nargs="?", help="the cache (default: $CUTEDSL_BACKEND_CACHE_DIR)")
    mr = sub.add_parser("merge-reports", help="merge report.json files into one report")
    mr.add_argument("out")
    mr.add_argument("reports", nargs="+")
    mr.add_argument("--expect", default="", help="archs whose GPU cells must have run in some part "
                    "(comma-separated, e.g. sm90a,sm100a); the merged report fails otherwise")
    v = sub.add_parser("validate", help="the validation run: compile matrix + GPU cells + report")
    v.add_argument("--tag", default="quick", choices=["quick", "standard", "full"])
    v.add_argument("--arch", default="sm90a,sm100a")
    v.add_argument("--out", default="reports")
    v.add_argument("--require-gpu", nargs="?", const="all", default=None, metavar="ARCHS",
                   help="fail unless the GPU cells of these archs ran (comma-separated; bare: every --arch)")
    v.add_argument("--workers", type=int, default=0)
    v.add_argument("--compile-only", action="store_true", help="skip GPU gates (reported as not run)")
    args = ap.parse_args(argv)
    if args.cmd in GPU_COMMANDS:
        why = _no_gpu_message(args.cmd)
        if why:
            print(why, file=sys.stderr)
            return 2

    if args.cmd in ("probe-power", "probe-tiles"):
        from .validation import probes

        rows = (probes.run_cases(probes.power_cases(), args.seconds) if args.cmd == "probe-power"
                else probes.tile_ab(args.set, args.seconds))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0 if rows else 1
    if args.cmd == "probe-epilogue":
        from .validation.probes import epilogue_ab

        epilogue_ab(args.rounds, args.configs or None)
        return 0
    if args.cmd == "probe-workers":
        from .validation.probes import worker_pool_contention

        worker_pool_contention()
        return 0
    if args.cmd == "sass-digest":
        from .validation.matrix import sass_digests

        digests = sass_digests()
        for name, d in digests.items():
            print(f"{d}  {name}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(digests, f, indent=1, sort_keys=True)
        return 0
    if args.cmd == "bench-host":
        import logging

        from .validation.bench import host_overhead_us

        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("cutedsl_backend.compiler").setLevel(logging.INFO)  # why a direct launch is off
        res = host_overhead_us()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0
    if args.cmd == "fuzz":
        from .validation.fuzz import fuzz

        return 1 if fuzz(args.seed, args.cases, gated_cases=args.gated_cases, scaled_cases=args.scaled_cases) else 0
    if args.cmd == "sweep-decode":
        from .validation.tuning_sweeps import sweep_decode

        def save(rows):  # after every shape: a sweep stopped part-way keeps what it measured
            if args.json:
                import os

                with open(args.json + ".tmp", "w") as f:
                    json.dump(rows, f, indent=1)
                os.replace(args.json + ".tmp", args.json)  # a kill mid-write leaves the last whole file

        save(sweep_decode(tuple(int(m) for m in args.ms.split(",")), space=args.space,
                          models=args.models.split(",") if args.models else None, dtype=args.dtype,
                          checkpoint=save))
        return 0
    if args.cmd == "config-table":
        from .configs.measured import table_from_sweeps
        from .validation.bench import geomean
        from .validation.tuning_sweeps import load_sweep_rows

        rows = load_sweep_rows(args.sweeps)
        table = table_from_sweeps(rows, args.gpu, args.source, min_gain=args.min_gain)
        with open(args.out, "w") as f:
            json.dump(table.to_json(), f, indent=1)
            f.write("\n")
        chosen = [e for e in table.entries if e.beats_models(args.min_gain)]
        gains = [e.model_ms / e.ms for e in chosen if e.model_ms > 0]
        gain = geomean(gains) if gains else 1.0
        print(f"{len(table.entries)} measured (projection, M) from {len(rows)} rows; {len(chosen)} name a config "
              f"faster than the models' pick (geomean {gain:.3f}x in the sweep)")
        return 0
    if args.cmd == "replay":
        from .validation.replay import replay
        from .validation.tuning_sweeps import load_sweep_rows

        result = replay(load_sweep_rows(args.sweeps), gpu=args.gpu)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        if result["all"] is None:
            print(f"no row timed the config the dispatcher picks now ({len(result['not_measured'])} rows)")
            return 1
        for label, s in [("all", result["all"])] + [(f"M = {m}", s) for m, s in result["per_m"].items()]:
            print(f"{label:>8}: {s['cells']} cells; geomean vs the peer: the sweep's picks {s['swept_pick']:.3f}, "
                  f"now {s['now']:.3f}, best {s['best']:.3f}; below 0.90: {s['below_gate_swept_pick']} -> "
                  f"{s['below_gate_now']}")
        if result["not_measured"]:
            print(f"{len(result['not_measured'])} rows did not time the config the dispatcher picks now (not scored)")
        return 0
    if args.cmd == "tune":
        from .validation.tune import tune

        def ints(text):
            return tuple(int(m) for m in text.split(",") if m)

        tune(args.out, ints(args.ms), ints(args.swap_ms), ints(args.fp8_ms),
             args.models.split(",") if args.models else None, decode_ms=ints(args.decode_ms),
             fp8_swap_ms=ints(args.fp8_swap_ms))
        return 0
    if args.cmd == "sweep-gated":
        from .validation.tuning_sweeps import sweep_gated

        n, k = (int(x) for x in args.shape.split("x"))
        rows = sweep_gated(tuple(int(m) for m in args.ms.split(",")), n=n, k=k)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.cmd == "bench":
        from .validation.bench import PREFILL_SHAPES, bench_shapes, geomean, host_overhead_us

        host_overhead_us()
        rows = bench_shapes(_shapes(args.shapes), dtypes=args.dtypes.split(","))
        for dt in args.dtypes.split(","):
            for mode in ("ratio", "graph_ratio"):
                pre = [r[mode] for r in rows if r["dtype"] == dt and (r["m"], r["n"], r["k"]) in PREFILL_SHAPES]
                if pre:
                    print(f"{dt}: geomean {mode} vs cuBLAS over prefill shapes: {geomean(pre):.3f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.cmd == "sweep":
        from .validation.tuning_sweeps import sweep

        res = sweep(_shapes(args.shapes), dtype=args.dtype)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"x".join(map(str, k)): v for k, v in res.items()}, f, indent=1)
        return 0
    if args.cmd == "bench-epilogue":
        from .validation.bench import bench_epilogues

        m, n, k = (int(x) for x in args.shape.split("x"))
        rows = bench_epilogues(m, n, k, args.dtype, with_compile=not args.no_compile)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.cmd in ("sweep-epilogue", "sweep-fp8"):
        from .validation.tuning_sweeps import sweep_epilogue, sweep_fp8

        if args.cmd == "sweep-epilogue":
            m, n, k = (int(x) for x in args.shape.split("x"))
            only = args.variants.split(",") if args.variants else None
            res = {args.shape: sweep_epilogue(m, n, k, args.dtype, only=only)}
        else:
            only = args.configs.split(",") if args.configs else None
            known = {"fast": True, "precise": False}
            names = [m.strip() for m in args.modes.split(",")]
            bad = [m for m in names if m not in known]
            if bad:
                print(f"--modes: unknown {bad}; use fast, precise or fast,precise", file=sys.stderr)
                return 2
            modes = tuple(known[m] for m in names)
            res = {"x".join(map(str, s)): sweep_fp8(*s, only=only, modes=modes) for s in _shapes(args.shapes)}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0
    if args.cmd == "bench-fp8":
        from .validation.bench import bench_fp8, geomean

        rows = bench_fp8(_shapes(args.shapes))
        for kind in ("tensorwise", "rowwise"):
            for mode in ("fast_accum", "precise"):
                sel = [r["graph_ratio"] for r in rows if r["scaling"] == kind and r["accumulation"] == mode]
                print(f"fp8 {kind} {mode}: geomean graph ratio vs torch._scaled_mm: {geomean(sel):.3f}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    if args.cmd == "bench-inductor":
        from .validation.bench_inductor import bench_inductor, bench_inductor_isolated

        blocks = tuple(args.blocks.split(","))
        if args.rounds is not None and args.rounds < 1:
            bi.error("--rounds must be at least 1")
        if args.dynamic:
            from .validation.bench_dynamic import bench_inductor_dynamic, token_counts_of

            if args.isolated or args.rows or args.loss_rows:
                bi.error("--dynamic runs in one process with its own variants: no --isolated, --rows or --loss-rows")
            try:
                token_counts = token_counts_of(args.dynamic, args.d, args.hidden)
            except ValueError as e:
                bi.error(f"--dynamic: {e}")
            rows = bench_inductor_dynamic(token_counts, args.d, args.hidden, args.dtype, rounds=args.rounds or 5)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)
            return 0
        if not args.isolated and (args.rounds not in (None, 1) or args.rows):
            bi.error("--rounds and --rows need --isolated")
        if args.isolated:
            rows = bench_inductor_isolated(args.tokens, args.d, args.hidden, args.dtype, blocks,
                                           loss_rows=args.loss_rows,
                                           rounds=args.rounds or 1,
                                           rows_between=tuple(args.rows.split(",")) if args.rows else None)
        else:
            rows = bench_inductor(args.tokens, args.d, args.hidden, args.dtype, tuple(args.variants.split(",")),
                                  kernel_dir=args.kernel_dir, blocks=blocks)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return 0
    if args.cmd == "sweep-shapes":
        from .validation.report import perf_markdown
        from .validation.shape_sweep import run_sweep

        def save(perf):
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(perf, f, indent=1)

        if args.no_config_tables:
            from .configs.measured import MEASURED

            MEASURED.enabled = False
        ms = None
        if args.ms:
            try:
                ms = tuple(int(m) for m in args.ms.split(","))
            except ValueError:
                ss.error(f"--ms: token counts are comma-separated integers, not {args.ms!r}")
            if min(ms) < 1:
                ss.error("--ms: token counts must be positive")
        perf = run_sweep(args.tag, args.dtypes.split(","), checkpoint=save, ms=ms)
        save(perf)
        print("\n".join(perf_markdown(perf)))
        return 0
    if args.cmd == "render-report":
        from pathlib import Path

        from .validation.report import html, load_report, markdown

        path = Path(args.report)
        report = load_report(path)
        (path.parent / "summary.md").write_text(markdown(report))
        (path.parent / "report.html").write_text(html(report))
        print(f"wrote {path.parent / 'summary.md'} and {path.parent / 'report.html'}")
        return 0
    if args.cmd == "compile":
        from .compiler import compile_gemm

        m, n, k = (int(x) for x in args.mnk.split("x"))
        cg = compile_gemm(m, n, k, dtype=args.dtype, arch=args.arch)
        print(json.dumps({"config": cg.config.name, "compile_seconds": round(cg.compile_seconds, 3),
                          "cache_hit": cg.cache_hit, "resources": vars(cg.resources),
                          "sass": cg.sass_counts(), "cubin_bytes": len(cg.cubin)}, indent=1))
        return 0
    if args.cmd == "precompile":
        from .validation.runner import precompile_matrix

        return precompile_matrix(args.tag, args.arch.split(","), args.workers)
    if args.cmd == "seal-cache":
        from pathlib import Path

        from .disk_cache import cache_dir, seal

        try:
            print(seal(Path(args.dir) if args.dir else cache_dir()))
        except OSError as e:
            print(f"seal-cache: {e}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "merge-reports":
        from .validation.report import merge_reports

        return merge_reports(args.out, args.reports, [x for x in args.expect.split(",") if x])
    if args.cmd == "info":
        from .validation.environment import environment

        print(json.dumps(environment(), indent=1))
        return 0
    if args.cmd == "validate":
        from .validation.runner import run_validation

        return run_validation(tag=args.tag, archs=args.arch.split(","), out_root=args.out,
                              require_gpu=(True if args.require_gpu == "all" else
                                           [x for x in (args.require_gpu or "").split(",") if x]),
                              workers=args.workers,
                              compile_only=args.compile_only)
    return 2


if __name__ == "__main__":
    sys.exit(main())
