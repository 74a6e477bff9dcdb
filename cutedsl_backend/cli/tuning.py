"""Commands that measure candidates and turn the measurements into config choices: the candidate
sweeps (GPU), ``tune`` (GPU), and ``config-table`` / ``table-check`` / ``replay`` / ``picks`` (any
machine, from stored rows or none)."""

from __future__ import annotations

import sys

from .common import Command, apply_borrowed_tables, borrowed_tables_argument, dims, ints, names, shapes, write_json


def _sweep_arguments(p):
    p.add_argument("--shapes", default="all")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--json")


def _sweep(args, p) -> int:
    from ..validation.tuning_sweeps import sweep

    res = sweep(shapes(args.shapes), dtype=args.dtype)
    write_json(args.json, {"x".join(map(str, k)): v for k, v in res.items()})
    return 0


def _sweep_epilogue_arguments(p):
    p.add_argument("--shape", default="4096x14336x4096")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--variants", help="comma-separated subset of bare,bias+relu,bias+gelu_tanh,bias+silu,residual")
    p.add_argument("--json")


def _sweep_epilogue(args, p) -> int:
    from ..validation.tuning_sweeps import sweep_epilogue

    m, n, k = dims(args.shape)
    write_json(args.json, {args.shape: sweep_epilogue(m, n, k, args.dtype, only=names(args.variants))})
    return 0


def _sweep_fp8_arguments(p):
    p.add_argument("--shapes", default="8192x8192x8192,4096x14336x4096")
    p.add_argument("--configs", help="only configs whose name contains one of these (comma-separated)")
    p.add_argument("--modes", default="fast,precise", help="fast, precise, or fast,precise")
    p.add_argument("--json")


def _sweep_fp8(args, p) -> int:
    from ..validation.tuning_sweeps import sweep_fp8

    known = {"fast": True, "precise": False}
    modes = [m.strip() for m in args.modes.split(",")]
    bad = [m for m in modes if m not in known]
    if bad:
        print(f"--modes: unknown {bad}; use fast, precise or fast,precise", file=sys.stderr)
        return 2
    res = {"x".join(map(str, s)): sweep_fp8(*s, only=names(args.configs), modes=tuple(known[m] for m in modes))
           for s in shapes(args.shapes)}
    write_json(args.json, res)
    return 0


def _sweep_decode_arguments(p):
    p.add_argument("--ms", default="1,8,16,32,48,64", help="token counts (comma-separated)")
    p.add_argument("--space", default="decode", choices=["decode", "mid", "swap", "prior", "clusters", "waves"],
                   help="the candidates: few-token (split-K, short A loads), a few hundred tokens, swap-AB, "
                   "those a --prior table names near each cell, or against the --prior table's choice (this GPU's "
                   "own) four-row clusters of swap-AB tiles or tile widths that fill the waves better")
    p.add_argument("--prior", help="a config table (JSON): measured on another GPU for --space prior, on this one "
                   "for --space clusters and waves")
    p.add_argument("--models", help="only these models' projections (comma-separated, e.g. llama3-8b,qwen2.5-7b)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "fp8_tensorwise", "fp8_tensorwise_fast"],
                   help="bf16 against cuBLAS, or e4m3 with scalar scales against torch._scaled_mm (its default "
                   "fp32 accumulation, or fast accumulation on both sides)")
    p.add_argument("--stream-k", action="store_true",
                   help="also time each unswapped candidate without K slices in its stream-K form "
                   "(GemmConfig.stream_k)")
    p.add_argument("--json", help="write the rows here")


def _sweep_decode(args, p) -> int:
    from ..configs.config import DECODE_MAX_M
    from ..validation.tuning_sweeps import sweep_decode

    def save(rows):  # after every shape: a sweep stopped part-way keeps what it measured
        write_json(args.json, rows, atomic=True)

    prior = None
    if (args.space in ("prior", "clusters", "waves")) != bool(args.prior):
        p.error("--space prior, clusters or waves and --prior TABLE go together")
    if args.space == "waves" and min(int(m) for m in args.ms.split(",")) <= DECODE_MAX_M:
        p.error(f"--space waves measures token counts above {DECODE_MAX_M} (--ms {args.ms}): its tiles are 128 "
                "tokens tall")
    if args.prior:
        from ..configs.measured import SWEEP_OPERANDS
        from ..validation.tune import load_prior

        try:
            prior, _ = load_prior(args.prior)
        except (OSError, ValueError, KeyError) as e:
            p.error(f"--prior {args.prior}: {e}")
        if prior.operands != SWEEP_OPERANDS[args.dtype]:
            p.error(f"--prior {args.prior}: a {prior.operands} table; --dtype {args.dtype} sweeps "
                    f"{SWEEP_OPERANDS[args.dtype]} operands")
        if args.stream_k:
            p.error(f"--space {args.space} times the prior's configs as named: no --stream-k")
        if args.space in ("clusters", "waves"):
            import torch

            here = torch.cuda.get_device_name() if torch.cuda.is_available() else None
            if prior.gpu != here:
                p.error(f"--space {args.space} measures this GPU's own table: --prior {args.prior} is {prior.gpu}'s, "
                        f"this GPU is {here}")
    save(sweep_decode(tuple(int(m) for m in args.ms.split(",")), space=args.space, models=names(args.models),
                      dtype=args.dtype, checkpoint=save, stream_k=args.stream_k, prior=prior))
    return 0


