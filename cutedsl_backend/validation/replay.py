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

from typing import Optional

from .bench import geomean
from .shape_sweep import MIN_CELL_RATIO as GATE
from .sweep_spaces import sweep_problem


def replay(rows: list, gpu: Optional[str] = None) -> dict:
    """Score the dispatcher's current choices on ``rows``: per row the ratio (peer / ours) of the
    config the sweep's models picked (``pick``), of the config ``default_config`` picks now (with
    the measured table of GPU model ``gpu``, if given; the models alone otherwise) and of the
    fastest candidate; their geomeans overall and per M, and the cells below the gate."""
    from ..configs import default_config

    scored, missing = [], []
    for row in rows:
        # (rows of sweeps from before the dtype field: bf16, their only mode)
        problem, spec = sweep_problem(row.get("dtype", "bfloat16"), row["m"], row["n"], row["k"])
        # the sweeps time candidates as tiled; the pick as run (configs.as_run: moved tiles,
        # dependent launch) is the same config to a model that ranks them
        now = default_config(problem, epilogue=spec, gpu=gpu).tiling()
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
