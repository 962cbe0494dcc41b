"""Drained restarts on a real engine behind the gateway, counted by a client under steady
load: every restart path (rolling_restart.yml, a deploy that changes a flag, vllm-restart
itself) through HAProxy's admin socket at a non-default path, and the last serving replica
refused unless the downtime is accepted. The load: two workers, 127.0.0.1 only, bounded in
time and count."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = Path(__file__).resolve().parents[1]
LOAD = SCENARIO / "files" / "steady_load.py"
KEY = "molecule-operations-key"  # converge.yml's test value, not a secret
SOCKET = "/run/haproxy/engine-gateway.sock"  # gateway.yml: not HAProxy's default path
UNITS = ("vllm-0", "vllm-1")
STAMP = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 "


def _pid(host: Any, unit: str) -> str:
    return str(host.run(f"systemctl show -p InvocationID --value {unit}").stdout.strip())


def _admin(host: Any, command: str) -> str:
    """One command on HAProxy's admin socket, from the host."""
    script = ("import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
              "s.sendall(sys.argv[2].encode()+b'\\n'); "
              "print(b''.join(iter(lambda: s.recv(65536), b'')).decode())")
    return str(host.check_output(f"python3 -c \"{script}\" {SOCKET} '{command}'"))


def _run_in_unit(host: Any, command: str, timeout: float = 900) -> SimpleNamespace:
    """Run a command that lasts minutes (a restart with the engine's load) in a transient
    systemd unit on the host, and wait for its exit status with short execs. One podman exec
    held for minutes can lose its exit status when the CI machine is loaded (podman: "timed
    out waiting for file .../exit/...: internal libpod error", rc 255), which failed the test
    for the transport, not for the restart."""
    tag = f"operations-test-{uuid.uuid4().hex[:8]}"
    host.check_output(f"cat > /tmp/{tag}.sh <<'EOF'\n{command}\n"
                      f"echo $? > /tmp/{tag}.rc.part && mv /tmp/{tag}.rc.part /tmp/{tag}.rc\nEOF")
    host.check_output(f"systemd-run --unit {tag} --collect "
                      f"-p StandardOutput=file:/tmp/{tag}.out -p StandardError=file:/tmp/{tag}.err "
                      f"/bin/sh /tmp/{tag}.sh")
    deadline = time.monotonic() + timeout
    while not host.file(f"/tmp/{tag}.rc").exists:
        assert time.monotonic() < deadline, f"{command!r} still running after {timeout} s"
        time.sleep(2)
    return SimpleNamespace(rc=int(host.file(f"/tmp/{tag}.rc").content_string.strip()),
                           stdout=host.file(f"/tmp/{tag}.out").content_string,
                           stderr=host.file(f"/tmp/{tag}.err").content_string)


def _status(host: Any, server: str) -> str:
    rows = [line.split(",") for line in _admin(host, "show stat").splitlines()]
    header = rows[0]
    row = next(r for r in rows[1:] if r[:2] == ["vllm", server])
    return row[header.index("status")]


def _log(host: Any) -> list[str]:
    return list(host.file("/var/log/vllm/restart.log").content_string.splitlines())


@contextmanager
def steady_load(host: Any, result: dict[str, Any]) -> Iterator[None]:
    """Completions through the gateway while the block runs (10 s before and after it)."""
    host.run("rm -f /tmp/load.stop /tmp/load.json")
    host.check_output(f"cat > /root/steady_load.py <<'EOF'\n{LOAD.read_text()}\nEOF")
    host.check_output("nohup python3 /root/steady_load.py --stop /tmp/load.stop "
                      f"--out /tmp/load.json --max-seconds 900 --max-requests 5000 --key {KEY} "
                      ">/dev/null 2>&1 &")
    time.sleep(10)  # the stream is flowing before the restart begins
    try:
        yield
    finally:
        time.sleep(10)  # and keeps flowing after it
        host.run("touch /tmp/load.stop")
        for _attempt in range(90):
            if host.file("/tmp/load.json").exists:
                break
            time.sleep(2)
        result.update(json.loads(host.file("/tmp/load.json").content_string))
        print(f"load: {result}")


