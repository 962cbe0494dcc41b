#!/usr/bin/python3
"""Restart, stop or return vLLM engine replicas without dropping a request.

One path for every restart (vllm_server's deploy-time restarts, playbooks/rolling_restart.yml,
playbooks/rebuild.yml, the weekly cron job of engine_restarts). For each replica, one at a
time: take it out of the gateway's rotation (HAProxy's admin socket), wait until HAProxy
holds no session for it and the engine runs and queues no request (its /metrics), restart
(or stop) it, wait for /health and one test completion, put it back and wait until HAProxy
sees it UP.

The last replica serving on a host is refused (exit 3): HAProxy answers 503 at once when no
server of the backend is UP, so its restart would fail every client request meanwhile.
It proceeds only when the configuration says how to pull the host from an upstream balancer
and put it back (upstream_drain_command / upstream_ready_command), or accepts the downtime
with a reason (then the log holds the reason and the 5xx the gateway answered meanwhile).

Exit status: 0 done, 1 a step failed (the replicas not yet handled keep serving), 2 usage
(no such replica, unreadable configuration), 3 refused (the last serving replica).
Every step is logged with a UTC timestamp. Standard library only; installed by the
vllm_server role as /usr/local/sbin/vllm-restart with <config_dir>/replicas.json.
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REFUSED = 0, 1, 2, 3
BUSY = re.compile(
    r"^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)
FIX_LAST = ("Fix: set vllm_server_upstream_drain_command and vllm_server_upstream_ready_command "
            "(how to pull this host from the upstream balancer and put it back), or "
            "vllm_server_restart_downtime_reason to accept the downtime, or plan a second "
            "replica on the host.")


@dataclass(frozen=True)
class Replica:
    name: str
    port: int
    model: str
    unit: str = ""
    env_file: str = ""
    # A headless rank of a multi-host engine group: it serves no API (rank 0 does, and its
    # start waits for every rank), so it is restarted without a drain or a health wait.
    headless: bool = False

    @property
    def unit_name(self) -> str:
        return self.unit or f"{self.name}.service"

    def api_key(self) -> str:
        """VLLM_API_KEY from the replica's environment file, where the engine reads it."""
        try:
            text = Path(self.env_file).read_text() if self.env_file else ""
        except OSError:
            return ""
        for line in text.splitlines():
            name, _sep, value = line.partition("=")
            if name.strip() == "VLLM_API_KEY":
                value = value.strip()
                return str(json.loads(value)) if value.startswith('"') else value
        return ""


@dataclass(frozen=True)
class Config:
    replicas: tuple[Replica, ...]
    gateway_socket: Path = Path("/run/haproxy/admin.sock")
    backend: str = "vllm"
    config_dir: Path = Path("/etc/vllm")
    upstream_drain_command: str = ""
    upstream_ready_command: str = ""
    downtime_reason: str = ""


def load_config(path: Path) -> Config:
    """replicas.json: {replicas: [{name, port, model, unit, env_file}], gateway_socket,
    backend, upstream_drain_command, upstream_ready_command, downtime_reason}. The file's
    directory holds the pending-restart markers."""
    data = json.loads(path.read_text())
    replicas = tuple(Replica(str(r["name"]), int(r["port"]), str(r["model"]),
                             str(r.get("unit", "")), str(r.get("env_file", "")),
                             bool(r.get("headless", False)))
                     for r in data["replicas"])
    return Config(replicas, Path(str(data.get("gateway_socket", "/run/haproxy/admin.sock"))),
                  str(data.get("backend", "vllm")), path.parent,
                  str(data.get("upstream_drain_command", "")),
                  str(data.get("upstream_ready_command", "")),
                  str(data.get("downtime_reason", "")))


def engine_busy(metrics_text: str) -> float | None:
    """Requests the engine runs or queues (vllm:num_requests_running + _waiting over their
    series); None when neither metric is there."""
    values = [float(v) for v in BUSY.findall(metrics_text)]
    return sum(values) if values else None


