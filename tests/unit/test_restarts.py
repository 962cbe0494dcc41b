"""Restart staggering, and vllm-restart: the one drained restart path of every replica,
driven against a fake HAProxy admin socket (a real UNIX socket server speaking the runtime
API's 'show stat' and 'set server ... state') and a fake engine and systemctl."""

from __future__ import annotations

import io
import json
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

from _scripts import ansible_env, load_script  # noqa: E402
from ansible_collections.vllm_fleet.serving.plugins.filter.restart_schedule import restart_slot  # noqa: E402

vllm_restart = load_script("roles/vllm_server/files/vllm_restart.py", "vllm_restart")


def test_hosts_of_a_group_never_share_a_window() -> None:
    slots = [restart_slot(i, "Mon 04:00", 30, hosts=16) for i in range(16)]
    starts = [(int(s["weekday"]) * 1440 + int(s["hour"]) * 60 + int(s["minute"])) for s in slots]
    assert starts == sorted(starts)
    assert all(b - a == 30 for a, b in zip(starts, starts[1:], strict=False))
    assert slots[0]["label"] == "Mon 04:00" and slots[3]["label"] == "Mon 05:30"


def test_slots_wrap_past_midnight_and_the_week() -> None:
    assert restart_slot(2, "Sun 23:00", 45)["label"] == "Mon 00:30"
    assert restart_slot(1, "Sat 23:30", 60) == {"weekday": "0", "hour": "0", "minute": "30",
                                                "label": "Sun 00:30"}


