#!/usr/bin/env bash
# A controller without root: the README's way to run against real hosts ("Pointing it at real
# H100/H200 hosts", docs/real-hosts.md "The control node"), done as written by a user who is
# not root, in that user's HOME, from a copy of the checkout:
#   a venv on Python 3.12+, pip install -r requirements.txt, the built tarball installed with
#   ansible-galaxy into ~/.ansible/collections, requirements.yml's collections (from the
#   `ansible` bundle, no Galaxy), a copy of inventories/example in ~/inv, then, outside the
#   checkout, the installed playbook vllm_fleet.serving.plan with -i ~/inv/hosts.yml.
# It fails when a step fails or when the output has a [WARNING] or [DEPRECATION WARNING] line.
# Everything after `pip install` runs without network (unshare --net, where it can; else with
# ANSIBLE_GALAXY_SERVER pointing at a closed local port): the Galaxy steps must not need it.
#
#   scripts/controller-test.sh        (make controller-test)
#
# As root (CI): the steps run as the throwaway user VLLM_FLEET_CTL_USER (default vllm-fleet-ctl,
# made with useradd -m when missing and kept, with its pip cache, for the next run; remove it
# with `userdel -r vllm-fleet-ctl`). Its HOME is cleaned of the previous run's files first.
# As another user: the steps run as that user with HOME set to a scratch folder (removed at the
# end), so the real ~/inv, ~/vllm-fleet-venv and ~/.ansible are not touched; pip keeps using
# the real pip cache (PIP_CACHE_DIR, default ~/.cache/pip).
# The Python: scripts/lib/python.sh's finder (VLLM_FLEET_PYTHON, python3/python3.13/python3.12
# on PATH, /usr/bin, pyenv), first as the user, then as root; root's interpreter that the user
# cannot run (pyenv under /root, mode 0700) is copied into the user's HOME, as a user's own
# build would be. Nothing in the checkout changes.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly CTL_USER="${VLLM_FLEET_CTL_USER:-vllm-fleet-ctl}"

# The user's commands, exactly as README.md and docs/real-hosts.md give them
# (tests/unit/test_controller_docs.py fails when they differ). `python3` is the Python found
# below (a 3.12 or newer), first on the user's PATH. ONLINE runs with network (PyPI); OFFLINE
# without, in the same shell session (the venv stays activated).
readonly ONLINE_STEPS='python3 -m venv ~/vllm-fleet-venv
. ~/vllm-fleet-venv/bin/activate
pip install -r requirements.txt'
readonly OFFLINE_STEPS='scripts/build-collection.sh build/
ansible-galaxy collection install -p ~/.ansible/collections build/vllm_fleet-serving-1.0.0.tar.gz
ansible-galaxy collection install -p ~/.ansible/collections -r requirements.yml
cp -r inventories/example ~/inv
cd ~
ansible-playbook -i ~/inv/hosts.yml vllm_fleet.serving.plan'
# Not in the docs (it needs real hosts to run): site.yml of the installed copy parses; its path
# shows which copy ran.
readonly EXTRA_STEPS='ansible-playbook -i ~/inv/hosts.yml vllm_fleet.serving.site --syntax-check'

log() { printf "[controller-test +%ds] %s\n" "${SECONDS}" "$*" >&2; }
die() { printf '[controller-test] ERROR: %s\n' "$*" >&2; exit 1; }

# shellcheck source=scripts/lib/python.sh
. "${ROOT}/scripts/lib/python.sh"

# as_user CMD...: CMD as the controller user, with a clean login-like environment (the caller's
# venv, PATH and ANSIBLE_* settings do not leak in); pip's settings and proxies pass through.
as_user() {
  local -a env_args=(HOME="${user_home}" USER="${user}" LOGNAME="${user}" SHELL=/bin/bash
    LANG=C.UTF-8 PATH="${user_bin}:/usr/local/bin:/usr/bin:/bin")
  local name
  for name in $(compgen -e); do
    case "${name}" in
      PIP_*|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|TMPDIR|VLLM_FLEET_PYTHON|PYENV_ROOT)
        env_args+=("${name}=${!name}") ;;
    esac
  done
  if [[ ${EUID} -eq 0 ]]; then
    "${wrap[@]}" runuser -u "${user}" -- env -i "${env_args[@]}" "$@"
  else
    "${wrap[@]}" env -i "${env_args[@]}" "$@"
  fi
}
wrap=()  # a command as_user runs its command under (unshare --net for the offline steps)

