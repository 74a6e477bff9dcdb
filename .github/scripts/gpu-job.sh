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
# set. GPU_JOB_STEPS (unset or empty: "tests,validate") runs one part alone: "tests" (the nox sessions) or
# "validate" (the validation run), e.g. to split the job over two time-limited GPU leases.
# Exit status: non-zero if any step failed.
set -uo pipefail
arch="${1:?usage: gpu-job.sh ARCH [SESSION]}"
session="${2:-}"
tag="${TAG:-standard}"
cd "$(dirname "$0")/../.."
export CUTEDSL_NOX_SYSTEM=1
steps="${GPU_JOB_STEPS:-tests,validate}"
IFS=, read -ra wanted <<< "${steps}"
for step in "${wanted[@]}"; do
  if [[ "${step}" != tests && "${step}" != validate ]]; then
    echo "gpu-job.sh: GPU_JOB_STEPS=${steps}: each step is tests or validate" >&2
    exit 2
  fi
done
status=0
sessions=()
if [[ ",${steps}," != *,tests,* ]]; then
  :
elif [[ -n "${session}" ]]; then
  sessions=("${session}")
else
  mapfile -t sessions < <(nox -l --json -t gpu | python3 .github/scripts/gpu_matrix.py - --sessions-of "${arch}")
fi
for s in ${sessions[@]+"${sessions[@]}"}; do
  echo "== nox session ${s}"
  nox --no-venv -s "${s}" -- --require-gpu || status=1
done
if [[ ",${steps}," == *,validate,* ]]; then
  echo "== validation run (${arch}, tag ${tag})"
  nox --no-venv -s validate -- --tag "${tag}" --arch "${arch}" --require-gpu || status=1
fi
summary="$(ls -t reports/*/summary.md 2>/dev/null | head -n 1)"
if [[ -n "${summary}" && -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
  cat "${summary}" >> "${GITHUB_STEP_SUMMARY}"
fi
exit "${status}"
