#!/usr/bin/env bash
# The GPU image by digest for this commit's inputs: IMAGE:inputs-<hash of the image's inputs>,
# built by the images workflow (this commit's build, or an earlier one when the inputs did not
# change). Waits up to WAIT_MINUTES for a build still under way. Prints ref=<image>@<digest> for
# $GITHUB_OUTPUT. Env: IMAGE, INPUTS, REGISTRY_TOKEN, ACTOR, WAIT_MINUTES (default 60).
set -euo pipefail
image="$(echo "${IMAGE}" | tr '[:upper:]' '[:lower:]')"
tag="${image}:inputs-${INPUTS:0:16}"
echo "${REGISTRY_TOKEN}" | docker login ghcr.io -u "${ACTOR}" --password-stdin >&2
deadline=$(( $(date +%s) + 60 * ${WAIT_MINUTES:-60} ))
until digest="$(docker buildx imagetools inspect "${tag}" --format '{{json .Manifest.Digest}}' 2>/dev/null)"; do
  if (( $(date +%s) > deadline )); then
    echo "no image ${tag}: the images workflow has not built these inputs" >&2
    exit 1
  fi
  sleep 60
done
echo "ref=${image}@$(echo "${digest}" | tr -d '"')"
