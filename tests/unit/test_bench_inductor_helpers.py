"""bench-inductor's bookkeeping (CPU): which autotune candidates are ours, and the timings it keeps."""

import pytest

pytest.importorskip("torch")


class Choice:
    def __init__(self, name, description="", decision=None):
        self.name, self.description = name, description
        if decision is not None:
            self.cutedsl_decision = decision


def test_winners_tell_our_kernels_from_the_unfused_subgraph():
    from cutedsl_backend.validation.bench_inductor import _Winners

    ours = Choice("cutedsl_gemm_ab_bias_res_abc", "cutedsl sm90a_cooperative_128x256", decision="k1")
    unfused = Choice("cutedsl_fused_gemm_ab_bias_res_unfused_0", "unfused GEMM + pointwise ops")
    aten = Choice("bias_addmm")
    w = _Winners()
    w({ours: 0.21, unfused: 0.20, aten: 0.25}, "cutedsl_fused_gemm_ab_bias_res", [], [])
    (row,) = w.rows
    # the unfused subgraph's name starts with "cutedsl_" too: it is theirs all the same
    assert row["best_ours_ms"] == 0.21 and row["best_theirs_ms"] == 0.20
    assert row["winner"].startswith("cutedsl_fused_gemm_ab_bias_res_unfused_0")
    assert [t for _, t in row["timings_ms"]] == [0.20, 0.21, 0.25] and row["choices"] == 3
    w({}, "empty", [], [])  # an autotune without timings adds nothing
    assert len(w.rows) == 1


def test_ab_variants_set_their_environment_for_their_compile_only(monkeypatch):
    import os

    from cutedsl_backend.validation.bench_inductor import AB_VARIANTS, SPAWNED_WORKERS, _variant_env

    monkeypatch.setenv("CUTEDSL_WORKER_FORK", "1")
    with _variant_env(SPAWNED_WORKERS):
        assert os.environ["CUTEDSL_WORKER_FORK"] == "0"
    assert os.environ["CUTEDSL_WORKER_FORK"] == "1"
    monkeypatch.delenv("CUTEDSL_BENCH_FORCE_UNFUSED", raising=False)
    with _variant_env("cutedsl warm"):  # not an A/B variant: nothing set
        assert "CUTEDSL_BENCH_FORCE_UNFUSED" not in os.environ
    assert not any("," in v for v in AB_VARIANTS)  # --variants splits on commas


def test_forced_loss_makes_our_timed_choices_lose(monkeypatch):
    """The forced-loss rows keep our choices in the autotune (compiled, timed) and multiply their
    times, so the unfused ops win after the whole autotune; only under the variable."""
    import pytest

    from cutedsl_backend.inductor import device_timing
    from cutedsl_backend.validation import bench_inductor as bi

    class Choice:
        name = "cutedsl_gemm_ab_bias_3fba6f93f1"

    def fake_install(choice, call, kwargs):  # stands for the device timer's installation
        choice.benchmark = lambda *args, out: call(*args, **kwargs)

    monkeypatch.setattr(device_timing, "install_on_ours", fake_install)
    assert bi.AB_VARIANTS[bi.FORCED_LOSS_ATEN]["CUTEDSL_BENCH_FORCE_UNFUSED"] == "1"
    monkeypatch.delenv("CUTEDSL_BENCH_FORCE_UNFUSED", raising=False)
    with bi._forced_unfused():
        assert device_timing.install_on_ours is fake_install
    monkeypatch.setenv("CUTEDSL_BENCH_FORCE_UNFUSED", "0")  # off, not a pattern ("0" is in our names' tags)
    with bi._forced_unfused():
        assert device_timing.install_on_ours is fake_install
    monkeypatch.setenv("CUTEDSL_BENCH_FORCE_UNFUSED", "1")
    with bi._forced_unfused() as forced:
        c = Choice()
        device_timing.install_on_ours(c, lambda x, scale: x * scale, {"scale": 2.0})
        assert c.benchmark(0.1, out=None) == pytest.approx(0.2 * bi.FORCED_LOSS_FACTOR)
    assert forced["losses"] == 1  # counted: a forced row that forced nothing says so
    assert device_timing.install_on_ours is fake_install
    monkeypatch.setenv("CUTEDSL_BENCH_FORCE_UNFUSED", "_res_")  # only the choices it names lose
    with bi._forced_unfused():
        res, plain = Choice(), Choice()
        res.name, plain.name = "cutedsl_gemm_ab_bias_res_3fba6f93f1", "cutedsl_gemm_ab_bias_3fba6f93f1"
        for c in (res, plain):
            device_timing.install_on_ours(c, lambda x: x, {})
        assert res.benchmark(0.5, out=None) == pytest.approx(0.5 * bi.FORCED_LOSS_FACTOR)
        assert plain.benchmark(0.5, out=None) == 0.5
    assert bi._short("0f96fd0042d078e0355d155d") == "0f96fd0042d0"  # cache keys cut, names whole
    assert bi._short(res.name) == res.name
    assert bi.AB_VARIANTS[bi.RESIDUAL_LOST]["CUTEDSL_BENCH_FORCE_UNFUSED"] == "_res_"
    assert len({v.split()[-1] for v in bi.AB_VARIANTS}) == len(bi.AB_VARIANTS)  # each its own cold cache dir


