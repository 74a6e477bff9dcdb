"""Commands that time our kernels against their peers in the same process: the perf gate's sweep
(``sweep-shapes``), the benches, and torch.compile blocks (``bench-inductor``). GPU only."""

from __future__ import annotations

from .common import Command, apply_borrowed_tables, borrowed_tables_argument, dims, shapes, write_json


def _bench_arguments(p):
    p.add_argument("--shapes", default="all", help="prefill | decode | all | MxNxK,...")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--json", help="write rows here")


def _bench(args, p) -> int:
    from ..validation.bench import PREFILL_SHAPES, bench_shapes, geomean, host_overhead_us

    host_overhead_us()
    rows = bench_shapes(shapes(args.shapes), dtypes=args.dtypes.split(","))
    for dt in args.dtypes.split(","):
        for mode in ("ratio", "graph_ratio"):
            pre = [r[mode] for r in rows if r["dtype"] == dt and (r["m"], r["n"], r["k"]) in PREFILL_SHAPES]
            if pre:
                print(f"{dt}: geomean {mode} vs cuBLAS over prefill shapes: {geomean(pre):.3f}")
    write_json(args.json, rows)
    return 0


def _bench_host_arguments(p):
    p.add_argument("--json", help="write the figures here")


def _bench_host(args, p) -> int:
    import logging

    from ..validation.bench import host_overhead_us

    logging.basicConfig(format="%(name)s: %(message)s")
    logging.getLogger("cutedsl_backend.compiler").setLevel(logging.INFO)  # why a direct launch is off
    write_json(args.json, host_overhead_us())
    return 0


def _bench_epilogue_arguments(p):
    p.add_argument("--shape", default="4096x14336x4096")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    p.add_argument("--json")


def _bench_epilogue(args, p) -> int:
    from ..validation.bench import bench_epilogues

    m, n, k = dims(args.shape)
    write_json(args.json, bench_epilogues(m, n, k, args.dtype, with_compile=not args.no_compile))
    return 0


def _bench_fp8_arguments(p):
    p.add_argument("--shapes", default="prefill")
    p.add_argument("--json")


def _bench_fp8(args, p) -> int:
    from ..validation.bench import bench_fp8, geomean

    rows = bench_fp8(shapes(args.shapes))
    for kind in ("tensorwise", "rowwise"):
        for mode in ("fast_accum", "precise"):
            sel = [r["graph_ratio"] for r in rows if r["scaling"] == kind and r["accumulation"] == mode]
            print(f"fp8 {kind} {mode}: geomean graph ratio vs torch._scaled_mm: {geomean(sel):.3f}")
    write_json(args.json, rows)
    return 0


def _bench_inductor_arguments(p):
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=14336)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--variants", default="aten+triton,cutedsl cold,cutedsl warm")
    p.add_argument("--blocks", default="mlp,swiglu,attn_out_proj")
    p.add_argument("--kernel-dir", help="our kernel cache root (default: a new temporary folder)")
    p.add_argument("--pdl", action="store_true",
                   help="our picks launched as programmatic dependent launches (configs.as_run; not with --isolated)")
    p.add_argument("--isolated", action="store_true", help="each block and variant in a fresh process")
    p.add_argument("--loss-rows", action="store_true",
                   help="with --isolated: add a cold row where every fused chain loses (its GEMM then "
                        "autotuned with ATen only)")
    p.add_argument("--rounds", type=int, default=None,
                   help="with --isolated: repeat the rows this many times (fresh kernel cache each), report "
                        "medians (default 1); with --dynamic: timing rounds per M, the variants alternated "
                        "(default 5)")
    p.add_argument("--rows", help="with --isolated: the variants between the two baselines (comma-separated)")
    p.add_argument("--kernels", action="store_true", help="each row also lists its kernels' device time per call "
                   "(the profiler, after the timings; --isolated and --dynamic always do)")
    p.add_argument("--dynamic", metavar="MS", help="instead: a SiLU MLP compiled once with dynamic=True and run "
                   "at these token counts (comma-separated, e.g. 16,48,512,2048), with and without us: per M "
                   "the timed call and its GPU time (calls queued behind a GPU sleep; a timed call slower than "
                   "that is host-bound)")
    p.add_argument("--json")


