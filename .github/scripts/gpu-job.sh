#!/usr/bin/env bash
# The GPU job: what the gpu workflow runs on a self-hosted runner, and what anyone runs on a GPU
# host to get the same report (inside the GPU image, or with a CUDA torch plus
# requirements/gpu.txt installed):
#
#   .github/scripts/gpu-job.sh ARCH [SESSION]
#
# ARCH: sm90a or sm100a; SESSION: one GPU nox session (the workflow's matrix entry), default every
# GPU session of ARCH. Then the validation run for ARCH (tag $TAG, default standard) writes
# reports/<run id>/ (report.json, junit.xml, summary.md, report.html). A missing GPU of ARCH is a
# failure here (--require-gpu), never a silent pass. The summary goes to $GITHUB_STEP_SUMMARY when
# set. Exit status: non-zero if any step failed.
set -uo pipefail
arch="${1:?usage: gpu-job.sh ARCH [SESSION]}"
session="${2:-}"
tag="${TAG:-standard}"
cd "$(dirname "$0")/../.."
export CUTEDSL_NOX_SYSTEM=1
status=0
if [[ -n "${session}" ]]; then
  sessions=("${session}")
else
  mapfile -t sessions < <(nox -l --json -t gpu | python3 .github/scripts/gpu_matrix.py - --sessions-of "${arch}")
fi
for s in "${sessions[@]}"; do
  echo "== nox session ${s}"
  nox --no-venv -s "${s}" -- --require-gpu || status=1
done
echo "== validation run (${arch}, tag ${tag})"
nox --no-venv -s validate -- --tag "${tag}" --arch "${arch}" --require-gpu || status=1
summary="$(ls -t reports/*/summary.md 2>/dev/null | head -n 1)"
if [[ -n "${summary}" && -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
  cat "${summary}" >> "${GITHUB_STEP_SUMMARY}"
fi
exit "${status}"
