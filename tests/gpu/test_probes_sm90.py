"""Probes on the GPU: the peer-precision one (``probe-peer``) times and checks its three calls on one
small shape per 16-bit dtype, and torch's reduced-precision switches are as before afterwards; the
cluster-padding one (``probe-padding``) checks and times both shapes of each case. Skipped with the
reason without an sm90 GPU."""

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


def test_cluster_padding_checks_and_times_both_shapes_of_each_case():
    from cutedsl_backend.validation.probes import cluster_padding

    cases = (("bfloat16", "sm90a_cooperative_128x128xauto_c2x1_sauto_rn8", (384, 1024, 512), (512, 1024, 512)),
             ("fp8_tensorwise", "sm90a_cooperative_128x128xauto_c2x1_sauto_rn8", (384, 1024, 512), (512, 1024, 512)))
    rows = cluster_padding(rounds=2, cases=cases, log=lambda *a: None)
    assert [(r["dtype"], r["m"]) for r in rows] == [("bfloat16", 384), ("bfloat16", 512),
                                                    ("fp8_tensorwise", 384), ("fp8_tensorwise", 512)]
    for r in rows:
        assert r["correct"], r
        assert 0 < r["ours_range"][0] <= r["ours_ms"] <= r["ours_range"][1] and r["peer_ms"] > 0, r


def test_config_ab_checks_and_times_each_config_and_the_pick():
    """``probe-configs``: every dtype's calls right against float64 (the pick and a named config,
    FP8 with both scalings), a config the rules refuse for the shape a row naming the rule."""
    from cutedsl_backend.validation.probe_configs import config_ab

    named = "sm90a_pingpong_64x64xauto_c1x1_sauto_rn8_a16"
    # N = 1056: a partial last tile for 64-, 96- and 128-wide tiles, a multiple of 16 for the FP8 peer
    cases = [(d, c, (16, 1056, 1024)) for d in ("bfloat16", "float16", "fp8_tensorwise", "fp8_rowwise")
             for c in ("pick", named)]
    cases.append(("bfloat16", named, (64, 1056, 1024)))  # 64 tokens past its 16 rows of A: refused
    rows = config_ab(cases, rounds=2, log=lambda *a: None)
    timed = [r for r in rows if "refused" not in r]
    assert len(timed) == 8 and all(r["correct"] for r in timed), timed
    assert {r["config"] for r in timed if r["config"].endswith("(pick)")} and all(
        0 < r["ours_range"][0] <= r["ours_ms"] <= r["ours_range"][1] and r["peer_ms"] > 0 for r in timed)
    refused = [r for r in rows if "refused" in r]
    assert len(refused) == 1 and "a_rows" in refused[0]["refused"] and refused[0]["m"] == 64