def serving(status: str) -> bool:
    """Whether HAProxy sends new requests to a server with this 'show stat' status
    ("UP", "UP 1/3" going down, "no check"); not DOWN, DRAIN, MAINT, NOLB."""
    return status.startswith("UP") or status == "no check"


def parse_stat(text: str) -> list[dict[str, str]]:
    """HAProxy's 'show stat' CSV (a '# ' header line) as one dict per row."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise OSError(f"haproxy: unexpected 'show stat' answer {lines[:1]}")
    header = lines[0][2:].split(",")
    return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]


@dataclass(frozen=True)
class Position:
    """Where a replica stands behind the gateway."""

    behind_gateway: bool  # the gateway has a server of this name in the backend
    serving: bool  # the gateway sends it new requests
    others_serving: int  # other servers of the backend the gateway sends new requests to
    why: str = ""

    @property
    def last(self) -> bool:
        return self.serving and self.others_serving == 0


@dataclass
class Gateway:
    """HAProxy's runtime API (engine_gateway role) over its admin socket."""

    path: Path
    backend: str = "vllm"

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

    def rows(self) -> list[dict[str, str]]:
        return [r for r in parse_stat(self.command("show stat"))
                if r.get("pxname") == self.backend]

    def server(self, server: str) -> dict[str, str] | None:
        return next((r for r in self.rows() if r.get("svname") == server), None)

    def status(self, server: str) -> str:
        """The server's status from 'show stat' (UP, DOWN, DRAIN, MAINT, ...)."""
        row = self.server(server)
        if row is None:
            raise OSError(f"haproxy: no server {self.backend}/{server}")
        return row.get("status", "")

    def position(self, server: str) -> Position:
        rows = self.rows()
        mine = next((r for r in rows if r.get("svname") == server), None)
        others = sum(1 for r in rows if r.get("svname") not in (server, "FRONTEND", "BACKEND")
                     and serving(r.get("status", "")))
        if mine is None:
            return Position(False, False, others, f"the gateway has no server "
                            f"{self.backend}/{server}: nothing routes to it")
        return Position(True, serving(mine.get("status", "")), others)

    def sessions(self, server: str) -> int:
        """Requests HAProxy holds for the server: current sessions plus its queue."""
        row = self.server(server) or {}
        return sum(int(row.get(key) or 0) for key in ("scur", "qcur"))

    def answered_5xx(self) -> int:
        """5xx answers to clients: the frontend of the backend's name (engine_gateway names
        both 'vllm'), else the backend's own count."""
        rows = parse_stat(self.command("show stat"))
        for svname in ("FRONTEND", "BACKEND"):
            for row in rows:
                if row.get("pxname") == self.backend and row.get("svname") == svname:
                    return int(row.get("hrsp_5xx") or 0)
        return 0


def http(url: str, body: dict[str, object] | None = None, timeout: float = 10,
         api_key: str = "") -> str:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        return str(response.read().decode())


def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


class Refused(Exception):
    """The last serving replica, with no upstream balancer and no accepted downtime."""


