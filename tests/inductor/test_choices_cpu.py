"""Plain GEMMs (aten.mm, addmm, bmm) get our candidates under max-autotune; a forced win makes
the generated code call our op with the config by name."""

import pytest

torch = pytest.importorskip("torch")

from .conftest import CALLS, assert_close, compile_and_code, forced_ours, rand  # noqa: E402


def test_mm_offers_the_heuristic_top_k(inductor, feedback):
    a, b = rand(256, 128), rand(128, 192)
    out, code = compile_and_code(lambda a, b: a @ b, a, b)
    ours = feedback.ours("mm")
    assert 1 <= len(ours) <= 3, feedback.rounds
    assert all(desc.startswith("cutedsl sm90a_") for _, desc in ours)
    assert len({desc for _, desc in ours}) == len(ours)  # distinct configs
    assert_close(out, a.double() @ b.double(), 128)


def test_top_k_differs_in_more_than_raster_and_spans_both_schedules():
    """The top-k offered: raster/group variants only when nothing else is left, and (k >= 3) the
    last slot the best of the other schedule when the heuristic's best share one."""
    from cutedsl_backend.configs import GemmConfig
    from cutedsl_backend.inductor.eligibility import diverse

    coop_a = GemmConfig(128, 256, cluster_m=2)
    coop_a_n = GemmConfig(128, 256, cluster_m=2, raster="m")
    coop_b = GemmConfig(256, 128, cluster_n=2)
    coop_c = GemmConfig(128, 256, cluster_n=2)
    pp = GemmConfig(128, 128, schedule="pingpong")
    ranked = [coop_a, coop_a_n, coop_b, coop_c, pp]
    assert diverse(ranked, 2) == [coop_a, coop_b]
    assert diverse(ranked, 3) == [coop_a, coop_b, pp]  # not coop_c: another schedule
    assert diverse([coop_a, coop_a_n, pp, coop_b], 3) == [coop_a, pp, coop_b]  # already mixed
    assert diverse([coop_a, coop_a_n], 3) == [coop_a, coop_a_n]  # raster variants fill up
    assert diverse([coop_a, coop_b, coop_c], 3) == [coop_a, coop_b, coop_c]  # no other schedule
    assert diverse(ranked, 0) == []


def test_top_k_and_ops_options(inductor, feedback):
    inductor.enable(device_arch=inductor_arch(), top_k=1, ops=("mm",))
    a, b, bias = rand(128, 64), rand(96, 64), rand(96)
    compile_and_code(lambda a, b, bias: (a @ b.t(), torch.nn.functional.linear(a, b, bias)), a, b, bias)
    assert len(feedback.ours("mm")) == 1
    assert feedback.ours("addmm") == []  # addmm not among ops=


def inductor_arch():
    from .conftest import as_sm90a

    return as_sm90a


def test_forced_mm_code_calls_our_op(inductor):
    a, b = rand(256, 128), rand(192, 128)
    with forced_ours():
        out, code = compile_and_code(lambda a, b: a @ b.t(), a, b)
    assert "extern_kernels.cutedsl_gemm_ab_" in code and "kernel_config='sm90a_" in code, code
    assert CALLS and CALLS[-1][0] == "gemm_ab" and CALLS[-1][1].startswith("sm90a_")
    assert_close(out, a.double() @ b.double().t(), 128)


def test_forced_addmm_bias_and_residual(inductor):
    a, w, bias = rand(256, 128), rand(64, 128), rand(64)
    c = rand(256, 64)
    with forced_ours():
        out, code = compile_and_code(lambda a, w, bias: torch.nn.functional.linear(a, w, bias), a, w, bias)
    assert "extern_kernels.cutedsl_gemm_ab_bias_120_" in code, code
    assert_close(out, a.double() @ w.double().t() + bias.double(), 128)
    torch._dynamo.reset()
    with forced_ours():
        out, code = compile_and_code(lambda c, a, w: torch.addmm(c, a, w.t(), beta=0.5, alpha=2.0), c, a, w)
    assert "extern_kernels.cutedsl_gemm_ab_res_120_" in code and "beta=0.5" in code and "alpha=2.0" in code, code
    assert_close(out, 0.5 * c.double() + 2.0 * (a.double() @ w.double().t()), 128)


def test_forced_bmm(inductor):
    a, b = rand(3, 128, 64), rand(3, 64, 96)
    with forced_ours():
        out, code = compile_and_code(torch.bmm, a, b)
    assert "extern_kernels.cutedsl_gemm_ab_" in code, code
    assert_close(out, a.double() @ b.double(), 64)


def test_dynamic_m_is_offered(inductor, feedback):
    """Our kernels take any M at run time: a dynamic batch dimension is fine as long as the
    strides stay statically 16-byte aligned."""
    w = rand(96, 128)
    fn = torch.compile(lambda x, w: x @ w.t(), mode="max-autotune-no-cudagraphs")
    with forced_ours():
        for m in (40, 72):
            x = rand(m, 128)
            torch._dynamo.mark_dynamic(x, 0)
            assert_close(fn(x, w), x.double() @ w.double().t(), 128)
    # one choice (the per-call dispatcher), so forced, Inductor does not benchmark: it just runs
    assert {c[1] for c in CALLS if c[0] == "gemm_ab"}, CALLS


