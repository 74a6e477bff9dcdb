#!/usr/bin/env bash
# Session 4's second device call: residual config A/B, the standard validation report through
# nox, the whole GPU suite, then bench-inductor --isolated. From the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-session4.sh
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
step() { echo "=== $1"; shift; timeout "$@"; echo "=== rc=$?"; }
{
  step "residual A/B" 90 python3 scripts/epilogue_ab.py 5
  step "nox validate (standard)" 150 env CUTEDSL_NOX_SYSTEM=1 nox --no-venv -s validate -- --tag standard --out "$out/reports"
  step "gpu tests" 170 python3 -m pytest tests/gpu -n 12 -q -rs -p no:cacheprovider --junitxml="$out/gpu-tests.xml"
  step "bench-inductor" 160 python3 -m cutedsl_backend bench-inductor --isolated --blocks mlp,attn_out_proj --json "$out/bench-inductor.json"
} 2>&1 | grep -v "DeprecationWarning\|warnings.warn\|select_algorithm.py:[0-9]*\]\|triton_mm\|^  [a-z_]* [0-9.]* ms\|^strides:\|^dtypes:\|Autotune Choices\|num_choices\|AUTOTUNE \|TypedStorage\|current_out_size" > "$out/session4.log"
cp "$out"/reports/*/summary.md "$out/" 2>/dev/null
