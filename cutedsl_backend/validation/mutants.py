"""Fault injection: deliberately broken variants that the suite must catch.

Three kinds, each reported with what caught it (and none counted among the report's cells):
  - broken kernels (an sm90 GPU): the sm90a kernel compiled with one realistic bug (a K loop one
    k-tile short, the output's last row never stored, a wrong split-K slice offset) and run beside
    the same kernel without it: the GPU numerics must fail the mutant and pass the control;
  - real artifacts (any machine): a compiled kernel without HGMMA must fail the SASS gate;
  - numerics faults (any machine, emulated with torch on the CPU): the output a kernel with the
    bug would produce (wrong bias axis, missing activation, ignored scale, transposed output,
    unwritten tail) must fail the tolerance policy against the true reference.
"""

from __future__ import annotations

import copy
from typing import Callable

from .budgets import check_budgets, load_budgets
from .matrix import REQUIRED_SASS


def sass_gate_problems(counts: dict, arch: str, in_bits: int, local_bytes: int) -> list[str]:
    """The compile gate's SASS and spill rules (shared with the runner)."""
    problems = []
    missing = [alts for alts in REQUIRED_SASS[(arch, in_bits)] if not any(counts.get(op, 0) for op in alts)]
    if missing:
        problems.append("SASS lacks " + " and ".join("/".join(a) for a in missing))
    if local_bytes or counts.get("LDL") or counts.get("STL"):
        problems.append(f"local memory in use ({local_bytes} bytes/thread; spills)")
    return problems


def _copy_kernel_cubin() -> bytes:
    """A real sm_90a cubin of a kernel that is no GEMM (an element-wise copy)."""
    import tempfile
    from pathlib import Path

    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from .mutant_kernels import launch_copy

    x = make_fake_compact_tensor(cutlass.Float16, (cute.sym_int32(),), assumed_align=16)
    with tempfile.TemporaryDirectory() as d:
        fn = cute.compile(launch_copy, x, x, options=f"--gpu-arch sm_90a --keep-cubin --dump-dir {d}")
        cubin = fn.__cubin__ or next(Path(d).glob("*.cubin")).read_bytes()
    return cubin if isinstance(cubin, bytes) else cubin.encode("latin-1")


def mutant_no_hgmma() -> dict:
    from ..compiler import disassemble, resource_usage

    cubin = _copy_kernel_cubin()
    text = disassemble(cubin)
    counts = {op: text.count(op) for op in ("HGMMA", "QGMMA", "UTMALDG", "LDL", "STL")}
    problems = sass_gate_problems(counts, "sm90a", 16, resource_usage(cubin).local_bytes)
    return {"caught": any("HGMMA" in p for p in problems), "by": "; ".join(problems) or "nothing"}


def mutant_over_budget() -> dict:
    """The budget gate fails a compile against a budget a quarter of its time. By construction it
    cannot fail to be caught, so it is a unit test of the gate (tests/unit/test_mutants.py), not a
    mutant in the report."""
    from ..compiler import compile_gemm
    from ..configs import quick_configs

    k = compile_gemm(512, 512, 512, dtype="bfloat16", config=quick_configs("sm90a")[5], use_cache=False)
    tight = copy.deepcopy(load_budgets())
    fam = tight["families"]["sm90a/gemm"]
    fam["median_s"] = fam["cell_max_s"] = k.compile_seconds / 4  # a budget the kernel cannot meet
    res = {"compile_seconds": k.compile_seconds, "cell": {"arch": "sm90a", "config": k.config.name}}
    verdict = check_budgets([res], tight)
    return {"caught": not verdict["ok"], "by": "; ".join(verdict["regressions"]) or "nothing"}


# ------------------------------------------------------------------------- numerics faults

def _case():
    import torch

    from ..epilogue import reference

    g = torch.Generator().manual_seed(7)
    m = n = 96  # square, so a transposed or wrongly-broadcast result has the right shape
    k = 200
    a = (torch.randn(m, k, generator=g) * k ** -0.25).to(torch.bfloat16).double()
    b = (torch.randn(k, n, generator=g) * k ** -0.25).to(torch.bfloat16).double()
    bias = torch.randn(n, generator=g).to(torch.bfloat16).double()
    sa = torch.rand(m, 1, generator=g, dtype=torch.float64) + 0.5
    sb = torch.rand(1, n, generator=g, dtype=torch.float64) + 0.5
    acc = a @ b
    ref = reference(acc, bias=bias, activation="gelu_tanh", scale_a=sa, scale_b=sb)
    return acc, bias, sa, sb, ref, reference, k


