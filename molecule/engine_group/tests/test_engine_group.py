"""One engine on two containers (converge.yml): rank 0 serves the API, rank 1 runs headless,
over gloo on the test network; the roles' preflight, order and group restart, for real."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml
from host_http import request_in_host  # noqa: E402
from scenario_playbook import run_playbook  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
KEY = "molecule-group-key"  # vars/group.yml's test value
RANK0, RANK1 = "engine_group-rank0", "engine_group-rank1"
UNIT = "vllm-0.service"
# A change of the environment on every member: the CPU engine's own variables plus one more
# (an extra var replaces the dict whole).
_CPU_ENV = yaml.safe_load(
    (ROOT / "inventories/local/group_vars/vllm_servers/cpu_engine.yml").read_text()
)["vllm_server_environment"]
CHANGE = json.dumps({"vllm_server_environment": {**_CPU_ENV, "GROUP_TEST": "1"}})


@pytest.fixture(scope="module")
def rank0() -> Any:
    return testinfra.get_host(f"podman://{RANK0}")


@pytest.fixture(scope="module")
def rank1() -> Any:
    return testinfra.get_host(f"podman://{RANK1}")


@pytest.fixture
def host() -> Any:  # testinfra's default fixture, unused: each test names its member
    return None


def address(member: Any) -> str:
    return str(member.check_output("hostname -I").split()[0])


def invocation(member: Any) -> str:
    return str(member.check_output(f"systemctl show -p InvocationID --value {UNIT}"))


def completion(member: Any, key: str = KEY) -> tuple[int, str]:
    return request_in_host(member, "http://127.0.0.1:8000/v1/completions",
                           {"model": "tiny-qwen2", "prompt": "hello", "max_tokens": 4}, key)


def playbook_run(playbook: str, *args: str) -> subprocess.CompletedProcess[str]:
    """One of the scenario's playbooks against both members, as molecule runs them."""
    return run_playbook(Path(__file__).resolve().parents[1] / playbook, *args)


def test_both_ranks_run_and_only_rank_0_waits_for_health(rank0: Any, rank1: Any) -> None:
    assert rank0.service("vllm-0").is_running and rank1.service("vllm-0").is_running
    unit0 = rank0.check_output(f"systemctl cat {UNIT}")
    unit1 = rank1.check_output(f"systemctl cat {UNIT}")
    assert "ExecStartPost=/srv/vllm/bin/vllm-wait-healthy 8000" in unit0
    assert "ExecStartPost" not in unit1 and "rank 1 of 2" in unit1 and "headless" in unit1


def argv(member: Any) -> list[str]:
    """The words the launch script execs."""
    script = member.file("/srv/vllm/bin/vllm-0.sh").content_string
    return shlex.split(script.split("\nexec", 1)[1].replace("\\\n", " "))


