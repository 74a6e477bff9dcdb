"""What every command module shares: the command record, and parsing and writing helpers."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Command:
    """One ``python -m cutedsl_backend`` subcommand. ``gpu``: it runs kernels on a GPU (times,
    probes or fuzzes them) and refuses, with a sentence, on a machine without one; the others
    compile, replay, report or validate (compile-only without a GPU) anywhere. ``arguments`` adds
    the subcommand's arguments to its parser; ``run(args, parser)`` carries it out and returns the
    exit status (``parser.error`` for a bad combination of arguments)."""

    name: str
    help: str
    gpu: bool
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, argparse.ArgumentParser], int]


def borrowed_tables_argument(p: argparse.ArgumentParser) -> None:
    """``--no-borrowed-tables``: the other half of the borrowed tables' A/B (apply it with
    :func:`apply_borrowed_tables`)."""
    p.add_argument("--no-borrowed-tables", action="store_true",
                   help="each GPU model's own measured tables only, none borrowed from another model of its die "
                   "(configs.measured.BORROWED_TABLES: the H100's on an H200): the other half of that A/B")


def apply_borrowed_tables(args: argparse.Namespace) -> None:
    """Rank with each GPU model's own tables only where ``--no-borrowed-tables`` was given."""
    if args.no_borrowed_tables:
        from ..configs.measured import MEASURED

        MEASURED.borrowing = False


def shapes(spec: str) -> list:
    """``prefill``, ``decode``, ``all`` (the bench shape lists) or ``MxNxK,...``."""
    from ..validation.bench import DECODE_SHAPES, PREFILL_SHAPES

    if spec == "prefill":
        return PREFILL_SHAPES
    if spec == "decode":
        return DECODE_SHAPES
    if spec == "all":
        return PREFILL_SHAPES + DECODE_SHAPES
    return [dims(s) for s in spec.split(",")]


def dims(text: str) -> tuple:
    """``MxNxK`` (or ``NxK``) as integers."""
    return tuple(int(x) for x in text.split("x"))


def mnk_list(p: argparse.ArgumentParser, text: str) -> list:
    """``MxNxK,...`` as (M, N, K) tuples of positive integers; anything else a usage error on ``p``."""
    try:
        wanted = [dims(s) for s in text.split(",")]
    except ValueError:
        wanted = []
    if not wanted or any(len(s) != 3 or min(s) < 1 for s in wanted):
        p.error("--shapes: MxNxK,... (positive integers)")
    return wanted


def chosen(p: argparse.ArgumentParser, option: str, text, allowed) -> list:
    """The comma-separated names of ``option``, each one of ``allowed``; else a usage error on ``p``."""
    got = names(text) or []
    if not got or any(x not in allowed for x in got):
        p.error(f"{option}: one or more of {', '.join(allowed)}")
    return got


def ints(text: str) -> tuple:
    """Comma-separated integers; empty items (and an empty string) are left out."""
    return tuple(int(m) for m in text.split(",") if m)


def names(text) -> list | None:
    """Comma-separated names, or None for an absent option."""
    return text.split(",") if text else None


def write_json(path, data, atomic: bool = False) -> None:
    """Write ``data`` to ``path`` if a path was given. ``atomic``: through a temporary file, so that
    a kill mid-write leaves the last whole file (for checkpoints written after every shape)."""
    if not path:
        return
    target = path + ".tmp" if atomic else path
    with open(target, "w") as f:
        json.dump(data, f, indent=1)
    if atomic:
        os.replace(target, path)


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """For a command that takes none."""