NUMERIC_FAULTS: dict[str, Callable] = {
    "wrong bias axis": lambda acc, bias, sa, sb, f: f(acc, bias=bias.reshape(-1, 1), activation="gelu_tanh",
                                                     scale_a=sa, scale_b=sb),
    "missing activation": lambda acc, bias, sa, sb, f: f(acc, bias=bias, scale_a=sa, scale_b=sb),
    "ignored scale": lambda acc, bias, sa, sb, f: f(acc, bias=bias, activation="gelu_tanh", scale_a=sa),
    "transposed output": lambda acc, bias, sa, sb, f: f(acc, bias=bias, activation="gelu_tanh", scale_a=sa,
                                                        scale_b=sb).t().contiguous(),
    "unwritten tail": lambda acc, bias, sa, sb, f: _poison_tail(f(acc, bias=bias, activation="gelu_tanh",
                                                                  scale_a=sa, scale_b=sb)),
}


def _poison_tail(out):
    out = out.clone()
    out[:, -8:] = float("nan")  # the NaN the harness poisons outputs with, never overwritten
    return out


def numeric_fault(name: str) -> dict:
    from .tolerances import compare

    acc, bias, sa, sb, ref, reference, k = _case()
    bad = NUMERIC_FAULTS[name](acc, bias, sa, sb, reference).to(__import__("torch").bfloat16)
    m = compare(bad, ref, "bfloat16", k, activation="gelu_tanh")
    good = compare(ref.to(__import__("torch").bfloat16), ref, "bfloat16", k, activation="gelu_tanh")
    why = f"rel_l2={m['rel_l2']:.2e}, bad elements={m['n_bad']}, non-finite={m['n_nonfinite']}"
    return {"caught": (not m["ok"]) and good["ok"], "by": "tolerance policy: " + why}


# the broken kernels' problem: tails in M and N, nine k-tiles, two K slices for the split-K mutant;
# two batches for the batch-offset mutant; square (M = N) for the swapped fp8 scale vectors; the
# gated mutants' output is N wide (a GEMM of 2N gate and up columns)
KERNEL_MUTANT_PROBLEM = (200, 264, 520)
BARRIER_MUTANT_PROBLEM = (4096, 8192, 64)
# launches of a racy mutant (and its control): caught when any launch gives a wrong result
RACE_LAUNCHES = 5


