#!/bin/sh
# vllm-install INSTALLER UV_VERSION VENV CONSTRAINTS EXCLUDES REQUIREMENTS [ARG...]
#
# Installs REQUIREMENTS (the pinned engine, e.g. vllm==0.32.0, and what is installed in the
# same resolution, e.g. prebuilt kernels: separated by commas) into the virtual environment
# VENV with uv, the installer vLLM's own documentation uses: downloads and unpacks in
# parallel and compiles the bytecode on every core (pip does each one after the other).
#   INSTALLER    uv's own virtual environment (made here with pip: uv==UV_VERSION)
#   CONSTRAINTS  pins applied to the whole resolution (uv --constraints)
#   EXCLUDES     packages never installed, even where a dependency asks for them: names
#                separated by commas, or empty
#   ARG...       passed to both installs (pip's of uv, uv's of the engine): the options they
#                share, such as --no-index or --cert FILE
# The package sources reach both through the environment (PIP_INDEX_URL / UV_DEFAULT_INDEX,
# PIP_FIND_LINKS / UV_FIND_LINKS), so an index URL with credentials is on no command line.
# VLLM_INSTALL_PYTHON: the interpreter both environments are made with (/usr/bin/python3);
# UV_CACHE_DIR: uv's download cache (the role keeps it beside the environments).
set -eu
[ $# -ge 6 ] || { echo "usage: $0 INSTALLER UV_VERSION VENV CONSTRAINTS EXCLUDES REQUIREMENTS [ARG...]" >&2; exit 2; }
installer=$1 uv_version=$2 venv=$3 constraints=$4 excludes=$5 requirements=$6
shift 6
python=${VLLM_INSTALL_PYTHON:-/usr/bin/python3}

excludes_file=$(mktemp) requirements_file=$(mktemp)
trap 'rm -f "$excludes_file" "$requirements_file"' EXIT
printf '%s\n' "$excludes" | tr ',' '\n' >"$excludes_file"
printf '%s\n' "$requirements" | tr ',' '\n' >"$requirements_file"

found=$("$installer/bin/uv" --version 2>/dev/null | cut -d' ' -f2) || found=
if [ "$found" != "$uv_version" ]; then
  [ -x "$installer/bin/python" ] || "$python" -m venv "$installer"
  "$installer/bin/pip" install --quiet --disable-pip-version-check "$@" "uv==$uv_version"
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$installer/bin/uv" pip install --no-progress \
  --python "$venv/bin/python" --compile-bytecode \
  --constraints "$constraints" --excludes "$excludes_file" "$@" --requirements "$requirements_file"
