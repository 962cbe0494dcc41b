"""scripts/molecule-lanes.sh with a stand-in `molecule` and engine-image build: a failed
scenario's cause is repeated at the end of the output (CI shows only the end of a long log);
the benchmark and the --host-last command run in the host lane only after the engine lane
has built the engine image, and not at all when that build failed; the summary comes after
every lane's last line even when the lanes' prefixers lag."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_MOLECULE = """#!/usr/bin/env bash
# molecule test -s NAME: NAME 'vllm_server' fails as pytest does, every other one passes.
scenario="$3"
echo "start ${scenario}" >> events
for i in $(seq 1 300); do echo "noise line ${i} of ${scenario}"; done
if [[ "${scenario}" == vllm_server ]]; then
  echo "FAILED tests/test_vllm_server.py::test_health - AssertionError: engine said 503"
  echo "FAILED - RETRYING: [localhost]: Wait for instance(s) creation to complete"
  printf '  \033[2m\u2502\033[0m E       assert 503 == 200\n'  # molecule's boxed output
  exit 1
fi
"""


# sed that, as a lane's prefixer ("s/^/[lane] /"), hands on its lines only a second after its
# input ends, as a lagging prefixer does on a loaded machine: the lanes' output must still all
# come before the summary.
SLOW_PREFIXER = """#!/usr/bin/env bash
if [[ "$*" == *'s/^/['* ]]; then
  out="$("$REAL_SED" "$@")"
  sleep 1
  printf '%s\\n' "${out}"
else
  exec "$REAL_SED" "$@"
fi
"""


BUILD_OK = "#!/usr/bin/env bash\nsleep 3\necho built >> events\n"
BUILD_FAILS = "#!/usr/bin/env bash\nsleep 1\necho 'podman build failed' >&2\nexit 125\n"


def run_lanes(tmp_path: Path, *args: str,
              build: str = BUILD_OK) -> subprocess.CompletedProcess[str]:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name in ("molecule-lanes.sh", "molecule-image.sh"):
        shutil.copy(ROOT / "scripts" / name, scripts / name)
    (scripts / "build-engine-image.sh").write_text(build)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "molecule").write_text(FAKE_MOLECULE)
    (bin_dir / "sed").write_text(SLOW_PREFIXER)
    for path in (scripts / "build-engine-image.sh", bin_dir / "molecule", bin_dir / "sed"):
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "REAL_SED": shutil.which("sed") or "/bin/sed"}
    env.pop("MOLECULE_LANES_LOGS", None)
    return subprocess.run(["bash", "scripts/molecule-lanes.sh", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_failed_scenario_is_explained_at_the_end(tmp_path: Path) -> None:
    run = run_lanes(tmp_path, "vllm_server", "test_hosts")
    assert run.returncode == 1, run.stdout[-2000:]
    tail = "\n".join((run.stdout + run.stderr).splitlines()[-15:])
    assert "=== why vllm_server failed" in tail, tail
    assert "AssertionError: engine said 503" in tail and "E       assert 503 == 200" in tail
    why = tail.split("=== why vllm_server failed")[1]
    assert "noise line" not in why and "RETRYING" not in why, why
    assert "test_hosts passed" in run.stdout and "vllm_server FAILED" in run.stdout


def test_all_passed_prints_no_excerpt(tmp_path: Path) -> None:
    run = run_lanes(tmp_path, "test_hosts", "vllm_plan")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    assert "=== why" not in run.stdout + run.stderr
    assert (tmp_path / ".molecule-lanes/vllm_plan.log").read_text().count("noise line") == 300


def events(tmp_path: Path) -> list[str]:
    return (tmp_path / "events").read_text().splitlines()


def test_benchmark_and_last_command_wait_for_the_engine_image_in_the_host_lane(
        tmp_path: Path) -> None:
    run = run_lanes(tmp_path, "--host-last", "echo oracle >> events", "benchmark", "monitoring")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    order = events(tmp_path)
    # monitoring does not wait for the image; the benchmark and the last command do.
    assert order.index("start monitoring") < order.index("built"), order
    assert order.index("built") < order.index("start benchmark") < order.index("oracle"), order
    host = (tmp_path / ".molecule-lanes/host.result").read_text()
    assert host.split() == ["monitoring", "passed", host.split()[2], "benchmark", "passed",
                            host.split()[5], "last", "passed", host.split()[8]], host


def test_a_failed_engine_image_fails_the_benchmark_without_running_it(tmp_path: Path) -> None:
    run = run_lanes(tmp_path, "--host-last", "echo oracle >> events", "benchmark", "monitoring",
                    build=BUILD_FAILS)
    assert run.returncode == 1, run.stdout[-2000:]
    assert events(tmp_path) == ["start monitoring"]
    assert "benchmark FAILED" in run.stdout and "the engine image did not build" in run.stdout
    assert "=== failed: benchmark" in run.stderr, run.stderr