# steps_script STEPS: a bash script that echoes each line of STEPS, then runs it.
steps_script() {
  local line
  while IFS= read -r line; do
    printf 'printf "%%s\\n" %q\n%s\n' "\$ ${line}" "${line}"
  done <<<"$1"
}

# user_python: a Python 3.12+ the user can run, printed; copied into its HOME where only root
# can run the one found.
user_python() {
  local py rc=0 prefix version dest binary
  # shellcheck disable=SC2016  # $1 is expanded by the user's shell
  py="$(as_user bash -c '. "$1"; vllm_fleet_python' _ "${checkout}/scripts/lib/python.sh")" || rc=$?
  case ${rc} in
    0) printf '%s\n' "${py}"; return ;;
    2) die "VLLM_FLEET_PYTHON=${VLLM_FLEET_PYTHON} is not a Python 3.12+ with venv and ensurepip that ${user} can run; point it at one, or unset it" ;;
  esac
  rc=0
  [[ ${EUID} -eq 0 ]] || die "no Python 3.12 or newer found (VLLM_FLEET_PYTHON, python3, python3.13, python3.12 on PATH, /usr/bin, ~/.pyenv). Fix: install one (pyenv install 3.13, or Debian 13's python3) and rerun with VLLM_FLEET_PYTHON=/path/to/python3"
  py="$(vllm_fleet_python)" || rc=$?
  case ${rc} in
    0) ;;
    2) die "VLLM_FLEET_PYTHON=${VLLM_FLEET_PYTHON} is not a Python 3.12+ with venv and ensurepip; point it at one, or unset it" ;;
    *) die "no Python 3.12 or newer found for root or ${user}. Fix: make setup (it finds or installs one), or set VLLM_FLEET_PYTHON=/path/to/python3" ;;
  esac
  if as_user "${py}" -c 'import venv, ensurepip' 2>/dev/null; then
    printf '%s\n' "${py}"
    return
  fi
  # The user cannot run root's interpreter: give it a copy of the installation. A build whose
  # executable names its own lib/ by absolute path (pyenv's --enable-shared builds) is pointed
  # at $ORIGIN/../lib instead, in place (the new path is shorter).
  prefix="$("${py}" -c 'import sys; print(sys.base_prefix)')"
  version="$("${py}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  binary="$(realpath "$("${py}" -c 'import sys; print(sys.executable)')")"
  [[ "${binary}" == "${prefix}/bin/"* ]] || die "${py} is not inside its prefix ${prefix}; set VLLM_FLEET_PYTHON to a Python ${user} can run"
  dest="${user_home}/.local/python${version}"
  log "${user} cannot run ${py}; copying ${prefix} to ${dest} (without its tests and site-packages)"
  rm -rf "${dest}"
  mkdir -p "${dest}"
  tar -C "${prefix}" --exclude="./lib/python${version}/test" \
    --exclude="./lib/python${version}/site-packages/*" -cf - . | tar -C "${dest}" -xf -
  "${py}" - "${dest}/bin/${binary##*/}" "${prefix}/lib" <<'PY' || die "could not relocate the copy of ${prefix}"
import sys
from pathlib import Path

binary, libdir = Path(sys.argv[1]), sys.argv[2].encode() + b"\0"
data = binary.read_bytes()
new = b"$ORIGIN/../lib"
if data.count(libdir) == 1 and len(new) < len(libdir):
    binary.write_bytes(data.replace(libdir, new + b"\0" * (len(libdir) - len(new))))
elif data.count(libdir) > 1:
    sys.exit(f"{binary} names {libdir!r} more than once")
PY
  chown -R "${user}:" "${dest}"
  py="${dest}/bin/${binary##*/}"
  as_user "${py}" -c 'import venv, ensurepip, ssl, sqlite3, ctypes' \
    || die "the copy ${py} does not run as ${user}; set VLLM_FLEET_PYTHON to a Python ${user} can run"
  printf '%s\n' "${py}"
}

