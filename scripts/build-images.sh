#!/usr/bin/env bash
# Build the systemd test-host images the molecule scenarios run on:
#   localhost/testhost:debian12  (bookworm)
#   localhost/testhost:debian13  (trixie)
# No registry is reachable from CI, so each image is a Debian minbase rootfs made
# with mmdebstrap and imported with `podman import`.
#
# Cache: every image carries the label testhost.inputs = sha256 of this script
# plus the suite and mirror it was built from. An image whose label matches is
# kept; anything else is rebuilt. FORCE=1 rebuilds unconditionally.
#
# Usage: scripts/build-images.sh [debian12|debian13 ...]   (default: both)
# Env:   MIRROR (default http://deb.debian.org/debian),
#        SECURITY_MIRROR (default http://deb.debian.org/debian-security), FORCE=1.
set -euo pipefail

SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
readonly SCRIPT_PATH
readonly IMAGE_REPO="localhost/testhost"
readonly LABEL_KEY="testhost.inputs"
readonly MIRROR="${MIRROR:-http://deb.debian.org/debian}"
readonly SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
readonly COMPONENTS="main contrib non-free non-free-firmware"

# What Ansible and the tests need, and nothing more: systemd as PID 1, python3
# (+ python3-apt for ansible.builtin.apt), dbus for systemctl, cron as a
# harmless service to manage, ca-certificates for HTTPS, iproute2 for `ip`
# (network facts), procps for `ps` (testinfra process checks).
readonly PACKAGES="systemd,systemd-sysv,dbus,python3,python3-apt,cron,ca-certificates,iproute2,procps"

# Units that cannot work in a container and would leave
# `systemctl is-system-running` at "degraded":
#   systemd-modules-load.service: no kernel modules can be loaded (fails on trixie).
readonly MASKED_UNITS="systemd-modules-load.service"

declare -A SUITES=([debian12]=bookworm [debian13]=trixie)

log() { printf '[build-images] %s\n' "$*"; }
die() { printf '[build-images] ERROR: %s\n' "$*" >&2; exit 1; }

[[ ${EUID} -eq 0 ]] || die "must run as root (mmdebstrap root mode, rootful podman)"
for tool in mmdebstrap podman sha256sum; do
  command -v "${tool}" >/dev/null || die "${tool} not found: run scripts/setup.sh first"
done

WORKDIR="$(mktemp -d "${TMPDIR:-/var/tmp}/testhost-build.XXXXXX")"
readonly WORKDIR
trap 'rm -rf -- "${WORKDIR}"' EXIT

inputs_hash() {
  local suite=$1
  { cat "${SCRIPT_PATH}"; printf '%s\n' "${suite}" "${MIRROR}" "${SECURITY_MIRROR}"; } \
    | sha256sum | cut -d' ' -f1
}

build_image() {
  local tag=$1
  local suite=${SUITES[${tag}]} image="${IMAGE_REPO}:${tag}"
  local hash current old_id tarball="${WORKDIR}/${tag}.tar" start=${SECONDS}
  hash="$(inputs_hash "${suite}")"
  current="$(podman image inspect --format "{{ index .Labels \"${LABEL_KEY}\" }}" "${image}" 2>/dev/null || true)"
  if [[ "${FORCE:-0}" != 1 && "${current}" == "${hash}" ]]; then
    log "${image} is up to date (${LABEL_KEY}=${hash:0:12}), skipping"
    return
  fi
  old_id="$(podman image inspect --format '{{.Id}}' "${image}" 2>/dev/null || true)"

  log "building ${image} from ${suite} (${MIRROR})"
  local mask_hook="" unit
  for unit in ${MASKED_UNITS}; do
    mask_hook+="ln -sf /dev/null \"\$1/etc/systemd/system/${unit}\"; "
  done
  # --skip=cleanup/apt/lists keeps the package lists, as on a real host: with
  # them removed, /var/lib/apt/lists still has a fresh mtime, so ansible's
  # `apt: cache_valid_time=...` skips the update and then finds no packages.
  mmdebstrap --variant=minbase --include="${PACKAGES}" --quiet \
    --skip=cleanup/apt/lists \
    --customize-hook="${mask_hook}" \
    "${suite}" "${tarball}" \
    "deb ${MIRROR} ${suite} ${COMPONENTS}" \
    "deb ${MIRROR} ${suite}-updates ${COMPONENTS}" \
    "deb ${SECURITY_MIRROR} ${suite}-security ${COMPONENTS}" \
    || die "mmdebstrap ${suite} failed"

  podman import --quiet \
    --change 'CMD ["/sbin/init"]' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL ${LABEL_KEY}=${hash}" \
    --message "testhost ${suite} (scripts/build-images.sh)" \
    "${tarball}" "${image}" >/dev/null || die "podman import ${image} failed"
  rm -f -- "${tarball}"

  # Drop the image this one replaces (still used by a container: keep it).
  if [[ -n "${old_id}" && "${old_id}" != "$(podman image inspect --format '{{.Id}}' "${image}")" ]]; then
    podman rmi "${old_id}" >/dev/null 2>&1 || true
  fi
  log "built ${image} in $((SECONDS - start)) s ($(podman image inspect --format '{{.Size}}' "${image}") bytes)"
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(debian12 debian13)
for target in "${targets[@]}"; do
  [[ -n "${SUITES[${target}]:-}" ]] || die "unknown image '${target}' (known: ${!SUITES[*]})"
done

# The builds are mostly downloads and disk writes: running them side by side
# takes ~40 s instead of ~60 s on 2 cores.
total=${SECONDS}
pids=()
for target in "${targets[@]}"; do
  build_image "${target}" &
  pids+=("$!")
done
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[${i}]}" || failed+=("${targets[${i}]}")
done
[[ ${#failed[@]} -eq 0 ]] || die "building ${failed[*]} failed (see the messages above)"
log "done in $((SECONDS - total)) s"
