"""The benchmarks' alternated timing and the power readings beside it (no GPU: the timer and the
readers are replaced)."""

import itertools
import time

import pytest

from cutedsl_backend.validation import bench, power


@pytest.fixture
def fake_timer(monkeypatch):
    """_graph_ms returns the next value of a per-function script and logs the call order."""
    calls = []

    def graph_ms(fn):
        calls.append(fn.__name__)
        return fn()
    monkeypatch.setattr(bench, "_graph_ms", graph_ms)
    return calls


def scripted(name, values):
    it = iter(values)

    def fn():
        return next(it)
    fn.__name__ = name
    return fn


def test_alternation_order_medians_and_round_ratios(fake_timer):
    # the peer's second round ran on a slow clock: both sides slowed in that round
    ours = scripted("ours", [1.0, 1.5, 1.02])
    peer = scripted("peer", [0.99, 1.49, 1.03])
    timed = bench.alternated_graph_ms({"ours": ours, "peer": peer}, rounds=3)
    assert fake_timer == ["ours", "peer"] * 3
    assert timed["ours"]["runs"] == [1.0, 1.5, 1.02] and timed["ours"]["ms"] == 1.02
    assert timed["peer"]["ms"] == 1.03
    # per-round ratios 0.99, 0.9933, 1.0098 -> median 0.9933 (not 1.03 / 1.02 of the medians)
    assert bench.round_ratio(timed, "peer", "ours") == pytest.approx(1.49 / 1.5)
    assert "sm_mhz" not in timed["ours"]  # no sampler, no readings


class FakeSampler:
    """A sampler whose samples the test's timer appends (one per timing)."""

    def __init__(self):
        self.samples = []

    def __enter__(self):
        self.samples = []
        return self

    def __exit__(self, *exc):
        pass


def test_readings_are_kept_per_function(fake_timer, monkeypatch):
    sampler = FakeSampler()
    readings = itertools.cycle([(1400, 690.0, 0x4), (1500, 650.0, 0x0)])

    def graph_ms(fn):
        sampler.samples.append(next(readings))
        return fn()
    monkeypatch.setattr(bench, "_graph_ms", graph_ms)
    timed = bench.alternated_graph_ms({"ours": scripted("ours", [1, 1]), "peer": scripted("peer", [2, 2])},
                                      rounds=2, sampler=sampler)
    assert timed["ours"]["sm_mhz"] == 1400 and timed["ours"]["power_w"] == 690.0
    assert timed["ours"]["throttle"] == ["sw_power_cap"]
    assert timed["peer"]["sm_mhz"] == 1500 and timed["peer"]["throttle"] == []


def test_summarize_and_utilisation():
    assert power.summarize([]) == {}
    s = power.summarize([(1400, 690.0, 0x4), (1480, 692.0, 0x1), (1450, 691.0, 0x0)])
    assert s == {"sm_mhz": 1450, "power_w": 691.0, "throttle": ["idle", "sw_power_cap"]}
    # 132 SMs x 4096 FLOP/clk x 1.83 GHz is the H100/H200 dense bf16 rate (989 TFLOP/s)
    assert power.tensor_utilisation(989.4, 1830, 132, "16bit") == pytest.approx(1.0, rel=1e-3)
    assert power.tensor_utilisation(989.4, 1830, 132, "fp8") == pytest.approx(0.5, rel=1e-3)


def test_sampler_without_a_reader_yields_no_samples(monkeypatch):
    def no_reader(index):
        raise RuntimeError("no NVML here")
    monkeypatch.setattr(power, "_nvml_reader", no_reader)
    monkeypatch.setattr(power, "_smi_reader", no_reader)
    sampler = power.PowerSampler(0, interval=0.001)
    assert sampler.source is None
    with sampler:
        pass
    assert sampler.samples == []


def test_sampler_thread_reads_until_exit(monkeypatch):
    values = itertools.count()
    monkeypatch.setattr(power, "_nvml_reader", lambda index: lambda: (next(values), 100.0, 0))
    sampler = power.PowerSampler(0, interval=0.001)
    assert sampler.source == "nvml"
    deadline = time.monotonic() + 10
    with sampler:
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
    n = len(sampler.samples)
    assert n >= 3 and sampler._thread is None  # joined on exit: no more samples after it
    assert len(sampler.samples) == n


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduced_precision_switch_is_set_inside_and_restored_after(dtype):
    """probe-peer's switch of torch's reduced-precision reductions: set for the call it wraps and
    back as it was afterwards, also when the call raises."""
    import torch

    from cutedsl_backend.validation.probes import REDUCED_PRECISION_FLAGS, _reduced_precision

    flags = torch.backends.cuda.matmul  # torch's own settings object (properties, not attributes)
    name = REDUCED_PRECISION_FLAGS[dtype]
    full = getattr(torch._C, f"_get_cublas_{name}", None)
    before = full() if full is not None else getattr(flags, name)
    try:
        setattr(flags, name, True)
        with _reduced_precision(dtype, False):
            assert getattr(flags, name) is False
        assert getattr(flags, name) is True
        with pytest.raises(RuntimeError), _reduced_precision(dtype, False):
            raise RuntimeError("the call failed")
        assert getattr(flags, name) is True
        if full is not None:  # torch >= 2.10: (reduced precision, split-K), both restored
            setattr(flags, name, (False, False))
            with _reduced_precision(dtype, True):
                assert full() == (True, True)
            assert full() == (False, False)
    finally:
        setattr(flags, name, before)


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "128x4096"], "--shapes"), (["--shapes", "0x8x8"], "--shapes"), (["--shapes", "ax8x8"], "--shapes"),
    (["--dtypes", "float32"], "--dtypes"), (["--dtypes", ""], "--dtypes")])
def test_probe_peer_refuses_bad_arguments_by_name(monkeypatch, capsys, argv, message):
    import torch

    from cutedsl_backend.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(SystemExit) as exit_:
        main(["probe-peer", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
