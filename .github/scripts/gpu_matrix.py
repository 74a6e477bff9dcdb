"""Turn `nox -l --json -t gpu` into the GPU workflow's job matrix: one job per GPU nox session,
on the self-hosted runner of the session's architecture."""

import json
import re
import sys

RUNNERS = {
    "sm90a": ["self-hosted", "linux", "x64", "h100"],
    "sm100a": ["self-hosted", "linux", "x64", "b200"],
}


def matrix(sessions: list) -> dict:
    include = []
    for s in sessions:
        name = s["session"]
        m = re.search(r"arch='(sm\d+a)'", name)
        if not m or "gpu" not in s.get("tags", []):
            continue
        include.append({"session": name, "arch": m.group(1), "runner": RUNNERS[m.group(1)]})
    return {"include": include}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        data = json.load(f)
    print("matrix=" + json.dumps(matrix(data)))
