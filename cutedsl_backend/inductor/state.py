"""What enable() set: read by the choices handler, the fusion pass and the lowerings."""

from __future__ import annotations

import functools
import hashlib
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .eligibility import default_device_arch

# Inductor's op names (the ``op_name`` of InductorChoices.get_template_configs) we offer kernels for
OPS = ("mm", "addmm", "bmm", "scaled_mm")


# what the integration counts in this process (STATE.counters; cutedsl_backend.inductor.stats()):
# compiled calls that took the unfused torch ops at run time, candidates timed on the device,
# unfused subgraphs timed beside them, device timings that fell back to Inductor's own, timing
# sleeps the GPU outran, fused-vs-unfused autotunes and their seconds
COUNTERS = ("runtime_fallbacks", "device_timed", "subgraphs_timed", "timing_fallbacks", "sleep_outrun",
            "fused_autotunes", "unfused_subgraph_s", "fused_autotune_s")


@dataclass
class State:
    enabled: bool = False
    top_k: int = 3
    fuse: bool = True
    gated_mlp: bool = False  # also form gated-MLP candidates (gated_mlp.py; opt-in)
    ops: frozenset = frozenset(OPS)
    device_arch: Callable = default_device_arch
    # what enable() replaced, put back by disable()
    saved: Optional[dict] = field(default=None, repr=False)
    # compile modes our kernels cannot serve, already logged (choices.unsupported_mode)
    modes_logged: set = field(default_factory=set, repr=False)
    counters: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0), repr=False)
    # our ExternKernelChoice per choice name (choices.extern_choice)
    extern_choices: dict = field(default_factory=dict, repr=False)
    # per graph being lowered: (op name, FX node) already offered (tuned_addmm asks the handler up
    # to three times), and (a, b) buffer-name pairs whose plain candidates are suppressed
    offered: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, repr=False)
    suppressed: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, repr=False)
    # our lowerings per op overload, and the lowerings they replaced (lowering.register/unregister)
    lowerings: dict = field(default_factory=dict, repr=False)
    replaced_lowerings: dict = field(default_factory=dict, repr=False)
    subgraph_names: itertools.count = field(default_factory=itertools.count, repr=False)
    # decisions read from each decisions file (decisions.get/record), under decisions_lock
    decisions: dict = field(default_factory=dict, repr=False)
    decisions_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


STATE = State()


@functools.lru_cache(None)
def build_tag() -> str:
    """Short hash of everything that decides what our candidates compute and how fast: the
    package version, the kernel sources, the DSL version and this
    integration's sources. It is part of every choice name, so Inductor's autotune cache never
    reuses stale timings, and of the choices handler's and fusion pass's uuid() (FX graph cache keys)."""
    from .. import __version__
    from ..compiler import dsl_version, kernel_source_hash

    h = hashlib.sha256(f"{__version__}|{kernel_source_hash()}|{dsl_version()}".encode())
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.read_bytes())
    return h.hexdigest()[:10]


# FX node meta: a GEMM whose fused form lost to its unfused ops before gets no plain candidates
# (set by the fusion pass, read by choices.plain_gemm_choices)
NO_PLAIN_CANDIDATES = "cutedsl_no_plain_candidates"
