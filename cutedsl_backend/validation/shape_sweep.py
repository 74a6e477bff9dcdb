"""The perf sweep: model projections x the whole token range, ours against the peer, on the GPU.

Each cell (dtype, projection, M) is first checked for correctness (fresh random inputs from a seed
derived from the cell, output poisoned with NaN, the tolerance policy against a float64
reference), then timed: ours and the peer (``torch.matmul`` = cuBLAS for 16-bit,
``torch._scaled_mm`` for fp8, cuBLAS on the concatenated weight + torch's ``silu(g) * u`` for the
gated MLP) alternate in three rounds, each side replayed from a CUDA graph (device time, no host
cost), the ratio is the median of the per-round ratios. A cell passes when its output is correct
and its ratio is at least ``MIN_CELL_RATIO``; the sweep passes when every cell does.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from typing import Callable, Optional

from .model_shapes import SWEEP_DTYPES, operand_bytes, sweep_cells

# the gate: a cell below this ratio to the peer fails (same-run, CUDA-graph device time)
MIN_CELL_RATIO = 0.90
ROUNDS = 3
# a cell whose per-round ratios spread wider than this (max / min) is timed for another ROUNDS,
# up to EXTRA_ROUND_SETS times, the medians taken over all of them: a stall of one side (seen on
# both, ours and cuBLAS: a cell's rounds 2-20x slower than the same cell in another run, unevenly
# across the rounds) would otherwise set the cell's ratio
MAX_ROUND_SPREAD = 1.10
EXTRA_ROUND_SETS = 2
HBM_TBPS = {"NVIDIA H200": 4.8, "NVIDIA H100 80GB HBM3": 3.35}
# a cell's config_source where a measured table chose its config (_config_choice)
TABLE_SOURCES = ("measured table", "borrowed table")


def cell_seed(dtype: str, n: int, k: int, m: int) -> int:
    """A replayable seed from the cell's identity (never ``hash()``: it changes per process)."""
    return int.from_bytes(hashlib.sha256(f"{dtype}/{m}x{n}x{k}".encode()).digest()[:4], "little")


def cell_id(dtype: str, m: int, n: int, k: int) -> str:
    return f"sm90a/sweep/{dtype}/{m}x{n}x{k}"


def _graph_ms(fn, target_ms: float = 1.0, reps: int = 0) -> Callable[[], float]:
    """A timer for ``fn``: a CUDA graph of enough back-to-back calls to take ~``target_ms``, whose
    replays are timed with CUDA events; the returned function gives the median ms per call."""
    import torch

    from .bench import graph_of

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)
    calls = max(1, min(50, round(target_ms / one)))
    graph = graph_of(fn, calls)
    n_reps = reps or max(5, min(15, round(10.0 / (one * calls))))

    def timed() -> float:
        graph.replay()  # warm
        times = []
        for _ in range(n_reps):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / calls)
        return statistics.median(times)

    return timed


def alternate(ours: Callable[[], float], peer: Callable[[], float], rounds: int = ROUNDS,
              max_spread: float = MAX_ROUND_SPREAD, extra_sets: int = EXTRA_ROUND_SETS) -> dict:
    """Ours and the peer timed in alternation; per-round times, medians and the median ratio.
    While the newest ``rounds`` ratios spread wider than ``max_spread`` (max / min), another
    ``rounds`` are timed, at most ``extra_sets`` times; the medians and the spread are over every
    round (both sides alike)."""
    t_ours: list = []
    t_peer: list = []
    for _ in range(1 + extra_sets):
        for _ in range(rounds):
            t_ours.append(ours())
            t_peer.append(peer())
        ratios = [p / o for p, o in zip(t_peer, t_ours)]
        newest = ratios[-rounds:]
        if max(newest) <= max_spread * min(newest):
            break
    return {"ours_ms": statistics.median(t_ours), "peer_ms": statistics.median(t_peer),
            "ratio": statistics.median(ratios), "ratio_spread": [min(ratios), max(ratios)],
            "rounds_ours_ms": t_ours, "rounds_peer_ms": t_peer}


def weight_copies(weight_bytes: int, l2_bytes: int, cold: bool) -> int:
    """How many copies of a cell's weights its timing rotates through. Hot (1): the same weights
    call after call, which stay in L2 where they fit (a benchmark loop's regime). Cold: enough
    copies that between two uses of one the others stream more than twice the L2 through it, so
    every call reads its weights from HBM, as a model's forward step does (each layer's weights
    once per step); at most 32."""
    if not cold or weight_bytes >= 2 * l2_bytes:
        return 1
    return min(32, math.ceil(2 * l2_bytes / weight_bytes) + 1)