def _config_table_arguments(p):
    p.add_argument("sweeps", nargs="+", help="sweep-decode --json files (.json or .json.gz)")
    p.add_argument("--gpu", required=True,
                   help='the GPU model, as torch.cuda.get_device_name reports it (e.g. "NVIDIA H200")')
    p.add_argument("--source", required=True, help="the commands and code version that produced the sweeps")
    p.add_argument("--min-gain", type=float, default=0.03,
                   help="name the fastest config where it beat the models' pick (with --update: the table's entry) "
                   "by more than this, else keep that")
    p.add_argument("-o", "--out", required=True, help="the table's JSON file")
    p.add_argument("--update", metavar="TABLE",
                   help="this GPU's table to update: only the cells the sweeps measured change, each to the "
                   "fastest config where it beat the table's by more than --min-gain in the same sweep")


def _config_table(args, p) -> int:
    from ..configs.measured import MeasuredTable, table_from_sweeps, updated_table
    from ..validation.bench import geomean
    from ..validation.sweep_spaces import load_sweep_rows

    rows = load_sweep_rows(args.sweeps)
    if args.update:
        old = MeasuredTable.load(args.update)
        if old.gpu != args.gpu:
            p.error(f"--update {args.update}: a table for {old.gpu}, not {args.gpu}")
        table = updated_table(old, rows, args.source, min_gain=args.min_gain)
        changed = sorted(set(table.entries) - set(old.entries), key=lambda e: (e.m, e.n, e.k))
        for e in changed:
            print(f"{e.m}x{e.n}x{e.k}: {e.config.name if e.config else None} {e.ms * 1e3:.2f} us "
                  f"(peer {e.peer_ms * 1e3:.2f} us)")
        print(f"{len(changed)} of {len(table.entries)} entries changed by {len(rows)} sweep rows")
    else:
        table = table_from_sweeps(rows, args.gpu, args.source, min_gain=args.min_gain)
    table.save(args.out)
    chosen = [e for e in table.entries if e.beats_models(args.min_gain)]
    gains = [e.model_ms / e.ms for e in chosen if e.model_ms > 0]
    gain = geomean(gains) if gains else 1.0
    made = "in the table" if args.update else f"measured (projection, M) from {len(rows)} rows"
    print(f"{len(table.entries)} {made}; {len(chosen)} name a config faster than the models' pick (geomean "
          f"{gain:.3f}x in the sweeps that measured them)")
    return 0


def _table_check_arguments(p):
    p.add_argument("--old", required=True, help="the table before the update (JSON)")
    p.add_argument("--new", required=True, help="the updated table (config-table --update's output)")
    p.add_argument("--before", nargs="+", required=True,
                   help="sweep-shapes --json reports run with the old table (.json or .json.gz)")
    p.add_argument("--after", nargs="+", required=True, help="the same cells run with the new table, "
                   "on the same machine")
    p.add_argument("--source", required=True, help="the commands behind the two runs")
    p.add_argument("--min-change", type=float, default=None,
                   help="keep an updated entry where its cells' ratio after / before is at least this "
                   "(geomean; default: validation.table_check.MIN_CHANGE)")
    p.add_argument("-o", "--out", required=True, help="the checked table's JSON file")


def _table_check(args, p) -> int:
    from ..configs.measured import MeasuredTable
    from ..validation import table_check as check

    tables = [MeasuredTable.load(args.old), MeasuredTable.load(args.new)]
    try:
        verdicts = check.entry_verdicts(*tables, check.load_perf_rows(args.before), check.load_perf_rows(args.after))
    except ValueError as e:
        p.error(str(e))
    min_change = check.MIN_CHANGE if args.min_change is None else args.min_change
    table, back = check.checked_table(*tables, verdicts, args.source, min_change)
    for v in verdicts:
        print(("kept       " if v.kept(min_change) else "put back   ") + v.describe())
    unchecked = check.unchecked(*tables, verdicts)
    for e in unchecked:
        print(f"unchecked  {e.m}x{e.n}x{e.k} {e.config.name}: no cell of both runs ran another kernel with it")
    table.save(args.out)
    print(f"{len(verdicts)} updated entries changed the runs' cells; {len(back)} put back; {len(unchecked)} "
          f"unchecked (kept); {len(table.entries)} entries in {args.out}")
    return 0