@pytest.mark.parametrize(("args", "message"), [
    ((0, "Monday 4am", 30), "is not like 'Mon 04:00'"),
    ((0, "Mon 24:00", 30), "is not like"),
    ((0, "Mon 04:00", 0), "whole number of minutes"),
    ((-1, "Mon 04:00", 30), "host index"),
    ((0, "Mon 04:00", 600, 20), "do not fit in a week"),
])
def test_bad_schedules_name_the_problem(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        restart_slot(*args)  # type: ignore[arg-type]


METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-qwen2"} 3.0
vllm:num_requests_waiting{engine="0",model_name="tiny-qwen2"} 7.0
"""
IDLE = METRICS.replace(" 3.0", " 0.0").replace(" 7.0", " 0.0")


def test_running_and_waiting_requests_both_count_as_busy() -> None:
    assert vllm_restart.engine_busy(METRICS) == 10.0
    assert vllm_restart.engine_busy(METRICS.replace(" 3.0", " 0.0")) == 7.0  # queued only
    assert vllm_restart.engine_busy(IDLE) == 0.0
    assert vllm_restart.engine_busy("vllm:cache_config_info 1\n") is None


@pytest.mark.parametrize(("status", "serving"), [
    ("UP", True), ("UP 1/3", True), ("no check", True), ("DOWN", False),
    ("DOWN 1/2", False), ("DRAIN", False), ("MAINT", False), ("NOLB", False)])
def test_which_haproxy_states_take_new_requests(status: str, serving: bool) -> None:
    assert vllm_restart.serving(status) is serving


class FakeHaproxy:
    """HAProxy's runtime API, the subset vllm-restart speaks, on a real UNIX socket."""

    def __init__(self, path: Path, servers: dict[str, str], backend: str = "vllm") -> None:
        self.path, self.backend = path, backend
        self.status = dict(servers)
        self.sessions = dict.fromkeys(servers, 0)
        self.fivexx = 0
        self.commands: list[str] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def stat(self) -> str:
        rows = ["# pxname,svname,qcur,scur,status,hrsp_5xx",
                f"{self.backend},FRONTEND,,0,OPEN,{self.fivexx}"]
        rows += [f"{self.backend},{name},0,{self.sessions[name]},{status},0"
                 for name, status in self.status.items()]
        rows.append(f"{self.backend},BACKEND,0,0,UP,{self.fivexx}")
        return "\n".join(rows) + "\n\n"

    def answer(self, line: str) -> str:
        self.commands.append(line)
        if line == "show stat":
            return self.stat()
        words = line.split()
        if words[:2] == ["set", "server"] and words[3] == "state":
            backend, _sep, server = words[2].partition("/")
            if backend != self.backend:
                return "No such backend.\n"
            if server not in self.status:
                return "No such server.\n"
            self.status[server] = {"ready": "UP", "drain": "DRAIN", "maint": "MAINT"}[words[4]]
            return ""
        return "Unknown command.\n"

    def serve(self) -> None:
        while True:
            try:
                conn, _address = self.sock.accept()
            except OSError:
                return
            with conn:
                line = conn.recv(4096).decode().strip()
                conn.sendall(self.answer(line).encode())

    def close(self) -> None:
        self.sock.close()


class FakeHost:
    """systemctl and the engine's HTTP endpoints, recorded."""

    def __init__(self, gateway: FakeHaproxy | None, active: set[str] | None = None,
                 completion_fails: bool = False, downtime_5xx: int = 0) -> None:
        self.gateway = gateway
        self.active = active if active is not None else {"vllm-0.service", "vllm-1.service"}
        self.completion_fails = completion_fails
        self.downtime_5xx = downtime_5xx
        self.calls: list[str] = []

    def system(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        if argv[:2] == ["systemctl", "is-active"]:
            return subprocess.CompletedProcess(argv, 0 if argv[-1] in self.active else 3, "", "")
        self.calls.append(" ".join(argv))
        if argv[:2] == ["systemctl", "restart"] and self.gateway is not None:
            server = argv[2].removesuffix(".service")
            if self.gateway.status.get(server) == "DRAIN" and not any(
                    vllm_restart.serving(s) for s in self.gateway.status.values()):
                self.gateway.fivexx += self.downtime_5xx  # no server UP meanwhile
        return subprocess.CompletedProcess(argv, 0, "", "")

    def fetch(self, url: str, body: dict[str, object] | None = None, timeout: float = 10,
              api_key: str = "") -> str:
        self.calls.append(f"GET {url}" if body is None else f"POST {url}")
        if url.endswith("/metrics"):
            return IDLE
        if url.endswith("/v1/completions"):
            if self.completion_fails:
                raise OSError("connection reset")
            return json.dumps({"choices": [{"text": "pong"}]})
        return ""


def write_config(tmp_path: Path, **extra: object) -> Path:
    config = tmp_path / "etc" / "replicas.json"
    config.parent.mkdir(exist_ok=True)
    replicas = [{"name": f"vllm-{i}", "unit": f"vllm-{i}.service", "port": 8000 + i,
                 "model": "tiny-qwen2", "env_file": str(config.parent / f"vllm-{i}.env")}
                for i in range(2)]
    config.write_text(json.dumps({"gateway_socket": "/run/haproxy/admin.sock",
                                  "backend": "vllm", "replicas": replicas, **extra}))
    return config


@pytest.fixture
def run_main(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    def run(host: FakeHost, *args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(vllm_restart, "run", host.system)
        monkeypatch.setattr(vllm_restart, "http", host.fetch)
        log = tmp_path / "restart.log"
        code = vllm_restart.main([*args, "--log", str(log)])
        return code, log.read_text() if log.exists() else "", ""
    yield run


def gateway_at(tmp_path: Path, servers: dict[str, str]) -> FakeHaproxy:
    """A gateway whose admin socket is NOT at HAProxy's default path."""
    directory = tmp_path / "run"
    directory.mkdir(exist_ok=True)
    return FakeHaproxy(directory / "engine-gateway.sock", servers)


def state_changes(gateway: FakeHaproxy) -> list[str]:
    return [c for c in gateway.commands if c.startswith("set server")]


def test_restart_drains_each_replica_through_the_socket_it_is_given(
        tmp_path: Path, run_main: Any) -> None:
    """The configuration names HAProxy's default socket; the command line (as the cron job
    and the deploy render it) a different one: the drain goes through that one."""
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "UP"})
    host = FakeHost(gateway)
    config = write_config(tmp_path)
    (config.parent / "vllm-0.restart-pending").write_text("x\n")
    code, log, _output = run_main(host, "restart", "--config", str(config),
                                  "--gateway-socket", str(gateway.path))
    gateway.close()
    assert code == 0, log
    assert state_changes(gateway) == [
        "set server vllm/vllm-0 state drain", "set server vllm/vllm-0 state ready",
        "set server vllm/vllm-1 state drain", "set server vllm/vllm-1 state ready"]
    restarts = [c for c in host.calls if c.startswith("systemctl")]
    assert restarts == ["systemctl restart vllm-0.service", "systemctl restart vllm-1.service"]
    # Drained (gateway and engine) before the restart, tested after it.
    first = host.calls.index("systemctl restart vllm-0.service")
    assert "GET http://127.0.0.1:8000/metrics" in host.calls[:first]
    assert "POST http://127.0.0.1:8000/v1/completions" in host.calls[first:]
    assert "drained: 0 requests at the gateway, 0 running or waiting" in log
    assert not (config.parent / "vllm-0.restart-pending").exists()


def test_the_configurations_socket_is_used_without_the_flag(tmp_path: Path,
                                                            run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "UP"})
    config = write_config(tmp_path, gateway_socket=str(gateway.path))
    code, log, _output = run_main(FakeHost(gateway), "restart", "--config", str(config),
                                  "--only", "vllm-1")
    gateway.close()
    assert code == 0, log
    assert state_changes(gateway) == ["set server vllm/vllm-1 state drain",
                                      "set server vllm/vllm-1 state ready"]


def test_the_last_serving_replica_is_refused_and_nothing_changes(
        tmp_path: Path, run_main: Any, capsys: pytest.CaptureFixture[str]) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "MAINT"})
    host = FakeHost(gateway)
    config = write_config(tmp_path)
    (config.parent / "vllm-0.restart-pending").write_text("x\n")
    code, log, _output = run_main(host, "restart", "--config", str(config),
                                  "--gateway-socket", str(gateway.path), "--only", "vllm-0")
    gateway.close()
    err = capsys.readouterr().err
    assert code == vllm_restart.EXIT_REFUSED == 3
    assert "vllm-0.service is the last replica serving on this host" in err
    assert "HAProxy answers 503 at once when no server is UP" in err
    for fix in ("vllm_server_upstream_drain_command", "vllm_server_upstream_ready_command",
                "vllm_server_restart_downtime_reason"):
        assert fix in err
    assert state_changes(gateway) == [] and host.calls == []
    assert "REFUSED" in log
    assert (config.parent / "vllm-0.restart-pending").exists()  # the next deploy retries


