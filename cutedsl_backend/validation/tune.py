"""``python -m cutedsl_backend tune``: measure this GPU's config tables (configs.measured).

Runs the candidate sweeps the tables are made from (:func:`.tuning_sweeps.sweep_decode`: the
mid-size and swap-AB spaces in bf16 and in e4m3 with fp32 accumulation, then the waves space
against the table those made) on the
public models' projections, then writes the rows and one table per operand class into a
directory. Point ``CUTEDSL_BACKEND_CONFIG_TABLES`` at it to use the tables, or copy them into
``cutedsl_backend/configs/tables/`` to ship them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, NamedTuple, Optional


def gpu_slug(gpu: str) -> str:
    """A file-name form of a GPU model name ("NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3")."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")


def load_prior(path: str):
    """(the config table in ``path``, the first 12 hex digits of its content's sha256), for a
    sweep re-measuring it on this GPU (sweep_spaces.prior_candidates); an sm90a table only (the
    sweeps time sm90a candidates)."""
    import hashlib

    from ..configs.measured import MeasuredTable

    text = Path(path).read_bytes()
    table = MeasuredTable.from_json(json.loads(text))
    if table.arch != "sm90a":
        raise ValueError(f"{path}: an {table.arch} table; the sweeps time sm90a candidates")
    return table, hashlib.sha256(text).hexdigest()[:12]


class _Prior(NamedTuple):
    """A prior table as tune sweeps it: the table, its file's name, its content's digest."""

    table: object
    file: str
    digest: str


