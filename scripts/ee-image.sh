#!/usr/bin/env bash
# Build the execution environment (execution-environment.yml) with podman on a base that needs
# no registry, the Debian 13 test image (python3 3.13, no pip: the EE's first step installs
# Debian's python3-pip), and run a playbook inside it against inventories/local, with this
# checkout mounted read-only as the project (as AWX mounts a synced project at /runner/project).
#
#   scripts/ee-image.sh [PLAYBOOK]   (make ee-image; default playbooks/plan.yml; the FQCN form
#                                     vllm_fleet.serving.plan runs the installed collection's)
# Env: EE_BASE_IMAGE (default localhost/testhost:debian13, from scripts/build-images.sh),
#      EE_PYCMD (its Python, default /usr/bin/python3), EE_IMAGE (the tag, default
#      localhost/vllm-fleet-ee:ci), EE_CA_BUNDLE (a CA bundle the build's pip and apt trust,
#      for a TLS-intercepting proxy; default the host's, when there is one),
#      EE_PODMAN_ARGS (default: nofile/nproc ulimits a rootful podman here needs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PLAYBOOK="${1:-playbooks/plan.yml}"
BASE="${EE_BASE_IMAGE:-localhost/testhost:debian13}"
PYCMD="${EE_PYCMD:-/usr/bin/python3}"
IMAGE="${EE_IMAGE:-localhost/vllm-fleet-ee:ci}"
CA_BUNDLE="${EE_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
read -r -a PODMAN_ARGS <<< "${EE_PODMAN_ARGS:---ulimit nofile=4096:4096 --ulimit nproc=4096:4096}"
CONTEXT=build/ee/context
log() { printf '[ee-image] %s\n' "$*"; }

podman image exists "${BASE}" || {
  echo "[ee-image] ERROR: base image ${BASE} not found. Fix: scripts/build-images.sh debian13 (root), or set EE_BASE_IMAGE" >&2
  exit 1
}
start=${SECONDS}
python3 scripts/ee.py check --context "${CONTEXT}"

build_mounts=()
if [[ -n "${CA_BUNDLE}" && -f "${CA_BUNDLE}" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf -- "${tmp}"' EXIT
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "${tmp}/pip.conf"
  build_mounts=(-v "$(realpath "${CA_BUNDLE}"):/etc/ssl/certs/ca-certificates.crt:ro"
                -v "${tmp}/pip.conf:/etc/pip.conf:ro")
fi
log "building ${IMAGE} from ${BASE} (${PYCMD})"
podman build "${PODMAN_ARGS[@]}" "${build_mounts[@]}" \
  --build-arg "EE_BASE_IMAGE=${BASE}" --build-arg "PYCMD=${PYCMD}" \
  -f "${CONTEXT}/Containerfile" -t "${IMAGE}" "${CONTEXT}"
log "built ${IMAGE} in $((SECONDS - start)) s"

run=${SECONDS}
podman run --rm "${PODMAN_ARGS[@]}" -v "${PWD}:/runner/project:ro" -w /runner/project \
  "${IMAGE}" bash -c '
    set -euo pipefail
    ansible-playbook --version | head -n 1
    python3 --version
    ansible-galaxy collection list vllm_fleet.serving | grep -E "^vllm_fleet\.serving "
    exec ansible-playbook -i inventories/local "$1"' ee-run "${PLAYBOOK}"
log "${PLAYBOOK} ran in the image in $((SECONDS - run)) s (all: $((SECONDS - start)) s)"
