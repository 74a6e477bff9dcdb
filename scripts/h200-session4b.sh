#!/usr/bin/env bash
# Session 4's last device call (after the runner and op-registration fixes, the residual taking the
# cooperative default): A/B, bench-epilogue, the standard report through nox, the GPU suite, and
# bench-inductor --isolated on the attention out-projection. From the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-session4b.sh
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() { echo "=== $1"; shift; timeout "$@"; echo "=== rc=$?"; }
{
  step "residual A/B" 60 python3 scripts/epilogue_ab.py 3
  step "bench-epilogue" 130 python3 -m cutedsl_backend bench-epilogue --json "$out/bench-epilogue.json"
  step "nox validate (standard)" 120 env CUTEDSL_NOX_SYSTEM=1 nox --no-venv -s validate -- --tag standard --out "$out/reports"
  step "gpu tests" 140 python3 -m pytest tests/gpu -n 12 -q -rs -p no:cacheprovider --junitxml="$out/gpu-tests.xml"
  step "bench-inductor" 100 python3 -m cutedsl_backend bench-inductor --isolated --blocks attn_out_proj --json "$out/bench-inductor-outproj.json"
} 2>&1 | grep -v "DeprecationWarning\|warnings.warn\|select_algorithm.py:[0-9]*\]\|triton_mm\|^  [a-z_]* [0-9.]* ms\|^strides:\|^dtypes:\|Autotune Choices\|num_choices\|AUTOTUNE \|TypedStorage\|current_out_size\|pytest_benchmark\|bringing up\|^\[compile\]\|^\[gpu\]" > "$out/session4b.log"
cp "$out"/reports/*/summary.md "$out"/reports/*/report.json "$out/" 2>/dev/null
