#!/usr/bin/env bash
# The fused-epilogue work's device call: its GPU tests, the config sweep and the benchmark
# against cuBLAS / cuBLASLt / eager / torch.compile. On the device machine, from the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-epilogue.sh [tests|sweep|bench ...]
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
parts=${*:-tests sweep bench}
step() { echo "=== $1"; shift; timeout "$@"; echo "=== rc=$?"; }
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  for p in $parts; do case $p in
    tests) step "epilogue tests" 200 python3 -m pytest tests/gpu/test_epilogue_sm90.py tests/gpu/test_scaled_mm_sm90.py \
             -n 8 -q -rs -p no:cacheprovider ;;
    sweep) step "sweep-epilogue" 200 python3 -m cutedsl_backend sweep-epilogue --variants "${SWEEP_VARIANTS:-bare,residual}" --json "$out/sweep-epilogue.json" ;;
    bench) step "bench-epilogue" 200 python3 -m cutedsl_backend bench-epilogue --json "$out/bench-epilogue.json" ;;
    fp8) step "bench-fp8" 150 python3 -m cutedsl_backend bench-fp8 --shapes prefill --json "$out/bench-fp8.json" ;;
  esac; done
} 2>&1 | grep -v "DeprecationWarning\|warnings.warn" | tee "$out/epilogue.log"