def _write(path: Path, data) -> None:
    """Through a temporary file: a lease killed mid-write leaves the last whole file, not a torn one
    a resume would fail to read."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(partial, path)


# The token counts tune measures by default: the bounds of the buckets a table serves (configs.measured:
# a runtime M takes the entry of the next measured M up, within sqrt(2)), 1.2-1.33x apart from 96 to
# 1536, so every M from 68 to 1536 has one (up to 64 the few-token model serves, its picks measured
# within 2% of the best; above 1536 the models' large tiles run at parity with cuBLAS). The swap-AB
# space up to 320 (two tiles of 160 tokens), the mid-size one from 256 (fp8: from 128, where its
# unswapped configs won on the H100 too). FP8 at 320 tokens too: on the H100 the best unswapped
# FP8 candidate there measured 0.791x torch._scaled_mm (a 4096-wide weight in 64 x 128 tiles is
# 160 tiles, 1.2 waves), where two 160-token swap tiles make one wave of 128 (bf16 at 320: the
# swap-AB picks 1.022x against the mid-size picks' 0.805x).
MID_MS = (256, 320, 384, 512, 640, 768, 1024, 1280, 1536)
SWAP_MS = (96, 128, 160, 192, 256, 320)
FP8_MID_MS = (128, 192, 256, 320, 384, 512, 640, 768, 1024, 1280, 1536)
FP8_SWAP_MS = (96, 128, 160, 192, 256, 320)
# and, after those, the waves sweep (sweep_spaces.wave_candidates against the table measured so
# far: 128-row tiles 144-240 wide where they fill the SMs' waves better, only in the cells where
# one does) at the mid-size token counts from 384 and at 2048 and 4096 (where the models serve
# otherwise and a width that fills the waves enters as a new entry only past the noise margin)
WAVES_MS = (384, 512, 640, 768, 1024, 1280, 1536, 2048, 4096)
FP8_WAVES_MS = WAVES_MS


def tune(out_dir: str, ms: tuple = MID_MS, swap_ms: tuple = SWAP_MS,
         fp8_ms: tuple = FP8_MID_MS, models: Optional[list] = None, log: Callable = print,
         sweep: Optional[Callable] = None, gpu: Optional[str] = None, versions: Optional[dict] = None,
         decode_ms: tuple = (), fp8_swap_ms: tuple = FP8_SWAP_MS, fp8_decode_ms: tuple = (),
         stream_k: bool = False, priors: tuple = (), prior_ms: tuple = (), waves_ms: tuple = WAVES_MS,
         fp8_waves_ms: tuple = FP8_WAVES_MS) -> list:
    """Sweep and write this GPU's tables into ``out_dir``: the rows of each sweep
    (``sweeps/sweep-*.json``) and ``<gpu>-16bit.json`` / ``<gpu>-fp8.json``; returns the table paths.
    ``ms`` / ``swap_ms`` / ``decode_ms``: token counts of the bf16 mid-size, swap-AB and few-token
    (split-K, short A loads) sweeps, ``fp8_ms`` / ``fp8_swap_ms`` / ``fp8_decode_ms`` of the fp8
    ones (empty: none; few-token sweeps at 16, 32 and 64 cover every M up to 64, see
    configs.measured.same_decode_work); ``models``: only
    these models' projections; ``stream_k``: the mid-size sweeps also time each candidate without
    K slices in its stream-K form (rows kept as ``sweep-mid-*-sk.json``, beside those without).
    ``priors``: tables measured on another GPU (JSON files, one per class): each one's class is also
    swept at each token count it measured, on the configs it names near there
    (sweep_spaces.prior_candidates, with the models' picks; rows ``sweep-prior-*.json``), a fifth of
    the full spaces' time. ``prior_ms``: only these of the priors' token counts, in this order (the
    ones that matter most first, for a time-limited lease; empty: all, ascending).
    ``waves_ms`` / ``fp8_waves_ms``: token counts of the waves sweeps, run last per class against
    the table its earlier sweeps made (rows ``sweep-waves-*.json``; their cells merge with the
    others', the fastest config of all the sweeps of a cell naming it).
    ``sweep``, ``gpu`` and ``versions`` stand in for the GPU in tests.
    Hopper (sm90a) GPUs only: the sweeps time the sm90a candidates.

    Resumes: a sweep whose rows ``out_dir`` already holds is not run again (an interrupted tune,
    or one run in parts, goes on where it stopped; the tables are rewritten after every sweep, so one
    stopped part-way leaves those of what it measured); ``out_dir/tuned-on.json`` records the GPU
    model and the models' projections, and a directory measured on another GPU or other
    projections is refused (ValueError)."""
    from ..configs.measured import SWEEP_OPERANDS, MeasuredTable
    from .sweep_spaces import load_sweep_rows
    from .tuning_sweeps import sweep_decode

    sweep = sweep or sweep_decode
    if gpu is None or versions is None:
        from .environment import environment, gpu_arch

        if gpu_arch() != "sm90a":
            raise RuntimeError(f"tune sweeps the sm90a (Hopper) candidates; this machine's GPU: {gpu_arch()}")
        env = environment()
        gpu = gpu or env.get("gpu")
        versions = versions or {k: env.get(k) for k in ("torch", "nvidia_cutlass_dsl", "cutedsl_backend")}
    out = Path(out_dir)
    (out / "sweeps").mkdir(parents=True, exist_ok=True)
    marker, identity = out / "tuned-on.json", {"gpu": gpu, "models": sorted(models) if models else None}
    if marker.exists() and json.loads(marker.read_text()) != identity:
        raise ValueError(f"{out} holds sweeps of {json.loads(marker.read_text())}, not of {identity}: "
                         "tune into another directory")
    _write(marker, identity)
    model_arg = f" --models {','.join(models)}" if models else ""
    runs = [("bfloat16", "decode", m) for m in decode_ms] + [("bfloat16", "mid", m) for m in ms]
    runs += [("bfloat16", "swap", m) for m in swap_ms]
    runs += [("fp8_tensorwise", "decode", m) for m in fp8_decode_ms]
    runs += [("fp8_tensorwise", "mid", m) for m in fp8_ms]
    runs += [("fp8_tensorwise", "swap", m) for m in fp8_swap_ms]
    rows: dict = {"bfloat16": [], "fp8_tensorwise": []}
    commands: dict = {"bfloat16": [], "fp8_tensorwise": []}
    files: dict = {"bfloat16": [], "fp8_tensorwise": []}
    prior_tables: dict = {}  # the sweep dtype -> _Prior
    for prior in priors:
        table, digest = load_prior(prior)
        # the dtype whose sweep rows a table of this class is made from (tune sweeps these two)
        prior_dtype = next((d for d in rows if SWEEP_OPERANDS[d] == table.operands), None)
        if prior_dtype is None or prior_dtype in prior_tables:
            raise ValueError(f"{prior}: a {table.operands} table; tune re-measures one 16bit and one fp8_precise")
        prior_tables[prior_dtype] = _Prior(table, Path(prior).name, digest)
        measured = sorted({e.m for e in table.entries})
        wanted = [m for m in prior_ms if m in measured] if prior_ms else measured
        if prior_ms and len(wanted) < len(prior_ms):
            log(f"tune: {prior}: not measured at {[m for m in prior_ms if m not in measured]} tokens (skipped)")
        runs += [(prior_dtype, "prior", m) for m in wanted]
    runs += [("bfloat16", "waves", m) for m in waves_ms] + [("fp8_tensorwise", "waves", m) for m in fp8_waves_ms]
    write_table = _table_writer(out, gpu, versions, rows, commands, files, prior_tables)
    tables: dict = {}  # the sweep dtype -> (path, table) as last written
    for dtype, space, m in runs:
        sk = stream_k and space == "mid"
        # a prior's rows are named by its content: another table's are never taken for them
        suffix = "-sk" if sk else f"-{prior_tables[dtype].digest}" if space == "prior" else ""
        name = f"sweep-{space}-{'bf16' if dtype == 'bfloat16' else 'fp8'}-m{m}{suffix}.json"
        if (out / "sweeps" / name).exists():
            log(f"tune: {dtype} {space} M={m}: measured before, its rows kept ({name})")
            got = load_sweep_rows([out / "sweeps" / name])
        else:
            log(f"tune: {dtype} {space} M={m}")
            extra = {"stream_k": True} if sk else {"prior": prior_tables[dtype].table} if space == "prior" else {}
            if space == "waves":  # against this GPU's table as measured so far (none yet: the models' picks)
                extra = {"prior": tables[dtype][1] if dtype in tables
                         else MeasuredTable(gpu, "sm90a", SWEEP_OPERANDS[dtype], "none", ())}
            got = sweep((m,), space=space, models=models, dtype=dtype, log=log, **extra)
            _write(out / "sweeps" / name, got)
        rows[dtype] += got
        files[dtype].append(f"sweeps/{name}")
        commands[dtype].append(f"python -m cutedsl_backend sweep-decode --space {space} --dtype {dtype} --ms {m}"
                               f"{' --stream-k' if sk else ''}"
                               + (f" --prior {prior_tables[dtype].file}" if space == "prior"
                                  else " --prior <this table from the sweeps before it>" if space == "waves" else "")
                               + f"{model_arg} --json {name}")
        if got:  # after every sweep: a tune stopped part-way leaves the tables of what it measured
            tables[dtype] = write_table(dtype)
    made = [tables[dtype] for dtype in rows if dtype in tables]  # 16-bit first, then fp8
    for path, table in made:
        named = sum(e.beats_models() for e in table.entries)
        log(f"tune: {path}: {len(table.entries)} measured (projection, M), {named} naming a config faster "
            "than the models' pick")
    return [path for path, _ in made]


def _table_writer(out: Path, gpu: str, versions: dict, rows: dict, commands: dict, files: dict,
                  prior_tables: dict) -> Callable:
    """A function writing one sweep dtype's table from the rows measured so far; returns its path
    and the table."""
    from ..configs.measured import table_from_sweeps

    def write_table(dtype: str) -> tuple:
        suffix = "16bit" if dtype == "bfloat16" else "fp8"
        path = out / f"{gpu_slug(gpu)}-{suffix}.json"
        source = (f"{gpu}; torch {versions.get('torch')}, nvidia-cutlass-dsl {versions.get('nvidia_cutlass_dsl')}, "
                  f"cutedsl-backend {versions.get('cutedsl_backend')}. python -m cutedsl_backend tune ran: "
                  + "; ".join(commands[dtype])
                  + (f" (the prior {prior_tables[dtype].file}: sha256 {prior_tables[dtype].digest}..., its rows' "
                     "file names end in that digest)" if dtype in prior_tables else "")
                  + f"; python -m cutedsl_backend config-table {' '.join(files[dtype])} --gpu '{gpu}' -o {path.name}")
        table = table_from_sweeps(rows[dtype], gpu, source)
        _write(path, table.to_json())
        return path, table

    return write_table
