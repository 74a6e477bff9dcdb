"""What the dispatcher would run on swept shapes, scored with the sweep's own timings.

A ``sweep-decode --json`` row times many candidate configs of one nn.Linear problem against one
peer timing (cuBLAS or torch._scaled_mm) in the same process. Replaying the rows through today's
ranking (``default_config``) scores a change to the cost models against stored measurements
without a GPU: per row, the peer's time over the time of the config the dispatcher now picks.
Each row keeps its own peer (rows of different sweeps are never merged: their peer timings
differ), and a row that did not time the config the dispatcher now picks is counted as not
measured, not scored.
"""

from __future__ import annotations

import gzip
import json
from typing import Iterable, Optional

from ..configs.measured import SWEEP_OPERANDS
from .bench import geomean

GATE = 0.90  # the perf gate's cell floor (shape_sweep.MIN_CELL_RATIO), for the "below" counts


def load_rows(paths: Iterable[str]) -> list:
    """The rows of ``sweep-decode --json`` files (``.json`` or ``.json.gz``)."""
    rows: list = []
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            rows += json.load(f)
    return rows


def _problem_and_spec(row: dict):
    from ..epilogue import EpilogueSpec
    from ..problem import GemmProblem

    dtype = row.get("dtype", "bfloat16")  # (rows of sweeps from before the field: bf16, their only mode)
    if SWEEP_OPERANDS.get(dtype) is None:
        raise ValueError(f"row dtype {dtype!r}: one of {', '.join(SWEEP_OPERANDS)}")
    fp8 = dtype.startswith("fp8")
    problem = GemmProblem(row["m"], row["n"], row["k"], 1, "float8_e4m3fn" if fp8 else "bfloat16", "bfloat16",
                          "k", "k", "sm90a", fast_accum=dtype == "fp8_tensorwise_fast")
    return problem, (EpilogueSpec(scale_a="scalar", scale_b="scalar") if fp8 else None)


def replay(rows: list, gpu: Optional[str] = None) -> dict:
    """Score the dispatcher's current choices on ``rows``: per row the ratio (peer / ours) of the
    config the sweep's models picked (``pick``), of the config ``default_config`` picks now (with
    the measured table of GPU model ``gpu``, if given; the models alone otherwise) and of the
    fastest candidate; their geomeans overall and per M, and the cells below the gate."""
    from ..configs import default_config

    scored, missing = [], []
    for row in rows:
        problem, spec = _problem_and_spec(row)
        now = default_config(problem, epilogue=spec, gpu=gpu)
        times = row["times"]
        if now.name not in times or row["pick"] not in times:
            missing.append({"m": row["m"], "n": row["n"], "k": row["k"], "config": now.name})
            continue
        scored.append({"m": row["m"], "n": row["n"], "k": row["k"], "config": now.name,
                       "swept_pick": row["peer_ms"] / times[row["pick"]],
                       "now": row["peer_ms"] / times[now.name],
                       "best": row["peer_ms"] / min(times.values())})

    def summary(cells):
        return {"cells": len(cells), **{key: geomean(c[key] for c in cells) for key in ("swept_pick", "now", "best")},
                "below_gate_swept_pick": sum(c["swept_pick"] < GATE for c in cells),
                "below_gate_now": sum(c["now"] < GATE for c in cells)}

    return {"all": summary(scored) if scored else None,
            "per_m": {m: summary([c for c in scored if c["m"] == m]) for m in sorted({c["m"] for c in scored})},
            "rows": scored, "not_measured": missing}
