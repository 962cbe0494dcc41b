#!/usr/bin/env python3
"""Preflight of one engine group member, read-only: its interfaces and whether it reaches
its peers. Prints JSON {interfaces: {name: {address, mtu}}, address, peers: {peer: why}}.

Usage: vllm_group_preflight.py ADDRESS PORT [PEER...]

ADDRESS (this member's fabric address, a name or an IPv4) is resolved; each PEER is tried
with a TCP connect to PORT (rank 0's rendezvous port): an answer, even a refusal (nothing
listens there before the engine starts), proves the route and the firewall let it through;
a timeout or an unreachable network does not.
"""
from __future__ import annotations

import fcntl
import json
import socket
import struct
import sys
from pathlib import Path

SIOCGIFADDR = 0x8915


def ipv4(name: str) -> str | None:
    """The interface's (primary) IPv4 address, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR,
                                 struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def mtu(name: str) -> int | None:
    try:
        return int(Path(f"/sys/class/net/{name}/mtu").read_text().strip())
    except (OSError, ValueError):
        return None


def reach(peer: str, port: int, timeout: float = 3.0) -> str:
    """'ok' when PEER answers on PORT (a refusal is an answer), else why not."""
    try:
        with socket.create_connection((peer, port), timeout=timeout):
            return "ok"
    except ConnectionRefusedError:
        return "ok"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror or exc}"


def resolve(address: str) -> str:
    try:
        return socket.gethostbyname(address)
    except OSError as exc:
        return f"unresolved ({exc})"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    address, port, peers = argv[0], int(argv[1]), argv[2:]
    names = [name for _index, name in socket.if_nameindex()]
    print(json.dumps({
        "address": resolve(address),
        "interfaces": {name: {"address": ipv4(name), "mtu": mtu(name)} for name in names},
        "peers": {peer: reach(peer, port) for peer in peers},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