def flag(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def test_each_rank_runs_its_own_argv(rank0: Any, rank1: Any) -> None:
    words = {0: argv(rank0), 1: argv(rank1)}
    for rank, these in words.items():
        assert these[:2] == ["/usr/local/bin/vllm", "serve"]
        assert (flag(these, "--nnodes"), flag(these, "--node-rank")) == ("2", str(rank))
        assert flag(these, "--master-addr") == address(rank0)
        assert flag(these, "--pipeline-parallel-size") == "2"
    assert "--headless" in words[1] and "--headless" not in words[0]
    # Only rank 0 serves the API (its --host; the port is vLLM's default 8000, the plan's).
    assert "--host" in words[0] and "--host" not in words[1]


def test_sockets_are_pinned_to_the_fabric_interface(rank0: Any, rank1: Any) -> None:
    for member in (rank0, rank1):
        env = dict(line.split("=", 1) for line in member.check_output(
            "grep -E '^(VLLM_HOST_IP|GLOO_SOCKET_IFNAME|NCCL_SOCKET_IFNAME|MASTER_ADDR)=' "
            "/etc/vllm/vllm-0.env").splitlines())
        assert env == {"VLLM_HOST_IP": address(member), "GLOO_SOCKET_IFNAME": "eth0",
                       "NCCL_SOCKET_IFNAME": "eth0", "MASTER_ADDR": address(rank0)}


def test_the_group_serves_a_completion_with_the_key_only(rank0: Any, rank1: Any) -> None:
    status, body = completion(rank0)
    assert status == 200, body
    assert json.loads(body)["choices"][0]["text"]
    assert completion(rank0, key="")[0] == 401
    # Both stages ran it: rank 1's engine joined as pipeline rank 1 of world size 2.
    log1 = rank1.check_output(f"journalctl -u {UNIT} --no-pager -o cat")
    assert "world_size=2 rank=1" in log1 and "PP rank 1" in log1


def test_the_benchmark_gate_and_sweep_measure_the_group(rank0: Any) -> None:
    """benchmark.yml: the gate passes at 1 and 4 concurrent requests through rank 0
    (every request crosses both stages), with the plateau and its plot; rank 1 runs nothing."""
    run = playbook_run("benchmark.yml")
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    results = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "benchmarks"
    assert (results / RANK0 / "vllm-0.json").exists()
    assert not (results / RANK1).exists()
    assert not rank0.run("ls -d /tmp/vllm-bench.* 2>/dev/null").stdout.strip()


def test_a_fabric_interface_that_does_not_exist_is_refused_before_any_change(
        rank0: Any, rank1: Any) -> None:
    before = {m: (invocation(m), m.file("/etc/vllm/vllm-0.env").sha256sum)
              for m in (rank0, rank1)}
    run = playbook_run("converge.yml", "-e", "vllm_plan_group_interface=fab9",
                       "-e", CHANGE)
    out = run.stdout + run.stderr  # molecule's env may send failures to stderr
    assert run.returncode != 0
    assert "vllm_plan_group_interface 'fab9'" in out, out[-3000:]
    assert "no interface of this host by that name holds that address" in out
    assert {m: (invocation(m), m.file("/etc/vllm/vllm-0.env").sha256sum)
            for m in (rank0, rank1)} == before


def test_a_change_restarts_the_whole_group_in_order_and_it_serves_again(
        rank0: Any, rank1: Any) -> None:
    """A change of the environment (on every member) restarts the group as one unit: rank 0
    drained and stopped, rank 1 restarted, rank 0 started and gated on the group's health."""
    before = {RANK0: invocation(rank0), RANK1: invocation(rank1)}
    done = "headless rank of an engine group: restart done"
    restarts = rank1.check_output("cat /var/log/vllm/restart.log || true").count(done)
    run = playbook_run("converge.yml", "-e", CHANGE)
    assert run.returncode == 0, run.stdout[-3000:]
    assert invocation(rank0) != before[RANK0] and invocation(rank1) != before[RANK1]
    log = rank0.check_output("cat /var/log/vllm/restart.log")
    assert "stopped; `vllm-restart ready` puts it back" in log
    assert rank1.check_output("cat /var/log/vllm/restart.log").count(done) == restarts + 1
    assert completion(rank0)[0] == 200
    assert not rank0.file("/etc/vllm/vllm-0.restart-pending").exists
    assert not rank1.file("/etc/vllm/vllm-0.restart-pending").exists


def reaches(member: Any, address: str, port: int) -> bool:
    """A TCP connect from MEMBER (or, given None, this machine) answered within 3 s."""
    probe = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])),"
             " timeout=3).close(); print('yes')\nexcept ConnectionRefusedError: print('yes')\n"
             "except OSError: print('no')")
    if member is None:
        out = subprocess.run([sys.executable, "-c", probe, address, str(port)],
                             capture_output=True, text=True, check=True).stdout
    else:
        out = member.check_output(f"python3 -c {shlex.quote(probe)} {address} {port}")
    return out.strip() == "yes"


def test_the_group_ports_admit_the_other_member_only(rank0: Any, rank1: Any) -> None:
    """Rank 0's rendezvous port: rank 1 reaches it, this machine (on the same network, not a
    member) is dropped; the allowlist lists exactly the peer."""
    assert reaches(rank1, address(rank0), 29500)
    assert not reaches(None, address(rank0), 29500)
    rules = rank0.check_output("nft list table inet vllm_allowlist")
    assert f"elements = {{ {address(rank1)} }}" in rules
    assert "tcp dport { 29500, 32768-60999 } drop" in rules
