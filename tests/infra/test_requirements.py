"""One source of truth for the GPU environment: requirements/gpu.txt (with requirements/test.txt)
is what the GPU image installs and what the nox sessions install, and it covers every third-party
import the GPU sessions make (the GPU tests, their conftest, the package and the noxfile), torch
aside (the image pins its CUDA build)."""

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# top-level module -> the distribution that provides it ("torch": the image's torch or its deps)
PROVIDED_BY = {"pytest": "pytest", "xdist": "pytest-xdist", "yaml": "PyYAML", "matplotlib": "matplotlib",
               "nox": "nox", "numpy": "numpy", "cutlass": "nvidia-cutlass-dsl",
               "cuda": "nvidia-cutlass-dsl",  # cuda-python, a dependency of the DSL
               "nvidia": "nvidia-cuda-cuobjdump",  # the SASS tools' wheels (nvidia.* namespace)
               "torch": "torch", "triton": "torch", "sympy": "torch"}  # (sympy: a dependency of torch)
# imports the package guards with a fallback (the reason is the fallback)
OPTIONAL = {"pynvml": "validation/power.py reads clocks and power with nvidia-smi without it"}


def requirements(name: str) -> dict:
    pins = {}
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            pins.update(requirements(line[3:].strip()))
        elif line:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([\w.]+)", line)
            assert m, f"requirements/{name}: {line!r} is not pinned with =="
            pins[m.group(1).lower()] = m.group(2)
    return pins


def gpu_session_imports() -> set:
    files = (list((ROOT / "tests" / "gpu").glob("*.py")) + [ROOT / "tests" / "conftest.py", ROOT / "noxfile.py"]
             + list((ROOT / "cutedsl_backend").rglob("*.py")))
    names = set()
    for p in files:
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Import):
                names.update(a.name.split(".")[0] for a in n.names)
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                names.add(n.module.split(".")[0])
    return {x for x in names if x not in sys.stdlib_module_names and x != "cutedsl_backend"}


def test_gpu_requirements_cover_every_import_of_the_gpu_sessions():
    pins = requirements("gpu.txt")
    for name in sorted(gpu_session_imports()):
        if name in OPTIONAL:
            continue
        assert name in PROVIDED_BY, f"import {name!r}: add it to requirements/ and to PROVIDED_BY"
        dist = PROVIDED_BY[name]
        assert dist == "torch" or dist.lower() in pins, f"import {name!r} needs {dist} in requirements/gpu.txt"
    # the GPU nox sessions run pytest with xdist workers
    assert "pytest-xdist" in pins and "pytest" in pins


def test_image_and_nox_install_the_same_lists():
    dockerfile = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    # the image installs gpu.txt's hash lock (test_the_hash_lock_covers_the_requirements_at_their_versions)
    assert "pip install --no-cache-dir --require-hashes --no-deps -r requirements/gpu.lock" in dockerfile
    assert "COPY requirements ./requirements" in dockerfile
    noxfile = (ROOT / "noxfile.py").read_text()
    assert 'TEST_DEPS = ["-r", "requirements/test.txt"]' in noxfile


def _lock(name: str) -> dict:
    text = (ROOT / "requirements" / name).read_text()
    entries = re.findall(r"^([a-z0-9\-]+)==([\w.]+) \\\n    --hash=sha256:([0-9a-f]{64})$", text, re.M)
    pinned = [line for line in text.splitlines() if "==" in line]
    assert len(entries) == len(pinned), f"requirements/{name}: a pin without its sha256"
    return {n: v for n, v, _ in entries}


def test_the_hash_lock_covers_the_requirements_at_their_versions():
    """requirements/gpu.lock (+ gpu-cu13.lock) pins every package of requirements/gpu.txt at the same
    version, each with a sha256, the DSL's CUDA 13 libs at the DSL's version (regenerate both with
    .github/scripts/lock_requirements.py after changing gpu.txt or test.txt)."""
    lock = _lock("gpu.lock")
    cu13 = _lock("gpu-cu13.lock")
    wanted = {re.sub(r"[-_.]+", "-", k): v for k, v in requirements("gpu.txt").items()}
    for name, version in wanted.items():
        assert lock.get(name) == version, (name, version, lock.get(name))
    assert cu13 == {"nvidia-cutlass-dsl-libs-cu13": wanted["nvidia-cutlass-dsl"]}
    assert "nvidia-cutlass-dsl-libs-cu12" not in lock  # the image's CUDA is 13
    dockerfile = (ROOT / "docker" / "Dockerfile.gpu").read_text()
    assert "--require-hashes --no-deps -r requirements/gpu.lock" in dockerfile
    assert dockerfile.index("requirements/gpu.lock") < dockerfile.index("requirements/gpu-cu13.lock")