def mutant_problem(name: str):
    """(problem, epilogue spec, config) the kernel mutant ``name`` runs on."""
    from ..configs import GemmConfig
    from ..epilogue import EpilogueSpec
    from ..problem import GemmProblem

    m, n, k = KERNEL_MUTANT_PROBLEM
    config = GemmConfig(128, 128, splits=2) if "split" in name else GemmConfig(128, 128)
    if "barrier" in name:
        # a race shows where the epilogue is the bottleneck: K of one k-tile, 128x256 tiles of
        # eight 128x32 fp32 sub-tiles, enough tiles to fill the SMs many times over (the TMA
        # stores queue, so a buffer is still being read when the unsynchronized warps overwrite it)
        return (GemmProblem(*BARRIER_MUTANT_PROBLEM, 1, "bfloat16", "float32", "k", "k", "sm90a"), EpilogueSpec(),
                GemmConfig(128, 256))
    if "fp8" in name:
        # K a multiple of 16 (fp8 rows must be 16-byte aligned)
        problem = GemmProblem(n, n, k - k % 16, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a")
        return problem, EpilogueSpec(scale_a="row", scale_b="col"), config
    if name.startswith("gated"):
        gated = GemmProblem(m, 2 * n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
        return gated, EpilogueSpec(gated="silu"), config
    batch = 2 if "batch" in name else 1
    return GemmProblem(m, n, k, batch, "bfloat16", "bfloat16", "k", "k", "sm90a"), EpilogueSpec(), config


def kernel_mutant(name: str) -> dict:
    """Compile the sm90a kernel with the bug ``name`` (mutant_kernels.sm90_mutants), run it on the
    GPU beside the same kernel without the bug (the control), both on NaN-poisoned outputs against
    a float64 reference: caught when the control passes and the mutant fails. Without an sm90 GPU
    it is not run (said so, never counted as caught)."""
    import torch

    from ..build import compile_kernel
    from ..compiler import resolve
    from ..epilogue import gated_reference
    from ..operands import as_rcl, kernel_views, max_clusters
    from .environment import gpu_arch
    from .mutant_kernels import sm90_mutants
    from .tolerances import GATED_TERMS, compare, compare_fp8

    if gpu_arch() != "sm90a":
        return {"caught": False, "skipped": True, "by": "not run: needs an sm90 GPU"}
    import cuda.bindings.driver as cuda
    from cutlass import Float32

    problem, spec, config = mutant_problem(name)
    m, n, k, L = problem.m, problem.n, problem.k, problem.batch
    which = resolve(problem, config, spec)
    cfg = which.config
    g = torch.Generator(device="cuda").manual_seed(4711)
    dt = getattr(torch, problem.dtype)
    a = torch.randn(L, m, k, device="cuda", generator=g).to(dt)
    b = torch.randn(L, n, k, device="cuda", generator=g).to(dt)  # (L, N, K): K-major B
    ref = a.double() @ b.double().transpose(1, 2)
    up = ()  # the gated kernel's up weights: the second half of b's rows (its first half is the gate's)
    if spec.gated:
        n = n // 2
        ref = gated_reference(a, b[0, :n], b[0, n:], spec.gated)  # (one batch: nn.Linear weights)
        b, up = b[:, :n], (as_rcl(b[:, n:], True, 16 // b.element_size()),)
    sa = sb = None
    if spec.scale_a:
        sa = torch.rand(m, device="cuda", generator=g) + 0.5
        sb = torch.rand(n, device="cuda", generator=g) + 0.5
        ref = ref * sa.double()[:, None] * sb.double()[None, :]
    work = counters = None
    if cfg.splits > 1:
        from ..configs import split_k_workspace

        tiles, floats = split_k_workspace(problem, cfg)
        work = torch.empty(floats, device="cuda")
        counters = torch.zeros(tiles, device="cuda", dtype=torch.int32)
    verdicts = {}
    launches = RACE_LAUNCHES if "barrier" in name else 1
    for label, cls in (("control", None), ("mutant", sm90_mutants()[name])):
        cg = compile_kernel(problem, which, kernel_cls=cls)
        cg.key = f"{which.digest}-{label}"  # never the real kernel's key (these are never cached)
        for _ in range(launches):  # the worst launch is the verdict
            out = torch.full((L, m, n), float("nan"), device="cuda", dtype=getattr(torch, problem.out_dtype))
            if counters is not None:
                counters.zero_()
            views = kernel_views(problem, a, b, out)
            cg._fn(*views, None, sa, sb, None, work, counters, Float32(1.0), Float32(0.0),
                   max_clusters(torch.cuda.current_device(), cfg.cluster_m * cfg.cluster_n),
                   cuda.CUstream(torch.cuda.current_stream().cuda_stream), *up)
            torch.cuda.synchronize()
            verdict = (compare_fp8(out, ref, problem.out_dtype, k) if spec.scale_a
                       else compare(out, ref, problem.out_dtype, k, activation=spec.gated,
                                    terms=GATED_TERMS if spec.gated else 1))
            if label not in verdicts or not verdict["ok"] or verdict["rel_l2"] > verdicts[label]["rel_l2"]:
                verdicts[label] = verdict
            if not verdict["ok"]:
                break
    why = (f"control {'ok' if verdicts['control']['ok'] else 'FAILED'}; mutant rel_l2="
           f"{verdicts['mutant']['rel_l2']:.2e}, bad={verdicts['mutant']['n_bad']}, "
           f"non-finite={verdicts['mutant']['n_nonfinite']}")
    return {"caught": verdicts["control"]["ok"] and not verdicts["mutant"]["ok"], "by": "GPU numerics: " + why}


KERNEL_MUTANTS = ("dropped last k-tile", "unwritten last row", "split-K slice offset", "unwritten last column",
                  "wrong batch offset", "fp8 scales on the wrong axis", "missing epilogue barrier",
                  "gated: up read from the gate weights", "gated: up weights' extent one vector short")


def run_mutants() -> list[dict]:
    """Every mutant, run; each entry says whether (and by what) it was caught, and its kind (a
    real kernel run on the GPU, a real artifact, or an emulated output). A mutant that could not
    run says so (``skipped``) and is never counted as caught."""
    runs = ([(name, "broken sm90a kernel, GPU numerics", lambda n=name: kernel_mutant(n)) for name in KERNEL_MUTANTS]
            + [("kernel without HGMMA", "real cubin, SASS gate", mutant_no_hgmma)]
            + [(name, "emulated output, tolerance policy", lambda n=name: numeric_fault(n)) for name in NUMERIC_FAULTS])
    out = []
    for name, kind, run in runs:
        try:
            out.append({"mutant": name, "kind": kind, **run()})
        except Exception as e:  # a mutant that cannot run is reported, never counted as caught
            out.append({"mutant": name, "kind": kind, "caught": False, "by": f"error: {type(e).__name__}: {e}"})
    return out
