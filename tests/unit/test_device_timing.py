"""The fused autotune's device timing (cutedsl_backend.inductor.device_timing) on the CPU: where it
is installed, what it runs, and that a failure falls back to Inductor's timing with a warning.
The timing itself (queued behind a GPU sleep) runs in tests/gpu."""

import logging

import pytest

torch = pytest.importorskip("torch")

from cutedsl_backend.inductor import device_timing  # noqa: E402


class FakeChoice:
    name = "fake_choice"

    def __init__(self, ms=1.5):
        self.ms = ms
        self.inductor_calls = 0

    def benchmark(self, *args, out):
        self.inductor_calls += 1
        return self.ms


def test_env_switch(monkeypatch):
    monkeypatch.delenv("CUTEDSL_FUSED_TIMING", raising=False)
    assert device_timing.enabled()
    monkeypatch.setenv("CUTEDSL_FUSED_TIMING", "inductor")
    assert not device_timing.enabled()


def test_timing_failure_falls_back_to_inductor_timing_and_says_so(monkeypatch, caplog):
    def no_gpu(fn, **kw):
        raise RuntimeError("no GPU here")

    monkeypatch.setattr(device_timing, "device_ms_per_call", no_gpu)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    choice = FakeChoice(ms=1.5)
    x = torch.randn(4, 4)
    device_timing.install_on_ours(choice, lambda a, b, **kw: a @ b, {})
    out = torch.full((4, 4), float("nan"))
    with caplog.at_level(logging.WARNING, logger="cutedsl_backend.inductor"):
        assert choice.benchmark(x, x, out=out) == 1.5
    assert choice.inductor_calls == 1 and choice.cutedsl_device_timed
    assert "could not be timed on the device" in caplog.text and "fake_choice" in caplog.text
    torch.testing.assert_close(out, x @ x)  # our result still reaches Inductor's output buffer


def test_ours_timed_through_the_device_timer_with_the_bound_kwargs(monkeypatch):
    seen = []

    def fake_timer(fn, **kw):
        fn()
        return 0.25

    monkeypatch.setattr(device_timing, "device_ms_per_call", fake_timer)
    choice = FakeChoice()

    def op(a, b, *, kernel_config=""):
        seen.append(kernel_config)
        return a + b

    device_timing.install_on_ours(choice, op, {"kernel_config": "cfg_x"})
    x = torch.ones(2, 2)
    out = torch.empty(2, 2)
    assert choice.benchmark(x, x, out=out) == 0.25
    assert choice.inductor_calls == 0
    assert seen == ["cfg_x", "cfg_x"]  # once for the output check, once timed
    torch.testing.assert_close(out, x + x)
    assert choice.benchmark(x, x, out=torch.empty(0)) == 0.0  # nothing to time


def test_subgraph_compiled_once_and_called_with_its_symbols_first(monkeypatch):
    monkeypatch.setattr(device_timing, "device_ms_per_call", lambda fn, **kw: (fn(), fn(), 0.5)[-1])
    calls = []

    class Module:
        def call(self, args):
            calls.append(list(args))
            args.clear()  # Inductor's generated call() empties its list
            return [None]

    class Subgraph(FakeChoice):
        _compiled_module = None
        sym_input_values = [7]
        compiles = 0

        def _compile_for_benchmarking(self):
            self.compiles += 1
            return Module()

    sub = Subgraph()
    assert device_timing.install_on_subgraph(sub) is None
    assert sub.benchmark("a", "b", out=None) == 0.5
    assert sub.compiles == 1 and calls == [[7, "a", "b"], [7, "a", "b"]]


def test_subgraph_without_the_pieces_is_left_alone():
    choice = FakeChoice()
    why = device_timing.install_on_subgraph(choice)
    assert "_compile_for_benchmarking" in why and "sym_input_values" in why
    assert not hasattr(choice, "cutedsl_device_timed")
    assert choice.benchmark(out=None) == 1.5