def _bench_inductor(args, p) -> int:
    from ..validation.bench_inductor import bench_inductor, bench_inductor_isolated

    blocks = tuple(args.blocks.split(","))
    if args.rounds is not None and args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.pdl:
        if args.isolated:
            p.error("--pdl sets this process's dispatch policy: not with --isolated")
        from ..configs.as_run import DEPENDENT_LAUNCH

        DEPENDENT_LAUNCH.enabled = True
    if args.dynamic:
        from ..validation.bench_dynamic import bench_inductor_dynamic, token_counts_of

        if args.isolated or args.rows or args.loss_rows:
            p.error("--dynamic runs in one process with its own variants: no --isolated, --rows or --loss-rows")
        try:
            token_counts = token_counts_of(args.dynamic, args.d, args.hidden)
        except ValueError as e:
            p.error(f"--dynamic: {e}")
        write_json(args.json, bench_inductor_dynamic(token_counts, args.d, args.hidden, args.dtype,
                                                     rounds=args.rounds or 5))
        return 0
    if not args.isolated and (args.rounds not in (None, 1) or args.rows):
        p.error("--rounds and --rows need --isolated")
    if args.isolated:
        rows = bench_inductor_isolated(args.tokens, args.d, args.hidden, args.dtype, blocks,
                                       loss_rows=args.loss_rows, rounds=args.rounds or 1,
                                       rows_between=tuple(args.rows.split(",")) if args.rows else None)
    else:
        rows = bench_inductor(args.tokens, args.d, args.hidden, args.dtype, tuple(args.variants.split(",")),
                              kernel_dir=args.kernel_dir, blocks=blocks, kernels=args.kernels)
    write_json(args.json, rows)
    return 0


def _sweep_shapes_arguments(p):
    p.add_argument("--tag", default="standard", choices=["quick", "standard", "full"])
    p.add_argument("--dtypes", default="bfloat16,float16,fp8_tensorwise,fp8_rowwise,gated_silu")
    p.add_argument("--json", help="write the sweep (rows and summary) here")
    p.add_argument("--no-config-tables", action="store_true",
                   help="rank with the cost models alone (no measured config table): the other half of an A/B")
    borrowed_tables_argument(p)
    p.add_argument("--cold-weights", action="store_true",
                   help="time each call on a copy of the weights not in L2 (rotating through enough copies), as "
                   "a model's forward step reads them; default: the same weights every call (in L2 where they fit)")
    p.add_argument("--no-edge-tiles", action="store_true",
                   help="run the picks with their last tiles where the grid puts them, partly past the output's "
                   "edge (default: moved back to end at it, GemmConfig.edge; configs.edge): the other half of that A/B")
    p.add_argument("--no-fitted-a-rows", action="store_true",
                   help="run the few-token picks with the 16 or 32 rows of A they were chosen with, not the 1-8 "
                   "that hold M (configs.as_run.ShortALoads): the other half of that A/B")
    p.add_argument("--pdl", action="store_true",
                   help="launch the picks as programmatic dependent launches (GemmConfig.pdl; configs.as_run): "
                   "the other half of that A/B, whose default is off")
    p.add_argument("--ms", help="these token counts instead of the tag's (comma-separated; e.g. 96,160,320,768,1536 "
                   "between the measured tables' points, for an out-of-sample A/B)")


def _sweep_shapes(args, p) -> int:
    from ..validation.report import perf_markdown
    from ..validation.shape_sweep import run_sweep

    if args.no_config_tables:
        from ..configs.measured import MEASURED

        MEASURED.enabled = False
    apply_borrowed_tables(args)
    if args.no_edge_tiles:
        from ..configs.edge import EDGE_TILES

        EDGE_TILES.enabled = False
    if args.no_fitted_a_rows:
        from ..configs.as_run import SHORT_A_LOADS

        SHORT_A_LOADS.enabled = False
    if args.pdl:
        from ..configs.as_run import DEPENDENT_LAUNCH

        DEPENDENT_LAUNCH.enabled = True
    ms = None
    if args.ms:
        try:
            ms = tuple(int(m) for m in args.ms.split(","))
        except ValueError:
            p.error(f"--ms: token counts are comma-separated integers, not {args.ms!r}")
        if min(ms) < 1:
            p.error("--ms: token counts must be positive")
    perf = run_sweep(args.tag, args.dtypes.split(","), checkpoint=lambda part: write_json(args.json, part), ms=ms,
                     cold=args.cold_weights)
    write_json(args.json, perf)
    print("\n".join(perf_markdown(perf)))
    return 0


COMMANDS = (
    Command("sweep-shapes", "model projections x the whole M range vs the peer (the perf gate)", True,
            _sweep_shapes_arguments, _sweep_shapes),
    Command("bench", "TFLOP/s vs torch.matmul on this GPU, same run", True, _bench_arguments, _bench),
    Command("bench-host", "host microseconds per eager call (gemm, fused gemm, scaled_mm) beside the torch call "
            "each replaces, on a tiny shape (GPU)", True, _bench_host_arguments, _bench_host),
    Command("bench-epilogue", "fused epilogues vs bare GEMM, cuBLASLt, eager, torch.compile", True,
            _bench_epilogue_arguments, _bench_epilogue),
    Command("bench-fp8", "scaled_mm vs torch._scaled_mm (tensorwise, rowwise)", True, _bench_fp8_arguments,
            _bench_fp8),
    Command("bench-inductor", "torch.compile max-autotune blocks with/without our candidates", True,
            _bench_inductor_arguments, _bench_inductor),
)
