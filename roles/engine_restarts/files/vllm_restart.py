#!/usr/bin/python3
"""Restart vLLM engine replicas one at a time: drain, restart, wait healthy, prove it serves.

Every step is logged with a UTC timestamp. The first failing replica stops the run (exit 1)
so the remaining replicas keep serving. Standard library only; installed by the
engine_restarts role, driven by cron (weekly, staggered) and playbooks/rolling_restart.yml.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

RUNNING = re.compile(r"^vllm:num_requests_running(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


@dataclass(frozen=True)
class Replica:
    unit: str
    port: int
    model: str
    env_file: str = ""

    def api_key(self) -> str:
        """VLLM_API_KEY from the replica's environment file, where the engine reads it."""
        try:
            text = Path(self.env_file).read_text() if self.env_file else ""
        except OSError:
            return ""
        for line in text.splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "VLLM_API_KEY":
                value = value.strip()
                return str(json.loads(value)) if value.startswith('"') else value
        return ""


def requests_running(metrics_text: str) -> float | None:
    """Sum of vllm:num_requests_running over its series; None when the metric is absent."""
    values = [float(v) for v in RUNNING.findall(metrics_text)]
    return sum(values) if values else None


def load_replicas(path: Path) -> list[Replica]:
    data = json.loads(path.read_text())
    return [Replica(str(r["unit"]), int(r["port"]), str(r["model"]), str(r.get("env_file", "")))
            for r in data]


class Gateway:
    """HAProxy's runtime API (engine_gateway role): take a replica out of rotation and back."""

    def __init__(self, path: Path, backend: str = "vllm") -> None:
        self.path = path
        self.backend = backend

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.path))
            sock.sendall(f"{line}\n".encode())
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        return answer.decode().strip()

    def set_state(self, server: str, state: str) -> None:
        text = self.command(f"set server {self.backend}/{server} state {state}")
        if text:  # HAProxy answers nothing on success
            raise OSError(f"haproxy: {text}")

    def status(self, server: str) -> str:
        """The server's check status from 'show stat' (UP, DOWN, DRAIN, MAINT, ...)."""
        lines = self.command("show stat").splitlines()
        if not lines or not lines[0].startswith("# "):
            raise OSError(f"haproxy: unexpected 'show stat' answer {lines[:1]}")
        header = lines[0][2:].split(",")
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("pxname") == self.backend and row.get("svname") == server:
                return row.get("status", "")
        raise OSError(f"haproxy: no server {self.backend}/{server}")


class Restarter:
    def __init__(self, log: TextIO, drain_timeout: float, health_timeout: float,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 gateway: Gateway | None = None) -> None:
        self.gateway = gateway
        self.log_file = log
        self.drain_timeout = drain_timeout
        self.health_timeout = health_timeout
        self.clock = clock
        self.sleep = sleep

    def log(self, replica: Replica, message: str) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        self.log_file.write(f"{stamp} {replica.unit} :{replica.port} {message}\n")
        self.log_file.flush()

    @staticmethod
    def http(url: str, body: dict[str, object] | None = None, timeout: float = 10,
             api_key: str = "") -> str:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data else {}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        request = urllib.request.Request(url, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return str(response.read().decode())

    def drain(self, replica: Replica) -> None:
        """Wait until no request is running, at most drain_timeout seconds."""
        deadline = self.clock() + self.drain_timeout
        while True:
            try:
                running = requests_running(
                    self.http(f"http://127.0.0.1:{replica.port}/metrics"))
            except (OSError, urllib.error.URLError):
                running = None
            if running == 0:
                self.log(replica, "drained: 0 requests running")
                return
            if self.clock() >= deadline:
                self.log(replica, f"drain timeout after {self.drain_timeout:.0f} s with "
                         f"{running} requests running; restarting anyway")
                return
            self.sleep(1)

    def wait_healthy(self, replica: Replica) -> bool:
        deadline = self.clock() + self.health_timeout
        while self.clock() < deadline:
            try:
                self.http(f"http://127.0.0.1:{replica.port}/health", timeout=5)
                return True
            except (OSError, urllib.error.URLError):
                self.sleep(2)
        return False

    def back_in_rotation(self, replica: Replica, server: str) -> bool:
        """Return the replica to the gateway and wait until its checks see it UP, so the
        next replica is drained only once this one takes traffic again."""
        assert self.gateway is not None
        try:
            self.gateway.set_state(server, "ready")
            deadline = self.clock() + self.health_timeout
            while (status := self.gateway.status(server)) != "UP":
                if self.clock() >= deadline:
                    self.log(replica, f"FAILED: the gateway still sees it {status}")
                    return False
                self.sleep(1)
        except OSError as exc:
            self.log(replica, f"FAILED: cannot return it to the gateway: {exc}")
            return False
        return True

    def restart(self, replica: Replica) -> bool:
        server = replica.unit.removesuffix(".service")
        if self.gateway is not None:
            try:
                self.gateway.set_state(server, "drain")
            except OSError as exc:
                self.log(replica, f"FAILED: cannot drain it at the gateway: {exc}")
                return False
            self.log(replica, "restart begins: out of the gateway's rotation, draining")
        else:
            self.log(replica, "restart begins: draining")
        self.drain(replica)
        result = subprocess.run(["systemctl", "restart", replica.unit], capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            self.log(replica, f"FAILED: systemctl restart: {result.stderr.strip()}")
            return False
        self.log(replica, "restarted; waiting for /health")
        if not self.wait_healthy(replica):
            self.log(replica, f"FAILED: not healthy within {self.health_timeout:.0f} s")
            return False
        try:
            answer = json.loads(self.http(
                f"http://127.0.0.1:{replica.port}/v1/completions",
                {"model": replica.model, "prompt": "ping", "max_tokens": 1}, timeout=120,
                api_key=replica.api_key()))
            text = answer["choices"][0]["text"]
        except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError) as exc:
            self.log(replica, f"FAILED: test completion: {exc}")
            return False
        if self.gateway is not None and not self.back_in_rotation(replica, server):
            return False
        self.log(replica, f"healthy and serving (test completion {text!r})")
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=Path, default=Path("/etc/vllm/replicas.json"),
                        help="JSON list of {unit, port, model}")
    parser.add_argument("--only", action="append", default=[],
                        help="restart only this unit (repeatable)")
    parser.add_argument("--drain-timeout", type=float, default=300)
    parser.add_argument("--health-timeout", type=float, default=1800)
    parser.add_argument("--log", type=Path, default=Path("/var/log/vllm/restart.log"))
    parser.add_argument("--gateway-socket", type=Path,
                        default=Path("/run/haproxy/admin.sock"),
                        help="HAProxy runtime API of the engine gateway (used if it exists)")
    args = parser.parse_args(argv)
    replicas = [r for r in load_replicas(args.replicas) if not args.only or r.unit in args.only]
    if not replicas:
        print(f"no replicas to restart (from {args.replicas})", file=sys.stderr)
        return 2
    args.log.parent.mkdir(parents=True, exist_ok=True)
    with args.log.open("a") as log:
        gateway = Gateway(args.gateway_socket) if args.gateway_socket.is_socket() else None
        restarter = Restarter(log, args.drain_timeout, args.health_timeout, gateway=gateway)
        for replica in replicas:
            if not restarter.restart(replica):
                print(f"{replica.unit}: restart failed, see {args.log}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