# ---- the user, its HOME and a copy of the checkout ----
scratch=""
cleanup() { [[ -z "${scratch}" ]] || rm -rf "${scratch}"; }
trap cleanup EXIT
if [[ ${EUID} -eq 0 ]]; then
  user="${CTL_USER}"
  if ! id -u "${user}" >/dev/null 2>&1; then
    command -v useradd >/dev/null || die "useradd not found: cannot create ${user}. Fix: run as a user who is not root, or install passwd"
    log "creating the user ${user} (useradd -m)"
    useradd -m -s /bin/bash "${user}" || die "useradd -m ${user} failed"
  fi
  [[ "$(id -u "${user}")" -ne 0 ]] || die "VLLM_FLEET_CTL_USER=${user} is root; name a user who is not"
  user_home="$(getent passwd "${user}" | cut -d: -f6)"
  [[ -d "${user_home}" ]] || die "${user}'s HOME ${user_home} does not exist. Fix: userdel -r ${user}, then rerun"
  # The previous run's files go; the pip cache (~/.cache/pip) stays.
  log "removing the previous run's files from ${user_home} (its pip cache stays)"
  rm -rf "${user_home:?}"/{vllm-fleet,vllm-fleet-venv,inv,.ansible,.local/bin/python3}
  # PIP_CACHE_DIR of root's environment would point pip at a cache the user cannot write.
  unset PIP_CACHE_DIR
else
  user="$(id -un)"
  scratch="$(mktemp -d "${TMPDIR:-/tmp}/vllm-fleet-controller.XXXXXX")"
  export PIP_CACHE_DIR="${PIP_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/pip}"
  user_home="${scratch}/home"
  mkdir -p "${user_home}"
fi
readonly user user_home
user_bin="${user_home}/.local/bin"
checkout="${user_home}/vllm-fleet"

# A user's clone: the files git lists (tracked, and untracked ones it does not ignore), in a
# fresh repository (scripts/build-collection.sh asks git for the list again).
log "copying the checkout to ${checkout} (as ${user})"
as_user mkdir -p "${checkout}" "${user_bin}"
(
  cd "${ROOT}"
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' path; do
        [[ -e "${path}" || -L "${path}" ]] && printf '%s\0' "${path}"
      done \
    | xargs -0 cp -P --parents -t "${checkout}"
) || die "could not copy the checkout (git ls-files in ${ROOT})"
[[ ${EUID} -ne 0 ]] || chown -R "${user}:" "${checkout}"
as_user git -C "${checkout}" init -q
as_user git -C "${checkout}" add -A

python="$(user_python)"
# A shim, as pyenv's (a link would make the venv look for the standard library beside it).
printf '#!/bin/sh\nexec %q "$@"\n' "${python}" | as_user tee "${user_bin}/python3" >/dev/null
as_user chmod 0755 "${user_bin}/python3"
log "python3 is ${python} ($(as_user "${python}" -c 'import sys; print(sys.version.split()[0])'))"

# ---- the steps ----
offline=()
if [[ ${EUID} -eq 0 ]] && unshare --net true 2>/dev/null; then
  offline=(unshare --net)
elif unshare --map-current-user --net true 2>/dev/null; then
  offline=(unshare --map-current-user --net)
fi
logfile="$(mktemp "${TMPDIR:-/tmp}/vllm-fleet-controller-log.XXXXXX")"
start=${SECONDS}
rc=0
{
  as_user bash -c "cd ~/vllm-fleet && set -euo pipefail && $(steps_script "${ONLINE_STEPS}")" || exit
  log "installed in $((SECONDS - start)) s; now without network (${offline[*]:-ANSIBLE_GALAXY_SERVER only})"
  wrap=("${offline[@]}")
  as_user env ANSIBLE_GALAXY_SERVER=http://127.0.0.1:9/ ANSIBLE_NOCOLOR=1 bash -c \
    "cd ~/vllm-fleet && set -euo pipefail && . ~/vllm-fleet-venv/bin/activate && $(steps_script "${OFFLINE_STEPS}
${EXTRA_STEPS}")"
} 2>&1 | tee "${logfile}" || rc=$?
[[ ${rc} -eq 0 ]] || die "a step failed (exit ${rc}; output above, also in ${logfile})"
warnings="$(grep -E '^\[(DEPRECATION )?WARNING\]' "${logfile}" || true)"
[[ -z "${warnings}" ]] || die "the output has $(wc -l <<<"${warnings}") warning line(s) (full output: ${logfile}):
${warnings}"
installed="${user_home}/.ansible/collections/ansible_collections/vllm_fleet/serving"
grep -qxF "playbook: ${installed}/playbooks/site.yml" "${logfile}" \
  || die "vllm_fleet.serving.site did not run from the installed copy ${installed} (full output: ${logfile})"
rm -f "${logfile}"
log "passed in $((SECONDS - start)) s: ${user} installed the built collection and ran vllm_fleet.serving.plan from ${user_home}, no warnings"
