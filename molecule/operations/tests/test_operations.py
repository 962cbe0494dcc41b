"""Drained rolling restarts on a real engine behind the gateway, and the restart schedule."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

LOAD = Path(__file__).resolve().parents[1] / "files" / "steady_load.py"


def _pid(host: Any, unit: str) -> str:
    return str(host.run(f"systemctl show -p MainPID --value {unit}").stdout.strip())


def test_rolling_restart_under_steady_load_fails_no_request(host: Any) -> None:
    host.run("rm -f /tmp/load.stop /tmp/load.json")
    host.check_output(f"cat > /root/steady_load.py <<'EOF'\n{LOAD.read_text()}\nEOF")
    host.check_output("nohup python3 /root/steady_load.py --stop /tmp/load.stop "
                      "--out /tmp/load.json --max-seconds 900 --key molecule-operations-key "
                      ">/dev/null 2>&1 &")
    time.sleep(10)  # the stream is flowing before the restart begins
    before = {unit: _pid(host, unit) for unit in ("vllm-0", "vllm-1")}
    restart = host.run("/usr/local/sbin/vllm-restart --health-timeout 300")
    time.sleep(10)  # and keeps flowing after it
    host.run("touch /tmp/load.stop")
    for _ in range(60):
        if host.file("/tmp/load.json").exists:
            break
        time.sleep(2)
    assert restart.rc == 0, restart.stdout + restart.stderr
    load = json.loads(host.file("/tmp/load.json").content_string)
    assert load["failed"] == 0, load["errors"]
    assert load["ok"] >= 20
    for unit, pid in before.items():
        assert _pid(host, unit) not in (pid, "0"), unit
    log = host.file("/var/log/vllm/restart.log").content_string.splitlines()
    stamp = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00 "
    for unit, port in (("vllm-0", 8000), ("vllm-1", 8001)):
        steps = [line for line in log if f"{unit}.service :{port} " in line][-4:]
        assert all(re.match(stamp, line) for line in steps), steps
        assert "out of the gateway's rotation, draining" in steps[0]
        assert "drained: 0 requests running" in steps[1]
        assert "restarted; waiting for /health" in steps[2]
        assert "healthy and serving (test completion" in steps[3]
    first_done = next(i for i, line in enumerate(log) if "vllm-0.service" in line
                      and "healthy and serving" in line)
    second_begins = next(i for i, line in enumerate(log) if "vllm-1.service" in line
                         and "restart begins" in line)
    assert first_done < second_begins  # one replica at a time


def test_weekly_restart_is_scheduled_and_rotated(host: Any) -> None:
    cron = host.file("/etc/cron.d/vllm-restart").content_string
    assert re.search(r"^0 4 \* \* 1 root /usr/local/sbin/vllm-restart ", cron, re.M), cron
    assert host.file("/etc/logrotate.d/vllm-restart").contains("rotate 12")
    replicas = json.loads(host.file("/etc/vllm/replicas.json").content_string)
    assert [r["unit"] for r in replicas] == ["vllm-0.service", "vllm-1.service"]
    assert {r["model"] for r in replicas} == {"tiny-qwen2"}


def test_an_unknown_replica_is_refused(host: Any) -> None:
    result = host.run("/usr/local/sbin/vllm-restart --only vllm-9.service")
    assert result.rc == 2 and "no replicas to restart" in result.stderr
