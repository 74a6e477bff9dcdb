"""``python -m cutedsl_backend probe-configs``: named configs (or the dispatcher's pick) on chosen
shapes against the peer, each result checked against float64 first, then ours and the peer timed
in alternation (CUDA-graph replay). What a design question about one config needs (does a field
change the time, is one scaling slower than another with the same tiles), as a command rather
than a script.

A case is (dtype, config, (M, N, K)): dtype one of :data:`PROBE_DTYPES`; config a
:class:`~cutedsl_backend.configs.GemmConfig` name, or ``"pick"`` for what the dispatcher runs
(its table or model choice as configs.as_run runs it). Operands are nn.Linear's: A (M, K)
row-major, the weight (N, K) row-major passed transposed; FP8 in e4m3 with fp32 scales (a scalar
each, or per row of A and per column of the output), bf16 out.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

# the operand classes a probe times, each against its peer: cuBLAS (torch.matmul) for 16-bit,
# torch._scaled_mm with the same scales for FP8 (its default: every k-tile accumulated in fp32)
PROBE_DTYPES = ("bfloat16", "float16", "fp8_tensorwise", "fp8_rowwise")
PICK = "pick"


class ProbeOperands(NamedTuple):
    """One (dtype, shape)'s operands, drawn once and shared by every config probed on it: the
    dtype, K, A, B (the weight transposed), the output our calls write, the scales (FP8; else
    None), the peer's call and the float64 reference."""

    dtype: str
    k: int
    a: object
    b: object
    out: object
    scales: Optional[tuple]
    peer: Callable
    ref: Callable


class ProbeCalls(NamedTuple):
    """One config's calls: ``ours`` and ``peer`` (each writes its own output buffer, the same one
    every call), and ``check`` (ours on a NaN-poisoned output against float64: tolerances.compare's
    dict, ``ok`` among its keys)."""

    ours: Callable
    peer: Callable
    check: Callable


def probe_operands(dtype: str, m: int, n: int, k: int, seed: int = 2026) -> ProbeOperands:
    """Fresh random operands of one case (a generator seeded from ``seed`` and the shape:
    replayable)."""
    import torch

    from ..epilogue import reference

    if dtype not in PROBE_DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(PROBE_DTYPES)}")
    g = torch.Generator(device="cuda").manual_seed(seed + m + n + k)
    fp8 = dtype.startswith("fp8")
    t = torch.float8_e4m3fn if fp8 else getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", generator=g).to(t)
    b = torch.randn(n, k, device="cuda", generator=g).to(t).t()
    out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16 if fp8 else t)
    if not fp8:
        peer_out = torch.empty_like(out)
        return ProbeOperands(dtype, k, a, b, out, None, lambda: torch.matmul(a, b, out=peer_out),
                             lambda: a.double() @ b.double())
    if dtype == "fp8_rowwise":
        sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5
        sb = torch.rand(1, n, device="cuda", generator=g) + 0.5
    else:
        sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(1.5, device="cuda")
    return ProbeOperands(dtype, k, a, b, out, (sa, sb),
                         lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16),
                         lambda: reference(a.double() @ b.double(), scale_a=sa.double(), scale_b=sb.double()))


def probe_calls(ops: ProbeOperands, config) -> ProbeCalls:
    """The calls of one config on ``ops``. ``config``: a GemmConfig, or None for the dispatcher's pick."""
    import cutedsl_backend as cb

    from .tolerances import compare, compare_fp8

    if ops.scales is None:
        def ours():
            return cb.gemm(ops.a, ops.b, config=config, out=ops.out)
    else:
        def ours():
            return cb.scaled_mm(ops.a, ops.b, *ops.scales, config=config, out=ops.out)

    def check() -> dict:
        ops.out.fill_(float("nan"))  # poisoned: an element the kernel does not write fails the check
        got = ours()
        if ops.scales is None:
            return compare(got, ops.ref(), ops.dtype, ops.k)
        return compare_fp8(got, ops.ref(), "bfloat16", ops.k)

    return ProbeCalls(ours, ops.peer, check)


def as_dispatched(dtype: str, m: int, n: int, k: int) -> str:
    """The name of the config the dispatcher runs for a case (this GPU model's table or the
    models, as configs.as_run runs it)."""
    from .shape_sweep import _config_choice

    return _config_choice(dtype, m, n, k)[0]


