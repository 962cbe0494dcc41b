#!/usr/bin/env bash
# Build the tarball users install: scripts/build-collection.sh OUTDIR  (prints the tarball's path)
# The checkout keeps its filters in filter_plugins/ (the project's layout) with one link,
# plugins/filter -> ../filter_plugins, for the collection. ansible-galaxy packs links as links,
# and ansible-test refuses them, so the tarball is built from a staged copy of the files git
# lists (tracked, and untracked ones it does not ignore: uncommitted work is included) in which
# plugins/filter holds the filters as files and filter_plugins/ is left out. galaxy.yml's
# build_ignore then leaves out what users do not install (molecule/, the venvs, ...).
# The build fails if the tarball holds a link.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { printf '[build-collection] ERROR: %s\n' "$*" >&2; exit 1; }
[[ $# -eq 1 ]] || die "usage: scripts/build-collection.sh OUTDIR"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
command -v ansible-galaxy >/dev/null || die "ansible-galaxy not found. Fix: make dev (or use .venv/bin on PATH)"

stage="$(mktemp -d "${TMPDIR:-/tmp}/vllm-fleet-build.XXXXXX")"
trap 'rm -rf "${stage}"' EXIT
(
  cd "${ROOT}"
  git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' path; do
        [[ -e "${path}" || -L "${path}" ]] && printf '%s\0' "${path}"
      done \
    | xargs -0 cp -P --parents -t "${stage}"
)
[[ -L "${stage}/plugins/filter" ]] || die "plugins/filter is not the link to filter_plugins/"
rm "${stage}/plugins/filter"
mv "${stage}/filter_plugins" "${stage}/plugins/filter"

ansible-galaxy collection build --force --output-path "${out}" "${stage}" >&2
# ansible-galaxy names it NAMESPACE-NAME-VERSION.tar.gz, from galaxy.yml.
tarball="${out}/$(sed -n 's/^namespace: *//p' "${stage}/galaxy.yml")-$(sed -n 's/^name: *//p' "${stage}/galaxy.yml")-$(sed -n 's/^version: *//p' "${stage}/galaxy.yml").tar.gz"
[[ -f "${tarball}" ]] || die "ansible-galaxy built no ${tarball}"
links="$(tar -tvzf "${tarball}" | grep '^l' || true)"
[[ -z "${links}" ]] || die "${tarball} holds links (ansible-test refuses them):
${links}"
printf '%s\n' "${tarball}"