def _replay_arguments(p):
    p.add_argument("sweeps", nargs="+", help="sweep-decode --json files (.json or .json.gz)")
    p.add_argument("--gpu", action="append", default=[],
                   help="rank with this GPU model's measured config tables too (its own and those it borrows), "
                   "scored beside the models alone on the same rows; repeatable")
    borrowed_tables_argument(p)
    p.add_argument("--json", help="write the scored rows and summaries here")


def _replay(args, p) -> int:
    from ..validation.replay import replay
    from ..validation.sweep_spaces import load_sweep_rows

    apply_borrowed_tables(args)
    result = replay(load_sweep_rows(args.sweeps), gpus=(None, *dict.fromkeys(args.gpu)))
    write_json(args.json, result)
    if result["all"] is None:
        print(f"no row timed the configs the dispatcher picks now ({result['rows_not_measured']} rows)")
        return 1
    if not result["borrowed_tables"]:
        print("each GPU model's own tables only (--no-borrowed-tables)")
    for label, s in [("all", result["all"])] + [(f"M = {m}", s) for m, s in result["per_m"].items()]:
        now = ", ".join(f"now ({r}) {s['now'][r]:.3f}" for r in result["rankings"])
        below = ", ".join(f"{r} {s['below_gate_now'][r]}" for r in result["rankings"])
        print(f"{label:>8}: {s['cells']} shapes; geomean vs the peer: the sweep's picks {s['swept_pick']:.3f}, "
              f"{now}, best {s['best']:.3f}; below 0.90: the sweep's picks {s['below_gate_swept_pick']}, {below}")
    print(f"{result['rows_scored']} rows scored, {result['rows_not_measured']} did not time a config the "
          "dispatcher picks now")
    for c in result["not_measured"]:
        print(f"not scored: {c['dtype']} {c['m']}x{c['n']}x{c['k']} (no row timed {', '.join(c['configs'])})")
    return 0


def _picks_arguments(p):
    p.add_argument("--tag", default="standard", choices=["quick", "standard", "full"])
    p.add_argument("--dtypes", default="bfloat16,float16,fp8_tensorwise,fp8_rowwise,gated_silu")
    p.add_argument("--ms", help="these token counts instead of the tag's (comma-separated)")
    p.add_argument("--gpu", help='the GPU model whose measured tables rank (as torch.cuda.get_device_name reports '
                   'it, e.g. "NVIDIA H200"; default: the cost models alone)')
    p.add_argument("--against", help="a stored perf sweep (a validation report.json(.gz) or a sweep-shapes --json): "
                   "which of its cells run another config now, and which slow ones the same")
    borrowed_tables_argument(p)
    p.add_argument("--json", help="write the cells and counts here")


def _picks(args, p) -> int:
    from ..validation.picks import picks, picks_markdown
    from ..validation.sweep_spaces import read_json

    apply_borrowed_tables(args)
    ms = ints(args.ms) if args.ms else None
    result = picks(args.tag, args.dtypes.split(","), gpu=args.gpu, ms=ms,
                   against=read_json(args.against) if args.against else None)
    write_json(args.json, result)
    print("\n".join(picks_markdown(result)))
    return 0


