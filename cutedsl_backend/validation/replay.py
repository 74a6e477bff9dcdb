"""What the dispatcher would run on swept shapes, scored with the sweep's own timings.

A ``sweep-decode --json`` row times many candidate configs of one nn.Linear problem against one
peer timing (cuBLAS or torch._scaled_mm) in the same process. Replaying the rows through today's
ranking (``default_config``) scores a change to the cost models against stored measurements
without a GPU: per row, the peer's time over the time of the config the dispatcher now picks.
Each row keeps its own peer (rows of different sweeps are never merged: their peer timings
differ), and a row that did not time the config the dispatcher now picks is counted as not
measured, not scored. Several rankings (the models alone, or with one GPU model's measured
tables each) are scored side by side on the same rows: a row counts where it timed every one's
pick, so their geomeans compare. A shape (dtype, M, N, K) counts once: where several sweeps'
rows scored it, by the geomean of their ratios.
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
    the models alone, labelled ``models``) and of the fastest candidate; per shape (``cells``)
    the geomean over its scored rows; their geomeans overall and per M, the cells below the gate,
    and the shapes no row scored (``not_measured``: a config it did not time)."""
    from ..configs import default_config

    labels = [gpu or MODELS for gpu in gpus]
    scored, missing = [], []
    for row in rows:
        # (rows of sweeps from before the dtype field: bf16, their only mode)
        dtype = row.get("dtype", "bfloat16")
        problem, spec = sweep_problem(dtype, row["m"], row["n"], row["k"])
        # the sweeps time candidates as tiled; the pick as run (configs.as_run: moved tiles,
        # dependent launch) is the same config to a model that ranks them
        now = {label: default_config(problem, epilogue=spec, gpu=gpu).tiling().name for label, gpu in zip(labels, gpus)}
        times = row["times"]
        absent = {name for name in (*now.values(), row["pick"]) if name not in times}
        if absent:
            missing.append({"dtype": dtype, "m": row["m"], "n": row["n"], "k": row["k"], "configs": absent})
            continue
        scored.append({"dtype": dtype, "m": row["m"], "n": row["n"], "k": row["k"], "configs": now,
                       "swept_pick": row["peer_ms"] / times[row["pick"]],
                       "now": {label: row["peer_ms"] / times[name] for label, name in now.items()},
                       "best": row["peer_ms"] / min(times.values())})

    cells = []
    for key in dict.fromkeys((r["dtype"], r["m"], r["n"], r["k"]) for r in scored):
        same = [r for r in scored if (r["dtype"], r["m"], r["n"], r["k"]) == key]
        cells.append({"dtype": key[0], "m": key[1], "n": key[2], "k": key[3], "rows": len(same),
                      "configs": same[0]["configs"], "swept_pick": geomean(r["swept_pick"] for r in same),
                      "now": {label: geomean(r["now"][label] for r in same) for label in labels},
                      "best": geomean(r["best"] for r in same)})
    done = {(c["dtype"], c["m"], c["n"], c["k"]) for c in cells}
    # a shape no row scored, and the picks none of its rows timed
    unscored: dict = {}
    for r in missing:
        key = (r["dtype"], r["m"], r["n"], r["k"])
        if key not in done:
            before = unscored[key]["configs"] if key in unscored else r["configs"]
            unscored[key] = {**r, "configs": before & r["configs"]}
    unscored_cells = [{**r, "configs": sorted(r["configs"])} for r in unscored.values()]

    def summary(sel):
        return {"cells": len(sel), "swept_pick": geomean(c["swept_pick"] for c in sel),
                "now": {label: geomean(c["now"][label] for c in sel) for label in labels},
                "best": geomean(c["best"] for c in sel),
                "below_gate_swept_pick": sum(c["swept_pick"] < GATE for c in sel),
                "below_gate_now": {label: sum(c["now"][label] < GATE for c in sel) for label in labels}}

    from ..configs.measured import MEASURED

    return {"rankings": labels, **MEASURED.state(),
            "all": summary(cells) if cells else None, "rows_scored": len(scored),
            "per_m": {m: summary([c for c in cells if c["m"] == m]) for m in sorted({c["m"] for c in cells})},
            "cells": cells, "not_measured": unscored_cells, "rows_not_measured": len(missing)}
