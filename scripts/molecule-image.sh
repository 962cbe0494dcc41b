#!/usr/bin/env bash
# Which image each molecule scenario's base platform runs on: the one table of it.
#
# The base platform (.config/molecule/config.yml) takes its image from MOLECULE_IMAGE
# (default localhost/testhost:debian12); scripts/molecule-lanes.sh exports this script's
# answer per scenario. Scenarios that set their own `platforms:` name their images there
# and are not listed (they get the default, which their platforms ignore).
#
# Usage:
#   scripts/molecule-image.sh SCENARIO            print the image SCENARIO's base platform needs
#   scripts/molecule-image.sh --ensure SCENARIO   (the scenarios' dependency step) fail, naming
#       the fix, when MOLECULE_IMAGE is not that image; build the engine image when it is
#       the one needed (scripts/build-engine-image.sh, cached by input hash)
#   scripts/molecule-image.sh --list              every image this table names, one a line
set -euo pipefail

readonly DEFAULT_IMAGE="localhost/testhost:debian12"
readonly ENGINE_IMAGE="localhost/testhost:engine"
# Scenarios that need another image than the default. The engine scenarios start from
# the image that already holds the CPU build of vLLM; site converges a bare host (as
# `make demo` does), so it takes the default.
declare -A IMAGES=(
  [vllm_server]="${ENGINE_IMAGE}"
  [operations]="${ENGINE_IMAGE}"
  [benchmark]="${ENGINE_IMAGE}"
  [engine_group]="${ENGINE_IMAGE}"
)
readonly IMAGES

die() { echo "molecule-image.sh: $*" >&2; exit 1; }

image_for() { echo "${IMAGES[$1]:-${DEFAULT_IMAGE}}"; }

ensure() {
  local scenario="$1" want have
  want="$(image_for "${scenario}")"
  have="${MOLECULE_IMAGE:-${DEFAULT_IMAGE}}"
  if [[ "${have}" != "${want}" ]]; then
    die "scenario ${scenario} runs on ${want}, but MOLECULE_IMAGE is '${MOLECULE_IMAGE:-}'" \
      "(so the platform would use ${have}). Run: MOLECULE_IMAGE=${want} molecule test -s ${scenario}" \
      "(or scripts/molecule-lanes.sh ${scenario}, which sets it)"
  fi
  if [[ "${want}" == "${ENGINE_IMAGE}" ]]; then
    "$(dirname "${BASH_SOURCE[0]}")/build-engine-image.sh"
  fi
}

case "${1:-}" in
  --ensure) [[ $# -eq 2 ]] || die "usage: $0 --ensure SCENARIO"; ensure "$2" ;;
  --list) printf '%s\n' "${DEFAULT_IMAGE}" "${IMAGES[@]}" | sort -u ;;
  -*|"") die "usage: $0 SCENARIO | --ensure SCENARIO | --list" ;;
  *) [[ $# -eq 1 ]] || die "usage: $0 SCENARIO"; image_for "$1" ;;
esac
