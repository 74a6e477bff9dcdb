#!/usr/bin/env bash
# One device call: the GPU test suite (kernels, epilogues, FP8, the Inductor integration), then
# bench-inductor (blocks under torch.compile max-autotune with and without our candidates).
# On the device machine, from the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-inductor.sh [pytest -k expression]
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 CUTEDSL_INDUCTOR_WINNERS="$out/inductor-winners.jsonl"
step() { echo "=== $1"; shift; timeout "$@"; echo "=== rc=$?"; }
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  step "gpu tests" "${GPU_TESTS_S:-330}" python3 -m pytest tests/gpu -n "${WORKERS:-12}" -q -rs -p no:cacheprovider \
       ${1:+-k "$1"} --junitxml="$out/gpu-tests.xml"
  step "bench-inductor" "${BENCH_S:-230}" python3 -m cutedsl_backend bench-inductor --json "$out/bench-inductor.json"
} 2>&1 | grep -v "DeprecationWarning\|warnings.warn" | tee "$out/all.log"
