"""Restart staggering and the restart script's drain logic."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "filter_plugins"))

from _scripts import load_script  # noqa: E402
from restart_schedule import restart_slot  # noqa: E402

vllm_restart = load_script("roles/engine_restarts/files/vllm_restart.py", "vllm_restart")


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


def test_running_requests_are_read_from_metrics() -> None:
    assert vllm_restart.requests_running(METRICS) == 3.0
    assert vllm_restart.requests_running(METRICS.replace(" 3.0", " 0.0")) == 0.0
    assert vllm_restart.requests_running("vllm:num_requests_waiting 4\n") is None


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_drain_waits_for_zero_then_stops_waiting() -> None:
    fake = FakeTime()
    log = io.StringIO()
    restarter = vllm_restart.Restarter(log, 60, 60, fake.clock, fake.sleep)
    answers = iter([METRICS, METRICS, METRICS.replace(" 3.0", " 0.0")])
    restarter.http = lambda url, body=None, timeout=10: next(answers)  # type: ignore[method-assign]
    replica = vllm_restart.Replica("vllm-0.service", 8000, "tiny-qwen2")
    restarter.drain(replica)
    assert fake.now == 2 and "drained: 0 requests running" in log.getvalue()


def test_drain_is_bounded_by_its_timeout() -> None:
    fake = FakeTime()
    log = io.StringIO()
    restarter = vllm_restart.Restarter(log, 10, 60, fake.clock, fake.sleep)
    restarter.http = lambda url, body=None, timeout=10: METRICS  # type: ignore[method-assign]
    restarter.drain(vllm_restart.Replica("vllm-1.service", 8001, "m"))
    assert fake.now == 10
    line = log.getvalue().strip()
    assert "vllm-1.service :8001 drain timeout after 10 s with 3.0 requests running" in line
    assert line[:4].isdigit() and "T" in line.split()[0]  # ISO timestamp first


def test_the_test_completion_uses_the_engines_api_key(tmp_path: Path) -> None:
    env = tmp_path / "vllm-0.env"
    env.write_text('HF_HUB_OFFLINE=1\nVLLM_API_KEY="s3cr=t"\n')
    assert vllm_restart.Replica("vllm-0.service", 8000, "m", str(env)).api_key() == "s3cr=t"
    assert vllm_restart.Replica("vllm-0.service", 8000, "m", str(tmp_path / "x")).api_key() == ""
    from restart_schedule import restart_replicas

    replicas = restart_replicas([{"name": "vllm-1", "port": 8001, "plan": {"model": "/m"}}],
                                "", "/etc/vllm")
    assert replicas == [{"unit": "vllm-1.service", "port": 8001, "model": "/m",
                         "env_file": "/etc/vllm/vllm-1.env"}]


def test_gateway_commands_go_to_haproxys_runtime_api(tmp_path: Path) -> None:
    import socket
    import threading

    path = tmp_path / "admin.sock"
    received: list[str] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()

    def serve(answers: list[bytes]) -> None:
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                received.append(conn.recv(4096).decode())
                conn.sendall(answer)

    thread = threading.Thread(target=serve, args=([b"", b"No such server.\n"],))
    thread.start()
    gateway = vllm_restart.Gateway(path)
    gateway.set_state("vllm-0", "drain")
    with pytest.raises(OSError, match="haproxy: No such server."):
        gateway.set_state("vllm-9", "ready")
    thread.join(5)
    server.close()
    assert received == ["set server vllm/vllm-0 state drain\n",
                        "set server vllm/vllm-9 state ready\n"]


def test_gateway_status_is_read_from_show_stat(tmp_path: Path) -> None:
    import socket
    import threading

    path = tmp_path / "admin.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen()
    stat = (b"# pxname,svname,qcur,status,weight\nvllm,FRONTEND,,OPEN,\n"
            b"vllm,vllm-0,0,UP,1\nvllm,vllm-1,0,DRAIN,1\nvllm,BACKEND,0,UP,2\n\n")

    def serve() -> None:
        for _ in range(3):
            conn, _ = server.accept()
            with conn:
                assert conn.recv(4096) == b"show stat\n"
                conn.sendall(stat)

    thread = threading.Thread(target=serve)
    thread.start()
    gateway = vllm_restart.Gateway(path)
    assert gateway.status("vllm-0") == "UP"
    assert gateway.status("vllm-1") == "DRAIN"
    with pytest.raises(OSError, match="no server vllm/vllm-7"):
        gateway.status("vllm-7")
    thread.join(5)
    server.close()
