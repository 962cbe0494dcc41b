#!/usr/bin/env bash
# Run every molecule scenario in two lanes side by side.
#
#   engine lane: the scenarios that start the CPU engine and take longest (vllm_server, site,
#                operations), plus nvidia_driver, test_hosts and vllm_plan to level the lanes, one
#                after another, after building localhost/testhost:engine;
#   host lane:   every other scenario (model, monitoring, firewall, driver preflight), one after
#                another, then the benchmark and engine_group scenarios: they need the engine
#                image, so the host lane waits for the engine lane's build of it first.
#
# The benchmark used to run alone after both lanes because its gate measures TTFT; its
# ceiling on the CPU engine (3000 ms p50) is ~70 x what it measures (13-42 ms), so it now
# runs beside the engine lane and CI saves its ~6.5 minutes of wall time.
#
# Each scenario runs with MOLECULE_IMAGE set to the image scripts/molecule-image.sh names
# for it (the base platform's image; localhost/testhost:engine for the engine scenarios).
# Each lane's output goes to its own log under MOLECULE_LANES_LOGS (default
# .molecule-lanes/), whose lines are also echoed here prefixed with the lane's name.
# The engine lane starts first; the host lane's scenarios are mostly apt and container
# I/O, so the two share the cores without starving the engine's health waits.
#
# Usage: scripts/molecule-lanes.sh [--host-first COMMAND] [--host-last COMMAND] SCENARIO...
#   --host-first COMMAND: run COMMAND (e.g. "make lint unit") at the head of the host lane;
#   `make test` puts the lint, unit and sanity checks there, since the host lane has room
#   beside the engine lane (on 2 cores, 2026-12-06 late: both lanes ~51 min, CI 3271 s in all).
#   --host-last COMMAND: run COMMAND at the end of the host lane, after the engine image is
#   built (`make test` runs the KV oracle there, which runs inside that image, and the EE image).
# Exit: 0 when every scenario (and COMMAND) passed, 1 otherwise (each failure is named).
set -euo pipefail

# nvidia_driver, test_hosts and vllm_plan (no engine) run here too, to level the lanes.
# Measured 2026-12-07 late on 2 cores, the CPU engines unpinned (docs/testing.md): a clean
# clone's .ci/run passed in 3573 s with the lanes level, engine 3477 s and host 3457 s.
readonly ENGINE_SCENARIOS=(vllm_server site operations nvidia_driver test_hosts vllm_plan)
# On the engine image, at the end of the host lane (after the engine lane has built it).
readonly HOST_ENGINE_SCENARIOS=(benchmark engine_group)
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