def _operands(dtype: str, m: int, n: int, k: int, seed: int, copies: int = 1):
    """(ours, peer, reference, out, out_dtype) for one cell: nn.Linear-style B = W^T (K-major).
    ``ours`` and ``peer`` take the index of the weights' copy to use (``copies`` of them, the same
    values; the reference is the product with any)."""
    import torch

    import cutedsl_backend as cb

    g = torch.Generator(device="cuda").manual_seed(seed)
    if dtype.startswith("gated"):
        # the gate_up projection: N = 2 x intermediate rows, gate first; the output is N / 2 wide
        half = n // 2
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.5).to(torch.bfloat16)
        ws = _copies(w, copies)
        out = torch.empty(m, half, device="cuda", dtype=torch.bfloat16)
        h = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        peer_out = torch.empty_like(out)

        def peer(r=0):
            torch.matmul(a, ws[r].t(), out=h)
            torch.mul(torch.nn.functional.silu(h[:, :half]), h[:, half:], out=peer_out)

        g64 = a.double() @ w[:half].double().t()
        ref = torch.nn.functional.silu(g64) * (a.double() @ w[half:].double().t())
        return (lambda r=0: cb.gemm_gated(a, w_gate_up=ws[r], out=out), peer, ref, out, "bfloat16")
    if not dtype.startswith("fp8"):
        dt = getattr(torch, dtype)
        a = torch.randn(m, k, device="cuda", generator=g).to(dt)
        w = torch.randn(n, k, device="cuda", generator=g).to(dt)
        bs = [c.t() for c in _copies(w, copies)]
        out = torch.empty(m, n, device="cuda", dtype=dt)
        peer_out = torch.empty_like(out)
        ref = a.double() @ bs[0].double()
        return (lambda r=0: cb.gemm(a, bs[r], out=out), lambda r=0: torch.matmul(a, bs[r], out=peer_out), ref, out,
                dtype)
    f8 = torch.float8_e4m3fn
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(f8)
    w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(f8)
    bs = [c.t() for c in _copies(w, copies)]
    if dtype == "fp8_tensorwise":
        sa = torch.rand((), device="cuda", generator=g) + 0.5
        sb = torch.rand((), device="cuda", generator=g) + 0.5
    else:
        sa = torch.rand(m, 1, device="cuda", generator=g) / 16 + 0.01
        sb = torch.rand(1, n, device="cuda", generator=g) / 16 + 0.01
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = (a.double() @ bs[0].double()) * sa.double() * sb.double()
    return (lambda r=0: cb.scaled_mm(a, bs[r], sa, sb, out_dtype=torch.bfloat16, out=out),
            lambda r=0: torch._scaled_mm(a, bs[r], sa, sb, out_dtype=torch.bfloat16), ref, out, "bfloat16")


def _copies(w, copies: int) -> list:
    """``w`` and ``copies - 1`` clones of it (the cold-weight timing's rotation)."""
    return [w] + [w.clone() for _ in range(copies - 1)]


def _per_call(timer, copies: int):
    """A timer of one call from a timer of ``copies`` calls (one per weights' copy)."""
    return lambda: timer() / copies