def test_a_missing_socket_is_no_silent_skip(tmp_path: Path, run_main: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 22: the old script restarted without draining when the socket was not where it
    looked. Now a running replica with no gateway to drain it through is the last one."""
    host = FakeHost(None)
    config = write_config(tmp_path)
    code, _log, _output = run_main(host, "restart", "--config", str(config),
                                   "--gateway-socket", str(tmp_path / "nowhere.sock"))
    err = capsys.readouterr().err
    assert code == 3
    assert f"no gateway admin socket at {tmp_path / 'nowhere.sock'}" in err
    assert "vllm_server_gateway_admin_socket" in err
    assert host.calls == []


def test_accepted_downtime_logs_the_reason_and_the_gateways_5xx(tmp_path: Path,
                                                                run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "MAINT"})
    gateway.fivexx = 5  # answered before the restart: not counted
    host = FakeHost(gateway, downtime_5xx=12)
    config = write_config(tmp_path)
    code, log, _output = run_main(host, "restart", "--config", str(config),
                                  "--gateway-socket", str(gateway.path), "--only", "vllm-0",
                                  "--downtime-reason", "maintenance window 42")
    gateway.close()
    assert code == 0, log
    assert "downtime accepted (maintenance window 42)" in log
    assert "the gateway answered 12 5xx meanwhile (reason: maintenance window 42)" in log
    assert host.calls.count("systemctl restart vllm-0.service") == 1


def test_an_upstream_balancer_covers_the_last_replica(tmp_path: Path, run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP"})
    host = FakeHost(gateway, active={"vllm-0.service"})
    config = write_config(tmp_path, upstream_drain_command="lb-out host1",
                          upstream_ready_command="lb-in host1")
    code, log, _output = run_main(host, "restart", "--config", str(config),
                                  "--gateway-socket", str(gateway.path), "--only", "vllm-0")
    gateway.close()
    assert code == 0, log
    shell = [c for c in host.calls if c.startswith(("/bin/sh", "systemctl"))]
    assert shell == ["/bin/sh -c lb-out host1", "systemctl restart vllm-0.service",
                     "/bin/sh -c lb-in host1"]
    assert state_changes(gateway) == ["set server vllm/vllm-0 state drain",
                                      "set server vllm/vllm-0 state ready"]


def test_a_replica_that_is_not_running_is_started_without_refusal(tmp_path: Path,
                                                                  run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "DOWN"})
    host = FakeHost(gateway, active=set())
    code, log, _output = run_main(host, "restart", "--config", str(write_config(tmp_path)),
                                  "--gateway-socket", str(gateway.path), "--only", "vllm-0")
    gateway.close()
    assert code == 0, log
    assert [c for c in host.calls if c.startswith("systemctl")] == [
        "systemctl start vllm-0.service"]
    assert state_changes(gateway) == ["set server vllm/vllm-0 state ready"]


def test_a_failed_test_completion_stops_the_run_and_keeps_the_mark(
        tmp_path: Path, run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "UP"})
    host = FakeHost(gateway, completion_fails=True)
    config = write_config(tmp_path)
    (config.parent / "vllm-0.restart-pending").write_text("x\n")
    code, log, _output = run_main(host, "restart", "--config", str(config),
                                  "--gateway-socket", str(gateway.path))
    gateway.close()
    assert code == 1
    assert "FAILED: test completion: connection reset" in log
    assert "systemctl restart vllm-1.service" not in host.calls  # vllm-1 keeps serving
    assert gateway.status["vllm-1"] == "UP"
    assert (config.parent / "vllm-0.restart-pending").exists()


def test_stop_then_ready_as_rebuild_runs_them(tmp_path: Path, run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "UP"})
    host = FakeHost(gateway)
    config = write_config(tmp_path, downtime_reason="rebuild",
                          upstream_ready_command="")
    code, log, _output = run_main(host, "stop", "--config", str(config),
                                  "--gateway-socket", str(gateway.path))
    assert code == 0, log
    assert [c for c in host.calls if c.startswith("systemctl")] == [
        "systemctl stop vllm-0.service", "systemctl stop vllm-1.service"]
    assert gateway.status == {"vllm-0": "MAINT", "vllm-1": "MAINT"}
    assert "last serving replica on this host: downtime accepted (rebuild)" in log
    host.active = set()
    host.calls.clear()
    code, log, _output = run_main(host, "ready", "--config", str(config),
                                  "--gateway-socket", str(gateway.path))
    gateway.close()
    assert code == 0, log
    assert [c for c in host.calls if c.startswith("systemctl")] == [
        "systemctl start vllm-0.service", "systemctl start vllm-1.service"]
    assert gateway.status == {"vllm-0": "UP", "vllm-1": "UP"}


def test_stopping_the_last_replica_is_refused_without_a_reason(tmp_path: Path,
                                                               run_main: Any) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "UP"})
    host = FakeHost(gateway)
    code, _log, _output = run_main(host, "stop", "--config", str(write_config(tmp_path)),
                                   "--gateway-socket", str(gateway.path))
    gateway.close()
    assert code == 3
    assert host.calls.count("systemctl stop vllm-0.service") == 1  # the first one went
    assert "systemctl stop vllm-1.service" not in host.calls
    assert gateway.status["vllm-1"] == "UP"


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def restarter(log: io.StringIO, answers: Iterator[str], drain_timeout: float = 60,
              gateway: Any = None) -> tuple[Any, FakeTime]:
    fake = FakeTime()
    config = vllm_restart.Config((), Path("/nonexistent.sock"))
    return vllm_restart.Restarter(
        config, log, gateway, drain_timeout, 60, fake.clock, fake.sleep,
        fetch=lambda url, body=None, timeout=10, api_key="": next(answers)), fake


def test_drain_waits_for_running_and_waiting_to_reach_zero() -> None:
    log = io.StringIO()
    waiting_only = METRICS.replace(" 3.0", " 0.0")
    r, fake = restarter(log, iter([METRICS, waiting_only, waiting_only, IDLE]))
    r.idle(vllm_restart.Replica("vllm-0", 8000, "tiny-qwen2"), behind_gateway=False)
    assert fake.now == 3 and "drained: 0 requests at the gateway, 0 running or waiting" \
        in log.getvalue()


def test_drain_is_bounded_by_its_timeout() -> None:
    log = io.StringIO()
    r, fake = restarter(log, iter([METRICS] * 20), drain_timeout=10)
    r.idle(vllm_restart.Replica("vllm-1", 8001, "m"), behind_gateway=False)
    assert fake.now == 10
    line = log.getvalue().strip()
    assert ("vllm-1.service :8001 drain timeout after 10 s with 0 at the gateway and 10.0 "
            "running or waiting") in line
    assert line[:4].isdigit() and "T" in line.split()[0]  # ISO timestamp first


def test_drain_also_waits_for_the_gateways_sessions(tmp_path: Path) -> None:
    gateway = gateway_at(tmp_path, {"vllm-0": "DRAIN", "vllm-1": "UP"})
    gateway.sessions["vllm-0"] = 2
    log = io.StringIO()
    answers = iter([IDLE] * 10)
    r, fake = restarter(log, answers, gateway=vllm_restart.Gateway(gateway.path))

    def sleep(seconds: float) -> None:
        fake.now += seconds
        gateway.sessions["vllm-0"] = max(0, gateway.sessions["vllm-0"] - 1)

    r.sleep = sleep
    r.idle(vllm_restart.Replica("vllm-0", 8000, "m"), behind_gateway=True)
    gateway.close()
    assert fake.now == 2


def test_the_test_completion_uses_the_engines_api_key(tmp_path: Path) -> None:
    env = tmp_path / "vllm-0.env"
    env.write_text('HF_HUB_OFFLINE=1\nVLLM_API_KEY="s3cr=t"\n')
    assert vllm_restart.Replica("vllm-0", 8000, "m", env_file=str(env)).api_key() == "s3cr=t"
    assert vllm_restart.Replica("vllm-0", 8000, "m",
                                env_file=str(tmp_path / "x")).api_key() == ""


def test_the_replicas_file_names_the_served_model() -> None:
    from ansible_collections.vllm_fleet.serving.plugins.filter.restart_schedule import (
        restart_replicas,
    )

    plan = {"model": "/srv/m", "argv": ["vllm", "serve", "/srv/m", "--served-model-name",
                                        "tiny", "--port", "8001"]}
    assert restart_replicas([{"name": "vllm-1", "port": 8001, "plan": plan}], "/etc/x") == [
        {"name": "vllm-1", "unit": "vllm-1.service", "port": 8001, "model": "tiny",
         "env_file": "/etc/x/vllm-1.env", "headless": False}]
    assert restart_replicas([{"name": "vllm-0", "port": 8000,
                              "plan": {"model": "/srv/m", "argv": []}}])[0]["model"] == "/srv/m"
    # A headless rank of an engine group (vllm_plan's replica carries its group).
    member = {"name": "vllm-0", "port": 8000, "plan": {"model": "/srv/m", "argv": []},
              "group": {"name": "g", "rank": 1, "headless": True}}
    assert restart_replicas([member])[0]["headless"] is True


@pytest.mark.parametrize("mode", ["restart", "stop", "ready"])
def test_a_headless_group_rank_is_handled_without_gateway_or_health(
        tmp_path: Path, run_main: Any, mode: str) -> None:
    """A headless rank serves no API: no drain, no /health, no test completion; systemctl
    alone, and a restart or start must leave the unit active (and clear its mark)."""
    config = write_config(tmp_path)
    data = json.loads(config.read_text())
    data["replicas"] = [{**data["replicas"][0], "headless": True}]
    config.write_text(json.dumps(data))
    (config.parent / "vllm-0.restart-pending").write_text("pending\n")
    host = FakeHost(None, active={"vllm-0.service"})
    code, log, _err = run_main(host, mode, "--config", str(config))
    verb = {"restart": "restart", "stop": "stop", "ready": "start"}[mode]
    assert code == 0, log
    assert host.calls == [f"systemctl {verb} vllm-0.service"], host.calls
    assert "headless rank of an engine group" in log
    assert (config.parent / "vllm-0.restart-pending").exists() == (mode == "stop")
    host = FakeHost(None, active=set())  # the unit did not come up
    code, log, _err = run_main(host, "restart", "--config", str(config))
    assert code == 1 and "headless rank not active" in log


def test_unknown_replicas_and_a_missing_configuration_are_usage_errors(
        tmp_path: Path, run_main: Any, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert run_main(FakeHost(None), "--config", str(config), "--only", "vllm-9")[0] == 2
    assert "no replicas to restart" in capsys.readouterr().err
    assert run_main(FakeHost(None), "--config", str(tmp_path / "none.json"))[0] == 2
    assert "Fix: converge the vllm_server role" in capsys.readouterr().err


def render_cron_job(tmp_path: Path, *roles_in_play: str, **extra: object) -> str:
    """The weekly cron job's command line exactly as engine_restarts' cron task renders it
    (its `job` expression, with the role's defaults and vars), by a real ansible-playbook;
    ``roles_in_play`` adds those roles' defaults, as site.yml's play has them."""
    role = ROOT / "roles/engine_restarts"
    tasks = yaml.safe_load((role / "tasks/main.yml").read_text())
    job = next(t["ansible.builtin.cron"]["job"] for t in tasks if "ansible.builtin.cron" in t)
    files = [str(ROOT / "roles" / r / "defaults/main.yml") for r in roles_in_play]
    files += [str(role / "defaults/main.yml"), str(role / "vars/main.yml")]
    playbook = [{"hosts": "localhost", "connection": "local", "gather_facts": False,
                 "vars_files": files,
                 "tasks": [{"ansible.builtin.copy": {"content": job, "dest": str(tmp_path / "job"),
                                                     "mode": "0644"}}]}]
    (tmp_path / "render.yml").write_text(yaml.safe_dump(playbook))
    (tmp_path / "extra.json").write_text(json.dumps(
        {"ansible_python_interpreter": sys.executable, **extra}))
    subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                    str(tmp_path / "render.yml"), "-e", f"@{tmp_path / 'extra.json'}"],
                   cwd=ROOT, env=ansible_env(), check=True, capture_output=True, text=True,
                   timeout=300)
    return (tmp_path / "job").read_text()


def test_the_cron_line_drains_through_a_moved_gateway_socket(tmp_path: Path,
                                                             run_main: Any) -> None:
    """Issue 22, item 2: set the documented engine_gateway_admin_socket to a non-default
    path; the cron line engine_restarts renders, run as cron runs it, drains through it."""
    gateway = gateway_at(tmp_path, {"vllm-0": "UP", "vllm-1": "UP"})
    config = write_config(tmp_path)  # names HAProxy's default socket, which is not there
    line = render_cron_job(tmp_path, "engine_gateway", "vllm_server",
                           engine_gateway_admin_socket=str(gateway.path),
                           vllm_server_config_dir=str(config.parent))
    argv = shlex.split(line.split(">", 1)[0])
    assert argv[0] == "/usr/local/sbin/vllm-restart"
    assert f"--gateway-socket={gateway.path}" in argv and f"--config={config}" in argv
    args = [a for a in argv[1:] if not a.startswith("--log=")]  # the log goes to tmp_path
    code, log, _output = run_main(FakeHost(gateway), *args)
    gateway.close()
    assert code == 0, log
    assert state_changes(gateway) == [
        "set server vllm/vllm-0 state drain", "set server vllm/vllm-0 state ready",
        "set server vllm/vllm-1 state drain", "set server vllm/vllm-1 state ready"]


def test_without_the_producer_roles_the_cron_line_takes_their_defaults(tmp_path: Path) -> None:
    """engine_restarts alone in a play: the paths are vllm_server's and engine_gateway's own
    defaults (read from their defaults files, not copied into engine_restarts)."""
    import yaml
    line = render_cron_job(tmp_path)
    defaults = {r: yaml.safe_load((ROOT / "roles" / r / "defaults/main.yml").read_text())
                for r in ("vllm_server", "engine_gateway")}
    assert f"--config={defaults['vllm_server']['vllm_server_config_dir']}/replicas.json" in line
    assert f"--gateway-socket={defaults['engine_gateway']['engine_gateway_admin_socket']}" in line
    for text in ((ROOT / "roles/engine_restarts" / f).read_text()
                 for f in ("defaults/main.yml", "vars/main.yml", "tasks/main.yml")):
        assert "/etc/vllm" not in text and "admin.sock" not in text
