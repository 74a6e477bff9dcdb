"""Tile and cluster shapes at the power cap, against the defaults and the peers.

Every GEMM on the H200 runs at its 700 W cap (scripts/power_probe.py), so a kernel is faster only
if it spends less energy per FLOP. Candidate sets: ``clusters`` - 2x2 clusters (both operands
multicast: a quarter less L2 -> SM traffic per tile than 2x1); ``wide`` - 128x320 tiles (two
160-wide WGMMAs per k-block; B K-major, as nn.Linear's weight and every fp8 B), the tile cuBLAS
launches for the large shapes. First a numerics check of each candidate on tail shapes (odd tile
counts in M and N) against a float64 reference, then each candidate and the peer sustained for
``seconds`` with SM clock, power and tensor utilisation (power_probe.run_cases), two rounds. Run
on the GPU machine from the repository root:

    python3 scripts/tile_ab.py clusters|wide [seconds] [--json FILE]
"""
import json
import sys

import torch
from power_probe import run_cases

import cutedsl_backend as cb
from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.epilogue import reference
from cutedsl_backend.validation.tolerances import compare, compare_fp8

SETS = {
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
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    if b_major == "k":
        return a, torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return a, torch.randn(k, n, device="cuda", dtype=torch.bfloat16)


def check_numerics(cand) -> bool:
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


def cases(cand):
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


def main(argv):
    cand = SETS[argv[0]]
    seconds = float(argv[1]) if len(argv) > 1 and not argv[1].startswith("--") else 2.0
    if not check_numerics(cand):
        print("tile_ab: a numerics check failed; not timing")
        sys.exit(1)
    rows = run_cases(cases(cand), seconds)
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