# prefix LANE EPOCH: each line as "[LANE +SECONDS] line", SECONDS since EPOCH (the lanes'
# start) when the line came: a CI log then says where each lane's time went. bash's read
# takes a pipe a byte at a time, so a line is stamped when it is written (mawk reads a pipe
# in blocks, and stamped a quiet lane's lines minutes late).
prefix() {
  local lane="$1" epoch="$2" line now
  while IFS= read -r line || [[ -n "${line}" ]]; do
    printf -v now '%(%s)T' -1
    printf '[%s +%ds] %s\n' "${lane}" "$((now - epoch))" "${line}"
  done
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

# run_command LANE NAME COMMAND: run COMMAND, recorded like a scenario under NAME.
run_command() {
  local lane="$1" name="$2" command="$3" start=${SECONDS}
  echo "=== [${lane}] ${command}"
  if bash -c "${command}" 2>&1 | tee "${LOGS}/${name}.log"; then
    echo "=== [${lane}] ${name} passed in $((SECONDS - start)) s"
    echo "${name} passed $((SECONDS - start))" >> "${LOGS}/${lane}.result"
  else
    echo "=== [${lane}] ${name} (${command}) FAILED after $((SECONDS - start)) s"
    echo "${name} FAILED $((SECONDS - start))" >> "${LOGS}/${lane}.result"
    return 1
  fi
}

# wait_for_engine_image LANE ENGINE_PID: wait until the engine lane has built the engine
# image (its exit status in ${LOGS}/engine-image.rc); 1 when that build failed or the
# engine lane ended without saying.
wait_for_engine_image() {
  local lane="$1" engine_pid="$2" start=${SECONDS}
  echo "=== [${lane}] waiting for the engine lane's build of the engine image"
  until [[ -s "${LOGS}/engine-image.rc" ]]; do
    if ! kill -0 "${engine_pid}" 2>/dev/null && [[ ! -s "${LOGS}/engine-image.rc" ]]; then
      echo "=== [${lane}] the engine lane ended without building the engine image"
      return 1
    fi
    sleep 2
  done
  if [[ "$(cat "${LOGS}/engine-image.rc")" != 0 ]]; then
    echo "=== [${lane}] the engine image did not build (see the engine lane's log)"
    return 1
  fi
  echo "=== [${lane}] engine image ready after $((SECONDS - start)) s of waiting"
}

# record_failed LANE NAME...: record NAMEs as failed without running them.
record_failed() {
  local lane="$1" name; shift
  for name in "$@"; do
    echo "${name} FAILED 0" >> "${LOGS}/${lane}.result"
    echo "not run: the engine image did not build" > "${LOGS}/${name}.log"
  done
}

main() {
  local engine=() host=() host_engine=() scenario first="" last=""
  while [[ "${1:-}" == --host-* ]]; do
    case "$1" in
      --host-first) first="$2" ;;
      --host-last) last="$2" ;;
      *) echo "molecule-lanes: unknown option $1" >&2; return 2 ;;
    esac
    shift 2
  done
  for scenario in "$@"; do
    if in_list "${scenario}" "${ENGINE_SCENARIOS[@]}"; then
      engine+=("${scenario}")
    elif in_list "${scenario}" "${HOST_ENGINE_SCENARIOS[@]}"; then
      host_engine+=("${scenario}")
    else
      host+=("${scenario}")
    fi
  done
  rm -rf "${LOGS}"
  mkdir -p "${LOGS}"
  : > "${LOGS}/engine.result"
  : > "${LOGS}/host.result"

  # Each lane is a pipeline (lane | prefix | log) in the background: waiting for it waits
  # for its last line to be written too (pipefail gives the lane's status), so the summary
  # below comes after every lane line. With the prefixer in a process substitution, a loaded
  # machine printed the summary first and the lane's last lines after it.
  local start=${SECONDS} epoch engine_pid host_pid rc=0
  epoch="$(date +%s)"
  (
    image_rc=0
    scripts/build-engine-image.sh || image_rc=$?
    echo "${image_rc}" > "${LOGS}/engine-image.rc"
    [[ ${image_rc} -eq 0 ]] || exit 1
    run_lane engine "${engine[@]}"
  ) 2>&1 | prefix engine "${epoch}" | tee "${LOGS}/engine.log" &
  engine_pid=$!
  (
    rc=0
    if [[ -n "${first}" ]]; then run_command host checks "${first}" || rc=1; fi
    run_lane host "${host[@]}" || rc=1
    if ((${#host_engine[@]})) || [[ -n "${last}" ]]; then
      if wait_for_engine_image host "${engine_pid}"; then
        run_lane host "${host_engine[@]}" || rc=1
        if [[ -n "${last}" ]]; then run_command host last "${last}" || rc=1; fi
      else
        record_failed host "${host_engine[@]}"
        rc=1
      fi
    fi
    exit "${rc}"
  ) 2>&1 | prefix host "${epoch}" | tee "${LOGS}/host.log" &
  host_pid=$!
  wait "${engine_pid}" || rc=1
  wait "${host_pid}" || rc=1

  echo "=== molecule summary (scenario, result, seconds)"
  cat "${LOGS}/engine.result" "${LOGS}/host.result"
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