def test_dynamic_k_is_refused(inductor, feedback, debug_log):
    """A dynamic K makes a's row stride symbolic: its alignment cannot be known statically."""
    w = rand(96, 128)
    fn = torch.compile(lambda x, w: x @ w.t(), mode="max-autotune-no-cudagraphs", dynamic=True)
    x = rand(40, 128)
    torch.testing.assert_close(fn(x, w), x @ w.t())
    assert feedback.ours() == []
    assert any("not statically a multiple" in r.getMessage() for r in debug_log.records)


def test_op_falls_back_to_torch_with_a_logged_warning(caplog):
    """If an input reaches our op in a form the kernel refuses (here: CPU tensors), the op
    computes the unfused torch result, logs a warning naming the rule and counts it (the GPU
    tests assert the count stays 0)."""
    import logging

    import cutedsl_backend.inductor as cbi
    from cutedsl_backend.inductor import ops as iops

    a, b, bias = rand(64, 32), rand(32, 48), rand(48)
    before = cbi.stats()["runtime_fallbacks"]
    with caplog.at_level(logging.WARNING, logger="cutedsl_backend.inductor"):
        out = iops._eager_call((False, True, False))(a, b, bias, activation="relu")
    assert cbi.stats()["runtime_fallbacks"] == before + 1
    assert any("device" in r.getMessage() and "unfused torch ops" in r.getMessage() for r in caplog.records)
    torch.testing.assert_close(out, torch.relu(torch.addmm(bias, a, b)))


def test_dynamic_m_runs_the_per_call_dispatcher(inductor, feedback):
    """A symbolic M gets one choice, the per-call dispatcher: the generated code names no config
    frozen at the hint (kernel_config="dispatch"), and each call's config comes from its own M."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.inductor.eligibility import DISPATCH
    from cutedsl_backend.problem import GemmProblem

    w = rand(96, 128)
    fn = torch.compile(lambda x, w: x @ w.t(), mode="max-autotune-no-cudagraphs")
    with forced_ours():
        for m in (40, 72, 300):
            x = rand(m, 128)
            torch._dynamo.mark_dynamic(x, 0)
            assert_close(fn(x, w), x.double() @ w.double().t(), 128)
    configs = [c[1] for c in CALLS if c[0] == "gemm_ab"]
    assert configs and set(configs) == {DISPATCH}, CALLS
    # what the dispatcher runs differs by M (decode vs mid-size picks)
    picks = {default_config(GemmProblem(m, 96, 128, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")) for m in (40, 300)}
    assert len(picks) == 2


def test_dispatch_buckets_cover_the_token_range():
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.inductor.eligibility import DISPATCH_BUCKETS_M, Offer
    from cutedsl_backend.problem import GemmProblem

    offer = Offer(GemmProblem(40, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"), EpilogueSpec(), (),
                  dynamic=True)
    pairs = offer.dispatch_buckets()
    # a pick per bucket at most, each also as the token counts beside it run it (configs.edge)
    assert 3 <= len(pairs) <= 2 * len(DISPATCH_BUCKETS_M)
    configs = {c for _, c in pairs}
    assert any(c.edge for c in configs) and any(c.replace(edge=False) in configs for c in configs if c.edge)
    unmoved = {c.replace(edge=False) for c in configs}
    ahead = 0
    for m in (63, 65, 95, 97, 255, 257, 511, 513, 1023, 1025):  # token counts beside the buckets
        run = default_config(GemmProblem(m, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"))
        if run.replace(edge=False) in unmoved:  # a config compiled ahead runs compiled, moved or not
            assert run in configs, run
            ahead += 1
    assert ahead >= 5
    assert any(c.splits > 1 or c.a_rows for _, c in pairs)  # decode buckets
    assert any(p.m >= 1024 for p, _ in pairs)  # prefill buckets


def test_dispatch_buckets_include_the_measured_tables_configs():
    """Under a dynamic M the kernels a measured config table serves (at its own token counts, which
    the fixed buckets miss) are compiled ahead too."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.measured import MEASURED
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.inductor.eligibility import Offer
    from cutedsl_backend.problem import GemmProblem

    gpu = "NVIDIA H100 80GB HBM3"  # a shipped table's GPU
    problem = GemmProblem(40, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    bounds = MEASURED.bounds(problem, gpu)
    assert bounds and MEASURED.bounds(problem, "NVIDIA Other") == ()
    # what the dispatcher runs at those token counts (the table's config, its last tiles moved
    # to the edge where partial: configs.edge)
    served = {default_config(GemmProblem(m, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"), gpu=gpu)
              for m in bounds}
    assert {c.replace(edge=False) for c in served} == {MEASURED.choice(GemmProblem(
        m, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"), gpu) for m in bounds}
    configs = {c for _, c in Offer(problem, EpilogueSpec(), (), dynamic=True, gpu=gpu).dispatch_buckets()}
    assert served and served <= configs, served - configs
