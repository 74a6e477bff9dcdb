#!/usr/bin/env bash
# One device call's worth of GPU work (see /work/.library/device on how it is called): the GPU
# test suite, the standard validation report, and the benchmarks, each against its peer in the
# same process. Usage on the device machine, from the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-perf.sh
# Writes under $OUT (default ./out): logs, report.json/summary.md and the benchmark JSON, plus
# all.tgz with everything.
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out/run"
export PYTHONUNBUFFERED=1
step() { echo "=== $1"; shift; timeout "$@"; echo "=== rc=$?"; }
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  step "gpu tests" 240 python3 -m pytest tests/gpu -n 12 -q -rs -p no:cacheprovider
  step "validate standard" 200 python3 -m cutedsl_backend validate --tag standard --out "$out/run/reports"
  step "bench-epilogue" 240 python3 -m cutedsl_backend bench-epilogue --json "$out/run/bench-epilogue.json"
  step "bench-fp8" 150 python3 -m cutedsl_backend bench-fp8 --shapes prefill --json "$out/run/bench-fp8.json"
  step "bench" 150 python3 -m cutedsl_backend bench --shapes all --json "$out/run/bench-gemm.json"
} 2>&1 | grep -v "DeprecationWarning\|warnings.warn" | tee "$out/all.log"
cp "$out"/run/reports/*/report.json "$out"/run/reports/*/summary.md "$out/" 2>/dev/null
tar -C "$out" -czf "$out/all.tgz" run