def test_cudagraph_skips_follow_inductors_counter():
    """bench-inductor reports rows measured without CUDA graphs (Inductor's own skip counter)."""
    from torch._dynamo.utils import counters

    from cutedsl_backend.validation import bench_inductor as bi

    before = bi._cudagraph_skips()
    counters["inductor"]["cudagraph_skips"] += 2
    try:
        assert bi._cudagraph_skips() == before + 2
    finally:
        counters["inductor"]["cudagraph_skips"] -= 2


def test_each_variant_keeps_its_own_compiled_graph():
    """--dynamic compiles one module once per variant and then alternates them: each entry must
    keep its own graph (no recompile, no reuse of the other variant's graph)."""
    import torch
    import torch._dynamo

    from cutedsl_backend.validation.bench_dynamic import _distinct_entry

    mod = torch.nn.Linear(8, 4)
    first, second = _distinct_entry(mod), _distinct_entry(mod)
    assert first.__code__ is not second.__code__
    compiled_by = []

    def backend(name):
        def compile_fx(gm, example_inputs):
            compiled_by.append(name)
            return gm.forward
        return compile_fx

    torch._dynamo.reset()
    a = torch.compile(first, backend=backend("first"), dynamic=True)
    b = torch.compile(second, backend=backend("second"), dynamic=True)
    x = torch.randn(3, 8)
    torch.testing.assert_close(a(x), mod(x))
    torch.testing.assert_close(b(x), mod(x))
    with torch._dynamo.config.patch(error_on_recompile=True):
        for m in (5, 7, 3):
            x = torch.randn(m, 8)
            torch.testing.assert_close(a(x), mod(x))
            torch.testing.assert_close(b(x), mod(x))
    assert compiled_by == ["first", "second"]
    torch._dynamo.reset()


def test_ratio_range_pairs_rounds():
    from cutedsl_backend.validation.bench_dynamic import _ratio_range

    assert _ratio_range([2.0, 3.0, 4.0], [1.0, 3.0, 5.0]) == [0.8, 2.0]


def test_compile_phases_are_the_compiles_own():
    """The benches report where each variant's compile time went (Dynamo's and Inductor's own
    phase metrics), counted from before that compile only."""
    import torch
    import torch._dynamo
    from torch._inductor.utils import fresh_cache

    from cutedsl_backend.validation.bench_inductor import _compile_phases, _phase_delta, _phases_text

    torch._dynamo.reset()
    before = _compile_phases()
    with fresh_cache():  # a compile, not a load from an earlier run's cache
        torch.compile(lambda x: (x * 2).relu() + 1)(torch.randn(8))
    phases = _phase_delta(before)
    assert phases and all(t >= 0.01 for t in phases.values())
    assert list(phases.values()) == sorted(phases.values(), reverse=True)
    assert "compile_fx_inner" in phases or "fx_codegen_and_compile" in phases, phases
    assert _phase_delta(_compile_phases()) == {}  # nothing compiled since
    assert _phases_text({}) == "none recorded"
    torch._dynamo.reset()


