"""GPU tests that time host or device work run alone: they carry the `timing` marker, and the GPU
nox session runs the rest in parallel first and the timing tests afterwards without workers."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# calls that time work: a test making one measures, and its bound measures its neighbours too
TIMERS = {"host_us_per_call", "device_ms_per_call", "perf_counter", "_graph_ms", "do_bench", "elapsed_time",
          "_median_ms", "alternated_graph_ms"}


def _marked_timing(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Attribute) and d.attr == "timing" for d in fn.decorator_list)


def _times_work(fn: ast.FunctionDef) -> bool:
    for node in ast.walk(fn):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in TIMERS:
            return True
    return False


def test_every_gpu_test_that_times_work_is_marked_timing():
    unmarked = []
    for path in sorted((ROOT / "tests" / "gpu").glob("test_*.py")):
        for fn in ast.parse(path.read_text()).body:
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_") and _times_work(fn):
                if not _marked_timing(fn):
                    unmarked.append(f"{path.name}::{fn.name}")
    assert not unmarked, f"time work without @pytest.mark.timing: {unmarked}"


def test_the_gpu_session_runs_timing_tests_after_the_rest_without_workers():
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    gpu = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "gpu")
    runs = [n for n in ast.walk(gpu) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "run"]
    args = [[a.value for a in call.args if isinstance(a, ast.Constant)] for call in runs]
    marks = [next(a[i + 1] for i in range(len(a) - 1) if a[i] == "-m" and a[i + 1] != "pytest") for a in args]
    assert marks == ["gpu and not timing", "gpu and timing"], args
    assert "-n" in args[1] and args[1][args[1].index("-n") + 1] == "0", args[1]
