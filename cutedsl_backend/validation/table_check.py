"""An update of a measured config table checked on the perf gate's cells before it ships.

``config-table --update`` changes an entry where a candidate beat it by more than 3% in one sweep
on one machine. For the few-token sizes (6-10 us kernels) that is within what a kernel's time can
move between two boards of the same GPU model (one moved by 16% between two H100s), and an entry
serves token counts its sweep did not time. So the update is measured where it acts: the perf
gate's cells at the token counts the changed entries serve, swept with the new tables and then
with the old ones back to back on one machine (``sweep-shapes --ms ... --json``). Each changed
entry gets the geomean, over the cells whose kernel it changed, of their ratios against the peer
after / before (the peer normalises the drift between the two runs); an entry below
``min_change`` (:data:`MIN_CHANGE`), or with a wrong result or a raise in a cell it changed, is put
back as the old table had it (or dropped where it had none). Pure Python.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional

from ..configs.measured import MeasuredEntry, MeasuredTable
from .shape_sweep import cell_problem
from .sweep_spaces import read_json

# the least after / before geomean an updated entry keeps. Cells that ran the same kernel in both
# of two back-to-back sweeps on an H100 (353 cells at 1-24 tokens) moved by 0.6% (median), 3% (90th
# percentile), 9% at most: a verdict on one cell is a weak one, on several a firmer one
MIN_CHANGE = 0.98


@dataclass(frozen=True)
class EntryVerdict:
    """A changed entry of the new table (``entry``) and the perf cells whose kernel it changed:
    ``cells`` holds (cell id, ratio before, ratio after) of those that ran in both runs;
    ``wrong``: one of them gave a wrong result, or raised, after the update."""

    entry: MeasuredEntry
    cells: tuple
    wrong: bool = False

    @property
    def change(self) -> float:
        """Geomean of the cells' ratio after / before (above 1: the update made them faster; 0
        where no cell ran after the update)."""
        if not self.cells:
            return 0.0
        return math.exp(statistics.mean(math.log(after / before) for _, before, after in self.cells))

    def kept(self, min_change: float) -> bool:
        return not self.wrong and self.change >= min_change

    def describe(self) -> str:
        e = self.entry
        return (f"{e.m}x{e.n}x{e.k} {e.config.name}: {self.change:.3f}x over {len(self.cells)} cells"
                + (" (a wrong result or a raise)" if self.wrong else ""))


def load_perf_rows(paths: Iterable) -> list:
    """The perf cells of ``sweep-shapes --json`` reports (``.json`` or ``.json.gz``), those that
    raised (no ratio) included."""
    return [r for path in paths for r in read_json(path)["results"] if r.get("gate") == "perf"]


def changed_entries(old: MeasuredTable, new: MeasuredTable) -> dict:
    """{(n, k, m): entry} of ``new``'s entries that ``old`` lacks or names another config for."""
    olds = {(e.n, e.k, e.m): e.config for e in old.entries}
    return {(e.n, e.k, e.m): e for e in new.entries
            if e.config is not None and olds.get((e.n, e.k, e.m), None) != e.config}


def _responsible(new: MeasuredTable, changed: dict, row: dict) -> Optional[MeasuredEntry]:
    """The changed entry of ``new`` behind ``row``'s cell: the one serving it, or where none serves
    it (an added entry took its range, or its config does not take the cell), the nearest changed
    one measured at or above the cell's token count on its projection."""
    problem, spec = cell_problem(row["dtype"], row["m"], row["n"], row["k"])
    if not new.covers(problem):
        return None
    entry = new.entry(problem, spec)
    if entry is not None:
        return changed.get((entry.n, entry.k, entry.m))
    above = [e for (n, k, m), e in changed.items() if (n, k) == (row["n"], row["k"]) and m >= row["m"]]
    return min(above, key=lambda e: e.m, default=None)


def _by_id(rows: Iterable[dict], label: str) -> dict:
    out: dict = {}
    for row in rows:
        if row["id"] in out:
            raise ValueError(f"the {label} run holds cell {row['id']} twice")
        out[row["id"]] = row
    return out


def entry_verdicts(old: MeasuredTable, new: MeasuredTable, before: Iterable[dict],
                   after: Iterable[dict]) -> list:
    """One :class:`EntryVerdict` per changed entry of ``new`` (:func:`changed_entries`) behind a
    cell that ran in the ``before`` run (with ``old``) and ran another config, or raised, in the
    ``after`` run (with ``new``): sweep-shapes perf rows of one GPU model, each naming the config
    it ran. Changed entries behind no such cell get none (:func:`unchecked`)."""
    if (old.gpu, old.operands) != (new.gpu, new.operands):
        raise ValueError(f"{new.gpu}'s {new.operands} table is no update of {old.gpu}'s {old.operands} one")
    earlier, changed = _by_id(before, "before"), changed_entries(old, new)
    cells: dict = {}
    wrong: set = set()
    for row in _by_id(after, "after").values():
        prior = earlier.get(row["id"])
        if prior is None or "ratio" not in prior:
            continue  # no baseline: not the update's cell to judge
        raised = "ratio" not in row
        if not raised and row["config"] == prior["config"]:
            continue  # the same kernel ran before (an entry naming the models' pick, as run)
        entry = _responsible(new, changed, row)
        if entry is None:
            continue
        key = (entry.n, entry.k, entry.m)
        served = cells.setdefault(key, (entry, []))[1]
        if raised or not row.get("correct", False):
            wrong.add(key)
        if not raised:
            served.append((row["id"], prior["ratio"], row["ratio"]))
    return [EntryVerdict(entry, tuple(served), key in wrong) for key, (entry, served) in sorted(cells.items())]


def unchecked(old: MeasuredTable, new: MeasuredTable, verdicts: Iterable[EntryVerdict]) -> list:
    """The changed entries of ``new`` that no verdict judged: their cells were not in both runs or
    ran the same kernel either way (an entry naming what the models pick, as run)."""
    judged = {(v.entry.n, v.entry.k, v.entry.m) for v in verdicts}
    return [e for key, e in sorted(changed_entries(old, new).items()) if key not in judged]


def checked_table(old: MeasuredTable, new: MeasuredTable, verdicts: Iterable[EntryVerdict],
                  source: str, min_change: float = MIN_CHANGE) -> tuple:
    """(``new`` with each entry whose verdict is below ``min_change`` or wrong put back as ``old``
    has it, or dropped where ``old`` has none; the verdicts put back). ``source`` (the A/B's
    commands) is added to the table's with the entries put back."""
    back = [v for v in verdicts if not v.kept(min_change)]
    if not back:
        return new, []
    olds = {(e.n, e.k, e.m): e for e in old.entries}
    undone = {(v.entry.n, v.entry.k, v.entry.m) for v in back}
    entries = [olds.get((e.n, e.k, e.m)) if (e.n, e.k, e.m) in undone else e for e in new.entries]
    named = ", ".join(f"{v.entry.n} x {v.entry.k} at {v.entry.m} token{'s' if v.entry.m != 1 else ''} "
                      f"({v.change:.3f}x{', a wrong result or a raise' if v.wrong else ''})" for v in back)
    table = MeasuredTable(new.gpu, new.arch, new.operands,
                          f"{new.source}; then checked on the perf gate's cells ({source}): put back {named}",
                          tuple(e for e in entries if e is not None))
    return table, back
