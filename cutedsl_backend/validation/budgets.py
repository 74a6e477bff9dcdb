"""Compile-time budgets: a versioned file (budgets.json), a gate, and a proposal writer."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

BUDGETS_FILE = Path(__file__).with_name("budgets.json")


def load_budgets(path: Path = BUDGETS_FILE) -> dict:
    return json.loads(Path(path).read_text())


def family(cell: dict) -> str:
    return f"{cell['arch']}/gemm" + ("" if cell.get("epilogue", "none") == "none" else "+epilogue")


def check_budgets(compile_results: list, budgets: dict) -> dict:
    """Per config: median compile time over its cells <= family median_s; each cell <= cell_max_s.

    Returns {"ok", "configs": {...}, "regressions": [...], "improvements": [...], "proposed": {...}}.
    """
    by_cfg = defaultdict(list)
    fam_of = {}
    for r in compile_results:
        if r.get("compile_seconds") is None:
            continue
        key = f"{r['cell']['config']}/{'gemm' if r['cell'].get('epilogue', 'none') == 'none' else 'epilogue'}"
        by_cfg[key].append(r["compile_seconds"])
        fam_of[key] = family(r["cell"])
    out: dict = {"ok": True, "configs": {}, "regressions": [], "improvements": []}
    fam_medians = defaultdict(list)
    for cfg, secs in sorted(by_cfg.items()):
        fam = budgets["families"][fam_of[cfg]]
        med = statistics.median(secs)
        fam_medians[fam_of[cfg]].append(med)
        worst = max(secs)
        ok = med <= fam["median_s"] and worst <= fam["cell_max_s"]
        out["configs"][cfg] = {"median_s": round(med, 3), "max_s": round(worst, 3), "n": len(secs),
                               "budget_median_s": fam["median_s"], "budget_cell_max_s": fam["cell_max_s"],
                               "ok": ok}
        if not ok:
            out["ok"] = False
            out["regressions"].append(f"{cfg}: median {med:.2f}s (budget {fam['median_s']}s), "
                                      f"max {worst:.2f}s (budget {fam['cell_max_s']}s)")
    proposed = json.loads(json.dumps(budgets))
    for fam, meds in fam_medians.items():
        m = statistics.median(meds)
        recorded = budgets["families"][fam].get("measured_median_s")
        if recorded and m < 0.8 * recorded:
            out["improvements"].append(f"{fam}: median {m:.2f}s vs recorded {recorded}s")
        proposed["families"][fam]["measured_median_s"] = round(m, 2)
    out["proposed"] = proposed
    return out


def write_proposal(report: dict, path: Path) -> None:
    """Write the budgets file this run would record (for a reviewed update of budgets.json)."""
    Path(path).write_text(json.dumps(report["summary"]["budgets"]["proposed"], indent=2) + "\n")
