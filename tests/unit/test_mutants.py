"""Every deliberately broken variant is caught by the gate meant for it."""

import pytest

pytest.importorskip("torch")

from cutedsl_backend.validation.mutants import (  # noqa: E402
    KERNEL_MUTANTS,
    NUMERIC_FAULTS,
    mutant_no_hgmma,
    mutant_over_budget,
    numeric_fault,
)


@pytest.mark.parametrize("name", list(NUMERIC_FAULTS))
def test_numeric_fault_is_caught(name):
    r = numeric_fault(name)
    assert r["caught"], r


@pytest.mark.compile
def test_kernel_without_hgmma_fails_the_sass_gate(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    r = mutant_no_hgmma()
    assert r["caught"], r


@pytest.mark.compile
def test_kernel_over_budget_fails_the_budget_gate(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    r = mutant_over_budget()
    assert r["caught"], r


@pytest.mark.compile
@pytest.mark.parametrize("name", KERNEL_MUTANTS)
def test_broken_kernels_compile(name, tmp_path, monkeypatch):
    """The realistic kernel bugs compile (their GPU run: tests/gpu/test_mutants_sm90.py); without
    an sm90 GPU the mutant says it was not run and is not counted as caught."""
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve
    from cutedsl_backend.validation.mutant_kernels import sm90_mutants
    from cutedsl_backend.validation.mutants import kernel_mutant, mutant_problem

    problem, spec, config = mutant_problem(name)
    which = resolve(problem, config, spec)
    cg = compile_kernel(problem, which, kernel_cls=sm90_mutants()[name])
    assert cg.sass_counts()["QGMMA" if "fp8" in name else "HGMMA"] > 0
    from cutedsl_backend.validation.environment import gpu_arch

    if gpu_arch() != "sm90a":
        r = kernel_mutant(name)
        assert r["skipped"] and not r["caught"] and "not run" in r["by"]


@pytest.mark.compile
def test_missing_barrier_mutant_has_fewer_barriers(tmp_path, monkeypatch):
    """The barrier mutant really drops the epilogue's store barriers (fewer BAR instructions than
    the same kernel without the bug), so its GPU run tests what its name says."""
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve
    from cutedsl_backend.validation.mutant_kernels import sm90_mutants
    from cutedsl_backend.validation.mutants import mutant_problem

    name = "missing epilogue barrier"
    problem, spec, config = mutant_problem(name)
    which = resolve(problem, config, spec)
    bars = [compile_kernel(problem, which, kernel_cls=cls).sass_counts(("BAR",))["BAR"]
            for cls in (None, sm90_mutants()[name])]
    assert bars[1] < bars[0], bars
