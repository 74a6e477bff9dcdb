"""Performance gate (GPU): the shape sweep (model projections x the whole M range), every cell
checked for correctness and timed against the peer in the same run (``shape_sweep``)."""

from __future__ import annotations


def perf_gate(tag: str) -> dict:
    from .shape_sweep import run_sweep

    return run_sweep(tag)