def test_dynamic_token_counts_are_checked():
    from cutedsl_backend.validation.bench_dynamic import token_counts_of

    assert token_counts_of("16,48,512", 4096, 14336) == (16, 48, 512)
    for bad, rule in (("x,16", "integers"), ("1,16", "at least 2"), ("4096,16", "differ from d")):
        with pytest.raises(ValueError, match=rule):
            token_counts_of(bad, 4096, 14336)


def test_kernels_per_call_averages_each_kernel_over_the_calls(monkeypatch):
    """The bench's kernel breakdown (bench-inductor --kernels, --isolated, --dynamic): per kernel
    name, launches and device microseconds per call, slowest first; host-side events left out."""
    import types

    import torch

    from cutedsl_backend.validation import bench

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    calls = []

    def event(name, us, device=cuda):
        return types.SimpleNamespace(name=name, device_time_total=us, device_type=device)

    class FakeProfile:
        def __init__(self, activities):
            self.activities = activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            per_call = [event("gemm", 40.0), event("silu_mul", 5.0), event("silu_mul", 5.0), event("launch", 9.0, cpu)]
            return [e for _ in calls for e in per_call]

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    got = bench.kernels_per_call(lambda: calls.append(1), calls=4)
    assert len(calls) == 4
    assert got == [{"name": "gemm", "launches": 1.0, "us": 40.0}, {"name": "silu_mul", "launches": 2.0, "us": 10.0}]
    assert bench.kernels_text(got) == "kernels per call (sum 50.0 us): 40.0 us gemm; 10.0 us silu_mul (x2)"


def test_block_summary_sets_the_timed_and_the_gpu_time_ratios_against_the_baselines_mean():
    """--isolated's summary: each row's timed call, compile and kernels' GPU time against the mean
    of the block's aten+triton rows, and each variant's median over the rounds. The timed call
    holds a host share the kernels do not, so the two ratios differ; both are reported."""
    from cutedsl_backend.validation.bench_inductor import block_summary

    def row(variant, ms, compile_s, *kernel_us):
        return {"variant": variant, "ms": ms, "compile_s": compile_s,
                "kernels": [{"name": f"k{i}", "launches": 1, "us": us} for i, us in enumerate(kernel_us)]}

    rows = [row("aten+triton", 2.2, 13.0, 1200.0, 580.0, 120.0), row("cutedsl cold", 2.1, 10.0, 1220.0, 600.0),
            row("cutedsl warm", 2.12, 9.0, 1225.0, 600.0), row("aten+triton", 2.1, 12.0, 1200.0, 580.0, 140.0)]
    lines = block_summary("swiglu", rows, medians=True)
    assert rows[1]["speedup_vs_aten_triton"] == pytest.approx(2.15 / 2.1)
    assert rows[1]["gpu_us"] == 1820.0 and rows[1]["gpu_speedup_vs_aten_triton"] == pytest.approx(1910.0 / 1820.0)
    assert rows[0]["gpu_speedup_vs_aten_triton"] == pytest.approx(1910.0 / 1900.0)
    assert rows[2]["compile_ratio_vs_aten_triton"] == pytest.approx(9.0 / 12.5)
    assert any("GPU 1820.0 us (1.049x)" in line for line in lines)
    median = next(line for line in lines if "cutedsl cold" in line and "median of 1" in line)
    assert "1.024x block" in median and "1.049x GPU time" in median
    # rows without kernels (--kernels off): no GPU-time ratio, the timed call's as before
    bare = [{k: r[k] for k in ("variant", "ms", "compile_s")} for r in rows]
    lines = block_summary("swiglu", bare)
    assert not any("GPU" in line or "back to back" in line for line in lines) and "gpu_us" not in bare[1]
    # rows timed back to back too: that ratio against the baselines' mean as well
    looped = [dict(r, loop_ms=ms) for r, ms in zip(bare, (2.0, 1.9, 1.92, 1.96))]
    lines = block_summary("swiglu", looped, medians=True)
    assert looped[1]["loop_speedup_vs_aten_triton"] == pytest.approx(1.98 / 1.9)
    assert any("back to back 1.9000 ms (1.042x)" in line for line in lines)
    assert any("median of 1" in line and "1.042x back to back" in line for line in lines)
    assert block_summary("swiglu", bare[1:3]) == []  # no baseline: nothing to compare with
