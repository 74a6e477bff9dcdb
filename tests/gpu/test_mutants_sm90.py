"""Realistic kernel bugs are caught by the GPU numerics (validation.mutants.kernel_mutant): the
sm90a kernel with a K loop one k-tile short, its last output row or its last 16-byte vector of
columns never stored (the M and N tail predicates off by one), a wrong split-K slice offset, a
wrong batch offset, FP8 row and column scales applied on each other's axis, and the epilogue's
barrier before each TMA store left out, each beside the same kernel without the bug (which must
pass). Skipped, with the reason, without an sm90 GPU."""

import pytest

pytest.importorskip("torch")

from cutedsl_backend.validation.mutants import KERNEL_MUTANTS, kernel_mutant  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]


@pytest.mark.parametrize("name", KERNEL_MUTANTS)
def test_broken_kernel_is_caught(name):
    r = kernel_mutant(name)
    assert not r.get("skipped") and r["caught"], r
