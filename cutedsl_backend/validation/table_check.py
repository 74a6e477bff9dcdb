"""An update of a measured config table checked on the perf gate's cells before it ships.

``config-table --update`` changes an entry where a candidate beat it by more than 3% in one sweep
on one machine. For the few-token sizes (6-10 us kernels) that is within what one kernel's time
moves between two boards of the same GPU model (up to 16% on two H100s), and an entry serves
token counts its sweep did not time. So the update is measured where it acts: the perf gate's
cells at the token counts the changed entries serve, swept with the new tables and then with the
old ones back to back on one machine (``sweep-shapes --ms ... --json``). Each changed entry gets
the geomean, over the cells it serves, of its cell ratios against the peer after / before (the
peer normalises the drift between the two runs); an entry below ``min_change`` (:data:`MIN_CHANGE`), or
with a wrong result, is put back as the old table had it (or dropped where it had none). Pure Python.
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
from dataclasses import dataclass
from typing import Iterable

from ..configs.measured import MeasuredEntry, MeasuredTable
from .shape_sweep import cell_problem

# the least after / before geomean an updated entry keeps. Cells that ran the same kernel in both
# of two back-to-back sweeps on an H100 (353 cells at 1-24 tokens) moved by 0.6% (median), 3% (90th
# percentile), 9% at most: a verdict on one cell is a weak one, on several a firmer one
MIN_CHANGE = 0.98


@dataclass(frozen=True)
class EntryVerdict:
    """A changed entry of the new table (``entry``) and the perf cells it serves:
    ``cells`` holds (cell id, ratio before, ratio after); ``wrong``: a cell it served after
    the update gave a wrong result."""

    entry: MeasuredEntry
    cells: tuple
    wrong: bool = False

    @property
    def change(self) -> float:
        """Geomean of the cells' ratio after / before (above 1: the update made them faster)."""
        return math.exp(statistics.mean(math.log(after / before) for _, before, after in self.cells))

    def kept(self, min_change: float) -> bool:
        return not self.wrong and self.change >= min_change

    def describe(self) -> str:
        e = self.entry
        config = e.config.name if e.config is not None else None
        return (f"{e.m}x{e.n}x{e.k} {config}: {self.change:.3f}x over {len(self.cells)} cells"
                + (" (a wrong result)" if self.wrong else ""))


def load_perf_rows(paths: Iterable) -> list:
    """The perf cells of ``sweep-shapes --json`` reports (``.json`` or ``.json.gz``) that ran."""
    rows: list = []
    for path in paths:
        with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
            rows += [r for r in json.load(f)["results"] if r.get("gate") == "perf" and "ratio" in r]
    return rows


def _serving(table: MeasuredTable, row: dict):
    """The entry of ``table`` serving ``row``'s cell (None: none, or one naming no config)."""
    problem, spec = cell_problem(row["dtype"], row["m"], row["n"], row["k"])
    entry = table.entry(problem, spec)
    return entry if entry is not None and entry.config is not None else None


def entry_verdicts(old: MeasuredTable, new: MeasuredTable, before: Iterable[dict],
                   after: Iterable[dict]) -> list:
    """One :class:`EntryVerdict` per entry of ``new`` serving a cell of both runs that ran another
    config before: ``before`` ran with ``old``, ``after`` with ``new`` (sweep-shapes perf rows of
    one GPU model; each row names the config it ran)."""
    if (old.gpu, old.operands) != (new.gpu, new.operands):
        raise ValueError(f"{new.gpu}'s {new.operands} table is no update of {old.gpu}'s {old.operands} one")
    earlier = {row["id"]: row for row in before}
    cells: dict = {}
    wrong: set = set()
    for row in after:
        prior = earlier.get(row["id"])
        entry = _serving(new, row) if prior is not None else None
        if entry is None:
            continue
        if row["config"] == prior["config"]:
            continue  # the same kernel ran before (an entry naming the models' pick, as run)
        key = (entry.n, entry.k, entry.m)
        cells.setdefault(key, (entry, []))[1].append((row["id"], prior["ratio"], row["ratio"]))
        if not row.get("correct", False):
            wrong.add(key)
    return [EntryVerdict(entry, tuple(served), key in wrong) for key, (entry, served) in sorted(cells.items())]


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
    named = ", ".join(f"{v.entry.n} x {v.entry.k} at {v.entry.m} tokens ({v.change:.3f}x)" for v in back)
    table = MeasuredTable(new.gpu, new.arch, new.operands,
                          f"{new.source}; then checked on the perf gate's cells ({source}): put back {named}",
                          tuple(e for e in entries if e is not None))
    return table, back
