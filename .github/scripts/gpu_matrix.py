"""Turn `nox -l --json -t gpu` into the GPU workflow's job matrix: one job per GPU nox session of
the architectures that have runners (``--kinds``, the repository variable GPU_KINDS, e.g. "sm90a"),
on the self-hosted runner of the session's architecture; the others are listed as not run.

    python3 gpu_matrix.py sessions.json --kinds sm90a          -> matrix=..., not_run=... (outputs)
    python3 gpu_matrix.py sessions.json --sessions-of sm90a    -> the session names, one per line
"""

import argparse
import json
import re
import sys

RUNNERS = {
    "sm90a": ["self-hosted", "linux", "x64", "h100"],
    "sm100a": ["self-hosted", "linux", "x64", "b200"],
}


def sessions_by_arch(sessions: list) -> dict:
    out: dict = {}
    for s in sessions:
        m = re.search(r"arch='(sm\d+a)'", s["session"])
        if m and "gpu" in s.get("tags", []):
            out.setdefault(m.group(1), []).append(s["session"])
    return out


def matrix(sessions: list, kinds) -> tuple:
    """(the job matrix for the architectures in ``kinds``, the architectures left out: no runner)."""
    by_arch = sessions_by_arch(sessions)
    include = [{"session": name, "arch": arch, "runner": RUNNERS[arch]}
               for arch, names in by_arch.items() if arch in kinds for name in names]
    not_run = sorted(a for a in by_arch if a not in kinds)
    return {"include": include}, not_run


def main(argv) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sessions", help="`nox -l --json -t gpu` output (a file, or - for stdin)")
    ap.add_argument("--kinds", default="sm90a", help="comma-separated architectures that have GPU runners")
    ap.add_argument("--sessions-of", help="print this architecture's GPU session names instead")
    args = ap.parse_args(argv)
    data = json.load(sys.stdin if args.sessions == "-" else open(args.sessions))
    if args.sessions_of:
        print("\n".join(sessions_by_arch(data).get(args.sessions_of, [])))
        return 0
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in RUNNERS]
    if unknown:
        print(f"unknown GPU kinds {unknown}: known {sorted(RUNNERS)}", file=sys.stderr)
        return 2
    mat, not_run = matrix(data, kinds)
    print("matrix=" + json.dumps(mat))
    print("not_run=" + json.dumps(not_run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
