#!/usr/bin/env bash
# ansible-test sanity on what users install, with the ansible-core of one of the checkout's venvs:
#   scripts/sanity.sh .venv            # ansible-core 2.21 (make sanity)
#   scripts/sanity.sh .venv-core2.20   # ansible-core 2.20 (make sanity-core2.20)
#   scripts/sanity.sh .venv --test pep8 ...   # further arguments go to ansible-test sanity
# The tarball (scripts/build-collection.sh, uncommitted work included) is installed with
# ansible-galaxy into a scratch ansible_collections path,
# ${TMPDIR:-/tmp}/vllm-fleet-sanity-<checkout hash>/<venv>/, and ansible-test runs there: it
# wants the collection at ansible_collections/<namespace>/<name>/, with no links, and outside
# the checkout's git. Findings are fixed in the code; the few that cannot be are in
# tests/sanity/ignore-<core>.txt, each with its reason.
#
# ansible-test runs every test in a virtual environment of its own (--venv), kept under
# HOME=.cache/ansible-test-home so that a second run reuses them. It puts pip into those
# environments with a get-pip script from ci-files.testing.ansible.com; where only the
# package index can be reached, scripts/ansible-test/get_pip.py stands in (CPython's ensurepip,
# then the pinned pip from the index).
#
# Skipped: no-illegal-filenames. The gpu_facts fixtures under tests/data/gpu/ are sysfs trees,
# named by PCI address (0000:17:00.0) as the kernel names them; the test refuses ':' (a
# Windows restriction) and, on these paths, crashes instead of reporting, so no ignore entry
# can hold it.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { printf '[sanity] ERROR: %s\n' "$*" >&2; exit 1; }

[[ $# -ge 1 ]] || die "usage: scripts/sanity.sh VENV [ansible-test sanity arguments]"
venv="$(cd "${REPO_ROOT}" && cd "$1" 2>/dev/null && pwd)" \
  || die "$1: no such virtual environment. Fix: run make setup (it makes .venv and .venv-core2.20)"
shift
[[ -x "${venv}/bin/ansible-test" ]] || die "${venv} has no ansible-test. Fix: run make setup"
# ansible-test skips its shellcheck test, with a warning only, where shellcheck is missing.
command -v shellcheck >/dev/null || die "shellcheck not found (ansible-test would skip its test). Fix: run make setup (apt-get install shellcheck)"

python="${venv}/bin/python"
version="$("${python}" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
core="$("${python}" -c 'from ansible.release import __version__; print(__version__)')"
home="${REPO_ROOT}/.cache/ansible-test-home"

# The pip version ansible-test bootstraps, and the stand-in for its get-pip script.
pip_version="$("${python}" - <<'PY'
import pathlib, re, ansible_test
source = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
match = re.search(r"pip='([0-9.]+)'", source.read_text())
print(match[1] if match else "")
PY
)"
[[ -n "${pip_version}" ]] || die "cannot tell which pip ansible-test ${core} bootstraps"
cache="${home}/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [[ ! -f "${cache}" ]]; then
  install -D -m 0644 "${REPO_ROOT}/scripts/ansible-test/get_pip.py" "${cache}"
fi

scratch="${TMPDIR:-/tmp}/vllm-fleet-sanity-$(printf '%s' "${REPO_ROOT}" | sha256sum | cut -c1-12)"
dest="${scratch}/$(basename "${venv}")"
rm -rf "${dest}"
tarball="$(PATH="${venv}/bin:${PATH}" "${REPO_ROOT}/scripts/build-collection.sh" "${dest}/build")"
# --no-deps: the collections it depends on are not what is tested (and the index is offline).
"${venv}/bin/ansible-galaxy" collection install --no-deps --force -p "${dest}" "${tarball}" >/dev/null
tree="${dest}/ansible_collections/$(sed -n 's/^namespace: *//p' "${REPO_ROOT}/galaxy.yml")/$(sed -n 's/^name: *//p' "${REPO_ROOT}/galaxy.yml")"
[[ -f "${tree}/MANIFEST.json" ]] || die "ansible-galaxy did not install ${tarball} into ${tree}"
printf '[sanity] ansible-core %s, Python %s, in %s\n' "${core}" "${version}" "${tree}"
cd "${tree}"
start=${SECONDS}
rc=0
pip_cache="${PIP_CACHE_DIR:-${HOME}/.cache/pip}"  # the user's pip cache, not the test HOME's
HOME="${home}" PATH="${venv}/bin:${PATH}" PIP_CACHE_DIR="${pip_cache}" \
  "${venv}/bin/ansible-test" sanity --venv --python "${version}" --color no \
  --skip-test no-illegal-filenames "$@" || rc=$?
printf '[sanity] ansible-core %s: exit %s after %s s\n' "${core}" "${rc}" "$((SECONDS - start))"
exit "${rc}"
