"""``python -m cutedsl_backend <command>``: the command line. One module per group of commands
(``release``: the validation run and report tools; ``benchmarks``: timing against the peers;
``tuning``: candidate sweeps and config tables; ``probes``: design probes and the fuzzer), each a
tuple of :class:`~.common.Command` records that this module turns into subparsers."""

from __future__ import annotations

import argparse
import sys

from . import benchmarks, probes, release, tuning

COMMANDS = release.COMMANDS + benchmarks.COMMANDS + tuning.COMMANDS + probes.COMMANDS
# the commands that run kernels on a GPU, and those that work on any machine
GPU_COMMANDS = frozenset(c.name for c in COMMANDS if c.gpu)
CPU_COMMANDS = frozenset(c.name for c in COMMANDS if not c.gpu)


def no_gpu_message(cmd: str) -> str | None:
    """Why ``cmd`` cannot run here (no CUDA device), or None."""
    import torch

    if torch.cuda.is_available():
        return None
    return (f"python -m cutedsl_backend {cmd}: needs a CUDA GPU (the sm90a kernels run on an H100 or H200) and "
            f"this machine has none (torch {torch.__version__}, CUDA {torch.version.cuda or 'not built in'}). "
            "Without a GPU, `validate` runs the compile-only matrix and `compile`, `replay`, `config-table` and "
            "`table-check` work.")


def parser() -> argparse.ArgumentParser:
    """The whole command line: one subparser per command; each knows its :class:`~.common.Command`
    (``args.command``) and its own parser (``args.command_parser``, for its argument errors)."""
    ap = argparse.ArgumentParser(prog="python -m cutedsl_backend")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help)
        command.arguments(p)
        p.set_defaults(command=command, command_parser=p)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command.gpu:
        why = no_gpu_message(args.cmd)
        if why:
            print(why, file=sys.stderr)
            return 2
    return args.command.run(args, args.command_parser)
