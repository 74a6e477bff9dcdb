"""What the dispatcher runs on the perf sweep's cells, without a GPU: per cell the config and
where the choice came from (the cost models, this GPU model's measured table or a borrowed one),
and, against a stored perf sweep (a validation report or ``sweep-shapes --json``), the cells whose
config changed since it ran.

A change to the ranking or the tables is measured on a GPU by an A/B of the cells it moves; this
says which cells those are before a GPU is at hand, and which of a stored sweep's slow cells would
still run the config that was slow (those a change has not touched stay where they were).
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from .model_shapes import SWEEP_DTYPES, sweep_cells
from .shape_sweep import MIN_CELL_RATIO, _config_choice

BANDS = (("M <= 64", 1, 64), ("65-1023", 65, 1023), (">= 1024", 1024, None))


def band(m: int) -> str:
    """The token-count band of the report's summaries a cell falls in."""
    return next(name for name, lo, hi in BANDS if m >= lo and (hi is None or m <= hi))


def _tiling(name: str) -> str:
    """A config name as the sweeps compare configs: without the moved last tiles and dependent
    launch configs.as_run adds as a config runs (a load of A fitted to M stays: a change)."""
    from ..configs import GemmConfig

    return GemmConfig.from_name(name).tiling().name


def _perf(sweep: dict) -> dict:
    """A validation report's ``perf`` section (empty where the report ran no GPU), or the
    ``sweep-shapes --json`` file itself."""
    return (sweep.get("perf") or {}) if "perf" in sweep else sweep


def stored_cells(sweep: dict) -> list:
    """The perf cells of a stored sweep: a validation report's ``perf`` section or a
    ``sweep-shapes --json`` file (the cells that ran: with a ratio and a config)."""
    return [r for r in _perf(sweep).get("results", [])
            if "ratio" in r and r.get("config") and all(key in r for key in ("dtype", "m", "n", "k"))]


def picks(tag: str = "standard", dtypes=None, gpu: Optional[str] = None, ms: Optional[tuple] = None,
          against: Optional[dict] = None) -> dict:
    """Per cell of ``tag`` (at ``ms`` instead of its token counts, if given) the config the
    dispatcher picks on GPU model ``gpu`` (None: the cost models alone) and its source; counts per
    dtype, source and band. With ``against`` (a stored sweep, :func:`stored_cells`): per dtype and
    band the cells whose config changed, those below the gate then (``slow``) whose config changed
    or not, and the unchanged slow cells themselves (``slow_unchanged``); cells of the stored sweep
    that are not in ``tag`` are left out."""
    cells = []
    for dtype, proj, m in sweep_cells(tag, tuple(dtypes or SWEEP_DTYPES), ms=ms):
        name, source, table_m, table_gpu = _config_choice(dtype, m, proj.n, proj.k, gpu or "")
        cells.append({"dtype": dtype, "model": proj.model, "projection": proj.name, "m": m, "n": proj.n,
                      "k": proj.k, "config": name, "source": source, "table_m": table_m, "table_gpu": table_gpu})
    from ..configs.measured import MEASURED

    out = {"tag": tag, "gpu": gpu, "cells": cells, **MEASURED.state(),
           "sources": {d: dict(Counter(c["source"] for c in cells if c["dtype"] == d))
                       for d in dict.fromkeys(c["dtype"] for c in cells)}}
    if against is None:
        return out
    perf, readable = _perf(against), stored_cells(against)
    stored = {(r["dtype"], r["m"], r["n"], r["k"]): r for r in readable}
    out["against"] = {"device": perf.get("device"), "cells": len(stored),
                      "rows_unreadable": len(perf.get("results", [])) - len(readable)}
    compared, slow_unchanged = Counter(), []
    for c in cells:
        then = stored.get((c["dtype"], c["m"], c["n"], c["k"]))
        if then is None:
            continue
        changed = _tiling(c["config"]) != _tiling(then["config"])
        slow = then["ratio"] < perf.get("gate_min_ratio", MIN_CELL_RATIO)
        c.update(then_config=then["config"], then_ratio=then["ratio"], changed=changed)
        compared[(c["dtype"], band(c["m"]), "changed" if changed else "same", "slow" if slow else "ok")] += 1
        if slow and not changed:
            slow_unchanged.append(c)
    out["compared"] = {d: {b: {key: compared[(d, b, *key.split("_"))]
                               for key in ("changed_ok", "changed_slow", "same_ok", "same_slow")}
                           for b, _, _ in BANDS}
                       for d in dict.fromkeys(c["dtype"] for c in cells)}
    out["slow_unchanged"] = slow_unchanged
    out["against"]["compared"] = sum(compared.values())
    return out


def picks_markdown(result: dict) -> list:
    """The picks in Markdown: the sources per dtype; against a stored sweep, the changed cells per
    dtype and band and the slow cells still running the config they were slow with."""
    who = result["gpu"] or "no GPU model (the cost models alone)"
    own = "" if result.get("borrowed_tables", True) else " (its own measured tables only, none borrowed)"
    out = [f"## Picks on {who}{own}, tag `{result['tag']}`", "", "| dtype | cells | " + " | ".join(
        ("models", "measured table", "borrowed table")) + " |", "|---|---|---|---|---|"]
    for d, s in result["sources"].items():
        out.append(f"| {d} | {sum(s.values())} | {s.get('models', 0)} | {s.get('measured table', 0)} | "
                   f"{s.get('borrowed table', 0)} |")
    if "compared" not in result:
        return out
    a = result["against"]
    device = f" (run on {a['device']})" if a.get("device") else ""
    out += ["", f"Against the stored sweep{device}: {a['compared']} of its {a['cells']} cells in this tag "
            f"({a['rows_unreadable']} rows without a shape or config left out); cells whose config changed / "
            "not, and of them those below the gate then (slow)", "",
            "| dtype | band | changed | of them slow then | same | of them slow then |", "|---|---|---|---|---|---|"]
    for d, bands in result["compared"].items():
        for b, n in bands.items():
            if sum(n.values()):
                out.append(f"| {d} | {b} | {n['changed_ok'] + n['changed_slow']} | {n['changed_slow']} | "
                           f"{n['same_ok'] + n['same_slow']} | {n['same_slow']} |")
    if result["slow_unchanged"]:
        out += ["", "Slow then, the same config now:", "", "| cell | ratio then | config | source |",
                "|---|---|---|---|"]
        out += [f"| {c['dtype']} {c['model']} {c['projection']} {c['m']}x{c['n']}x{c['k']} | {c['then_ratio']:.3f} | "
                f"`{c['config']}` | {c['source']} |" for c in result["slow_unchanged"]]
    return out
