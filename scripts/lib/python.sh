# shellcheck shell=bash
# The controller Python (3.12 or newer: ansible-core 2.21 needs it), found the same way by
# scripts/setup.sh and scripts/controller-test.sh. Source it; it defines two functions:
#   vllm_fleet_python_ok PYTHON   true when PYTHON runs, is 3.12 or newer and can make a venv
#   vllm_fleet_python             print the first one of: VLLM_FLEET_PYTHON (returns 2 when it
#                                 is set but not usable), python3, python3.13, python3.12 on
#                                 PATH, /usr/bin/python3.13, /usr/bin/python3.12, pyenv's
#                                 3.13 and 3.12; returns 1 when there is none
# A pyenv shim on PATH is printed as the interpreter it runs (sys.executable), so the path
# works without pyenv's shell setup.

vllm_fleet_python_ok() {
  "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
}

vllm_fleet_python() {
  local candidate
  if [[ -n "${VLLM_FLEET_PYTHON:-}" ]]; then
    vllm_fleet_python_ok "${VLLM_FLEET_PYTHON}" || return 2
    printf '%s\n' "${VLLM_FLEET_PYTHON}"
    return 0
  fi
  for candidate in python3 python3.13 python3.12 /usr/bin/python3.13 /usr/bin/python3.12 \
    "${PYENV_ROOT:-${HOME}/.pyenv}"/versions/3.13*/bin/python3 \
    "${PYENV_ROOT:-${HOME}/.pyenv}"/versions/3.12*/bin/python3; do
    if command -v "${candidate}" >/dev/null 2>&1 && vllm_fleet_python_ok "${candidate}"; then
      "${candidate}" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  return 1
}
