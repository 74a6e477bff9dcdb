"""Our autotune decisions, kept on disk across processes.

After each autotune in which our candidates took part, the feedback saver records, per GEMM
problem (device, op, shapes, dtypes, layouts, epilogue) and build (``build_tag``: kernel sources,
DSL version): our best config and time, and the best other candidate's time. The next compile of
the same problem, in any process, then
  - offers only that config when ours won or came within ``MARGIN`` (one compile, one benchmark);
  - offers nothing when ours lost by more than ``MARGIN`` (a fused op is put back as the
    unfused ops at once);
  - for a fused op that ours won by more than ``MARGIN``, emits our kernel without benchmarking.
Kernels themselves are cached by compiler.py; Inductor's own caches are untouched.
File: ``<kernel cache dir>/inductor/decisions-<build tag>.json``.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Optional

from .state import STATE, build_tag

log = logging.getLogger("cutedsl_backend.inductor")
MARGIN = 0.03


def path() -> Path:
    from ..compiler import cache_dir

    return cache_dir() / "inductor" / f"decisions-{build_tag()}.json"


def key(op: str, offer, device_name: str) -> str:
    """The problem a decision is about: a dynamic offer (the per-call dispatcher) and a static one
    at the same size hint are different decisions, and so are FP8's two accumulation modes and
    choices made under other dispatch policies (configs.as_run: the configs they name differ)."""
    import torch

    from ..configs.as_run import policy_tag

    return json.dumps([device_name, torch.__version__, op, offer.problem.describe(), offer.epilogue.key(),
                       "dynamic" if offer.dynamic else "static",
                       "fast_accum" if offer.problem.fast_accum else "precise_accum", policy_tag()], default=str)


def _load(p: Path) -> dict:
    if p not in STATE.decisions:
        try:
            STATE.decisions[p] = json.loads(p.read_text())
        except (OSError, ValueError):
            STATE.decisions[p] = {}
    return STATE.decisions[p]


def get(k: str) -> Optional[dict]:
    with STATE.decisions_lock:
        return _load(path()).get(k)


def record(k: str, config: str, ours_ms: float, theirs_ms: Optional[float]) -> None:
    p = path()
    with STATE.decisions_lock:
        entry = {"config": config, "ours_ms": ours_ms, "theirs_ms": theirs_ms}
        _load(p)[k] = entry
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            try:  # merge what other processes wrote meanwhile
                on_disk = json.loads(p.read_text())
            except (OSError, ValueError):
                on_disk = {}
            on_disk.update(STATE.decisions[p])
            tmp = p.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(on_disk, indent=0, sort_keys=True))
            tmp.replace(p)  # atomic: readers see the old or the new file, never half of one
            STATE.decisions[p] = on_disk
        except OSError as e:
            log.warning("cutedsl: could not write decisions to %s: %s", p, e)


def verdict(entry: Optional[dict]) -> str:
    """"unknown", "lost" (by more than MARGIN), "won" (by more than MARGIN) or "close"."""
    if not entry:
        return "unknown"
    ours, theirs = entry.get("ours_ms"), entry.get("theirs_ms")
    if ours is None:
        return "unknown"
    if theirs is None:
        return "won"
    if ours > theirs * (1 + MARGIN):
        return "lost"
    if ours * (1 + MARGIN) < theirs:
        return "won"
    return "close"


def feedback_saver(timings, name, input_nodes, choices, *rest) -> None:
    """Inductor's feedback hook (add_feedback_saver): record rounds our candidates were in."""
    if not STATE.enabled or not timings:
        return
    ours = [c for c in timings if getattr(c, "cutedsl_decision", None)]
    if not ours:
        return
    best = min(ours, key=timings.get)
    theirs = [timings[c] for c in timings if c not in ours]
    best_theirs = min(theirs) if theirs else None
    if not math.isfinite(timings[best]) or (best_theirs is not None and not math.isfinite(best_theirs)):
        return  # a candidate that failed is no measurement: it must not settle later compiles
    record(best.cutedsl_decision, best.cutedsl_config, float(timings[best]), best_theirs)


def install_feedback_saver() -> None:
    """Add the saver unless it is there (Inductor can only clear all savers at once, so this is
    checked at each use; the saver itself does nothing while we are disabled)."""
    from torch._inductor.select_algorithm import add_feedback_saver, get_algorithm_selector_cache

    if feedback_saver not in get_algorithm_selector_cache().feedback_saver_fns:
        add_feedback_saver(feedback_saver)


def narrow(offer, k: str) -> tuple:
    """(the offer narrowed to the recorded best config when there is one, the verdict)."""
    import dataclasses

    from ..configs import GemmConfig

    install_feedback_saver()
    entry = get(k)
    v = verdict(entry)
    if entry is not None and v in ("won", "close") and not offer.dynamic:  # a dynamic offer is one choice
        try:
            cfg = GemmConfig.from_name(entry["config"])
        except ValueError:
            return offer, "unknown"
        offer = dataclasses.replace(offer, configs=(cfg,))
    return offer, v


def device_name(device) -> str:
    """The GPU model (plan.gpu_model), or the device type off CUDA."""
    from ..plan import gpu_model

    return gpu_model(device) or device.type
