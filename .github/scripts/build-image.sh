#!/usr/bin/env bash
# Build one container image (KIND: cpu or gpu, from docker/Dockerfile.$KIND), tag it by commit
# (sha-<commit>) and by the hash of its inputs (inputs-<hash>: what the GPU workflows resolve to a
# digest), push both to IMAGE (the repository's registry), and record the digest in
# digests/<kind>.txt and the step summary. Env: IMAGE, KIND, SHA, INPUTS, REGISTRY_TOKEN, ACTOR.
set -euo pipefail
image="$(echo "${IMAGE}" | tr '[:upper:]' '[:lower:]')"
inputs="${INPUTS:0:16}"
echo "${REGISTRY_TOKEN}" | docker login ghcr.io -u "${ACTOR}" --password-stdin
docker build -f "docker/Dockerfile.${KIND}" -t "${image}:sha-${SHA}" -t "${image}:inputs-${inputs}" .
docker push "${image}:sha-${SHA}"
docker push "${image}:inputs-${inputs}"
digest="$(docker inspect --format '{{index .RepoDigests 0}}' "${image}:sha-${SHA}")"
mkdir -p digests
echo "${digest}" > "digests/${KIND}.txt"
echo "- ${KIND} image: \`${digest}\` (inputs-${inputs})" >> "${GITHUB_STEP_SUMMARY:-/dev/null}"
