"""Performance gate (GPU): ratio to the peer measured in the same run vs a versioned baseline."""

from __future__ import annotations

import json
from pathlib import Path

BASELINE_FILE = Path(__file__).with_name("perf_baseline.json")


def perf_gate(tag: str) -> dict:
    from .bench import bench_shapes

    base = json.loads(BASELINE_FILE.read_text())
    shapes = [tuple(s) for s in base["shapes"][tag]]
    rows = bench_shapes(shapes, dtypes=tuple(base["dtypes"]), log=lambda *a: None)
    results = []
    for r in rows:
        shape = f"{r['m']}x{r['n']}x{r['k']}"
        key = f"{r['dtype']}/{shape}"
        min_ratio = base["min_graph_ratio"].get(key, base["default_min_graph_ratio"])
        ok = r["graph_ratio"] >= min_ratio
        results.append({
            "id": f"sm90a/perf/{key}", "gate": "perf", "cell": {"arch": "sm90a", "dtype": r["dtype"]},
            "status": "pass" if ok else "fail",
            "reason": "" if ok else f"graph ratio {r['graph_ratio']:.3f} < baseline {min_ratio}",
            "dtype": r["dtype"], "shape": shape, "ours_tflops": r["graph_ours_tflops"],
            "peer_tflops": r["graph_torch_tflops"], "ratio": r["graph_ratio"],
            "eager_ratio": r["ratio"], "min_ratio": min_ratio, "config": r["config"],
        })
    return {"results": results, "peer": "torch.matmul (cuBLAS)", "timing": "CUDA-graph replay, median"}