def config_ab(cases, rounds: int = 5, log=print, time_calls: Optional[Callable] = None,
              make_operands: Callable = probe_operands, make_calls: Callable = probe_calls,
              dispatched: Callable = as_dispatched, peer_kernels: Optional[Callable] = None) -> list:
    """Each case (dtype, config name or ``"pick"``, (M, N, K)) checked, then every case of the
    same (dtype, shape) timed in one alternated set with its peer (so the configs of a shape share
    the clock state of a round, and one draw of operands). ``time_calls``
    (bench.alternated_graph_ms), ``make_operands`` / ``make_calls`` (:func:`probe_operands`,
    :func:`probe_calls`) and ``dispatched`` (:func:`as_dispatched`) stand in for the GPU in tests. A
    config the rules refuse for its shape is a row with ``refused`` (the rule) and no times.
    Rows: dtype, config, m, n, k, ours_ms (median over rounds) and its range, peer_ms and its
    range, ratio (the median over rounds of peer / ours, as the sweeps take it), correct, rel_l2.
    A shape whose timing fails (e.g. the peer refusing it) is one row with ``error``; the probe
    goes on with the next. ``peer_kernels`` (bench.kernels_per_call), where given, names the kernels
    the peer's call runs (its tile and cluster are in cuBLAS's kernel names): each timed row gains
    ``peer_kernels``, profiled after every shape was timed (CUPTI may stay attached and slow what
    runs after it)."""
    from ..configs import GemmConfig
    from ..problem import UnsupportedGemmError
    from .bench import kernels_text, round_ratio

    if time_calls is None:
        from .bench import alternated_graph_ms as time_calls

    groups: dict = {}
    for dtype, name, shape in cases:
        groups.setdefault((dtype, tuple(shape)), []).append(name)
    rows, peers = [], []
    for (dtype, (m, n, k)), names in groups.items():
        calls, checked = {}, {}
        ops = make_operands(dtype, m, n, k)
        for name in dict.fromkeys(names):
            cfg = None if name == PICK else GemmConfig.from_name(name)
            label = name
            try:
                if cfg is None:  # the shape may be one the API serves through a staged output
                    label = dispatched(dtype, m, n, k) + " (pick)"
                probe = make_calls(ops, cfg)
                checked[label] = probe.check()
            except UnsupportedGemmError as e:
                rows.append({"dtype": dtype, "config": label, "m": m, "n": n, "k": k, "refused": str(e)})
                log(f"{dtype:15s} {label:52s} {m}x{n}x{k}: refused: {e}")
                continue
            calls[label] = probe.ours
        if not calls:
            continue
        try:
            timed = time_calls({**calls, "peer": ops.peer}, rounds)
        except (RuntimeError, UnsupportedGemmError) as e:
            rows.append({"dtype": dtype, "config": ",".join(calls), "m": m, "n": n, "k": k, "error": str(e)})
            log(f"{dtype:15s} {m}x{n}x{k}: not timed: {e}")
            continue
        them = timed["peer"]
        peers.append((ops.peer, len(rows), len(rows) + len(calls)))
        for label in calls:
            us, check = timed[label], checked[label]
            row = {"dtype": dtype, "config": label, "m": m, "n": n, "k": k, "ours_ms": us["ms"],
                   "ours_range": [min(us["runs"]), max(us["runs"])], "peer_ms": them["ms"],
                   "peer_range": [min(them["runs"]), max(them["runs"])], "ratio": round_ratio(timed, "peer", label),
                   "correct": bool(check["ok"]), "rel_l2": check.get("rel_l2")}
            rows.append(row)
            lo, hi = row["ours_range"]
            log(f"{dtype:15s} {label:52s} {m}x{n}x{k}: ours {us['ms'] * 1e3:8.2f} us ({lo * 1e3:.2f}-{hi * 1e3:.2f}), "
                f"peer {them['ms'] * 1e3:8.2f} us, {row['ratio']:.3f}x, {'correct' if row['correct'] else 'WRONG'}")
    for call, first, end in peers if peer_kernels else ():
        kernels = peer_kernels(call)
        for row in rows[first:end]:
            row["peer_kernels"] = kernels
        r = rows[first]
        log(f"{r['dtype']:15s} {r['m']}x{r['n']}x{r['k']} peer: {kernels_text(kernels)}")
    return rows
