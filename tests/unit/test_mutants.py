"""Every deliberately broken variant is caught by the gate meant for it."""

import pytest

pytest.importorskip("torch")

from cutedsl_backend.validation.mutants import NUMERIC_FAULTS, mutant_no_hgmma, mutant_over_budget, numeric_fault  # noqa: E402,E501


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
