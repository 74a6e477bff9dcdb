"""Commands that probe a question behind a design choice (power, tiles, epilogues, the worker pool,
SASS identity) and the fuzzer."""

from __future__ import annotations

from .common import Command, chosen, ints, mnk_list, names, no_arguments, write_json


def _probe_power_arguments(p):
    p.add_argument("--seconds", type=float, default=3.0, help="per case and round")
    p.add_argument("--json", help="write the rows here")


def _probe_tiles_arguments(p):
    p.add_argument("set", choices=["clusters", "wide"])
    p.add_argument("--seconds", type=float, default=2.0, help="per case and round")
    p.add_argument("--json", help="write the rows here")


def _probe_power(args, p) -> int:
    from ..validation import probes

    rows = probes.run_cases(probes.power_cases(), args.seconds)
    write_json(args.json, rows)
    return 0 if rows else 1


def _probe_tiles(args, p) -> int:
    from ..validation import probes

    rows = probes.tile_ab(args.set, args.seconds)
    write_json(args.json, rows)
    return 0 if rows else 1


def _probe_bandwidth_arguments(p):
    p.add_argument("--sizes-mb", default="256,512,1024", help="bf16 weight sizes (comma-separated MiB)")
    p.add_argument("--ms", default="1,16", help="token counts of the GEMMs (comma-separated)")
    p.add_argument("--json", help="write the rows here")


def _probe_bandwidth(args, p) -> int:
    from ..validation.probes import bandwidth_ceiling

    try:
        sizes, ms = ints(args.sizes_mb), ints(args.ms)
    except ValueError:
        p.error("--sizes-mb and --ms are comma-separated integers")
    if not sizes or min(sizes) < 1 or min(ms, default=1) < 1:
        p.error("--sizes-mb needs at least one size; sizes and token counts are positive")
    write_json(args.json, bandwidth_ceiling(sizes, ms))
    return 0


def _probe_peer_arguments(p):
    p.add_argument("--shapes", default="128x4096x4096,1x4096x4096,16x4096x4096",
                   help="MxNxK,... (B = W^T as nn.Linear stores W)")
    p.add_argument("--dtypes", default="float16,bfloat16", help="float16, bfloat16 or both")
    p.add_argument("--json", help="write the rows here")


def _probe_peer(args, p) -> int:
    from ..validation.probes import REDUCED_PRECISION_FLAGS, peer_precision

    wanted = mnk_list(p, args.shapes)
    dtypes = chosen(p, "--dtypes", args.dtypes, REDUCED_PRECISION_FLAGS)
    write_json(args.json, peer_precision(wanted, dtypes))
    return 0


def _probe_padding_arguments(p):
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", help="write the rows here")


def _probe_padding(args, p) -> int:
    from ..validation.probes import cluster_padding

    rows = cluster_padding(args.rounds)
    write_json(args.json, rows)
    return 0 if rows and all(r["correct"] for r in rows) else 1


def _probe_configs_arguments(p):
    p.add_argument("--shapes", required=True, help="MxNxK,... (nn.Linear: A (M, K), the weight (N, K) transposed)")
    p.add_argument("--dtypes", default="bfloat16",
                   help="comma-separated: bfloat16, float16, fp8_tensorwise, fp8_rowwise")
    p.add_argument("--configs", default="pick",
                   help="comma-separated config names (GemmConfig.name), and 'pick' for what the dispatcher runs")
    p.add_argument("--rounds", type=int, default=5, help="alternated timing rounds (medians reported)")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--peer-kernels", action="store_true",
                   help="also name the kernels the peer runs per shape (the profiler, after the timings)")


def _probe_configs(args, p) -> int:
    from ..configs import GemmConfig
    from ..problem import UnsupportedGemmError
    from ..validation.bench import kernels_per_call
    from ..validation.probe_configs import PICK, PROBE_DTYPES, config_ab

    wanted = mnk_list(p, args.shapes)
    dtypes, configs = chosen(p, "--dtypes", args.dtypes, PROBE_DTYPES), names(args.configs) or []
    if any(d.startswith("fp8") for d in dtypes) and any(n % 16 or k % 16 for _, n, k in wanted):
        p.error("--shapes: FP8 needs N and K multiples of 16 (torch._scaled_mm, the peer, refuses others)")
    for name in configs:
        if name != PICK:
            try:
                GemmConfig.from_name(name)
            except UnsupportedGemmError as e:
                p.error(f"--configs: {e}")
    if not configs or args.rounds < 1:
        p.error("--configs needs a name or 'pick', --rounds at least 1")
    rows = config_ab([(d, c, s) for d in dtypes for s in wanted for c in configs], rounds=args.rounds,
                     peer_kernels=kernels_per_call if args.peer_kernels else None)
    write_json(args.json, rows)
    timed = [r for r in rows if "correct" in r]
    return 0 if timed and all(r["correct"] for r in timed) and not any("error" in r for r in rows) else 1


