"""The eager API fuzzed against torch's semantics on a Hopper GPU (cutedsl_backend.validation.fuzz:
gemm's cases, then gemm_gated's and scaled_mm's): every drawn call returns torch's result within the tolerance
policy or raises UnsupportedGemmError; a finding names the case, replayable from (seed, index).
Skipped, with the reason, without an sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.validation.fuzz import fuzz  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("fused")]


@pytest.mark.parametrize("seed", [2026, 7])
def test_fuzzed_calls_are_right_or_refused_by_name(seed):
    findings = fuzz(seed=seed, cases=250, log=lambda *a: None)
    assert not findings, "\n".join(findings[:10])