@dataclass
class Restarter:
    config: Config
    log_file: TextIO
    gateway: Gateway | None
    drain_timeout: float = 300
    health_timeout: float = 1800
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    fetch: Callable[..., str] = http
    system: Callable[[Sequence[str]], subprocess.CompletedProcess[str]] = run
    upstream_drained: bool = False
    downtime: bool = False
    failures: list[str] = field(default_factory=list)

    def log(self, replica: Replica | None, message: str) -> None:
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        where = f"{replica.unit_name} :{replica.port} " if replica else ""
        self.log_file.write(f"{stamp} {where}{message}\n")
        self.log_file.flush()

    def fail(self, replica: Replica, message: str) -> bool:
        self.log(replica, f"FAILED: {message}")
        self.failures.append(f"{replica.unit_name}: {message}")
        return False

    def active(self, replica: Replica) -> bool:
        return self.system(["systemctl", "is-active", "--quiet", replica.unit_name]).returncode == 0

    def position(self, replica: Replica) -> Position:
        if self.gateway is None:
            return Position(False, True, 0, f"no gateway admin socket at "
                            f"{self.config.gateway_socket} (--gateway-socket, "
                            f"vllm_server_gateway_admin_socket): clients reach this replica "
                            f"directly and nothing can take it out of rotation")
        try:
            return self.gateway.position(replica.name)
        except OSError as exc:
            raise OSError(f"cannot read the gateway at {self.config.gateway_socket}: {exc}") \
                from exc

    def idle(self, replica: Replica, behind_gateway: bool) -> None:
        """Wait until the gateway holds no request for the replica and the engine runs and
        queues none, at most drain_timeout seconds (then go on, logged)."""
        deadline = self.clock() + self.drain_timeout
        while True:
            held: float | None = 0
            if behind_gateway and self.gateway is not None:
                try:
                    held = self.gateway.sessions(replica.name)
                except OSError:
                    held = None
            try:
                busy = engine_busy(self.fetch(f"http://127.0.0.1:{replica.port}/metrics"))
            except (OSError, urllib.error.URLError, ValueError):
                busy = None
            if held == 0 and busy == 0:
                self.log(replica, "drained: 0 requests at the gateway, 0 running or waiting")
                return
            if self.clock() >= deadline:
                self.log(replica, f"drain timeout after {self.drain_timeout:.0f} s with "
                         f"{held} at the gateway and {busy} running or waiting; going on")
                return
            self.sleep(1)

    def wait_healthy(self, replica: Replica) -> bool:
        deadline = self.clock() + self.health_timeout
        while self.clock() < deadline:
            try:
                self.fetch(f"http://127.0.0.1:{replica.port}/health", timeout=5)
                return True
            except (OSError, urllib.error.URLError):
                self.sleep(2)
        return False

    def serves(self, replica: Replica) -> bool:
        """/health, then one test completion."""
        self.log(replica, "waiting for /health")
        if not self.wait_healthy(replica):
            return self.fail(replica, f"not healthy within {self.health_timeout:.0f} s")
        try:
            answer = json.loads(self.fetch(
                f"http://127.0.0.1:{replica.port}/v1/completions",
                {"model": replica.model, "prompt": "ping", "max_tokens": 1}, timeout=120,
                api_key=replica.api_key()))
            text = answer["choices"][0]["text"]
        except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError) as exc:
            return self.fail(replica, f"test completion: {exc}")
        self.log(replica, f"healthy and serving (test completion {text!r})")
        return True

    def back_in_rotation(self, replica: Replica) -> bool:
        """Return it to the gateway and wait until its checks see it UP, so the next
        replica is drained only once this one takes traffic again."""
        if self.gateway is None:
            return True
        try:
            if self.gateway.server(replica.name) is None:
                self.log(replica, "not behind the gateway; nothing to put back")
                return True
            self.gateway.set_state(replica.name, "ready")
            deadline = self.clock() + self.health_timeout
            while not serving(status := self.gateway.status(replica.name)):
                if self.clock() >= deadline:
                    return self.fail(replica, f"the gateway still sees it {status}")
                self.sleep(1)
        except OSError as exc:
            return self.fail(replica, f"cannot return it to the gateway: {exc}")
        self.log(replica, "back in the gateway's rotation")
        return True

    def shell(self, replica: Replica, what: str, command: str) -> bool:
        self.log(replica, f"{what}: {command}")
        result = self.system(["/bin/sh", "-c", command])
        if result.returncode != 0:
            return self.fail(replica, f"{what} exited {result.returncode}: "
                             f"{(result.stderr or result.stdout).strip()[-500:]}")
        return True

    def fivexx(self) -> int | None:
        try:
            return self.gateway.answered_5xx() if self.gateway is not None else None
        except OSError:
            return None

    def take_out(self, replica: Replica, stop: bool) -> tuple[bool, int | None]:
        """Out of rotation and drained. Returns (ok, the gateway's 5xx count before, when
        the downtime was accepted). Raises Refused for the last serving replica."""
        position = self.position(replica)
        before: int | None = None
        if position.why:
            self.log(replica, position.why)
        if position.last:
            if self.config.upstream_drain_command:
                if not self.shell(replica, "last serving replica on this host: pulling the "
                                  "host from the upstream balancer",
                                  self.config.upstream_drain_command):
                    return False, None
                self.upstream_drained = True
            elif self.config.downtime_reason:
                before = self.fivexx()
                self.downtime = True
                self.log(replica, "last serving replica on this host: downtime accepted "
                         f"({self.config.downtime_reason})")
            else:
                verb = "stopping" if stop else "restarting"
                raise Refused(
                    f"{replica.unit_name} is the last replica serving on this host: {verb} it "
                    "would answer every client 503 meanwhile (HAProxy answers 503 at once "
                    f"when no server is UP). {position.why + '. ' if position.why else ''}"
                    + FIX_LAST)
        if position.behind_gateway and self.gateway is not None:
            try:
                self.gateway.set_state(replica.name, "drain")
            except OSError as exc:
                return self.fail(replica, f"cannot drain it at the gateway: {exc}"), None
            self.log(replica, "out of the gateway's rotation, draining")
        else:
            self.log(replica, "draining")
        self.idle(replica, position.behind_gateway)
        return True, before

    def headless(self, replica: Replica, verb: str) -> bool:
        """A group's headless rank: systemctl VERB, no gateway, no /health of its own."""
        result = self.system(["systemctl", verb, replica.unit_name])
        if result.returncode != 0:
            return self.fail(replica, f"systemctl {verb}: {result.stderr.strip()}")
        if verb != "stop" and not self.active(replica):
            return self.fail(replica, f"headless rank not active after systemctl {verb}")
        self.log(replica, f"headless rank of an engine group: {verb} done (rank 0's start "
                 "waits for every rank)")
        if verb != "stop":
            self.clear_pending(replica)
        return True

    def restart(self, replica: Replica) -> bool:
        if replica.headless:
            return self.headless(replica, "restart")
        self.log(replica, "restart begins")
        if not self.active(replica):
            self.log(replica, "not running: starting it (nothing to drain)")
            result = self.system(["systemctl", "start", replica.unit_name])
            before = None
        else:
            ok, before = self.take_out(replica, stop=False)
            if not ok:
                return False
            result = self.system(["systemctl", "restart", replica.unit_name])
        if result.returncode != 0:
            return self.fail(replica, f"systemctl: {result.stderr.strip()}")
        self.log(replica, "restarted")
        if not self.serves(replica) or not self.back_in_rotation(replica):
            return False
        self.report_downtime(replica, before)
        self.clear_pending(replica)
        return True

    def report_downtime(self, replica: Replica, before: int | None) -> None:
        if not self.downtime:
            return
        self.downtime = False
        after = self.fivexx()
        counted = (f"the gateway answered {after - before} 5xx meanwhile"
                   if after is not None and before is not None
                   else "no gateway counted the failed requests")
        self.log(replica, f"downtime over: {counted} (reason: {self.config.downtime_reason})")

    def stop(self, replica: Replica) -> bool:
        if replica.headless:
            return self.headless(replica, "stop")
        if not self.active(replica):
            self.log(replica, "not running; nothing to stop")
            return True
        ok, before = self.take_out(replica, stop=True)
        if not ok:
            return False
        if self.gateway is not None and self.position(replica).behind_gateway:
            try:  # no health checks while it is down on purpose
                self.gateway.set_state(replica.name, "maint")
            except OSError as exc:
                return self.fail(replica, f"cannot set it to maintenance at the gateway: {exc}")
        result = self.system(["systemctl", "stop", replica.unit_name])
        if result.returncode != 0:
            return self.fail(replica, f"systemctl stop: {result.stderr.strip()}")
        del before  # a stopped replica stays down: its downtime ends with `ready`
        self.log(replica, "stopped; `vllm-restart ready` puts it back")
        return True

    def ready(self, replica: Replica) -> bool:
        if replica.headless:
            return self.headless(replica, "start")
        if not self.active(replica):
            result = self.system(["systemctl", "start", replica.unit_name])
            if result.returncode != 0:
                return self.fail(replica, f"systemctl start: {result.stderr.strip()}")
            self.log(replica, "started")
        if not self.serves(replica) or not self.back_in_rotation(replica):
            return False
        self.clear_pending(replica)
        return True

    def clear_pending(self, replica: Replica) -> None:
        (self.config.config_dir / f"{replica.name}.restart-pending").unlink(missing_ok=True)

    def upstream_ready(self, replica: Replica) -> bool:
        command = self.config.upstream_ready_command
        return not command or self.shell(replica, "putting the host back into the upstream "
                                         "balancer", command)


