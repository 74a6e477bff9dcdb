"""The epilogue formula, shared by every kernel family (sm90 and sm100).

``EpilogueSpec`` is plain data (hashable, part of the compile-cache key); ``apply`` is the CuTe
DSL piece a kernel calls on an fp32 accumulator fragment before rounding to the output dtype.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpilogueSpec:
    """out = acc (fp32), rounded once to the output dtype."""

    def key(self) -> tuple:
        return ("identity",)

    def apply(self, acc_vec):
        return acc_vec
