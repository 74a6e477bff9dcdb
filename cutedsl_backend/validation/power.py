"""The GPU's SM clock, board power and clock-throttle reasons while a benchmark runs.

On the H200 every large GEMM (ours, cuBLAS's, torch._scaled_mm's) runs at the 700 W board limit
with the clock lowered by the power cap, so a kernel's speed is the power budget divided by its
energy per FLOP. Benchmarks record these readings beside their timings so that a ratio can be
read with the clock each side ran at. NVML (pynvml) is used where importable, else one
``nvidia-smi`` query per sample; without either the readings are None.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import threading
import time
from typing import Optional

# NVML clock-throttle reason bits (nvmlClocksThrottleReason*) worth naming
THROTTLE_REASONS = {0x1: "idle", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal",
                    0x40: "hw_thermal", 0x80: "hw_power_brake"}
# Dense tensor-core FLOP per clock per SM on sm90 (the datasheet rates divided by SMs and boost clock)
SM90_FLOP_PER_CLK_PER_SM = {"16bit": 4096, "fp8": 8192}


def _nvml_reader(index: int):
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(index)

    def read():
        return (pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    read()
    return read


def _smi_reader(index: int):
    if not shutil.which("nvidia-smi"):
        raise RuntimeError("no nvidia-smi")

    def read():
        q = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=clocks.sm,power.draw,"
                            "clocks_throttle_reasons.active", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=5).stdout
        clk, watts, reasons = (x.strip() for x in q.split(","))
        return int(clk), float(watts), int(reasons, 16)
    read()
    return read


class PowerSampler:
    """Context manager sampling (SM MHz, watts, throttle bits) every ``interval`` seconds in a
    thread into ``samples`` (cleared on entry). ``source`` is "nvml", "nvidia-smi" or None
    (nothing to read: no samples)."""

    def __init__(self, index: int = 0, interval: float = 0.02):
        self.interval, self.samples, self.source, self._read = interval, [], None, None
        for source, make in (("nvml", _nvml_reader), ("nvidia-smi", _smi_reader)):
            try:
                self._read, self.source = make(index), source
                break
            except Exception:  # try the next source; none: no readings
                continue
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self):
        self.samples = []
        if self._read is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append(self._read())
            time.sleep(self.interval)

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


def summarize(samples: list) -> dict:
    """Median SM clock and power, and the throttle reasons seen, over PowerSampler samples
    (empty without samples)."""
    if not samples:
        return {}
    bits = 0
    for s in samples:
        bits |= s[2]
    return {"sm_mhz": statistics.median(s[0] for s in samples),
            "power_w": round(statistics.median(s[1] for s in samples), 1),
            "throttle": [name for bit, name in THROTTLE_REASONS.items() if bits & bit]}


def tensor_utilisation(tflops: float, sm_mhz: float, sms: int, operands: str) -> float:
    """Achieved TFLOP/s over the dense tensor-core rate at the clock measured (sm90)."""
    return tflops * 1e12 / (sms * SM90_FLOP_PER_CLK_PER_SM[operands] * sm_mhz * 1e6)