def act(restarter: Restarter, mode: str, replicas: Sequence[Replica]) -> int:
    """Run mode over the replicas one at a time; the first failure or refusal stops it."""
    handle = {"restart": restarter.restart, "stop": restarter.stop, "ready": restarter.ready}
    try:
        for replica in replicas:
            if not handle[mode](replica):
                return EXIT_FAILED
    except Refused as exc:
        restarter.log(None, f"REFUSED: {exc}")
        restarter.failures.append(f"REFUSED: {exc}")
        return EXIT_REFUSED
    except OSError as exc:
        restarter.log(None, f"FAILED: {exc}")
        restarter.failures.append(str(exc))
        return EXIT_FAILED
    # A host pulled from the upstream balancer goes back once its replicas serve again
    # (restart), and on `ready` (after a rebuild's stop) in any case.
    if mode == "ready" or (mode == "restart" and restarter.upstream_drained):
        if not restarter.upstream_ready(replicas[-1]):
            return EXIT_FAILED
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=["restart", "stop", "ready"],
                        default="restart")
    parser.add_argument("--config", type=Path, default=Path("/etc/vllm/replicas.json"),
                        help="replicas.json written by the vllm_server role")
    parser.add_argument("--only", action="append", default=[],
                        help="only this replica (name or unit; repeatable)")
    parser.add_argument("--gateway-socket", type=Path,
                        help="HAProxy admin socket (default: the configuration's)")
    parser.add_argument("--backend", help="HAProxy backend (default: the configuration's)")
    parser.add_argument("--downtime-reason", default=None,
                        help="accept the downtime of the host's last serving replica")
    parser.add_argument("--drain-timeout", type=float, default=300)
    parser.add_argument("--health-timeout", type=float, default=1800)
    parser.add_argument("--log", type=Path, default=Path("/var/log/vllm/restart.log"))
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"cannot read {args.config}: {exc}. Fix: converge the vllm_server role, or pass "
              "--config <vllm_server_config_dir>/replicas.json", file=sys.stderr)
        return EXIT_USAGE
    config = Config(config.replicas, args.gateway_socket or config.gateway_socket,
                    args.backend or config.backend, config.config_dir,
                    config.upstream_drain_command, config.upstream_ready_command,
                    config.downtime_reason if args.downtime_reason is None
                    else args.downtime_reason)
    replicas = [r for r in config.replicas
                if not args.only or r.name in args.only or r.unit_name in args.only]
    if not replicas:
        print(f"no replicas to {args.mode} (from {args.config}, --only {args.only})",
              file=sys.stderr)
        return EXIT_USAGE
    args.log.parent.mkdir(parents=True, exist_ok=True)
    with args.log.open("a") as log:
        gateway = (Gateway(config.gateway_socket, config.backend)
                   if config.gateway_socket.is_socket() else None)
        restarter = Restarter(config, log, gateway, args.drain_timeout, args.health_timeout,
                              fetch=http, system=run)
        status = act(restarter, args.mode, replicas)
    for failure in restarter.failures:
        print(failure, file=sys.stderr)
    if status == EXIT_FAILED:
        print(f"{args.mode} failed, see {args.log}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
