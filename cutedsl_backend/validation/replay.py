"""What the dispatcher would run on swept shapes, scored with the sweep's own timings.

A ``sweep-decode --json`` row times many candidate configs of one nn.Linear problem against one
peer timing (cuBLAS or torch._scaled_mm) in the same process. Replaying the rows through today's
ranking (``default_config``) scores a change to the cost models against stored measurements
without a GPU: per row, the peer's time over the time of the config the dispatcher now picks.
Each row keeps its own peer (rows of different sweeps are never merged: their peer timings
differ), and a row that did not time the config the dispatcher now picks is counted as not
measured, not scored. Several rankings (the models alone, or with one GPU model's measured
tables each) are scored side by side on the same rows: a row counts where it timed every one's
pick, so their geomeans compare.
"""

from __future__ import annotations

from .bench import geomean
from .shape_sweep import MIN_CELL_RATIO as GATE
from .sweep_spaces import sweep_problem

MODELS = "models"  # the label of the ranking without tables


def replay(rows: list, gpus: tuple = (None,)) -> dict:
    """Score the dispatcher's current choices on ``rows``: per row the ratio (peer / ours) of the
    config the sweep's models picked (``pick``), of the config ``default_config`` picks now for
    each of ``gpus`` (with that GPU model's measured tables, its own and those it borrows; None:
    the models alone, labelled ``models``) and of the fastest candidate; their geomeans overall
    and per M, and the cells below the gate."""
    from ..configs import default_config

    labels = [gpu or MODELS for gpu in gpus]
    scored, missing = [], []
    for row in rows:
        # (rows of sweeps from before the dtype field: bf16, their only mode)
        problem, spec = sweep_problem(row.get("dtype", "bfloat16"), row["m"], row["n"], row["k"])
        # the sweeps time candidates as tiled; the pick as run (configs.as_run: moved tiles,
        # dependent launch) is the same config to a model that ranks them
        now = {label: default_config(problem, epilogue=spec, gpu=gpu).tiling().name for label, gpu in zip(labels, gpus)}
        times = row["times"]
        absent = sorted({name for name in now.values() if name not in times})
        if absent or row["pick"] not in times:
            missing.append({"m": row["m"], "n": row["n"], "k": row["k"], "configs": absent or [row["pick"]]})
            continue
        scored.append({"m": row["m"], "n": row["n"], "k": row["k"], "configs": now,
                       "swept_pick": row["peer_ms"] / times[row["pick"]],
                       "now": {label: row["peer_ms"] / times[name] for label, name in now.items()},
                       "best": row["peer_ms"] / min(times.values())})

    def summary(cells):
        return {"cells": len(cells), "swept_pick": geomean(c["swept_pick"] for c in cells),
                "now": {label: geomean(c["now"][label] for c in cells) for label in labels},
                "best": geomean(c["best"] for c in cells),
                "below_gate_swept_pick": sum(c["swept_pick"] < GATE for c in cells),
                "below_gate_now": {label: sum(c["now"][label] < GATE for c in cells) for label in labels}}

    return {"rankings": labels, "all": summary(scored) if scored else None,
            "per_m": {m: summary([c for c in scored if c["m"] == m]) for m in sorted({c["m"] for c in scored})},
            "rows": scored, "not_measured": missing}
