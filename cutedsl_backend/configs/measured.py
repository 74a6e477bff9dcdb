"""Measured config tables: per GPU model, the config that ran fastest for a known projection
(N, K) at each measured token count M, from a candidate sweep on that GPU.

A cost model ranks configs for any shape; for the projections models actually run it leaves
5-15% on the table at a few hundred tokens (where wave quantization and the per-tile prologue
decide most of the time). A table records what the sweep measured instead, on its GPU:
per projection and measured M, the config that ran fastest there, or the models' pick where no
candidate beat it beyond noise (a measured config either way). The measured token counts are
bucket bounds: a runtime M is served by the entry at the smallest measured M at or above it,
if that is within a factor sqrt(2): its config partitions the tokens into as many tiles or
fewer, so it runs at most the work it was measured at, and nothing farther is trusted (a config
measured at 128 tokens still has one tile at 16, where the problem is bandwidth-bound and the
few-token configs win). A GPU model may borrow another's tables where its own have no entry
(:data:`BORROWED_TABLES`: the same die). Anything else - another GPU model (but a lender),
projection, layout, batch or operand class, an M above the largest measured one or far below the
next - falls back to the ranking's models.

Tables are JSON files in ``configs/tables/``, made by ``python -m cutedsl_backend config-table``
from ``sweep-decode --json`` rows, each carrying the commands that produced it. Pure Python.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping, Optional

from ..problem import GemmProblem, operand_class
from .config import DECODE_MAX_M, GemmConfig, decode_a_rows
from .rules import fits

log = logging.getLogger("cutedsl_backend.configs")
TABLE_DIR = Path(__file__).with_name("tables")
TABLE_SCHEMA = 2
# the farthest below the measured M serving it a runtime M may be (a ratio)
MAX_M_RATIO = math.sqrt(2)
# the least gain over the models' pick for which a table names another config (the sweeps' noise)
MIN_GAIN = 0.03
# sweep-decode's --dtype -> the operand class (problem.operand_class) its rows measure
SWEEP_OPERANDS = {"bfloat16": "16bit", "fp8_tensorwise": "fp8_precise", "fp8_tensorwise_fast": "fp8_fast"}
# GPU models that serve another model's tables where none of their own holds an entry: the same die,
# SM count, clocks and power cap (an H200 is an H100 SXM's GH100 with faster, larger HBM), so a
# config's rank carries over where compute and waves decide it: the entries measured above the
# few-token range (configs.config.DECODE_MAX_M) only: at a few tokens the weights' bandwidth
# decides, which differs (4.8 against 3.35 TB/s peak: more bytes in flight to saturate it).
# Replayed on the H200's own FP8 sweeps at 192 tokens (docs/results/h200/2026-12-07: the 23
# projections whose rows timed the H100 tables' picks), those picks ran at 1.077x
# torch._scaled_mm in geomean against the models' 0.984x; the other way round, the H200's table
# on the H100's sweeps at 1.074x against 1.011x.
BORROWED_TABLES: Mapping[str, tuple] = MappingProxyType({"NVIDIA H200": ("NVIDIA H100 80GB HBM3",)})


def swept_operands(problem: GemmProblem) -> Optional[str]:
    """The operand class (``16bit`` or ``fp8_precise``) a tuning sweep measures ``problem`` in, or
    None outside the sweeps' domain: nn.Linear's layout (A and B K-major, the output row-major), one
    batch, bf16/fp16 out for 16-bit operands and bf16 out for e4m3 with every k-tile added in fp32."""
    operands = operand_class(problem)
    out_dtype = problem.dtype if operands == "16bit" else "bfloat16"
    if (operands not in ("16bit", "fp8_precise") or problem.batch != 1 or problem.b_dtype is not None
            or (problem.a_major, problem.b_major, problem.c_major) != ("k", "k", "n")
            or problem.out_dtype != out_dtype):
        return None
    return operands


def stands_for(epilogue) -> bool:
    """Whether a sweep's measurement (bare GEMMs, scalar scales for fp8) stands for a call with
    ``epilogue``: none, a bias and an activation (a few percent on every config alike) or scalar
    scales; never a residual (its loads change which schedule wins: configs.tuning), a gated
    epilogue (its tiles pair columns; measured separately) or fp8 scales other than scalars."""
    return epilogue is None or not (getattr(epilogue, "gated", None) or epilogue.residual
                                    or {epilogue.scale_a, epilogue.scale_b} - {None, "scalar"})


@dataclass(frozen=True)
class MeasuredEntry:
    """The config serving (n, k) up to m tokens: the fastest measured there, or the models' pick
    where it was as fast (within the table's noise margin; None in tables made before picks were
    kept: the models serve); ``ms`` the fastest time, ``peer_ms`` the peer's in the same run,
    ``model_ms`` the time of the pick the models made then (``peer_ms`` over several sweeps at
    this M: their median)."""

    n: int
    k: int
    m: int
    config: Optional[GemmConfig]
    ms: float
    peer_ms: float
    model_ms: float

    def beats_models(self, min_gain: float = MIN_GAIN) -> bool:
        """Whether the entry names a config other than the models' pick: it ran more than
        ``min_gain`` faster, or the pick did not run (``model_ms`` -1)."""
        return self.model_ms < 0 or self.ms * (1 + min_gain) < self.model_ms


def same_decode_work(entry: MeasuredEntry, problem: GemmProblem) -> bool:
    """Whether ``entry``'s config does for ``problem`` exactly the work it was measured doing: a
    few-token config (ranking.decode_choice's kind: one 64-row tile along M, unswapped) that loads
    the same rows of A (configs.decode_a_rows) at both token counts, both within those rows. Its
    time does not depend on M there (the weights' loads and the K slices are the same; the rows
    past M are zero-filled), so an entry measured at 16 tokens serves 1-16, at 32 17-32 and at 64
    33-64, where the sqrt(2) rule would leave gaps. A swap-AB config with 64 weight rows per tile
    and one token tile holding both token counts serves the same ranges: it loads the same weights,
    but its token rows past M are TMA fills, which cost time (a 64 x 16 tile ran 1.07x as long at
    one token as at 16 on an H100), so :func:`updated_table` names one only where a sweep also
    timed it at the range's first token count (:func:`_serves_its_low_end`)."""
    cfg = entry.config
    if cfg is None or cfg.tile_m != 64 or entry.m > DECODE_MAX_M:
        return False
    if cfg.swap_ab:
        return entry.m <= cfg.tile_n and decode_a_rows(problem.m) == decode_a_rows(entry.m)
    return (entry.m <= (cfg.a_rows or cfg.tile_m)
            and cfg.a_rows == decode_a_rows(problem.m, problem.a_major) == decode_a_rows(entry.m, problem.a_major))


@dataclass(frozen=True)
class MeasuredTable:
    """Entries measured on one GPU model (``gpu``, as torch.cuda.get_device_name reports it) for
    one operand class (problem.operand_class) on the measured layout: nn.Linear (A and B K-major),
    one batch, the output in the input dtype (16-bit) or bf16 (fp8, with scalar scales). A 16-bit
    table is swept in bf16 and serves fp16 too (the same tensor-core rate and bytes).
    ``source``: the commands and code version behind the numbers."""

    gpu: str
    arch: str
    operands: str
    source: str
    entries: tuple = ()
    _by_nk: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        for e in self.entries:
            self._by_nk.setdefault((e.n, e.k), []).append(e)

    def measured_ms(self, problem: GemmProblem) -> tuple:
        """The token counts measured for ``problem``'s projection, if the table covers its class
        and layout (its M aside)."""
        return tuple(e.m for e in self._by_nk.get((problem.n, problem.k), ())) if self.covers(problem) else ()

    def covers(self, problem: GemmProblem) -> bool:
        """Whether ``problem`` is of the class and layout the table was measured on."""
        return problem.arch == self.arch and swept_operands(problem) == self.operands

    def entry(self, problem: GemmProblem, epilogue=None) -> Optional[MeasuredEntry]:
        """The entry serving ``problem`` (see the module doc): the measurement at the smallest
        measured M at or above the problem's, within :data:`MAX_M_RATIO`, if its config takes
        this problem and epilogue; else None. Only an epilogue the sweeps' measurement stands for
        (:func:`stands_for`: a bias, an activation or scalar scales)."""
        if not stands_for(epilogue) or problem.m <= 0 or not self.covers(problem):
            return None
        bound = min((e for e in self._by_nk.get((problem.n, problem.k), ()) if e.m >= problem.m),
                    key=lambda e: e.m, default=None)
        if bound is None or bound.config is None:
            return None
        if bound.m > MAX_M_RATIO * problem.m and not same_decode_work(bound, problem):
            return None
        # fits checks a swap-AB config on the swapped problem, as it runs
        return bound if fits(bound.config, problem, epilogue) else None

    def choice(self, problem: GemmProblem, epilogue=None) -> Optional[GemmConfig]:
        e = self.entry(problem, epilogue)
        return None if e is None else e.config

    def to_json(self) -> dict:
        return {"schema": TABLE_SCHEMA, "gpu": self.gpu, "arch": self.arch, "operands": self.operands,
                "source": self.source,
                "entries": [{"n": e.n, "k": e.k, "m": e.m, "config": e.config.name if e.config else None, "ms": e.ms,
                             "peer_ms": e.peer_ms, "model_ms": e.model_ms} for e in self.entries]}

    @classmethod
    def from_json(cls, data: dict) -> "MeasuredTable":
        if data.get("schema") != TABLE_SCHEMA:
            raise ValueError(f"config table schema {data.get('schema')!r}, expected {TABLE_SCHEMA}")
        entries = tuple(MeasuredEntry(e["n"], e["k"], e["m"], e["config"] and GemmConfig.from_name(e["config"]),
                                      e["ms"], e["peer_ms"], e["model_ms"]) for e in data["entries"])
        return cls(data["gpu"], data["arch"], data["operands"], data["source"], entries)

    @classmethod
    def load(cls, path) -> "MeasuredTable":
        """The table in the JSON file ``path``."""
        return cls.from_json(json.loads(Path(path).read_text()))

    def save(self, path) -> None:
        """Write the table to ``path`` as the shipped tables are written (JSON, one-space indents)."""
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")


def table_from_sweeps(rows: Iterable[dict], gpu: str, source: str, arch: str = "sm90a",
                      min_gain: float = MIN_GAIN) -> MeasuredTable:
    """A table from ``sweep-decode`` rows ({m, n, k, dtype, peer_ms, pick, times}) of one GPU and
    one operand class (every row's dtype of the same class, :data:`SWEEP_OPERANDS`): per
    (n, k, m) the fastest config where it beat the models' pick by more than ``min_gain``, else
    that pick (a smaller gain is within the sweep's run-to-run noise; the pick is kept as a
    measured config because the models may pick otherwise at the token counts below m that the
    entry serves). Rows of several sweeps for the same (n, k, m) are merged (every config's
    fastest time). A few-token swap-AB config is named only as :func:`updated_table` names one
    (:func:`_serves_its_low_end`), else the pick (no entry where the pick was not timed)."""
    operands, merged = _merged_rows(rows)
    entries = []
    for (n, k, m), slot in sorted(merged.items()):
        kept = _kept(slot["times"], slot["pick"], min_gain)
        if not _serves_its_low_end(merged, n, k, m, kept, min_gain):
            if slot["pick"] not in slot["times"]:
                continue  # nothing measured may serve the cell's range: no entry
            kept = slot["pick"]
        entries.append(_entry(n, k, m, kept, slot))
    return MeasuredTable(gpu, arch, operands, source, tuple(entries))


def updated_table(table: MeasuredTable, rows: Iterable[dict], source: str,
                  min_gain: float = MIN_GAIN) -> MeasuredTable:
    """``table`` with the (n, k, m) cells a sweep of the same GPU and operand class measured
    again (``sweep-decode --space clusters``, which times the table's entry beside new
    candidates): a cell whose fastest config beat the entry's by more than ``min_gain`` in the
    same sweep names it; one where the entry was within that margin, or was not timed, keeps it;
    one whose entry the sweep found wrong (its row's ``wrong``: a result off the float64
    reference, or a raise) gets the fastest config that ran right, as does a cell the table lacked
    (or the models' pick where within the margin, as :func:`table_from_sweeps` chooses). A
    few-token swap-AB config, which serves its M's whole few-token range, is named only where it
    also ran at the range's first token count no slower than the pick there
    (:func:`_serves_its_low_end`; else the entry stays, or a new cell takes the pick). ``source``
    (the sweep's commands) is added to the table's."""
    operands, merged = _merged_rows(rows)
    if operands != table.operands:
        raise ValueError(f"the sweeps measure {operands} operands; the table is a {table.operands} table")
    by_cell = {(e.n, e.k, e.m): e for e in table.entries}
    for (n, k, m), slot in sorted(merged.items()):
        times = slot["times"]
        if not times:
            continue
        old = by_cell.get((n, k, m))
        if old is not None and old.config is not None and old.config.tiling().name not in slot["wrong"]:
            name = old.config.tiling().name
            kept = _kept(times, name, min_gain) if name in times else name  # not timed: kept as it was
            if kept != name and _serves_its_low_end(merged, n, k, m, kept, min_gain):
                by_cell[(n, k, m)] = _entry(n, k, m, kept, slot)
            continue
        kept = _kept(times, slot["pick"], min_gain)
        if not _serves_its_low_end(merged, n, k, m, kept, min_gain):
            if slot["pick"] not in times:
                continue
            kept = slot["pick"]
        by_cell[(n, k, m)] = _entry(n, k, m, kept, slot)
    return MeasuredTable(table.gpu, table.arch, table.operands, f"{table.source}; then updated: {source}",
                         tuple(by_cell[key] for key in sorted(by_cell)))


def _serves_its_low_end(merged: dict, n: int, k: int, m: int, name: str, min_gain: float) -> bool:
    """Whether config ``name``, measured at ``m`` tokens, may serve its whole few-token range: any
    config but a few-token swap-AB one (same_decode_work) may; that one only where the sweeps also
    timed it at the range's first token count (1, 17 or 33) no more than ``min_gain`` slower than
    the models' pick there."""
    cfg = GemmConfig.from_name(name)
    # the first token count loading the rows of A that m does (the range same_decode_work serves)
    low = {16: 1, 32: 17, 0: 33}[decode_a_rows(m)]
    if not cfg.swap_ab or m > DECODE_MAX_M or m == low:
        return True
    slot = merged.get((n, k, low))
    times = slot["times"] if slot is not None else {}
    pick = slot["pick"] if slot is not None else None
    return name in times and pick in times and times[name] <= times[pick] * (1 + min_gain)


def _kept(times: dict, baseline: str, min_gain: float) -> str:
    """``baseline`` unless the fastest of ``times`` (config name -> ms) beat it by more than
    ``min_gain``, or it was not timed: then the fastest."""
    best = min(times, key=lambda name: (times[name], name))
    return baseline if times[best] * (1 + min_gain) >= times.get(baseline, math.inf) else best


def _entry(n: int, k: int, m: int, kept: str, slot: dict) -> MeasuredEntry:
    """The entry naming config ``kept`` for a merged sweep cell (``slot``: times, peer times, the
    models' pick)."""
    times = slot["times"]
    model_ms = times.get(slot["pick"], math.inf)
    peer = statistics.median(slot["peer"])  # two sweeps at one M (mid-size and swap-AB): their mean
    # a table names configs unmoved: the edge policy moves the last tiles of whichever it serves
    return MeasuredEntry(n, k, m, GemmConfig.from_name(kept).tiling(), min(times.values()), peer,
                         model_ms if math.isfinite(model_ms) else -1.0)


def _merged_rows(rows: Iterable[dict]) -> tuple:
    """(the operand class, {(n, k, m): {times: fastest ms per config, peer: [ms], pick, wrong:
    the configs some row found wrong}}) of ``sweep-decode`` rows of one operand class (several
    sweeps of one cell merged)."""
    rows = list(rows)
    classes = {SWEEP_OPERANDS.get(row["dtype"]) for row in rows}
    operands = next(iter(classes)) if len(classes) == 1 else None
    if operands is None:
        raise ValueError(f"a config table takes sweeps of one operand class ({sorted(SWEEP_OPERANDS)}); "
                         f"these rows have dtypes {sorted({row['dtype'] for row in rows})}")
    merged: dict = {}
    for row in rows:
        key = (row["n"], row["k"], row["m"])
        slot = merged.setdefault(key, {"times": {}, "peer": [], "pick": row["pick"], "wrong": set()})
        slot["wrong"].update(row.get("wrong", ()))
        for name, ms in row["times"].items():
            slot["times"][name] = min(ms, slot["times"].get(name, math.inf))
        slot["peer"].append(row["peer_ms"])
        slot["pick"] = row["pick"]  # the last sweep's models (rows come in the order they ran)
    return operands, merged


class MeasuredTables:
    """The tables of ``$CUTEDSL_BACKEND_CONFIG_TABLES`` (a directory of tables a user made with
    ``python -m cutedsl_backend tune``; looked up first) and those shipped in ``configs/tables/``,
    loaded once, looked up by GPU model name; a model with a lender in ``borrowed`` falls back to
    the lender's tables where its own hold no entry."""

    def __init__(self, directory: Path = TABLE_DIR, env: str = "CUTEDSL_BACKEND_CONFIG_TABLES",
                 borrowed: Mapping[str, tuple] = BORROWED_TABLES):
        self.directory = directory
        self.env = env
        self.borrowed = borrowed
        self.enabled = True  # False: the models alone (an A/B of the tables, sweep-shapes --no-config-tables)
        # False: a GPU model's own tables only (an A/B of the borrowed ones, sweep-shapes --no-borrowed-tables)
        self.borrowing = True
        self._tables: Optional[dict] = None

    def directories(self) -> list:
        import os

        user = os.environ.get(self.env)
        return ([Path(user)] if user else []) + [self.directory]

    def _load(self) -> dict:
        if self._tables is None:
            tables: dict = {}
            for path in [p for d in self.directories() for p in sorted(d.glob("*.json"))]:
                try:
                    data = json.loads(path.read_text())
                    if isinstance(data, dict) and "entries" not in data and "schema" not in data:
                        continue  # not a table (a tune directory's tuned-on.json)
                    table = MeasuredTable.from_json(data)
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # the models rank every shape
                    log.warning("cutedsl: measured config table %s not used: %s", path, e)
                    continue
                tables.setdefault(table.gpu, []).append(table)
            self._tables = tables
        return self._tables

    def state(self) -> dict:
        """Which tables rank (for a result's record: the two halves of an A/B look alike otherwise)."""
        return {"tables": self.enabled, "borrowed_tables": self.enabled and self.borrowing}

    def for_gpu(self, gpu: Optional[str]) -> tuple:
        """The tables serving GPU model ``gpu`` in the order they are looked up: those measured on
        it, then those it borrows (:data:`BORROWED_TABLES`); none for None or an unmeasured model."""
        if not gpu or not self.enabled:
            return ()
        tables = self._load()
        lenders = self.borrowed.get(gpu, ()) if self.borrowing else ()
        return tuple(t for model in (gpu, *lenders) for t in tables.get(model, ()))

    def serving(self, problem: GemmProblem, gpu: Optional[str], epilogue=None) -> list:
        """(entry, table) of every one of :meth:`for_gpu`'s tables holding an entry for ``problem``,
        in lookup order (a table's ``gpu`` says whether it was measured on this model or borrowed;
        a borrowed table serves no few-token entry, :data:`BORROWED_TABLES`)."""
        found = ((table.entry(problem, epilogue), table) for table in self.for_gpu(gpu))
        return [(e, t) for e, t in found if e is not None and _serves(t, gpu, e.m)]

    def served(self, problem: GemmProblem, gpu: Optional[str], epilogue=None) -> Optional[tuple]:
        """(entry, table) serving ``problem`` on GPU model ``gpu``: the first of :meth:`serving`."""
        return next(iter(self.serving(problem, gpu, epilogue)), None)

    def entry(self, problem: GemmProblem, gpu: Optional[str], epilogue=None) -> Optional[MeasuredEntry]:
        """The table entry serving ``problem`` on GPU model ``gpu`` (its ``m`` is the token count
        it was measured at), if a table holds one."""
        found = self.served(problem, gpu, epilogue)
        return None if found is None else found[0]

    def bounds(self, problem: GemmProblem, gpu: Optional[str]) -> tuple:
        """The token counts this GPU model's tables measured ``problem``'s projection at (its class
        and layout; the M of ``problem`` aside), ascending: where a served config changes (a
        borrowed table's above the few-token range only)."""
        return tuple(sorted({m for t in self.for_gpu(gpu) for m in t.measured_ms(problem) if _serves(t, gpu, m)}))

    def choice(self, problem: GemmProblem, gpu: Optional[str], epilogue=None) -> Optional[GemmConfig]:
        """The measured config for ``problem`` on GPU model ``gpu``, if a table holds one."""
        found = self.entry(problem, gpu, epilogue)
        return None if found is None else found.config


def _serves(table: MeasuredTable, gpu: Optional[str], m: int) -> bool:
    """Whether ``table``'s entries measured at ``m`` tokens serve GPU model ``gpu``: all of its own,
    a lender's above the few-token range (:data:`BORROWED_TABLES`)."""
    return table.gpu == gpu or m > DECODE_MAX_M


MEASURED = MeasuredTables()
