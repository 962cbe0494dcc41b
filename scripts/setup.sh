#!/usr/bin/env bash
# Prepare a Debian 12 machine (run as root) for this project's tests:
#   - apt packages: podman + runc (container test hosts), mmdebstrap (image builds),
#     prometheus (promtool), prometheus-alertmanager (amtool), python3-venv, shellcheck;
#   - a controller Python 3.12 or newer (ansible-core 2.21 needs it; Debian 12's own is 3.11):
#     VLLM_FLEET_PYTHON if set, else the newest python3.13/python3.12 on PATH, in /usr/bin or
#     under pyenv, else one installed by uv (`uv python install 3.13`, which downloads a
#     standalone CPython); it stops with the fix when none can be found or installed;
#   - /etc/containers/containers.conf: [engine] runtime = "runc" (crun fails on
#     cgroups v1 "hybrid" hosts), merged into an existing file;
#   - .venv with the pinned tooling from requirements-dev.txt;
#   - .venv-core2.20 with ansible-core 2.20 and the unit tests' needs from
#     requirements-core2.20.txt (the 2.20 leg: make unit-core2.20, make sanity-core2.20), made
#     with the same Python.
# Idempotent: every step checks whether it is already done, so a second run
# takes about a second.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly REPO_ROOT
readonly VENV="${REPO_ROOT}/.venv"
readonly REQUIREMENTS="${REPO_ROOT}/requirements-dev.txt"
readonly VENV_CORE220="${REPO_ROOT}/.venv-core2.20"
readonly REQUIREMENTS_CORE220="${REPO_ROOT}/requirements-core2.20.txt"
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
  shellcheck  # ansible-test sanity's shellcheck test (make sanity); without it the test is skipped
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

# vllm_fleet_python_ok, vllm_fleet_python: the finder scripts/controller-test.sh shares.
# shellcheck source=scripts/lib/python.sh
. "${REPO_ROOT}/scripts/lib/python.sh"

# find_python: print the controller interpreter (see the header), or stop with the fix.
find_python() {
  local candidate rc=0 uv_venv="${REPO_ROOT}/.cache/uv-bootstrap"
  vllm_fleet_python || rc=$?
  case ${rc} in
    0) return ;;
    2) die "VLLM_FLEET_PYTHON=${VLLM_FLEET_PYTHON} is not a Python 3.12+ with venv and ensurepip; point it at one, or unset it" ;;
  esac
  # None on the machine (a fresh Debian 12 has 3.11): uv installs a standalone CPython.
  log "no Python 3.12+ found; installing one with uv (python3 -m venv + pip install uv)" >&2
  if [[ ! -x "${uv_venv}/bin/uv" ]]; then
    if ! { python3 -m venv "${uv_venv}" >&2 \
        && "${uv_venv}/bin/python" -m pip install --quiet --disable-pip-version-check uv >&2; }; then
      die "could not install uv to fetch Python 3.12+. Fix: install Python 3.12 or newer (Debian 13's python3, pyenv, or a standalone build) and rerun with VLLM_FLEET_PYTHON=/path/to/python3"
    fi
  fi
  UV_PYTHON_INSTALL_DIR="${REPO_ROOT}/.cache/uv-python" "${uv_venv}/bin/uv" python install 3.13 >&2 \
    || die "uv could not download Python 3.13 (no network to its download host?). Fix: install Python 3.12 or newer and rerun with VLLM_FLEET_PYTHON=/path/to/python3"
  candidate="$(UV_PYTHON_INSTALL_DIR="${REPO_ROOT}/.cache/uv-python" "${uv_venv}/bin/uv" python find 3.13)" \
    || die "uv installed Python 3.13 but cannot find it; rerun with VLLM_FLEET_PYTHON=/path/to/python3"
  vllm_fleet_python_ok "${candidate}" || die "${candidate} (from uv) cannot make a venv; set VLLM_FLEET_PYTHON"
  printf '%s\n' "${candidate}"
}

# setup_venv VENV REQUIREMENTS PYTHON: VENV with the pins of REQUIREMENTS, made with PYTHON.
setup_venv() {
  local venv="$1" requirements="$2" python="$3" wanted current name version
  local stamp="${venv}/.setup-stamp"
  name="$(basename "${venv}")"
  version="$("${python}" -c 'import sys; print(sys.version.split()[0])')"
  wanted="$(sha256sum "${requirements}" | cut -d' ' -f1) ${version}"
  if [[ -x "${venv}/bin/python" && -f "${stamp}" && "$(cat "${stamp}")" == "${wanted}" ]]; then
    log "${name} is up to date with $(basename "${requirements}") (${python})"
    return
  fi
  # A venv from another interpreter (e.g. the Python 3.11 one of older releases) is rebuilt.
  current="$("${venv}/bin/python" -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || true)"
  if [[ -n "${current}" && "${current}" != "${version}" ]]; then
    log "rebuilding ${venv}: it runs Python ${current}, not ${python}"
    rm -rf "${venv}"
  fi
  if [[ ! -x "${venv}/bin/python" ]]; then
    log "creating ${venv} with ${python}"
    "${python}" -m venv "${venv}" || die "${python} -m venv failed"
  fi
  log "installing $(basename "${requirements}") into ${name}"
  "${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${requirements}" \
    || die "pip install -r $(basename "${requirements}") failed"
  printf '%s\n' "${wanted}" >"${stamp}"
}

start=${SECONDS}
install_apt_packages
configure_container_runtime
runtime="$(podman info --format '{{.Host.OCIRuntime.Name}}')" || die "podman info failed (see above)"
[[ "${runtime}" == "runc" ]] || die "podman uses '${runtime}', not runc; check ${CONTAINERS_CONF}"
python="$(find_python)"
setup_venv "${VENV}" "${REQUIREMENTS}" "${python}"
setup_venv "${VENV_CORE220}" "${REQUIREMENTS_CORE220}" "${python}"
# The checkout as the collection in both venvs (no root needed; `make dev` runs it alone).
"${REPO_ROOT}/scripts/editable.sh" "${VENV}" "${VENV_CORE220}"
log "done in $((SECONDS - start)) s"
