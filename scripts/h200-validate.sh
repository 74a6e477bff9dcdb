#!/usr/bin/env bash
# One device call: the README's main job through nox on the H200 (the image's CUDA torch, the
# carried DSL and nox: `CUTEDSL_NOX_SYSTEM=1 nox --no-venv`), then bench-inductor.
# On the device machine, from the repository root:
#   source .device-carry/on-device.sh && bash scripts/h200-validate.sh
set -uo pipefail
out=${OUT:-out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1 CUTEDSL_NOX_SYSTEM=1
step() { echo "=== $1"; shift; timeout "$@"; echo "=== rc=$?"; }
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  step "nox validate (standard)" "${VALIDATE_S:-280}" nox --no-venv -s validate -- --tag standard --out "$out/reports"
  step "bench-inductor" "${BENCH_S:-200}" python3 -m cutedsl_backend bench-inductor --json "$out/bench-inductor.json"
} 2>&1 | grep -v "DeprecationWarning\|warnings.warn\|select_algorithm.py:[0-9]*\] \[0/0\]" | tee "$out/all.log"