def run_cell(dtype: str, proj, m: int, cold: bool = False) -> dict:
    """One cell: correctness first, then the alternated timing (``cold``: rotating through copies
    of the weights, see :func:`weight_copies`); a result row of the report."""
    import torch

    from .tolerances import GATED_TERMS, compare, compare_fp8

    n, k = proj.n, proj.k
    copies = weight_copies(n * k * (1 if dtype.startswith("fp8") else 2),
                           torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size, cold)
    row = {"id": cell_id(dtype, m, n, k), "gate": "perf", "cell": {"arch": "sm90a", "dtype": dtype},
           "dtype": dtype, "model": proj.model, "projection": proj.name, "m": m, "n": n, "k": k,
           "shape": f"{m}x{n}x{k}", "seed": cell_seed(dtype, n, k, m), "weight_copies": copies}
    try:
        ours, peer, ref, out, out_dtype = _operands(dtype, m, n, k, row["seed"], copies)
        out.fill_(float("nan"))
        ours()
        torch.cuda.synchronize()
        if dtype.startswith("fp8"):
            check = compare_fp8(out, ref, out_dtype, k)
        else:
            gated = dtype.startswith("gated")
            check = compare(out, ref, out_dtype, k, activation="silu" if gated else None,
                            terms=GATED_TERMS if gated else 1)
        del ref
        row["correct"] = bool(check["ok"])
        row["rel_l2"] = check["rel_l2"]
        timing = alternate(*(_per_call(_graph_ms(lambda f=f: [f(r) for r in range(copies)]), copies)
                             for f in (ours, peer)))
    except Exception as e:  # a cell that cannot run fails with the reason, the sweep goes on
        return {**row, "status": "fail", "reason": f"{type(e).__name__}: {str(e)[:300]}"}
    moved = operand_bytes(m, n, k, dtype)
    row.update(timing)
    row["ours_tflops"] = 2 * m * n * k / (timing["ours_ms"] * 1e9)
    row["peer_tflops"] = 2 * m * n * k / (timing["peer_ms"] * 1e9)
    row["ours_tbps"] = moved / (timing["ours_ms"] * 1e9)
    row["peer_tbps"] = moved / (timing["peer_ms"] * 1e9)
    gpu = torch.cuda.get_device_name()
    row["config"], row["config_source"], row["table_m"], row["table_gpu"] = _config_choice(dtype, m, n, k, gpu)
    row["tuned_best_ratio"] = _tuned_best_ratio(dtype, m, n, k, gpu)
    if not row["correct"]:
        row.update(status="fail", reason=f"wrong result: {check}")
    elif timing["ratio"] < MIN_CELL_RATIO:
        row.update(status="fail", reason=f"ratio {timing['ratio']:.3f} < {MIN_CELL_RATIO}")
    else:
        row.update(status="pass", reason="")
    return row