def _tune_arguments(p):
    from ..validation import tune as grids  # the default token counts (pure Python)

    p.add_argument("--out", required=True, help="directory for the sweeps' rows and the tables (sweeps it already "
                   "holds are kept: an interrupted tune resumes)")
    p.add_argument("--ms", default=",".join(map(str, grids.MID_MS)), help="token counts of the bf16 mid-size sweep")
    p.add_argument("--swap-ms", default=",".join(map(str, grids.SWAP_MS)), help="the bf16 swap-AB sweep's")
    p.add_argument("--fp8-ms", default=",".join(map(str, grids.FP8_MID_MS)), help="the fp8 mid-size sweep's")
    p.add_argument("--fp8-swap-ms", default=",".join(map(str, grids.FP8_SWAP_MS)), help="fp8 swap-AB sweep's")
    p.add_argument("--waves-ms", default=",".join(map(str, grids.WAVES_MS)),
                   help="the bf16 waves sweep's (tile widths that fill the waves, against the table so far; run last)")
    p.add_argument("--fp8-waves-ms", default=",".join(map(str, grids.FP8_WAVES_MS)), help="the fp8 waves sweep's")
    p.add_argument("--decode-ms", default="", help="token counts of a bf16 few-token sweep (split-K, short A "
                   "loads; e.g. 1,8,16,32,64); default none: the decode model's picks measured within 2%% of the best")
    p.add_argument("--fp8-decode-ms", default="", help="the same for e4m3 with scalar scales (e.g. 16,32,64: "
                   "each covers the token counts loading as many rows of A; default none)")
    p.add_argument("--models", help="only these models' projections (comma-separated)")
    p.add_argument("--stream-k", action="store_true", help="the mid-size sweeps also time each candidate without "
                   "K slices in its stream-K form (GemmConfig.stream_k; a table names one where it beat the models' "
                   "pick by more than 3%%)")
    p.add_argument("--prior", action="append", default=[],
                   help="a table measured on another GPU (JSON; one per class, repeatable): also sweep its class at "
                   "its token counts on the configs it names near each (a fifth of the full spaces' time; e.g. the "
                   "H100's tables on an H200)")
    p.add_argument("--prior-ms", default="", help="only these of the priors' token counts, in this order (e.g. "
                   "256,320,384,512 first on a time-limited lease; default: all of them)")


def _tune(args, p) -> int:
    from ..validation.tune import tune

    if args.prior_ms and not args.prior:
        p.error("--prior-ms selects token counts of a --prior table: give one")

    tune(args.out, ints(args.ms), ints(args.swap_ms), ints(args.fp8_ms), names(args.models),
         decode_ms=ints(args.decode_ms), fp8_swap_ms=ints(args.fp8_swap_ms), fp8_decode_ms=ints(args.fp8_decode_ms),
         stream_k=args.stream_k, priors=tuple(args.prior), prior_ms=ints(args.prior_ms),
         waves_ms=ints(args.waves_ms), fp8_waves_ms=ints(args.fp8_waves_ms))
    return 0


def _sweep_gated_arguments(p):
    p.add_argument("--ms", default="16,128,512,2048,4096", help="token counts (comma-separated)")
    p.add_argument("--shape", default="14336x4096", help="NxK: the intermediate size and the hidden size")
    p.add_argument("--json", help="write the rows here")


def _sweep_gated(args, p) -> int:
    from ..validation.tuning_sweeps import sweep_gated

    n, k = dims(args.shape)
    write_json(args.json, sweep_gated(tuple(int(m) for m in args.ms.split(",")), n=n, k=k))
    return 0


COMMANDS = (
    Command("tune", "measure this GPU's config tables: the mid-size and swap-AB candidate sweeps on the model "
            "projections, then one table per operand class (use them with CUTEDSL_BACKEND_CONFIG_TABLES=OUT, or "
            "copy them into cutedsl_backend/configs/tables/)", True, _tune_arguments, _tune),
    Command("sweep-decode", "every small/mid-M candidate (tile, K slices, A rows) on each model projection vs "
            "cuBLAS, each result checked against float64 first (a wrong one is left out): the data the cost "
            "models are fitted on and the measured tables are made from (tuning)", True, _sweep_decode_arguments,
            _sweep_decode),
    Command("config-table", "a measured config table (configs/tables/) for one GPU model from sweep-decode --json "
            "files run on it (one operand class: bf16, or fp8 tensorwise)", False, _config_table_arguments,
            _config_table),
    Command("table-check", "check a config-table --update on the perf gate's cells: put back the updated "
            "entries whose cells ran slower with it than without (sweep-shapes reports of both, one machine)",
            False, _table_check_arguments, _table_check),
    Command("replay", "score the dispatcher's current choices on stored sweep-decode rows (each row's own peer "
            "timing; no GPU needed): the sweep's picks, today's picks and the best", False, _replay_arguments,
            _replay),
    Command("picks", "the config the dispatcher picks on each perf-sweep cell and where it came from (models, "
            "measured or borrowed table), and against a stored sweep which cells run another config now (no GPU "
            "needed)", False, _picks_arguments, _picks),
    Command("sweep", "time every valid config per shape (tuning)", True, _sweep_arguments, _sweep),
    Command("sweep-epilogue", "every fused variant on each candidate config (tuning)", True,
            _sweep_epilogue_arguments, _sweep_epilogue),
    Command("sweep-fp8", "scaled_mm on every valid config, both scalings and modes (tuning)", True,
            _sweep_fp8_arguments, _sweep_fp8),
    Command("sweep-gated", "every gated-MLP candidate (B multicast included) on a SwiGLU up projection at each M "
            "vs cuBLAS + silu*mul, results checked (tuning)", True, _sweep_gated_arguments, _sweep_gated),
)