def _probe_epilogue_arguments(p):
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("configs", nargs="*", help="config names (default: the cooperative and ping-pong candidates)")


def _probe_epilogue(args, p) -> int:
    from ..validation.probes import epilogue_ab

    epilogue_ab(args.rounds, args.configs or None)
    return 0


def _probe_workers(args, p) -> int:
    from ..validation.probes import worker_pool_contention

    worker_pool_contention()
    return 0


def _sass_digest_arguments(p):
    p.add_argument("--json", help="write {kernel: digest} here")


def _sass_digest(args, p) -> int:
    import json

    from ..validation.matrix import sass_digests

    digests = sass_digests()
    for name, d in digests.items():
        print(f"{d}  {name}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(digests, f, indent=1, sort_keys=True)
    return 0


def _fuzz_arguments(p):
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--gated-cases", type=int, help="gemm_gated cases after the gemm ones (default: "
                   "validation.fuzz.gated_case_count, a third as many)")
    p.add_argument("--scaled-cases", type=int, help="scaled_mm cases after those (default: a third as many as "
                   "--cases)")


def _fuzz(args, p) -> int:
    from ..validation.fuzz import fuzz

    return 1 if fuzz(args.seed, args.cases, gated_cases=args.gated_cases, scaled_cases=args.scaled_cases) else 0


COMMANDS = (
    Command("fuzz", "the eager API on random calls vs torch's semantics: right or refused by name, never wrong, "
            "never a foreign exception (GPU)", True, _fuzz_arguments, _fuzz),
    Command("probe-power", "ours and the peers sustained: TFLOP/s, SM clock, board power, throttle reasons, tensor "
            "utilisation at that clock (where the time goes at the power cap)", True, _probe_power_arguments,
            _probe_power),
    Command("probe-tiles", "tile/cluster candidates: numerics on tail shapes, then sustained against the defaults "
            "and the peers (clusters: 2x2; wide: 128x320)", True, _probe_tiles_arguments, _probe_tiles),
    Command("probe-bandwidth", "how fast the memory lets a kernel read a weight: torch's reductions and a copy "
            "beside cuBLAS and our gemm at a few tokens, in TB/s (the ceiling of decode GEMMs)", True,
            _probe_bandwidth_arguments, _probe_bandwidth),
    Command("probe-peer", "how much of cuBLAS's 16-bit speed comes from reduced-precision reductions (torch's "
            "default): torch.matmul with them allowed and disallowed beside our gemm, time and error vs float64",
            True, _probe_peer_arguments, _probe_peer),
    Command("probe-padding", "what loads past the output's edge cost (a cluster's CTAs wholly past it, a last tile "
            "partly past it): one launch at two shapes, each checked vs float64, timed beside the peer", True,
            _probe_padding_arguments, _probe_padding),
    Command("probe-configs", "named configs (or the dispatcher's pick) on chosen shapes and dtypes: each result "
            "checked vs float64, then timed beside the peer, the configs of a shape alternated", True,
            _probe_configs_arguments, _probe_configs),
    Command("probe-epilogue", "interleaved A/B of the fused residual epilogue across configs (4096x14336x4096 bf16) "
            "against cuBLAS, torch.addmm and eager", True, _probe_epilogue_arguments, _probe_epilogue),
    Command("probe-workers", "how starting the compile worker pool slows the compiling process (CPU only; compare "
            "CUTEDSL_WORKER_FORK=1 and 0)", False, no_arguments, _probe_workers),
    Command("sass-digest", "SHA-256 of the SASS of every quick-matrix kernel (both archs; no GPU needed): run "
            "before and after a refactor, the two outputs must be identical", False, _sass_digest_arguments,
            _sass_digest),
)
