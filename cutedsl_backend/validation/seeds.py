"""Replayable seeds: the same cell gets the same random inputs in every process (``hash()`` of a
string changes per process with PYTHONHASHSEED, so a failure seeded by it cannot be replayed)."""

from __future__ import annotations

import hashlib


def stable_seed(*parts) -> int:
    """A 31-bit seed from ``parts`` (their repr), the same on every run and machine."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "little") % 2**31
