#!/usr/bin/env bash
# The checkout as the collection vllm_fleet.serving, for what runs from it (ansible-playbook,
# ansible-lint, ansible-doc, pytest, mypy): an editable install, as `pip install -e` or
# ansible-dev-environment's `ade install -e` make one. Nothing of it is tracked:
#   .collections/ansible_collections/<namespace>/<name> -> the checkout (ansible.cfg's
#     collections_path, molecule's ANSIBLE_COLLECTIONS_PATH; .collections/ is git-ignored);
#   <venv>/lib/pythonX.Y/site-packages/vllm_fleet_serving.pth naming .collections, so each
#     venv's Python imports ansible_collections.<namespace>.<name>.plugins.* from the checkout
#     (the tests and scripts set up no path of their own).
# Users install the built tarball instead (scripts/build-collection.sh). No root needed;
# idempotent: run by make setup and by every make target that runs Ansible or Python.
#   scripts/editable.sh [VENV ...]     # default: .venv and .venv-core2.20 where they exist
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
namespace="$(sed -n 's/^namespace: *//p' "${ROOT}/galaxy.yml")"
name="$(sed -n 's/^name: *//p' "${ROOT}/galaxy.yml")"
[[ -n "${namespace}" && -n "${name}" ]] || { echo "[editable] galaxy.yml names no namespace/name" >&2; exit 1; }

link="${ROOT}/.collections/ansible_collections/${namespace}/${name}"
mkdir -p "$(dirname "${link}")"
if [[ "$(readlink "${link}" 2>/dev/null || true)" != "../../.." ]]; then
  rm -rf "${link}"
  ln -s ../../.. "${link}"
fi

venvs=("$@")
if [[ ${#venvs[@]} -eq 0 ]]; then
  for venv in .venv .venv-core2.20; do
    [[ -x "${ROOT}/${venv}/bin/python" ]] && venvs+=("${ROOT}/${venv}")
  done
fi
for venv in "${venvs[@]}"; do
  site="$("${venv}/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  pth="${site}/${namespace}_${name}.pth"
  if [[ "$(cat "${pth}" 2>/dev/null || true)" != "${ROOT}/.collections" ]]; then
    printf '%s\n' "${ROOT}/.collections" > "${pth}"
  fi
done
