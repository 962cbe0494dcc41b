#!/usr/bin/env bash
# Prepare a Debian 12 machine (run as root) for this project's tests:
#   - apt packages: podman + runc (container test hosts), mmdebstrap (image builds),
#     prometheus (promtool), prometheus-alertmanager (amtool), python3-venv;
#   - /etc/containers/containers.conf: [engine] runtime = "runc" (crun fails on
#     cgroups v1 "hybrid" hosts), merged into an existing file;
#   - .venv with the pinned tooling from requirements-dev.txt.
# Idempotent: every step checks whether it is already done, so a second run
# takes about a second.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly VENV="${REPO_ROOT}/.venv"
readonly REQUIREMENTS="${REPO_ROOT}/requirements-dev.txt"
readonly VENV_STAMP="${VENV}/.setup-stamp"
readonly CONTAINERS_CONF="/etc/containers/containers.conf"

# Rootful podman only: uidmap, slirp4netns and fuse-overlayfs serve rootless
# podman, so they are left out (--no-install-recommends). netavark and
# aardvark-dns are the network stack podman 4.3 uses by default; netavark
# only recommends iptables, yet fails every bridged `podman run` without it
# ("netavark: No such file or directory"), so it is named here.
readonly APT_PACKAGES=(
  podman runc netavark aardvark-dns conmon iptables
  mmdebstrap debian-archive-keyring
  prometheus prometheus-alertmanager  # promtool, amtool: the rule and Alertmanager tests
  python3 python3-venv
  git  # model_artifacts tests build the fixture Hugging Face repository with git
  openssh-client  # ssh and ssh-keygen: Ansible reaches the local demo target over SSH
  python3-dnf  # dnf's own parser reads the nvidia_driver role's rendered .repo file (unit test)
  nftables  # nft -c checks the host_firewall role's rendered ruleset (unit test)
)

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "failed at line ${LINENO}: ${BASH_COMMAND}"' ERR

[[ ${EUID} -eq 0 ]] || die "must run as root (installs apt packages, writes ${CONTAINERS_CONF})"
command -v apt-get >/dev/null || die "apt-get not found: this script targets Debian 12"

install_apt_packages() {
  local missing=() pkg
  for pkg in "${APT_PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null || true)" != "install ok installed" ]]; then
      missing+=("${pkg}")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "apt packages already installed"
    return
  fi
  log "installing apt packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    || die "apt-get install ${missing[*]} failed"
}

# Set [engine] runtime = "runc", keeping everything else in an existing file.
configure_container_runtime() {
  install -d -m 0755 "$(dirname "${CONTAINERS_CONF}")"
  python3 - "${CONTAINERS_CONF}" <<'PY' || die "could not update ${CONTAINERS_CONF}"
import re
import shutil
import sys
import tomllib
from pathlib import Path

path = Path(sys.argv[1])
wanted = 'runtime = "runc"'
text = path.read_text() if path.exists() else ""
if text:
    try:
        current = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:  # refuse to edit a file we cannot parse
        sys.exit(f"[setup] {path} is not valid TOML ({err}); fix it by hand")
    if current.get("engine", {}).get("runtime") == "runc":
        print(f"[setup] {path} already selects runc")
        sys.exit(0)

lines = text.splitlines()
header = re.compile(r"^\s*\[engine\]\s*(#.*)?$")
table = re.compile(r"^\s*\[")
runtime = re.compile(r"^\s*runtime\s*=")
start = next((i for i, line in enumerate(lines) if header.match(line)), None)
if start is None:
    if lines and lines[-1].strip():
        lines.append("")
    lines += ["[engine]", wanted]
else:
    end = next((i for i in range(start + 1, len(lines)) if table.match(lines[i])), len(lines))
    hit = next((i for i in range(start + 1, end) if runtime.match(lines[i])), None)
    if hit is None:
        lines.insert(start + 1, wanted)
    else:
        lines[hit] = wanted
new_text = "\n".join(lines) + "\n"
if tomllib.loads(new_text).get("engine", {}).get("runtime") != "runc":
    sys.exit(f"[setup] merged {path} does not parse to engine.runtime = runc")
if path.exists():
    shutil.copy2(path, path.with_name(path.name + ".bak"))
path.write_text(new_text)
print(f"[setup] {path}: set [engine] {wanted}")
PY
}

setup_venv() {
  local wanted
  wanted="$(sha256sum "${REQUIREMENTS}" | cut -d' ' -f1) $(python3 -c 'import sys; print(sys.version.split()[0])')"
  if [[ -x "${VENV}/bin/python" && -f "${VENV_STAMP}" && "$(cat "${VENV_STAMP}")" == "${wanted}" ]]; then
    log ".venv is up to date with requirements-dev.txt"
    return
  fi
  if [[ ! -x "${VENV}/bin/python" ]]; then
    log "creating ${VENV}"
    python3 -m venv "${VENV}" || die "python3 -m venv failed (is python3-venv installed?)"
  fi
  log "installing requirements-dev.txt into .venv"
  "${VENV}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${REQUIREMENTS}" \
    || die "pip install -r requirements-dev.txt failed"
  printf '%s\n' "${wanted}" >"${VENV_STAMP}"
}

start=${SECONDS}
install_apt_packages
configure_container_runtime
runtime="$(podman info --format '{{.Host.OCIRuntime.Name}}')" || die "podman info failed (see above)"
[[ "${runtime}" == "runc" ]] || die "podman uses '${runtime}', not runc; check ${CONTAINERS_CONF}"
setup_venv
log "done in $((SECONDS - start)) s"
