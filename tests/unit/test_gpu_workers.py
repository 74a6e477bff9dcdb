"""One GPU per pytest-xdist worker on a multi-GPU host (simulated GPU counts; no CUDA needed)."""

import os
import subprocess
import sys
from pathlib import Path

from cutedsl_backend.validation.gpus import pin_xdist_worker, visible_gpus, worker_gpu, xdist_workers

ROOT = Path(__file__).resolve().parents[2]


def test_visible_gpus_from_the_environment():
    assert visible_gpus({"CUTEDSL_GPU_COUNT": "4"}) == ["0", "1", "2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}) == ["2", "5"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_workers_round_robin_over_the_gpus():
    gpus = ["0", "1", "2", "3"]
    assert [worker_gpu(f"gw{i}", gpus) for i in range(6)] == ["0", "1", "2", "3", "0", "1"]
    assert worker_gpu("gw3", ["7"]) is None  # one GPU: nothing to pin
    assert worker_gpu(None, gpus) is None and worker_gpu("master", gpus) is None


def test_pinning_sets_cuda_visible_devices_only_where_it_chooses():
    env = {"CUTEDSL_GPU_COUNT": "2", "PYTEST_XDIST_WORKER": "gw3"}
    assert pin_xdist_worker(env) == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    env = {"CUDA_VISIBLE_DEVICES": "4,6", "PYTEST_XDIST_WORKER": "gw2"}
    assert pin_xdist_worker(env) == "4" and env["CUDA_VISIBLE_DEVICES"] == "4"
    env = {"CUTEDSL_GPU_COUNT": "1", "PYTEST_XDIST_WORKER": "gw0"}
    assert pin_xdist_worker(env) is None and "CUDA_VISIBLE_DEVICES" not in env


def test_worker_count_one_per_gpu():
    assert xdist_workers(8, {"CUTEDSL_GPU_COUNT": "4"}) == 4
    assert xdist_workers(8, {"CUTEDSL_GPU_COUNT": "1"}) == 8
    assert xdist_workers(8, {"CUDA_VISIBLE_DEVICES": ""}) == 8


def test_xdist_workers_really_get_their_gpus(tmp_path):
    """A real pytest-xdist run with a simulated 3-GPU host: each worker's tests see the GPU its
    id maps to, set before the test module (and anything CUDA) was imported."""
    test = tmp_path / "test_probe.py"
    test.write_text(
        "import os, pytest\n"
        "@pytest.mark.parametrize('i', range(12))\n"
        "def test_probe(i):\n"
        "    w = os.environ['PYTEST_XDIST_WORKER']\n"
        "    assert os.environ['CUDA_VISIBLE_DEVICES'] == str(int(w[2:]) % 3)\n")
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    env = dict(os.environ, CUTEDSL_GPU_COUNT="3", PYTHONPATH=str(ROOT))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "worksteal", "-p",
                          "no:cacheprovider", str(test)], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "12 passed" in out.stdout


def test_validation_cells_are_sharded_one_pinned_process_per_gpu(monkeypatch):
    """On a (simulated) 3-GPU host every cell runs once, in a process pinned to one GPU before
    CUDA initialises, every GPU takes work, and results come back in cell order; one GPU runs
    in this process."""
    from cutedsl_backend.validation.gpus import pinned_gpu, run_sharded

    monkeypatch.setenv("CUTEDSL_GPU_COUNT", "3")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seen = []
    got = run_sharded(pinned_gpu, [0.3] * 9, visible_gpus(), progress=lambda i, n: seen.append((i, n)))
    assert len(got) == 9 and set(got) == {"0", "1", "2"}
    assert seen[-1] == (9, 9)
    assert run_sharded(pinned_gpu, [0.0, 0.0], ["0"]) == [None, None]  # one GPU: here, unpinned
