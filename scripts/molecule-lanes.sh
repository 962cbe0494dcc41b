#!/usr/bin/env bash
# Run every molecule scenario in two lanes, then the benchmark alone.
#
#   engine lane: the scenarios that start the CPU engine (vllm_server, site, operations),
#                one after another, after building localhost/testhost:engine;
#   host lane:   every other scenario except the benchmark (packages, model, monitoring,
#                firewall, plan), one after another, beside the engine lane;
#   last:        benchmark, alone, because its TTFT gate measures the machine's cores.
#
# Each scenario runs with MOLECULE_IMAGE set to the image scripts/molecule-image.sh names
# for it (the base platform's image; localhost/testhost:engine for the engine scenarios).
# Each lane's output goes to its own log under MOLECULE_LANES_LOGS (default
# .molecule-lanes/), whose lines are also echoed here prefixed with the lane's name.
# The engine lane starts first; the host lane's scenarios are mostly apt and container
# I/O, so the two share the cores without starving the engine's health waits.
#
# Usage: scripts/molecule-lanes.sh [--host-first COMMAND] SCENARIO...
#   --host-first COMMAND: run COMMAND (e.g. "make lint unit") at the head of the host lane;
#   `make test` puts the lint, unit and sanity checks there, since the host lane ends long before
#   the engine lane (host ~21 min, engine ~60 min on 2 cores), so they cost no wall time.
# Exit: 0 when every scenario (and COMMAND) passed, 1 otherwise (each failure is named).
set -euo pipefail

readonly ENGINE_SCENARIOS=(vllm_server site operations)
readonly LAST_SCENARIOS=(benchmark)
LOGS="${MOLECULE_LANES_LOGS:-.molecule-lanes}"
readonly LOGS

in_list() {
  local needle="$1"; shift
  local item
  for item in "$@"; do [[ "${item}" == "${needle}" ]] && return 0; done
  return 1
}

# run_lane NAME SCENARIO... : run scenarios in order, record pass/fail per scenario.
run_lane() {
  local lane="$1"; shift
  local scenario start image rc=0
  for scenario in "$@"; do
    start=${SECONDS}
    # The image of the scenario's base platform (.config/molecule/config.yml): one table,
    # scripts/molecule-image.sh.
    image="$(scripts/molecule-image.sh "${scenario}")"
    echo "=== [${lane}] MOLECULE_IMAGE=${image} molecule test -s ${scenario}"
    if MOLECULE_IMAGE="${image}" molecule test -s "${scenario}" 2>&1 \
        | tee "${LOGS}/${scenario}.log"; then
      echo "=== [${lane}] molecule scenario ${scenario} passed in $((SECONDS - start)) s"
      echo "${scenario} passed $((SECONDS - start))" >> "${LOGS}/${lane}.result"
    else
      echo "=== [${lane}] molecule scenario ${scenario} FAILED after $((SECONDS - start)) s"
      echo "${scenario} FAILED $((SECONDS - start))" >> "${LOGS}/${lane}.result"
      rc=1
    fi
  done
  return "${rc}"
}

# failure_excerpt SCENARIO: the lines of a failed scenario's log (or the checks' log)
# that say why (pytest's failures and assertion lines, Ansible's fatal and failed results,
# molecule's errors), so that the end of a long CI log names the cause.
failure_excerpt() {
  local log="${LOGS}/$1.log"
  echo "=== why $1 failed (from ${log}; the whole output is above):"
  # molecule boxes a step's output ("  │ " after colour codes): both are taken off first.
  sed -E $'s/\x1b\\[[0-9;]*m//g; s/^ *\u2502 ?//' "${log}" \
    | grep -E '^(FAILED|ERROR) |^E  |^tests/.*Error$|fatal: \[|failed: \[|CRITICAL|AssertionError' \
    | grep -v -E 'FAILED - RETRYING|glob failed' | cut -c1-400 | tail -n 40 || true
}

# run_first LANE COMMAND: run COMMAND, recorded like a scenario under the name "checks".
run_first() {
  local lane="$1" command="$2" start=${SECONDS}
  echo "=== [${lane}] ${command}"
  if bash -c "${command}" 2>&1 | tee "${LOGS}/checks.log"; then
    echo "=== [${lane}] checks passed in $((SECONDS - start)) s"
    echo "checks passed $((SECONDS - start))" >> "${LOGS}/${lane}.result"
  else
    echo "=== [${lane}] checks (${command}) FAILED after $((SECONDS - start)) s"
    echo "checks FAILED $((SECONDS - start))" >> "${LOGS}/${lane}.result"
    return 1
  fi
}

main() {
  local engine=() host=() last=() scenario first=""
  if [[ "${1:-}" == "--host-first" ]]; then
    first="$2"
    shift 2
  fi
  for scenario in "$@"; do
    if in_list "${scenario}" "${ENGINE_SCENARIOS[@]}"; then
      engine+=("${scenario}")
    elif in_list "${scenario}" "${LAST_SCENARIOS[@]}"; then
      last+=("${scenario}")
    else
      host+=("${scenario}")
    fi
  done
  rm -rf "${LOGS}"
  mkdir -p "${LOGS}"
  : > "${LOGS}/engine.result"
  : > "${LOGS}/host.result"
  : > "${LOGS}/last.result"

  local start=${SECONDS} engine_pid host_pid rc=0
  (
    scripts/build-engine-image.sh
    run_lane engine "${engine[@]}"
  ) > >(sed -u 's/^/[engine] /' | tee "${LOGS}/engine.log") 2>&1 &
  engine_pid=$!
  (
    rc=0
    if [[ -n "${first}" ]]; then run_first host "${first}" || rc=1; fi
    run_lane host "${host[@]}" || rc=1
    exit "${rc}"
  ) > >(sed -u 's/^/[host] /' | tee "${LOGS}/host.log") 2>&1 &
  host_pid=$!
  wait "${engine_pid}" || rc=1
  wait "${host_pid}" || rc=1
  echo "=== lanes done in $((SECONDS - start)) s"
  if ((${#last[@]})); then
    run_lane last "${last[@]}" || rc=1
  fi

  echo "=== molecule summary (scenario, result, seconds)"
  cat "${LOGS}/engine.result" "${LOGS}/host.result" "${LOGS}/last.result"
  if grep -q FAILED "${LOGS}"/*.result; then
    while read -r scenario; do
      failure_excerpt "${scenario}"
    done < <(grep -h FAILED "${LOGS}"/*.result | cut -d' ' -f1)
    echo "=== failed: $(grep -h FAILED "${LOGS}"/*.result | cut -d' ' -f1 | tr '\n' ' ')" >&2
    rc=1
  elif [[ ${rc} -ne 0 ]]; then
    echo "=== a lane failed before its scenarios ran (see its log)" >&2
  fi
  echo "=== molecule total $((SECONDS - start)) s"
  return "${rc}"
}

main "$@"