def cell_problem(dtype: str, m: int, n: int, k: int) -> tuple:
    """(GemmProblem, EpilogueSpec or None) of a sweep cell, as the eager API dispatches it."""
    from ..epilogue import EpilogueSpec
    from ..problem import make_problem

    if dtype.startswith("gated"):
        return make_problem(m, n, k, dtype="bfloat16", b_major="k"), EpilogueSpec(gated="silu")
    if dtype.startswith("fp8"):
        scales = ("row", "col") if dtype == "fp8_rowwise" else ("scalar", "scalar")
        return (make_problem(m, n, k, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16"),
                EpilogueSpec(scale_a=scales[0], scale_b=scales[1]))
    return make_problem(m, n, k, dtype=dtype, b_major="k"), None


def _this_gpu(gpu: Optional[str]) -> str:
    if gpu is not None:
        return gpu
    import torch

    return torch.cuda.get_device_name()


def _config_choice(dtype: str, m: int, n: int, k: int, gpu: Optional[str] = None) -> tuple:
    """The config a cell runs, where the choice came from: "measured table" (this GPU model's
    entry for the projection, configs.measured, where it differs from what the cost models pick at
    this M), "borrowed table" (the same from a table measured on another model this one borrows,
    configs.measured.BORROWED_TABLES) or "models" (the ranking's cost models, also where a table
    entry names their own pick); the token count the table's entry was measured at (None for the
    models; another M than the cell's: the entry serves it from the next measured M up, out of
    sample); and the GPU model the table was measured on (None for the models)."""
    from ..configs import default_config, dispatched_entry

    gpu = _this_gpu(gpu)
    p, spec = cell_problem(dtype, m, n, k)
    cfg = default_config(p, epilogue=spec, gpu=gpu)
    found = dispatched_entry(p, gpu, spec)
    if found is not None and cfg != default_config(p, epilogue=spec):
        entry, table = found
        return cfg.name, "measured table" if table.gpu == gpu else "borrowed table", entry.m, table.gpu
    return cfg.name, "models", None, None


def _tuned_best_ratio(dtype: str, m: int, n: int, k: int, gpu: Optional[str] = None) -> Optional[dict]:
    """Where this GPU model's measured table has an entry serving the cell: the fastest candidate
    its tuning sweep timed there against that sweep's peer time (``ratio``) and the token count it
    was measured at (``m``): whether a cell below the gate lost by the choice or by every config
    the sweep had. None without such an entry, and for fp16 cells (16-bit tables are swept in
    bf16, against cuBLAS's bf16 kernels) and for entries borrowed from another GPU model's table
    (timed against that GPU's peer)."""
    from ..configs.measured import MEASURED

    if dtype == "float16":
        return None
    p, spec = cell_problem(dtype, m, n, k)
    gpu = _this_gpu(gpu)
    served = MEASURED.served(p, gpu, spec)
    if served is None or served[1].gpu != gpu:
        return None
    entry = served[0]
    if not entry.ms or not entry.peer_ms:
        return None
    return {"ratio": entry.peer_ms / entry.ms, "m": entry.m}


def summarize(rows: list) -> dict:
    """Per dtype: cells run, geomean ratio (all, and M <= 64 / 65..1023 / >= 1024), worst cell,
    cells below the gate; the sweep's verdict."""
    out = {}
    for dtype in sorted({r["dtype"] for r in rows}):
        ran = [r for r in rows if r["dtype"] == dtype and "ratio" in r]
        if not ran:
            continue

        def geo(sel):
            return math.exp(statistics.fmean(math.log(r["ratio"]) for r in sel)) if sel else None

        worst = min(ran, key=lambda r: r["ratio"])
        out[dtype] = {
            "cells": len(ran), "geomean": geo(ran),
            "geomean_m_le_64": geo([r for r in ran if r["m"] <= 64]),
            "geomean_m_65_1023": geo([r for r in ran if 64 < r["m"] < 1024]),
            "geomean_m_ge_1024": geo([r for r in ran if r["m"] >= 1024]),
            "worst": {"ratio": worst["ratio"], "cell": f"{worst['model']} {worst['projection']} M={worst['m']}"},
            "below_gate": sum(r["ratio"] < MIN_CELL_RATIO for r in ran),
            "wrong": sum(not r.get("correct", True) for r in ran),
            # cells whose config came from a measured table (the projections it was measured on:
            # in sample where measured at the cell's own M, and on this GPU model unless borrowed),
            # and the rest (the models)
            "table_cells": sum(r.get("config_source") in TABLE_SOURCES for r in ran),
            "table_cells_other_m": sum(r.get("config_source") in TABLE_SOURCES and r.get("table_m") not in
                                       (None, r["m"]) for r in ran),
            "table_cells_borrowed": sum(r.get("config_source") == "borrowed table" for r in ran),
            "geomean_table": geo([r for r in ran if r.get("config_source") in TABLE_SOURCES]),
            "geomean_models": geo([r for r in ran if r.get("config_source") not in TABLE_SOURCES]),
        }
    return out


def run_sweep(tag: str = "standard", dtypes=None, log: Optional[Callable] = print,
              checkpoint: Optional[Callable[[dict], None]] = None, ms: Optional[tuple] = None,
              cold: bool = False) -> dict:
    """Every cell of ``tag`` on this GPU (at the token counts ``ms`` instead of the tag's, if
    given); the perf section of the validation report. ``checkpoint`` receives the sweep so far
    every 25 cells (a long run keeps what it measured). ``cold``: each call reads its weights from
    HBM (:func:`weight_copies`); default: the same weights call after call (in L2 where they fit)."""
    import torch

    cells = sweep_cells(tag, tuple(dtypes or SWEEP_DTYPES), ms=ms)
    name = torch.cuda.get_device_name()
    num_sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

    from ..configs.measured import MEASURED

    def sweep(rows):
        return {"results": rows, "summary": summarize(rows), "tag": tag, **MEASURED.state(),
                "ms": sorted({m for _, _, m in cells}) if ms else None,
                "gate_min_ratio": MIN_CELL_RATIO,
                "peer": {"16-bit": "torch.matmul (cuBLAS)", "fp8": "torch._scaled_mm"},
                "timing": f"CUDA-graph replay, ours and the peer alternated in {ROUNDS} rounds (more, up to "
                          f"{ROUNDS * (1 + EXTRA_ROUND_SETS)}, where their ratios spread over "
                          f"{MAX_ROUND_SPREAD:.2f}x), median of the "
                          "per-round ratios" + ("; weights cold (each call reads a copy not in L2)" if cold
                                                else "; weights hot (the same copy every call)"),
                "weights": "cold" if cold else "hot", "hbm_tbps": HBM_TBPS.get(name), "device": name,
                "num_sms": num_sms, "cells_planned": len(cells)}

    t0 = time.time()
    rows: list = []
    for i, (dtype, proj, m) in enumerate(cells, 1):
        rows.append(run_cell(dtype, proj, m, cold))
        torch.cuda.empty_cache()
        if i % 25 == 0 or i == len(cells):
            if log:
                log(f"sweep: {i}/{len(cells)} cells, {time.time() - t0:.0f}s")
            if checkpoint:
                checkpoint(sweep(rows))
    return sweep(rows)