def playbook(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A playbook against the scenario's host, as molecule runs them."""
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
           # The checkout is the collection vllm_fleet.serving.
           "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(
               [str(ROOT / ".collections"), "~/.ansible/collections",
                "/usr/share/ansible/collections"]),
           "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"),
         "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(path), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False)


def _drained_restarts(log: list[str], unit: str, port: int) -> list[str]:
    """The steps of the unit's last drained restart, in order."""
    steps = [line for line in log if f"{unit}.service :{port} " in line]
    begin = max(i for i, line in enumerate(steps) if "restart begins" in line)
    return steps[begin:]


def _assert_drained(log: list[str]) -> None:
    for unit, port in (("vllm-0", 8000), ("vllm-1", 8001)):
        steps = _drained_restarts(log, unit, port)
        assert all(re.match(STAMP, line) for line in steps), steps
        text = "\n".join(steps)
        for step in ("out of the gateway's rotation, draining",
                     "drained: 0 requests at the gateway, 0 running or waiting", "restarted",
                     "healthy and serving (test completion", "back in the gateway's rotation"):
            assert step in text, (step, steps)
    first_back = max(i for i, line in enumerate(log) if "vllm-0.service" in line
                     and "back in the gateway's rotation" in line)
    second_out = max(i for i, line in enumerate(log) if "vllm-1.service" in line
                     and "out of the gateway's rotation" in line)
    assert first_back < second_out  # one replica at a time


def test_rolling_restart_playbook_under_steady_load_fails_no_request(host: Any) -> None:
    before = {unit: _pid(host, unit) for unit in UNITS}
    load: dict[str, Any] = {}
    with steady_load(host, load):
        run = playbook(ROOT / "playbooks/rolling_restart.yml")
    assert run.returncode == 0, run.stdout[-3000:]
    assert load["failed"] == 0, load
    assert load["ok"] >= 20
    for unit, invocation in before.items():
        assert _pid(host, unit) not in (invocation, ""), unit
    _assert_drained(_log(host))


def test_the_last_serving_replica_is_refused_unless_downtime_is_accepted(host: Any) -> None:
    """vllm-1 in maintenance: vllm-0 is the only replica serving. Restarting it is refused
    without a drop; with a reason it goes ahead, and the log's 5xx count is what the gateway
    answered: at least one, and no more than the clients saw."""
    _admin(host, "set server vllm/vllm-1 state maint")
    try:
        vllm_0 = _pid(host, "vllm-0")
        load: dict[str, Any] = {}
        with steady_load(host, load):
            refused = host.run("/usr/local/sbin/vllm-restart restart --only vllm-0 "
                               "--health-timeout 300")
        assert refused.rc == 3, refused.stdout + refused.stderr
        assert "last replica serving on this host" in refused.stderr
        assert "vllm_server_restart_downtime_reason" in refused.stderr
        assert "vllm_server_upstream_drain_command" in refused.stderr
        assert _pid(host, "vllm-0") == vllm_0 and _status(host, "vllm-0").startswith("UP")
        assert load["failed"] == 0, load

        # Prometheus probes the gateway's /health every 2 s (GatewayDown): its 503s would
        # count at the gateway too. The load is the only client while the downtime is counted.
        host.run("systemctl stop prometheus")
        load = {}
        with steady_load(host, load):
            accepted = _run_in_unit(host, "/usr/local/sbin/vllm-restart restart --only vllm-0 "
                                    "--health-timeout 300 --downtime-reason 'operations test'")
        assert accepted.rc == 0, accepted.stdout + accepted.stderr
        assert _pid(host, "vllm-0") != vllm_0
        log = "\n".join(_log(host)[-12:])
        assert "downtime accepted (operations test)" in log, log
        count = re.search(r"the gateway answered (\d+) 5xx meanwhile", log)
        assert count, log
        print(f"gateway 5xx: {count.group(1)}; clients: {load}")
        assert 1 <= int(count.group(1)) <= load["failed"], (count.group(1), load)
    finally:
        _admin(host, "set server vllm/vllm-1 state ready")
        host.run("systemctl start prometheus")
    for _attempt in range(30):
        if _status(host, "vllm-1").startswith("UP"):
            break
        time.sleep(1)
    assert _status(host, "vllm-1").startswith("UP")


