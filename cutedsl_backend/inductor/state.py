"""What enable() set: read by the choices handler, the fusion pass and the lowerings."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .eligibility import default_device_arch

# Inductor's op names (the ``op_name`` of InductorChoices.get_template_configs) we offer kernels for
OPS = ("mm", "addmm", "bmm", "scaled_mm")


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
