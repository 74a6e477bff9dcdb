"""Commands of the validation run and of release sign-off: ``validate``, the report tools, the
kernel-cache tools, and single-kernel ``compile`` / ``info``. Any machine (``validate`` runs the
compile-only matrix and reports its GPU cells as not run where there is no GPU)."""

from __future__ import annotations

import json
import sys

from .common import Command, dims, no_arguments

TAGS = ["quick", "standard", "full"]


def _validate_arguments(p):
    p.add_argument("--tag", default="quick", choices=TAGS)
    p.add_argument("--arch", default="sm90a,sm100a")
    p.add_argument("--out", default="reports")
    p.add_argument("--require-gpu", nargs="?", const="all", default=None, metavar="ARCHS",
                   help="fail unless the GPU cells of these archs ran (comma-separated; bare: every --arch)")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--compile-only", action="store_true", help="skip GPU gates (reported as not run)")


def _validate(args, p) -> int:
    from ..validation.runner import run_validation

    require_gpu = True if args.require_gpu == "all" else [x for x in (args.require_gpu or "").split(",") if x]
    return run_validation(tag=args.tag, archs=args.arch.split(","), out_root=args.out, require_gpu=require_gpu,
                          workers=args.workers, compile_only=args.compile_only)


def _merge_reports_arguments(p):
    p.add_argument("out")
    p.add_argument("reports", nargs="+")
    p.add_argument("--expect", default="", help="archs whose GPU cells must have run in some part "
                   "(comma-separated, e.g. sm90a,sm100a); the merged report fails otherwise")


def _merge_reports(args, p) -> int:
    from ..validation.report import merge_reports

    return merge_reports(args.out, args.reports, [x for x in args.expect.split(",") if x])


def _render_report_arguments(p):
    p.add_argument("report")


def _render_report(args, p) -> int:
    from pathlib import Path

    from ..validation.report import html, load_report, markdown

    path = Path(args.report)
    report = load_report(path)
    (path.parent / "summary.md").write_text(markdown(report))
    (path.parent / "report.html").write_text(html(report))
    print(f"wrote {path.parent / 'summary.md'} and {path.parent / 'report.html'}")
    return 0


def _precompile_arguments(p):
    p.add_argument("--tag", default="standard", choices=TAGS)
    p.add_argument("--arch", default="sm90a")
    p.add_argument("--workers", type=int, default=0)


def _precompile(args, p) -> int:
    from ..validation.runner import precompile_matrix

    return precompile_matrix(args.tag, args.arch.split(","), args.workers)


def _seal_cache_arguments(p):
    p.add_argument("dir", nargs="?", help="the cache (default: $CUTEDSL_BACKEND_CACHE_DIR)")


def _seal_cache(args, p) -> int:
    from pathlib import Path

    from ..disk_cache import cache_dir, seal

    try:
        print(seal(Path(args.dir) if args.dir else cache_dir()))
    except OSError as e:
        print(f"seal-cache: {e}", file=sys.stderr)
        return 1
    return 0


def _compile_arguments(p):
    p.add_argument("mnk")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--arch", default="sm90a")
    p.add_argument("--b-major", default="n", choices=["n", "k"],
                   help="B row-major (n, default) or K-major (k: an nn.Linear weight, as the measured tables are)")
    p.add_argument("--gpu", help='pick as the dispatcher does on this GPU model, with its measured config tables '
                   '(as torch.cuda.get_device_name reports it, e.g. "NVIDIA H200"); default: the cost models alone. '
                   'FP8 dtypes compile with scalar scales, as scaled_mm calls them')


def _compile(args, p) -> int:
    from ..compiler import compile_gemm, make_problem
    from ..epilogue import EpilogueSpec

    m, n, k = dims(args.mnk)
    # FP8 as scaled_mm calls it (scalar scales): the kernel, and the config picked for it, take them
    spec = EpilogueSpec(scale_a="scalar", scale_b="scalar") if args.dtype.startswith("float8") else None
    cg = compile_gemm(m, n, k, dtype=args.dtype, arch=args.arch, b_major=args.b_major, gpu=args.gpu, epilogue=spec)
    table = None
    if args.gpu:
        from ..configs import dispatched_entry

        problem = make_problem(m, n, k, dtype=args.dtype, arch=args.arch, b_major=args.b_major)
        found = dispatched_entry(problem, args.gpu, spec or EpilogueSpec())  # the entry that compiled, if any
        if found is not None:
            table = {"gpu": found[1].gpu, "measured_m": found[0].m, "entry": found[0].config.name}
    print(json.dumps({"config": cg.config.name, "table": table, "compile_seconds": round(cg.compile_seconds, 3),
                      "cache_hit": cg.cache_hit, "resources": vars(cg.resources),
                      "sass": cg.sass_counts(), "cubin_bytes": len(cg.cubin)}, indent=1))
    return 0


def _info(args, p) -> int:
    from ..validation.environment import environment

    print(json.dumps(environment(), indent=1))
    return 0


COMMANDS = (
    Command("validate", "the validation run: compile matrix + GPU cells + report", False, _validate_arguments,
            _validate),
    Command("merge-reports", "merge report.json files into one report", False, _merge_reports_arguments,
            _merge_reports),
    Command("render-report", "write summary.md and report.html again from a report.json (or report.json.gz)", False,
            _render_report_arguments, _render_report),
    Command("precompile", "fill the disk kernel cache with the matrix's kernels", False, _precompile_arguments,
            _precompile),
    Command("seal-cache", "make a kernel cache a shared read-only one: readable by all, its manifest of file "
            "digests written; prints the manifest's sha256", False, _seal_cache_arguments, _seal_cache),
    Command("compile", "compile one problem for an arch (no GPU needed)", False, _compile_arguments, _compile),
    Command("info", "versions, tools, GPU", False, no_arguments, _info),
)