def test_a_deploy_that_changes_a_flag_restarts_both_replicas_drained(host: Any) -> None:
    """First with vllm-1 in maintenance: vllm-0 would be the last one serving, so the deploy
    fails and both restarts stay pending. With vllm-1 back, the same deploy (no file changes
    any more) restarts both, drained, one at a time. No client request fails throughout."""
    before = {unit: _pid(host, unit) for unit in UNITS}
    seqs = [w for w in host.file("/srv/vllm/bin/vllm-0.sh").content_string.split() if w != "\\"]
    new = 4 if seqs[seqs.index("--max-num-seqs") + 1] != "4" else 3
    load: dict[str, Any] = {}
    with steady_load(host, load):
        _admin(host, "set server vllm/vllm-1 state maint")
        try:
            refused = playbook(SCENARIO / "gateway.yml", "-e", f"operations_max_num_seqs={new}")
        finally:
            _admin(host, "set server vllm/vllm-1 state ready")
        assert refused.returncode != 0, refused.stdout[-3000:]
        assert "last replica serving on this host" in refused.stdout + refused.stderr
        pending = host.run("ls /etc/vllm/").stdout.split()
        assert {"vllm-0.restart-pending", "vllm-1.restart-pending"} <= set(pending), pending
        assert {unit: _pid(host, unit) for unit in UNITS} == before
        for _attempt in range(30):
            if _status(host, "vllm-1").startswith("UP"):
                break
            time.sleep(1)
        run = playbook(SCENARIO / "gateway.yml", "-e", f"operations_max_num_seqs={new}")
    assert run.returncode == 0, run.stdout[-3000:]
    assert load["failed"] == 0, load
    for unit, invocation in before.items():
        assert _pid(host, unit) not in (invocation, ""), unit
        script = [w for w in host.file(f"/srv/vllm/bin/{unit}.sh").content_string.split()
                  if w != "\\"]
        assert script[script.index("--max-num-seqs") + 1] == str(new)
    _assert_drained(_log(host))
    assert f"maxconn {new}" in host.file("/etc/haproxy/haproxy.cfg").content_string
    assert not host.run("ls /etc/vllm/*.restart-pending").stdout.strip()


def test_weekly_restart_is_scheduled_with_its_paths_and_rotated(host: Any) -> None:
    cron = host.file("/etc/cron.d/vllm-restart").content_string
    assert re.search(r"^0 4 \* \* 1 root /usr/local/sbin/vllm-restart restart "
                     r"--config=/etc/vllm/replicas.json "
                     rf"--gateway-socket={re.escape(SOCKET)} ", cron, re.M), cron
    assert host.file("/etc/logrotate.d/vllm-restart").contains("rotate 12")
    config = json.loads(host.file("/etc/vllm/replicas.json").content_string)
    assert config["gateway_socket"] == SOCKET and config["backend"] == "vllm"
    assert config["downtime_reason"] == ""
    assert [r["unit"] for r in config["replicas"]] == ["vllm-0.service", "vllm-1.service"]
    assert {r["model"] for r in config["replicas"]} == {"tiny-qwen2"}


def test_an_unknown_replica_is_refused(host: Any) -> None:
    result = host.run("/usr/local/sbin/vllm-restart --only vllm-9")
    assert result.rc == 2 and "no replicas to restart" in result.stderr
