"""The fused autotune's device timing (cutedsl_backend.inductor.device_timing) on the CPU: where it
is installed, what it runs, and that a failure falls back to Inductor's timing with a warning.
The timing itself (queued behind a GPU sleep) runs in tests/gpu."""

import logging

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend.inductor as cbi  # noqa: E402
from cutedsl_backend.inductor import device_timing  # noqa: E402


class FakeChoice:
    name = "fake_choice"

    def __init__(self, ms=1.5):
        self.ms = ms
        self.inductor_calls = 0

    def benchmark(self, *args, out):
        self.inductor_calls += 1
        return self.ms


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
    from cutedsl_backend import compiler

    compiler.STORE.events.clear()
    assert choice.benchmark(x, x, out=out) == 0.25
    assert choice.inductor_calls == 0
    assert seen == ["cfg_x", "cfg_x"]  # once for the output check, once timed
    # bench-inductor's timeline shows each benchmark's start and end
    assert [(e[1], e[2]) for e in compiler.STORE.events] == [("benchmark starts", "fake_choice"),
                                                       ("benchmark done (0.2500 ms)", "fake_choice")]
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

    from cutedsl_backend import compiler

    sub = Subgraph()
    assert device_timing.install_on_subgraph(sub) is None
    compiler.STORE.events.clear()
    assert sub.benchmark("a", "b", out=None) == 0.5
    assert sub.benchmark("a", "b", out=None) == 0.5
    assert sub.compiles == 1 and calls == [[7, "a", "b"]] * 4
    assert [e[1] for e in compiler.STORE.events].count("subgraph compiled") == 1  # said only when it compiled


def test_subgraph_without_the_pieces_is_left_alone():
    choice = FakeChoice()
    why = device_timing.install_on_subgraph(choice)
    assert "_compile_for_benchmarking" in why and "sym_input_values" in why
    assert not hasattr(choice, "cutedsl_device_timed")
    assert choice.benchmark(out=None) == 1.5


class _FakeCuda:
    """Stands in for torch.cuda in _queued_times: the gate event answers from a script (True:
    the sleep already ended when the last iteration was queued)."""

    def __init__(self, gate_answers):
        self.gate_answers = list(gate_answers)
        self.sleeps = []

    def _sleep(self, cycles):
        self.sleeps.append(cycles)

    def synchronize(self):
        pass

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        fake = self

        class Ev:
            def record(self):
                pass

            def query(self):
                return fake.gate_answers.pop(0)

            def elapsed_time(self, other):
                return 0.2

        return Ev()


class _Flush:
    def zero_(self):
        pass


def _queued(monkeypatch, gate_answers, iters=10, host_ms=0.1):
    fake = _FakeCuda(gate_answers)
    monkeypatch.setattr(torch, "cuda", fake)
    monkeypatch.setattr(device_timing, "_cycles_per_ms", lambda: 1000.0)
    calls = []
    times, _ = device_timing._queued_times(lambda: calls.append(1), _Flush(), iters, host_ms)
    return fake, calls, times


def test_queued_in_time_takes_one_pass(monkeypatch):
    before = cbi.stats()["sleep_outrun"]
    fake, calls, times = _queued(monkeypatch, [False])  # the GPU still sleeps: all queued behind it
    assert len(fake.sleeps) == 1 and len(calls) == 10 and times == [0.2] * 10
    assert fake.sleeps[0] == 2.0 * 1000  # the 2 ms floor: 1.5 x 10 x 0.1 ms is less
    assert cbi.stats()["sleep_outrun"] == before


def test_outrun_sleep_is_retried_longer_then_counted(monkeypatch, caplog):
    before = cbi.stats()["sleep_outrun"]
    fake, calls, _ = _queued(monkeypatch, [True, False])
    assert len(fake.sleeps) == 2 and fake.sleeps[1] > fake.sleeps[0] and len(calls) == 20
    assert cbi.stats()["sleep_outrun"] == before
    with caplog.at_level(logging.WARNING, logger="cutedsl_backend.inductor"):
        fake, _, _ = _queued(monkeypatch, [True, True])
    assert len(fake.sleeps) == 2 and cbi.stats()["sleep_outrun"] == before + 1
    assert "may include host time" in caplog.text


def test_sleeps_are_capped_and_slow_hosts_get_fewer_iterations(monkeypatch):
    fake, calls, _ = _queued(monkeypatch, [True, True], iters=100, host_ms=50.0)
    cap = device_timing.MAX_SLEEP_MS * 1000.0
    assert all(c <= cap for c in fake.sleeps)
    assert len(calls) == 2 * int(device_timing.MAX_SLEEP_MS / (1.5 * 50.0))  # 13 a pass, not 100


def test_subgraph_compile_errors_are_its_own(monkeypatch):
    """A subgraph that fails to compile fails as under Inductor's timing, not as a timing fallback."""
    class Broken(FakeChoice):
        _compiled_module = None
        sym_input_values = []

        def _compile_for_benchmarking(self):
            raise ValueError("lowering failed")

    sub = Broken()
    before = cbi.stats()
    device_timing.install_on_subgraph(sub)
    with pytest.raises(ValueError, match="lowering failed"):
        sub.benchmark(torch.ones(1), out=None)
    assert cbi.stats() == before and sub.inductor_calls == 0
