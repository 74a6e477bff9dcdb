"""The peer-precision probe on the GPU (``probe-peer``): its three calls time and check on one
small shape per 16-bit dtype, and torch's reduced-precision switches are as before afterwards.
Skipped with the reason without an sm90 GPU."""

import math

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.validation.probes import REDUCED_PRECISION_FLAGS, peer_precision  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]


def test_peer_precision_times_and_checks_the_peer_both_ways_and_ours():
    flags = torch.backends.cuda.matmul
    before = {name: getattr(flags, name) for name in REDUCED_PRECISION_FLAGS.values()}
    rows = peer_precision([(64, 512, 1024)], rounds=2, log=lambda *a: None)
    assert {name: getattr(flags, name) for name in REDUCED_PRECISION_FLAGS.values()} == before
    assert [(r["dtype"], r["call"]) for r in rows] == [
        (d, c) for d in ("float16", "bfloat16")
        for c in ("torch.matmul (torch's defaults)", "torch.matmul (fp32 reductions only)", "ours gemm")]
    for r in rows:
        assert r["ms"] > 0 and r["ms_range"][0] <= r["ms"] <= r["ms_range"][1]
        assert math.isfinite(r["rel_l2_vs_fp64"]) and r["rel_l2_vs_fp64"] < 1e-2, r  # a 16-bit output's rounding
    assert all(r["peer_default_ms_over_this"] == 1.0 for r in rows if "defaults" in r["call"])
